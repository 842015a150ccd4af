//! Mode Node managers hand their credentials to the node agents as bundles (node/bundle.rs):
//! one Secret per manager in the node namespace, written here, in the manager's reconcile
//! (through the controller's [`Nodes`] seam).
//! The agents read those and nothing else, so a compromised node reads no manager (no inline
//! password of any other manager) and no source Secret (docs/node.md, "What one node can read
//! and write").
//!
//! ```text
//!   reconcile of a mode Node manager ──► publish: sources → credentials (one docker config)
//!       ok        → the bundle holds them
//!       a problem → the bundle keeps the last good credentials and says why
//!   deletion of a manager             ──► remove (and the owner reference, for the GC)
//!   node::status (every pass)         ──► stale: bundles of managers gone or out of mode Node
//! ```
//!
//! A Secret of the bundle's name that is not this manager's is never touched.

use std::collections::HashMap;

use cheiron_controller::{Issue, IssueKind, Nodes};
use cheiron_core::content::{Fetched, Provided, SourceKey, desired_with};
use cheiron_runtime::{
    api::{ClusterImagePullSecretManager, Mode},
    message,
};
use futures::{FutureExt, future::BoxFuture};
use k8s_openapi::{api::core::v1::Secret, apimachinery::pkg::apis::meta::v1::OwnerReference};
use kube::{Api, Client, ResourceExt, api::PostParams};

use super::bundle::{Bundle, BundleMeta, MAX_PROBLEM, bundle_name};

/// The bundles of the node namespace: the controller's hand-off to the node agents.
pub struct Handoff {
    client: Client,
    /// The node namespace (docs/node.md).
    namespace: String,
}

impl Handoff {
    /// Bundles written in `namespace` through `client`.
    pub fn new(client: Client, namespace: String) -> Self {
        Self { client, namespace }
    }
}

impl Nodes for Handoff {
    fn publish<'a>(
        &'a self,
        manager: &'a ClusterImagePullSecretManager,
        owner: &'a OwnerReference,
        fetched: &'a HashMap<SourceKey, Fetched>,
    ) -> BoxFuture<'a, Option<Issue>> {
        async move {
            if !wants_bundle(manager) {
                return None;
            }
            publish(&self.client, &self.namespace, manager, owner, fetched).await
        }
        .boxed()
    }

    fn remove<'a>(&'a self, name: &'a str, uid: &'a str) -> BoxFuture<'a, Option<Issue>> {
        remove(&self.client, &self.namespace, name, uid).boxed()
    }
}

/// What `manager`'s bundle should say, and the credentials it should hold (`None`: keep the
/// last good ones, as the problem says why).
fn wanted(
    manager: &ClusterImagePullSecretManager,
    fetched: &HashMap<SourceKey, Fetched>,
) -> (BundleMeta, Option<Vec<u8>>) {
    let desired = desired_with(
        &manager.spec.secrets,
        Some("node"),
        None,
        fetched,
        &Provided::new(),
    );
    let problems: Vec<String> = desired.problems.iter().map(|p| p.message()).collect();
    let content = desired
        .secrets
        .first()
        .and_then(|s| s.content.clone())
        .filter(|_| problems.is_empty());
    let problem = if problems.is_empty() && content.is_none() {
        Some("the manager yields no credentials".to_owned())
    } else if problems.is_empty() {
        None
    } else {
        let mut text = problems.join("; ");
        message::truncate(&mut text, MAX_PROBLEM);
        Some(text)
    };
    let meta = BundleMeta {
        manager: manager.name_any(),
        uid: manager.uid().unwrap_or_default(),
        generation: manager.metadata.generation,
        created: manager
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second()),
        node_selector: manager.spec.node_selector.clone().unwrap_or_default(),
        problem,
    };
    (meta, content)
}

/// True when `secret` is `uid`'s bundle (its owner reference says so).
fn owned_by(secret: &Secret, uid: &str) -> bool {
    secret.owner_references().iter().any(|o| o.uid == uid)
}

/// Writes `manager`'s bundle in `namespace` when it differs from what it should be. Returns
/// what could not be done.
async fn publish(
    client: &Client,
    namespace: &str,
    manager: &ClusterImagePullSecretManager,
    owner: &OwnerReference,
    fetched: &HashMap<SourceKey, Fetched>,
) -> Option<Issue> {
    let name = bundle_name(&manager.name_any());
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let failed = |what: &str, e: &kube::Error| {
        Some(Issue::new(
            IssueKind::SecretWrite,
            namespace,
            format!(
                "{what} the node credentials Secret {name}: {}",
                message::api_error(e)
            ),
        ))
    };
    let current = match api.get_opt(&name).await {
        Ok(current) => current,
        Err(e) => return failed("reading", &e),
    };
    let (meta, content) = wanted(manager, fetched);
    let uid = meta.uid.clone();
    if let Some(current) = &current
        && !owned_by(current, &uid)
    {
        return Some(Issue::new(
            IssueKind::Unmanaged,
            namespace,
            format!(
                "Secret {name} is not this manager's node credentials; left untouched (delete or rename it)"
            ),
        ));
    }
    let held = current.as_ref().and_then(Bundle::from_secret);
    // On a problem, the nodes keep the credentials they were given last.
    let content = content.or_else(|| held.as_ref().and_then(|b| b.content.clone()));
    if let Some(held) = &held
        && held.meta == meta
        && held.content == content
    {
        return None;
    }
    let mut secret = Bundle::secret(&meta, content.as_deref());
    secret.metadata.name = Some(name.clone());
    secret.metadata.namespace = Some(namespace.to_owned());
    secret.metadata.owner_references = Some(vec![owner.clone()]);
    let written = match current {
        Some(current) => {
            secret.metadata.resource_version = current.metadata.resource_version;
            api.replace(&name, &PostParams::default(), &secret).await
        }
        None => api.create(&PostParams::default(), &secret).await,
    };
    match written {
        Ok(_) => {
            tracing::info!(
                manager = meta.manager,
                namespace,
                secret = name,
                has_credentials = content.is_some(),
                "node credentials written"
            );
            None
        }
        Err(e) => failed("writing", &e),
    }
}

/// Deletes the bundle of the manager `name` with `uid` from `namespace`, if it is that
/// manager's (a Secret of the name that is not is left alone). Returns what failed.
async fn remove(client: &Client, namespace: &str, name: &str, uid: &str) -> Option<Issue> {
    let e = super::status::delete_bundle(client, namespace, name, uid)
        .await
        .err()?;
    Some(Issue::new(
        IssueKind::SecretDelete,
        namespace,
        format!(
            "deleting the node credentials Secret {}: {}",
            bundle_name(name),
            message::api_error(&e)
        ),
    ))
}

/// True when `manager` should have a bundle: in mode Node and not being deleted.
fn wants_bundle(manager: &ClusterImagePullSecretManager) -> bool {
    manager.spec.mode == Mode::Node && manager.metadata.deletion_timestamp.is_none()
}

#[cfg(test)]
mod tests {
    use cheiron_runtime::api::{ClusterImagePullSecretManagerSpec, PullSecretEntry};
    use k8s_openapi::{ByteString, api::core::v1::Secret as CoreSecret};

    use super::*;

    fn manager(sources: &[(&str, &str)]) -> ClusterImagePullSecretManager {
        let secrets: Vec<PullSecretEntry> = sources
            .iter()
            .map(|(namespace, name)| {
                serde_json::from_value(serde_json::json!({
                    "existingSecretRef": {"name": name, "namespace": namespace}
                }))
                .unwrap_or_else(|e| panic!("entry: {e}"))
            })
            .collect();
        let mut m = ClusterImagePullSecretManager::new(
            "node-pull",
            ClusterImagePullSecretManagerSpec {
                mode: Mode::Node,
                node_selector: Some(Default::default()),
                secrets,
                ..ClusterImagePullSecretManagerSpec::default()
            },
        );
        m.metadata.uid = Some("u-1".to_owned());
        m.metadata.generation = Some(2);
        m
    }

    fn pull_secret(registry: &str) -> Fetched {
        let config =
            format!(r#"{{"auths":{{"{registry}":{{"username":"u","password":"SECRET-VALUE"}}}}}}"#);
        Fetched::Present {
            secret_type: Some("kubernetes.io/dockerconfigjson".to_owned()),
            data: [(
                ".dockerconfigjson".to_owned(),
                ByteString(config.into_bytes()),
            )]
            .into(),
        }
    }

    #[test]
    fn readable_sources_make_credentials_and_a_missing_one_a_problem_without_credentials() {
        let m = manager(&[("platform", "a"), ("platform", "b")]);
        let fetched: HashMap<SourceKey, Fetched> = [
            (
                ("platform".to_owned(), "a".to_owned()),
                pull_secret("a.example"),
            ),
            (
                ("platform".to_owned(), "b".to_owned()),
                pull_secret("b.example"),
            ),
        ]
        .into();
        let (meta, content) = wanted(&m, &fetched);
        assert_eq!(meta.problem, None);
        assert_eq!((meta.uid.as_str(), meta.generation), ("u-1", Some(2)));
        let text = String::from_utf8(content.unwrap_or_default()).unwrap_or_default();
        assert!(
            text.contains("a.example") && text.contains("b.example"),
            "{text}"
        );

        let missing: HashMap<SourceKey, Fetched> = [
            (
                ("platform".to_owned(), "a".to_owned()),
                pull_secret("a.example"),
            ),
            (("platform".to_owned(), "b".to_owned()), Fetched::Missing),
        ]
        .into();
        let (meta, content) = wanted(&m, &missing);
        assert_eq!(content, None, "on a problem the last good credentials stay");
        let problem = meta.problem.unwrap_or_default();
        assert!(problem.contains("platform/b"), "{problem}");
        assert!(!problem.contains("SECRET-VALUE"));
    }

    #[test]
    fn only_a_secret_owned_by_the_manager_is_its_bundle() {
        let mut secret = CoreSecret::default();
        assert!(!owned_by(&secret, "u-1"));
        secret.metadata.owner_references =
            Some(vec![cheiron_controller::ManagerObject::owner_reference(
                &manager(&[]),
            )]);
        assert!(owned_by(&secret, "u-1"));
        assert!(!owned_by(&secret, "u-2"));
    }
}
