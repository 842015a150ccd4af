//! The plain manifests of `webhook-config/`, for clusters installed without Helm: one
//! [`Install`] describes the installation, [`Install::files`] renders it (the split
//! [`DeploymentMode`]; [`Install::files_for`] renders either). `cheiron manifests` writes them,
//! and `tests/install/` and CI fail when the committed copy drifts.

use k8s_openapi::{
    api::rbac::v1::{
        ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use serde::Serialize;
use serde_json::Value;

use super::{
    certificates,
    credential_providers::TOKENS as CREDENTIAL_PROVIDER_TOKENS,
    error::ManifestError,
    installation::{
        AGGREGATE_TO, CERTIFICATES, CONTROLLER, DeploymentMode, Install, LEASE, MANAGER_EDIT,
        MANAGER_VIEW, METRICS_AUTH, METRICS_READER, MetricsAuth, NAME, SERVICE_PORT, TLS_SECRET,
        WEBHOOK, Workload,
    },
    network_policy, rbac,
    setup::{CredentialProviderSetup, FleetSetup},
    webhook_configuration::{WebhookClient, WebhookRegistration},
    workload,
};

/// The Role and RoleBinding of the controller's Lease.
const LEADER_ELECTION: &str = "cheiron-leader-election";
/// The fleet's ClusterRole, Roles and bindings.
const FLEET: &str = "cheiron-fleet";

/// One file of the plain manifests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestFile {
    /// File name inside the output directory.
    pub name: &'static str,
    /// The YAML text.
    pub contents: String,
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

    /// A ClusterRole with `rules`, bound to `service_accounts` cluster-wide.
    pub(super) fn cluster_access(
        &self,
        name: &str,
        component: &str,
        service_accounts: &[&str],
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
            subjects: Some(service_accounts.iter().map(|sa| self.subject(sa)).collect()),
        };
        Ok([to_value(&role)?, to_value(&binding)?])
    }

    /// A Role with `rules` in cheiron's namespace, bound to `service_account`.
    pub(super) fn namespace_access(
        &self,
        name: &str,
        component: &str,
        service_account: &str,
        rules: Vec<PolicyRule>,
    ) -> Result<[Value; 2], ManifestError> {
        self.access_in(&self.namespace, name, component, service_account, rules)
    }

    /// Credential-provider plugins (docs/credential-providers.md): the config's ConfigMap, and
    /// a Role and RoleBinding letting `controller` mint tokens of the ServiceAccounts named in
    /// cheiron's namespace (only when some are named) and of any ServiceAccount in each
    /// namespace named. No token rights by default.
    fn credential_provider_objects(
        &self,
        providers: &CredentialProviderSetup,
        controller: &str,
    ) -> Result<Vec<Value>, ManifestError> {
        providers.validate()?;
        let mut objects = vec![to_value(&providers.config_map(self))?];
        if !providers.token_service_accounts.is_empty() {
            objects.extend(self.namespace_access(
                CREDENTIAL_PROVIDER_TOKENS,
                "controller",
                controller,
                rbac::credential_provider_token_rules(&providers.token_service_accounts),
            )?);
        }
        for namespace in &providers.token_namespaces {
            objects.extend(self.access_in(
                namespace,
                CREDENTIAL_PROVIDER_TOKENS,
                "controller",
                controller,
                rbac::credential_provider_token_rules(&[]),
            )?);
        }
        Ok(objects)
    }

    /// A Role `name` of `component` with `rules` in `namespace`, bound to `service_account`
    /// of cheiron's namespace.
    fn access_in(
        &self,
        namespace: &str,
        name: &str,
        component: &str,
        service_account: &str,
        rules: Vec<PolicyRule>,
    ) -> Result<[Value; 2], ManifestError> {
        let meta = ObjectMeta {
            namespace: Some(namespace.to_owned()),
            ..self.meta(name, component)
        };
        let role = Role {
            metadata: meta.clone(),
            rules: Some(rules),
        };
        let binding = RoleBinding {
            metadata: meta,
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".to_owned(),
                kind: "Role".to_owned(),
                name: name.to_owned(),
            },
            subjects: Some(vec![self.subject(service_account)]),
        };
        Ok([to_value(&role)?, to_value(&binding)?])
    }

    /// The fleet's RBAC (docs/fleet.md): a ClusterRole `cheiron-fleet` reading Cluster API's
    /// CRD, and a Role `cheiron-fleet` reading the `Cluster`s in each fleet namespace (cheiron's
    /// own when none is named; never cluster-wide).
    fn fleet_objects(
        &self,
        fleet: &FleetSetup,
        controller: &str,
    ) -> Result<Vec<Value>, ManifestError> {
        let mut objects = self
            .cluster_access(FLEET, "controller", &[controller], rbac::fleet_crd_rules())?
            .to_vec();
        for namespace in &fleet.namespaces_in(&self.namespace) {
            objects.extend(self.access_in(
                namespace,
                FLEET,
                "controller",
                controller,
                rbac::fleet_cluster_rules(),
            )?);
        }
        Ok(objects)
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

    /// cheiron itself in the default, split [`DeploymentMode`].
    pub fn server_objects(&self) -> Result<Vec<Value>, ManifestError> {
        self.server_objects_for(DeploymentMode::default())
    }

    /// cheiron itself, in apply order: Namespace, ServiceAccounts, RBAC, Services, Deployments,
    /// PodDisruptionBudgets, NetworkPolicies, MutatingWebhookConfiguration.
    ///
    /// Both modes have the same ClusterRoles and Role; only who they are bound to differs. Split,
    /// `cheiron-webhook` is bound to the webhook's ServiceAccount and `cheiron-controller` and
    /// the Lease's Role to the controller's; combined, all three to `cheiron`, the union. With
    /// `--metrics-auth kubernetes`, `cheiron-metrics-auth` is bound to every identity (each
    /// serves `/metrics`), and `cheiron-metrics-reader` waits for the scraper's binding.
    pub fn server_objects_for(&self, mode: DeploymentMode) -> Result<Vec<Value>, ManifestError> {
        let workloads = mode.workloads();
        let identity = |serves: fn(Workload) -> bool| {
            workloads
                .iter()
                .copied()
                .find(|w| serves(*w))
                .map_or(NAME, Workload::name)
        };
        let webhook_identity = identity(Workload::serves_webhook);
        let controller_identity = identity(Workload::runs_controller);

        let mut objects = vec![to_value(&workload::namespace(self))?];
        for w in workloads {
            objects.push(to_value(&workload::service_account(
                self,
                w.name(),
                w.component(),
            ))?);
        }
        objects.extend(self.access(workloads, webhook_identity, controller_identity)?);
        if let Some(providers) = &self.credential_providers {
            objects.extend(self.credential_provider_objects(providers, controller_identity)?);
        }
        if let Some(fleet) = &self.fleet {
            objects.extend(self.fleet_objects(fleet, controller_identity)?);
        }
        objects.push(to_value(&workload::service(self))?);
        if workloads.contains(&Workload::Controller) {
            objects.push(to_value(&workload::controller_service(self))?);
        }
        for w in workloads {
            objects.push(to_value(&workload::deployment(self, *w))?);
        }
        for w in workloads {
            objects.push(to_value(&workload::pod_disruption_budget(self, *w))?);
        }
        for w in workloads {
            objects.push(to_value(&network_policy::network_policy(self, *w))?);
        }
        if let Some(node_agent) = &self.node_agent {
            objects.extend(self.node_agent_objects(node_agent)?);
        }
        let mut registration = self.webhook_registration().configuration();
        registration.metadata.labels = Some(self.labels("webhook"));
        objects.push(to_value(&registration)?);
        Ok(objects)
    }

    /// The RBAC of [`Self::server_objects_for`]: the webhook's and the controller's
    /// ClusterRoles and the Lease's Role bound to the identities that need them, the metrics
    /// roles with `--metrics-auth kubernetes`, and the manager roles aggregated to `admin`,
    /// `edit` and `view`.
    fn access(
        &self,
        workloads: &[Workload],
        webhook_identity: &str,
        controller_identity: &str,
    ) -> Result<Vec<Value>, ManifestError> {
        let mut objects = Vec::new();
        objects.extend(self.cluster_access(
            WEBHOOK,
            "webhook",
            &[webhook_identity],
            rbac::webhook_rules(),
        )?);
        objects.extend(self.cluster_access(
            CONTROLLER,
            "controller",
            &[controller_identity],
            rbac::controller_rules(),
        )?);
        objects.extend(self.namespace_access(
            LEADER_ELECTION,
            "controller",
            controller_identity,
            rbac::leader_election_rules(LEASE),
        )?);
        if self.metrics_auth == MetricsAuth::Kubernetes {
            let identities: Vec<&str> = workloads.iter().map(|w| w.name()).collect();
            objects.extend(self.cluster_access(
                METRICS_AUTH,
                "metrics",
                &identities,
                rbac::metrics_auth_rules(),
            )?);
            objects.push(to_value(&ClusterRole {
                metadata: self.cluster_meta(METRICS_READER, "metrics"),
                rules: Some(rbac::metrics_reader_rules()),
                aggregation_rule: None,
            })?);
        }
        for (name, rules, roles) in [
            (
                MANAGER_EDIT,
                rbac::manager_edit_rules(),
                &["admin", "edit"][..],
            ),
            (MANAGER_VIEW, rbac::manager_view_rules(), &["view"]),
        ] {
            let mut metadata = self.cluster_meta(name, "rbac");
            for role in roles {
                metadata
                    .labels
                    .get_or_insert_default()
                    .insert(format!("{AGGREGATE_TO}{role}"), "true".to_owned());
            }
            objects.push(to_value(&ClusterRole {
                metadata,
                rules: Some(rules),
                aggregation_rule: None,
            })?);
        }
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
            &[CERTIFICATES],
            rbac::certificates_webhook_rules(NAME),
        )?);
        objects.push(to_value(&certificates::job(self))?);
        Ok(objects)
    }

    /// The files of `webhook-config/`: [`Install::files_for`] the default, split mode.
    pub fn files(&self) -> Result<Vec<ManifestFile>, ManifestError> {
        self.files_for(DeploymentMode::default())
    }

    /// The plain manifests of `mode`, in the order `kubectl apply -f DIR` reads them (by
    /// name): the CRDs (exactly `cheiron crds`), cheiron, the certificate Job.
    pub fn files_for(&self, mode: DeploymentMode) -> Result<Vec<ManifestFile>, ManifestError> {
        let about = match mode {
            DeploymentMode::Split => {
                "cheiron, split: namespace; the webhook (`cheiron webhook`) and the controller \
                 (`cheiron controller`), each with its own ServiceAccount, RBAC, Deployment, \
                 PodDisruptionBudget and NetworkPolicy; their Services; the \
                 MutatingWebhookConfiguration (its caBundle is written by the Job in \
                 webhook-certs.yaml, or by you)."
            }
            DeploymentMode::Combined => {
                "cheiron, combined: namespace; `cheiron run` (webhook and controller in one \
                 process) with one ServiceAccount holding the RBAC of both, its Deployment, \
                 PodDisruptionBudget and NetworkPolicy; the Service; the \
                 MutatingWebhookConfiguration (its caBundle is written by the Job in \
                 webhook-certs.yaml, or by you)."
            }
        };
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
                contents: render(about, &self.server_objects_for(mode)?)?,
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
            &crate::yaml::to_string(object).map_err(|source| ManifestError::Render {
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
    fn split_objects_come_in_apply_order() -> Result<(), ManifestError> {
        let objects = Install::default().server_objects()?;
        assert_eq!(
            kinds(&objects),
            [
                ("Namespace", "cheiron-system"),
                ("ServiceAccount", "cheiron-webhook"),
                ("ServiceAccount", "cheiron-controller"),
                ("ClusterRole", "cheiron-webhook"),
                ("ClusterRoleBinding", "cheiron-webhook"),
                ("ClusterRole", "cheiron-controller"),
                ("ClusterRoleBinding", "cheiron-controller"),
                ("Role", "cheiron-leader-election"),
                ("RoleBinding", "cheiron-leader-election"),
                ("ClusterRole", "cheiron-manager-edit"),
                ("ClusterRole", "cheiron-manager-view"),
                ("Service", "cheiron"),
                ("Service", "cheiron-controller"),
                ("Deployment", "cheiron-webhook"),
                ("Deployment", "cheiron-controller"),
                ("PodDisruptionBudget", "cheiron-webhook"),
                ("PodDisruptionBudget", "cheiron-controller"),
                ("NetworkPolicy", "cheiron-webhook"),
                ("NetworkPolicy", "cheiron-controller"),
                ("MutatingWebhookConfiguration", "cheiron"),
            ]
        );
        Ok(())
    }

    #[test]
    fn combined_objects_come_in_apply_order() -> Result<(), ManifestError> {
        let objects = Install::default().server_objects_for(DeploymentMode::Combined)?;
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
                ("ClusterRole", "cheiron-manager-edit"),
                ("ClusterRole", "cheiron-manager-view"),
                ("Service", "cheiron"),
                ("Deployment", "cheiron"),
                ("PodDisruptionBudget", "cheiron"),
                ("NetworkPolicy", "cheiron"),
                ("MutatingWebhookConfiguration", "cheiron"),
            ]
        );
        Ok(())
    }

    #[test]
    fn manager_roles_aggregate_into_the_built_in_roles_and_are_bound_to_no_one()
    -> Result<(), ManifestError> {
        let objects = Install::default().server_objects()?;
        let labels = |name: &str| -> Vec<String> {
            objects
                .iter()
                .filter(|o| o["metadata"]["name"] == name)
                .flat_map(|o| o["metadata"]["labels"].as_object().cloned())
                .flatten()
                .filter_map(|(k, v)| (v == "true").then_some(k))
                .collect()
        };
        assert_eq!(
            labels(MANAGER_EDIT),
            [
                "rbac.authorization.k8s.io/aggregate-to-admin",
                "rbac.authorization.k8s.io/aggregate-to-edit"
            ]
        );
        assert_eq!(
            labels(MANAGER_VIEW),
            ["rbac.authorization.k8s.io/aggregate-to-view"]
        );
        assert!(
            !objects
                .iter()
                .any(|o| o["roleRef"]["name"] == MANAGER_EDIT
                    || o["roleRef"]["name"] == MANAGER_VIEW),
            "aggregated, never bound"
        );
        Ok(())
    }

    /// The ServiceAccount each binding of `objects` grants its role to, by binding name.
    fn bound(objects: &[Value]) -> Vec<(String, String)> {
        objects
            .iter()
            .filter(|o| o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding")
            .map(|o| {
                (
                    o["roleRef"]["name"].as_str().unwrap_or_default().to_owned(),
                    o["subjects"][0]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn split_binds_each_role_to_one_identity_and_combined_binds_all_to_one()
    -> Result<(), ManifestError> {
        let install = Install::default();
        let split = install.server_objects()?;
        let owned = |role: &str, sa: &str| (role.to_owned(), sa.to_owned());
        assert_eq!(
            bound(&split),
            [
                owned("cheiron-webhook", "cheiron-webhook"),
                owned("cheiron-controller", "cheiron-controller"),
                owned("cheiron-leader-election", "cheiron-controller"),
            ]
        );
        let combined = install.server_objects_for(DeploymentMode::Combined)?;
        assert_eq!(
            bound(&combined),
            [
                owned("cheiron-webhook", "cheiron"),
                owned("cheiron-controller", "cheiron"),
                owned("cheiron-leader-election", "cheiron"),
            ]
        );
        let roles = |objects: &[Value]| -> Vec<Value> {
            objects
                .iter()
                .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
                .cloned()
                .collect()
        };
        assert_eq!(
            roles(&split),
            roles(&combined),
            "the same rules in both modes"
        );
        for binding in split.iter().chain(&combined) {
            for subject in binding["subjects"].as_array().into_iter().flatten() {
                let sa = subject["name"].as_str().unwrap_or_default();
                let deployment = split
                    .iter()
                    .chain(&combined)
                    .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == sa);
                assert!(
                    deployment.is_some_and(|d| {
                        d["spec"]["template"]["spec"]["serviceAccountName"] == sa
                    }),
                    "{sa} is some Deployment's identity"
                );
            }
        }
        Ok(())
    }

    #[test]
    fn metrics_auth_binds_token_reviews_to_every_identity_and_offers_a_reader_role()
    -> Result<(), ManifestError> {
        let install = Install {
            metrics_auth: MetricsAuth::Kubernetes,
            ..Install::default()
        };
        for (mode, identities) in [
            (
                DeploymentMode::Split,
                vec!["cheiron-webhook", "cheiron-controller"],
            ),
            (DeploymentMode::Combined, vec!["cheiron"]),
        ] {
            let objects = install.server_objects_for(mode)?;
            let binding = objects
                .iter()
                .find(|o| {
                    o["kind"] == "ClusterRoleBinding" && o["metadata"]["name"] == METRICS_AUTH
                })
                .cloned()
                .unwrap_or_default();
            let subjects: Vec<&str> = binding["subjects"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["name"].as_str())
                .collect();
            assert_eq!(subjects, identities, "{mode}");
            let reader = objects
                .iter()
                .filter(|o| o["metadata"]["name"] == METRICS_READER)
                .map(|o| o["kind"].as_str().unwrap_or_default())
                .collect::<Vec<_>>();
            assert_eq!(reader, ["ClusterRole"], "{mode}: a role, bound to no one");
            for deployment in objects.iter().filter(|o| o["kind"] == "Deployment") {
                let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
                assert!(
                    args.as_array()
                        .is_some_and(|a| a.contains(&"--metrics-auth=kubernetes".into())),
                    "{mode}: {args}"
                );
            }
        }
        let default = Install::default().server_objects()?;
        assert!(
            !default.iter().any(|o| [METRICS_AUTH, METRICS_READER]
                .contains(&o["metadata"]["name"].as_str().unwrap_or_default())),
            "no metrics RBAC unless asked for"
        );
        Ok(())
    }

    #[test]
    fn every_namespaced_object_lives_in_the_chosen_namespace() -> Result<(), ManifestError> {
        let install = Install {
            namespace: "pull-secrets".into(),
            ..Install::default()
        };
        let objects = [
            install.server_objects()?,
            install.server_objects_for(DeploymentMode::Combined)?,
            install.certificate_objects()?,
        ]
        .concat();
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
        let combined = Install::default().files_for(DeploymentMode::Combined)?;
        assert_ne!(files[1], combined[1]);
        assert_eq!(
            (&files[0], &files[2]),
            (&combined[0], &combined[2]),
            "only install.yaml differs"
        );
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
        for file in files[1..].iter().chain(&combined[1..]) {
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
