//! `cheiron audit`'s pull findings (docs/credential-health.md, "Audit"): Pods whose pull a
//! registry refused, read from the Pod's own status (the kubelet's `ErrImagePull` or
//! `ImagePullBackOff` and its message), judged against the registries the managers serve
//! (their `status.pullSecrets`):
//!
//! - `pullRejected`: the Pod holds a manager's Secret that the kubelet offers for the image, and
//!   the registry refused it: the credential is wrong, revoked or expired;
//! - `noCredential`: a manager serves the image's registry, but the Pod holds none of its
//!   Secrets: it pulled without cheiron's credential (its namespace is out of the manager's
//!   scope, it or its ServiceAccount opted out, or it was admitted before).
//!
//! Pure: the caller lists the Pods and the managers. Secrets are never read.

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use crate::{
    api::{
        ClusterImagePullSecretManager, ImagePullSecretManager, ManagerStatus, Mode,
        PullSecretRegistries,
    },
    health::pulls::{classify, offered_key},
    policy::{Manager, NamespaceMeta, Scope},
    registry::ImageRef,
};

/// What a manager's Secrets hold, for the pull findings.
#[derive(Clone, Debug)]
pub struct Serving {
    /// `Kind ns/name` or `Kind name`.
    pub manager: String,
    /// A namespaced manager's namespace: it serves only there.
    pub namespace: Option<String>,
    /// The namespaces it acts on (`None` for a manager that does not compile, which acts on
    /// none).
    pub scope: Option<Scope>,
    /// Its Secrets and their registry keys (`status.pullSecrets`).
    pub secrets: Vec<PullSecretRegistries>,
}

/// Each manager as findings name it (`Kind ns/name` or `Kind name`), its namespace (namespaced
/// managers), its mode, its scope (when it compiles) and its status.
fn described<'a>(
    namespaced: &'a [ImagePullSecretManager],
    cluster: &'a [ClusterImagePullSecretManager],
) -> impl Iterator<
    Item = (
        String,
        Option<String>,
        Mode,
        Option<Scope>,
        Option<&'a ManagerStatus>,
    ),
> {
    let name = |m: &kube::core::ObjectMeta| m.name.clone().unwrap_or_default();
    namespaced
        .iter()
        .map(move |m| {
            let ns = m.metadata.namespace.clone();
            (
                format!(
                    "ImagePullSecretManager {}/{}",
                    ns.clone().unwrap_or_default(),
                    name(&m.metadata)
                ),
                ns,
                m.spec.mode,
                Manager::from_namespaced(m).ok().map(|c| c.scope),
                m.status.as_ref(),
            )
        })
        .chain(cluster.iter().map(move |m| {
            (
                format!("ClusterImagePullSecretManager {}", name(&m.metadata)),
                None,
                m.spec.mode,
                Manager::from_cluster(m).ok().map(|c| c.scope),
                m.status.as_ref(),
            )
        }))
}

/// The managers whose Secrets Pods pull with (mode Node managers give their credentials to
/// the kubelet, not to Pods).
pub fn serving(
    namespaced: &[ImagePullSecretManager],
    cluster: &[ClusterImagePullSecretManager],
) -> Vec<Serving> {
    described(namespaced, cluster)
        .filter(|(_, _, mode, _, _)| *mode != Mode::Node)
        .map(|(manager, namespace, _, scope, status)| Serving {
            manager,
            namespace,
            scope,
            secrets: status.map(|s| s.pull_secrets.clone()).unwrap_or_default(),
        })
        .collect()
}

/// The credentials Docker Hub pulls are counted against: each manager's Secret whose Docker
/// Hub key the registry check read an allowance for (`status.credentials[].pullAllowance`), as
/// `Kind name: Secret S (76 of 100 pulls left per 6h)`.
pub fn docker_hub_allowances(
    namespaced: &[ImagePullSecretManager],
    cluster: &[ClusterImagePullSecretManager],
) -> Vec<String> {
    described(namespaced, cluster)
        .flat_map(|(manager, _, _, _, status)| {
            status
                .into_iter()
                .flat_map(|s| s.credentials.iter())
                .filter_map(move |c| {
                    let allowance = c.pull_allowance.as_ref()?;
                    Some(format!("{manager}: Secret {} ({allowance})", c.name))
                })
        })
        .collect()
}

/// Why a Pod's pull is a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullWhy {
    /// The registry refused the manager's credential the Pod holds.
    Rejected,
    /// The Pod holds no Secret of a manager that serves the registry.
    NoCredential,
}

/// A refused pull of one image of a Pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusedPull {
    /// The image, as the container names it.
    pub image: String,
    /// The registry key of the manager's Secret that matches the image.
    pub registry: String,
    /// The manager's Secret: the one the Pod holds (`pullRejected`), or the one it lacks
    /// (`noCredential`).
    pub secret: String,
}

/// One pull finding of a Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullFinding {
    /// Rejected, or no credential.
    pub why: PullWhy,
    /// The manager behind the Secret.
    pub manager: String,
    /// Whether the Pod's namespace is in the manager's scope (for `noCredential`: the Pod
    /// opted out or was admitted before, rather than its namespace being left out).
    pub in_scope: bool,
    /// The pull.
    pub pull: RefusedPull,
}

/// The pull findings of `pod` in `namespace`: one per refused image that a manager of `serving`
/// concerns. A Pod without any of the Secrets is named the Secret of a manager whose scope holds
/// its namespace before one whose scope does not, each group in `serving`'s order.
pub fn refused_pulls(pod: &Pod, meta: &NamespaceMeta, serving: &[Serving]) -> Vec<PullFinding> {
    let namespace = meta.name.as_str();
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let held: Vec<&str> = spec
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|r| r.name.as_str())
        .collect();
    let images: Vec<(&str, &str)> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter_map(|c| Some((c.name.as_str(), c.image.as_deref()?)))
        .collect();
    let statuses = pod.status.iter().flat_map(|s| {
        s.container_statuses
            .iter()
            .flatten()
            .chain(s.init_container_statuses.iter().flatten())
    });
    let mut findings = Vec::new();
    for status in statuses {
        let Some(waiting) = status.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
            continue;
        };
        if !matches!(
            waiting.reason.as_deref(),
            Some("ErrImagePull" | "ImagePullBackOff")
        ) {
            continue;
        }
        let Some((_, image)) = images.iter().find(|(name, _)| *name == status.name) else {
            continue;
        };
        // The kubelet's status message is the runtime's error, the part after the image in its
        // `Failed to pull image` Event.
        let message = format!(
            "Failed to pull image \"{image}\": {}",
            waiting.message.as_deref().unwrap_or_default()
        );
        if classify(&message).is_none() {
            continue;
        }
        let Ok(image_ref) = ImageRef::parse(image) else {
            continue;
        };
        let mut offered: Vec<(&Serving, &PullSecretRegistries, &str)> = Vec::new();
        for manager in serving
            .iter()
            .filter(|m| m.namespace.as_deref().is_none_or(|ns| ns == namespace))
        {
            for secret in &manager.secrets {
                if let Some(key) = offered_key(&secret.registries, &image_ref) {
                    offered.push((manager, secret, key));
                }
            }
        }
        let in_scope = |m: &Serving| m.scope.as_ref().is_some_and(|s| s.contains(meta));
        let rejected = offered
            .iter()
            .find(|(_, secret, _)| held.contains(&secret.name.as_str()));
        let lacked = offered
            .iter()
            .find(|(m, _, _)| in_scope(m))
            .or(offered.first());
        let (why, (manager, secret, key)) = match (rejected, lacked) {
            (Some(found), _) => (PullWhy::Rejected, found),
            (None, Some(first)) => (PullWhy::NoCredential, first),
            (None, None) => continue,
        };
        findings.push(PullFinding {
            why,
            manager: manager.manager.clone(),
            in_scope: in_scope(manager),
            pull: RefusedPull {
                image: (*image).to_owned(),
                registry: (*key).to_owned(),
                secret: secret.name.clone(),
            },
        });
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(pull_secrets: &[&str], reason: &str, message: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "app-1", "namespace": "team"},
            "spec": {
                "containers": [{"name": "app", "image": "registry.example.com/team/app:1"}],
                "imagePullSecrets": pull_secrets.iter().map(|n| serde_json::json!({"name": n})).collect::<Vec<_>>(),
            },
            "status": {"containerStatuses": [{
                "name": "app", "image": "registry.example.com/team/app:1", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}},
            }]},
        }))
        .expect("a Pod")
    }

    fn team() -> NamespaceMeta {
        NamespaceMeta::named("team")
    }

    fn serving(namespace: Option<&str>) -> Vec<Serving> {
        vec![Serving {
            manager: "ClusterImagePullSecretManager pulls".to_owned(),
            namespace: namespace.map(str::to_owned),
            scope: Some(match namespace {
                Some(ns) => Scope::Namespace(ns.to_owned()),
                None => Scope::Cluster {
                    selector: None,
                    include: Vec::new(),
                    exclude: Vec::new(),
                },
            }),
            secrets: vec![
                PullSecretRegistries {
                    name: "quay-pull".to_owned(),
                    registries: vec!["quay.io".to_owned()],
                },
                PullSecretRegistries {
                    name: "team-pull".to_owned(),
                    registries: vec!["registry.example.com".to_owned()],
                },
            ],
        }]
    }

    fn refused_pulls_in_team(pod: &Pod, serving: &[Serving]) -> Vec<PullFinding> {
        refused_pulls(pod, &team(), serving)
    }

    const REFUSED: &str = "failed to pull and unpack image \"registry.example.com/team/app:1\": failed to resolve reference \"registry.example.com/team/app:1\": unexpected status from HEAD request to https://registry.example.com/v2/team/app/manifests/1: 401 Unauthorized";

    #[test]
    fn a_refused_pull_with_the_managers_secret_is_rejected_and_without_it_no_credential() {
        let rejected = refused_pulls_in_team(
            &pod(&["team-pull"], "ErrImagePull", REFUSED),
            &serving(None),
        );
        assert_eq!(
            rejected,
            [PullFinding {
                why: PullWhy::Rejected,
                manager: "ClusterImagePullSecretManager pulls".to_owned(),
                in_scope: true,
                pull: RefusedPull {
                    image: "registry.example.com/team/app:1".to_owned(),
                    registry: "registry.example.com".to_owned(),
                    secret: "team-pull".to_owned(),
                },
            }]
        );
        let without = refused_pulls_in_team(
            &pod(&["other"], "ImagePullBackOff", REFUSED),
            &serving(None),
        );
        assert_eq!(without.len(), 1);
        assert_eq!(without[0].why, PullWhy::NoCredential);
        assert_eq!(without[0].pull.secret, "team-pull");
    }

    #[test]
    fn docker_hub_allowances_name_the_manager_and_secret_never_a_credential() {
        let manager: ClusterImagePullSecretManager = serde_json::from_value(serde_json::json!({
            "apiVersion": "cheiron.anny.co/v1alpha1",
            "kind": "ClusterImagePullSecretManager",
            "metadata": {"name": "hub"},
            "spec": {"secrets": [{"existingSecretRef": {"name": "hub", "namespace": "cheiron"}}]},
            "status": {"failures": [], "pullSecrets": [], "credentials": [
                {"name": "dockerhub", "registry": "https://index.docker.io/v1/", "result": "Accepted",
                 "pullAllowance": "76 of 100 pulls left per 6h", "pullsRemaining": 76, "pullsLimit": 100},
                {"name": "ghcr", "registry": "ghcr.io", "result": "Accepted"},
            ]},
        }))
        .expect("a manager");
        assert_eq!(
            docker_hub_allowances(&[], &[manager]),
            ["ClusterImagePullSecretManager hub: Secret dockerhub (76 of 100 pulls left per 6h)"]
        );
    }

    #[test]
    fn only_refusals_of_a_registry_a_manager_serves_in_the_pods_namespace_count() {
        let not_found = "failed to resolve reference \"registry.example.com/team/app:1\": registry.example.com/team/app:1: not found";
        assert!(
            refused_pulls_in_team(
                &pod(&["team-pull"], "ErrImagePull", not_found),
                &serving(None)
            )
            .is_empty()
        );
        assert!(
            refused_pulls_in_team(
                &pod(&["team-pull"], "ContainerCreating", REFUSED),
                &serving(None)
            )
            .is_empty()
        );
        assert!(
            refused_pulls_in_team(
                &pod(&[], "ErrImagePull", REFUSED),
                &serving(Some("elsewhere"))
            )
            .is_empty(),
            "a namespaced manager serves only its namespace"
        );
        assert_eq!(
            refused_pulls_in_team(&pod(&[], "ErrImagePull", REFUSED), &serving(Some("team"))).len(),
            1
        );
        let unserved = vec![Serving {
            secrets: vec![serving(None)[0].secrets[0].clone()],
            ..serving(None)[0].clone()
        }];
        assert!(refused_pulls_in_team(&pod(&[], "ErrImagePull", REFUSED), &unserved).is_empty());
    }

    #[test]
    fn a_pod_without_credential_is_named_the_secret_of_a_manager_whose_scope_holds_it() {
        let elsewhere = Serving {
            manager: "ClusterImagePullSecretManager fleet".to_owned(),
            scope: Some(Scope::Cluster {
                selector: None,
                include: vec![crate::policy::NamespaceGlob::parse("fleet-*").expect("a glob")],
                exclude: Vec::new(),
            }),
            secrets: vec![PullSecretRegistries {
                name: "fleet-pull".to_owned(),
                registries: vec!["registry.example.com".to_owned()],
            }],
            ..serving(None)[0].clone()
        };
        let both = [elsewhere.clone(), serving(None)[0].clone()];
        let found = refused_pulls_in_team(&pod(&[], "ErrImagePull", REFUSED), &both);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].why, PullWhy::NoCredential);
        assert_eq!(found[0].pull.secret, "team-pull");
        assert!(found[0].in_scope);

        let only_elsewhere =
            refused_pulls_in_team(&pod(&[], "ErrImagePull", REFUSED), &[elsewhere]);
        assert_eq!(only_elsewhere[0].pull.secret, "fleet-pull");
        assert!(!only_elsewhere[0].in_scope);
    }
}
