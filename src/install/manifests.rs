//! The plain manifests of `webhook-config/`, for clusters installed without Helm: one
//! [`Install`] describes the installation, [`Install::files`] renders it. `cheiron manifests`
//! writes them, and `tests/install.rs` and CI fail when the committed copy drifts.

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use serde::Serialize;
use serde_json::Value;

use super::{
    WebhookClient, WebhookRegistration, certificates,
    installation::{CERTIFICATES, Install, LEASE, NAME, SERVICE_PORT, TLS_SECRET},
    rbac, workload,
};

/// One file of the plain manifests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestFile {
    /// File name inside the output directory.
    pub name: &'static str,
    /// The YAML text.
    pub contents: String,
}

/// Why the manifests cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// An object did not serialise.
    #[error("cannot render {what}: {source}")]
    Render {
        /// What was being rendered.
        what: &'static str,
        /// Why.
        #[source]
        source: serde_yaml::Error,
    },
    /// An object did not serialise to JSON.
    #[error("cannot render an object: {0}")]
    Json(#[from] serde_json::Error),
}

fn to_value<T: Serialize>(object: &T) -> Result<Value, ManifestError> {
    Ok(serde_json::to_value(object)?)
}

impl Install {
    fn subject(&self, service_account: &str) -> Subject {
        Subject {
            kind: "ServiceAccount".to_owned(),
            name: service_account.to_owned(),
            namespace: Some(self.namespace.clone()),
            api_group: None,
        }
    }

    /// A ClusterRole with `rules`, bound to `service_account` cluster-wide.
    fn cluster_access(
        &self,
        name: &str,
        component: &str,
        service_account: &str,
        rules: Vec<PolicyRule>,
    ) -> Result<[Value; 2], ManifestError> {
        let role = ClusterRole {
            metadata: self.cluster_meta(name, component),
            rules: Some(rules),
            aggregation_rule: None,
        };
        let binding = ClusterRoleBinding {
            metadata: self.cluster_meta(name, component),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".to_owned(),
                kind: "ClusterRole".to_owned(),
                name: name.to_owned(),
            },
            subjects: Some(vec![self.subject(service_account)]),
        };
        Ok([to_value(&role)?, to_value(&binding)?])
    }

    /// A Role with `rules` in cheiron's namespace, bound to `service_account`.
    fn namespace_access(
        &self,
        name: &str,
        component: &str,
        service_account: &str,
        rules: Vec<PolicyRule>,
    ) -> Result<[Value; 2], ManifestError> {
        let role = Role {
            metadata: self.meta(name, component),
            rules: Some(rules),
        };
        let binding = RoleBinding {
            metadata: self.meta(name, component),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".to_owned(),
                kind: "Role".to_owned(),
                name: name.to_owned(),
            },
            subjects: Some(vec![self.subject(service_account)]),
        };
        Ok([to_value(&role)?, to_value(&binding)?])
    }

    /// The registration: a Service client, `caBundle` left for `cheiron-certs patch`.
    pub fn webhook_registration(&self) -> WebhookRegistration {
        WebhookRegistration::new(
            NAME,
            WebhookClient::Service {
                namespace: self.namespace.clone(),
                name: NAME.to_owned(),
                port: SERVICE_PORT,
            },
            self.namespace.clone(),
        )
    }

    /// cheiron itself, in apply order: Namespace, ServiceAccount, RBAC, Service, Deployment,
    /// PodDisruptionBudget, MutatingWebhookConfiguration.
    pub fn server_objects(&self) -> Result<Vec<Value>, ManifestError> {
        let mut objects = vec![
            to_value(&workload::namespace(self))?,
            to_value(&workload::service_account(self, NAME, "webhook"))?,
        ];
        objects.extend(self.cluster_access(
            "cheiron-webhook",
            "webhook",
            NAME,
            rbac::webhook_rules(),
        )?);
        objects.extend(self.cluster_access(
            "cheiron-controller",
            "controller",
            NAME,
            rbac::controller_rules(),
        )?);
        objects.extend(self.namespace_access(
            "cheiron-leader-election",
            "controller",
            NAME,
            rbac::leader_election_rules(LEASE),
        )?);
        objects.push(to_value(&workload::service(self))?);
        objects.push(to_value(&workload::deployment(self))?);
        objects.push(to_value(&workload::pod_disruption_budget(self))?);
        let mut registration = self.webhook_registration().configuration();
        registration.metadata.labels = Some(self.labels("webhook"));
        objects.push(to_value(&registration)?);
        Ok(objects)
    }

    /// The `cheiron-certs` Job that creates the serving certificate and patches `caBundle`,
    /// with its own ServiceAccount and RBAC.
    pub fn certificate_objects(&self) -> Result<Vec<Value>, ManifestError> {
        let mut objects = vec![to_value(&workload::service_account(
            self,
            CERTIFICATES,
            "certificates",
        ))?];
        objects.extend(self.namespace_access(
            CERTIFICATES,
            "certificates",
            CERTIFICATES,
            rbac::certificates_secret_rules(TLS_SECRET),
        )?);
        objects.extend(self.cluster_access(
            CERTIFICATES,
            "certificates",
            CERTIFICATES,
            rbac::certificates_webhook_rules(NAME),
        )?);
        objects.push(to_value(&certificates::job(self))?);
        Ok(objects)
    }

    /// The files of `webhook-config/`, in the order `kubectl apply -f webhook-config/` reads
    /// them (by name): the CRDs (exactly `cheiron crds`), cheiron, the certificate Job.
    pub fn files(&self) -> Result<Vec<ManifestFile>, ManifestError> {
        let crds = crate::api::crds_yaml().map_err(|source| ManifestError::Render {
            what: "the CRDs",
            source,
        })?;
        Ok(vec![
            ManifestFile {
                name: "crds.yaml",
                contents: crds,
            },
            ManifestFile {
                name: "install.yaml",
                contents: render(
                    "cheiron: namespace, RBAC, Service, Deployment, PodDisruptionBudget and the \
                     MutatingWebhookConfiguration (its caBundle is written by the Job in \
                     webhook-certs.yaml, or by you).",
                    &self.server_objects()?,
                )?,
            },
            ManifestFile {
                name: "webhook-certs.yaml",
                contents: render(
                    "The cheiron-certs Job: creates the serving certificate Secret and writes its \
                     CA into the MutatingWebhookConfiguration. Leave this file out when the \
                     certificate comes from cert-manager or from you.",
                    &self.certificate_objects()?,
                )?,
            },
        ])
    }
}

/// A commented multi-document YAML stream.
fn render(about: &str, objects: &[Value]) -> Result<String, ManifestError> {
    let mut out = String::from(
        "# Generated by `cheiron manifests --out webhook-config` (src/install/); do not edit.\n",
    );
    let mut line = String::from("#");
    for word in about.split_whitespace() {
        if line.len() + word.len() + 1 > 96 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    for object in objects {
        out.push_str("---\n");
        out.push_str(
            &serde_yaml::to_string(object).map_err(|source| ManifestError::Render {
                what: "a manifest",
                source,
            })?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(objects: &[Value]) -> Vec<(&str, &str)> {
        objects
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn server_objects_come_in_apply_order() -> Result<(), ManifestError> {
        let objects = Install::default().server_objects()?;
        assert_eq!(
            kinds(&objects),
            [
                ("Namespace", "cheiron-system"),
                ("ServiceAccount", "cheiron"),
                ("ClusterRole", "cheiron-webhook"),
                ("ClusterRoleBinding", "cheiron-webhook"),
                ("ClusterRole", "cheiron-controller"),
                ("ClusterRoleBinding", "cheiron-controller"),
                ("Role", "cheiron-leader-election"),
                ("RoleBinding", "cheiron-leader-election"),
                ("Service", "cheiron"),
                ("Deployment", "cheiron"),
                ("PodDisruptionBudget", "cheiron"),
                ("MutatingWebhookConfiguration", "cheiron"),
            ]
        );
        Ok(())
    }

    #[test]
    fn every_namespaced_object_lives_in_the_chosen_namespace() -> Result<(), ManifestError> {
        let install = Install {
            namespace: "pull-secrets".into(),
            ..Install::default()
        };
        let objects = [install.server_objects()?, install.certificate_objects()?].concat();
        let cluster_scoped = [
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            "MutatingWebhookConfiguration",
        ];
        for object in &objects {
            let kind = object["kind"].as_str().unwrap_or_default();
            if cluster_scoped.contains(&kind) {
                assert!(object["metadata"]["namespace"].is_null(), "{kind}");
            } else {
                assert_eq!(object["metadata"]["namespace"], "pull-secrets", "{kind}");
            }
            for subject in object["subjects"].as_array().into_iter().flatten() {
                assert_eq!(subject["namespace"], "pull-secrets");
            }
        }
        let registration = objects
            .iter()
            .find(|o| o["kind"] == "MutatingWebhookConfiguration")
            .cloned()
            .unwrap_or_default();
        let webhook = &registration["webhooks"][0];
        assert_eq!(
            webhook["clientConfig"]["service"]["namespace"],
            "pull-secrets"
        );
        assert_eq!(
            webhook["namespaceSelector"]["matchExpressions"][0]["values"],
            serde_json::json!(["kube-system", "pull-secrets"])
        );
        Ok(())
    }

    #[test]
    fn the_webhook_configuration_has_no_ca_bundle_and_the_registration_defaults()
    -> Result<(), ManifestError> {
        let install = Install::default();
        let objects = install.server_objects()?;
        let written = objects
            .iter()
            .find(|o| o["kind"] == "MutatingWebhookConfiguration")
            .cloned()
            .unwrap_or_default();
        let expected = serde_json::to_value(install.webhook_registration().configuration())?;
        assert_eq!(written["webhooks"], expected["webhooks"]);
        assert!(written["webhooks"][0]["clientConfig"]["caBundle"].is_null());
        Ok(())
    }

    #[test]
    fn files_start_with_the_crds_and_say_they_are_generated() -> Result<(), ManifestError> {
        let files = Install::default().files()?;
        let names: Vec<&str> = files.iter().map(|f| f.name).collect();
        assert_eq!(names, ["crds.yaml", "install.yaml", "webhook-certs.yaml"]);
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, names, "kubectl apply -f DIR reads files by name");
        assert_eq!(
            files[0].contents,
            crate::api::crds_yaml().map_err(|source| ManifestError::Render {
                what: "crds",
                source
            })?
        );
        for file in &files[1..] {
            assert!(
                file.contents
                    .starts_with("# Generated by `cheiron manifests")
            );
            for line in file.contents.lines().filter(|l| l.starts_with('#')) {
                assert!(line.len() <= 100, "{line}");
            }
        }
        Ok(())
    }
}
