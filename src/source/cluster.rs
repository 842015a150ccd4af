//! Cluster mode: the view kept current by kube-runtime reflectors. Managers of both kinds are
//! watched, stripped of every credential, and compiled on every change; Namespaces only as
//! metadata; cheiron's own Secrets (label selector) as metadata, and only when this identity
//! may list Secrets at all (the split install's webhook may not). Memory does not grow with
//! unrelated Secrets.

use std::{
    future::Future,
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, Ordering},
    },
};

use futures::{StreamExt, future};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api, Client, Resource,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use serde::de::DeserializeOwned;

use futures::future::BoxFuture;

use super::{NAMESPACE_LOOKUP_TIMEOUT, NamespaceIndex, NamespaceLookup, Source};
use crate::{
    admin::Readiness,
    api::{
        ApiCheckError, ClusterImagePullSecretManager, ImagePullSecretManager, PullSecretEntry,
        ensure_crds, label,
    },
    policy::{Manager, NamespaceMeta, View, live_managers},
    watch,
};

/// A [`Source`] over reflector stores. Not ready until every store has its first list.
pub struct ClusterSource {
    view: ClusterView,
    ready: AtomicBool,
    client: Client,
}

/// The stores behind a [`ClusterSource`].
#[derive(Clone)]
pub struct ClusterView {
    managers: Arc<RwLock<Arc<[Manager]>>>,
    namespaced: Store<ImagePullSecretManager>,
    cluster: Store<ClusterImagePullSecretManager>,
    namespaces: NamespaceIndex,
    /// cheiron's Secrets (metadata), when this identity may list Secrets: the split
    /// install's webhook may not, and then answers without "Secret missing" warnings.
    secrets: Option<Store<PartialObjectMeta<Secret>>>,
}

impl ClusterView {
    /// Recompiles the manager list from the two manager stores, oldest first. Invalid managers
    /// (which the CRD schema should have rejected) are logged and left out.
    fn recompile(&self) {
        let namespaced = self.namespaced.state();
        let cluster = self.cluster.state();
        let (managers, invalid) = live_managers(
            namespaced.iter().map(|m| &**m),
            cluster.iter().map(|m| &**m),
        );
        for e in invalid {
            tracing::warn!(error = %e, "ignoring invalid manager");
        }
        tracing::debug!(managers = managers.len(), "manager view updated");
        if let Ok(mut slot) = self.managers.write() {
            *slot = managers.into();
        }
    }
}

impl View for ClusterView {
    fn managers(&self) -> Arc<[Manager]> {
        match self.managers.read() {
            Ok(m) => m.clone(),
            // A writer panicked mid-swap; the previous list is still whole.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn namespace(&self, name: &str) -> Option<NamespaceMeta> {
        self.namespaces.get(name)
    }

    fn secret_exists(&self, namespace: &str, name: &str) -> Option<bool> {
        self.secrets
            .as_ref()
            .map(|s| s.get(&ObjectRef::new(name).within(namespace)).is_some())
    }
}

/// Only what the view reads is kept: managers' spec and creation time, Secrets' names.
/// (kubectl's last-applied annotation alone doubles a manager.)
fn trim<K: Resource>(o: &mut K) {
    let meta = o.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
}

/// A manager as the webhook keeps it: what admission decides with, and no credential. Every
/// replica serves an unauthenticated port, so an inline password (or any user name) is never
/// kept in its memory.
fn trim_manager<K: Resource>(
    entries: impl Fn(&mut K) -> &mut Vec<PullSecretEntry>,
) -> impl Fn(&mut K) {
    move |m| {
        trim(m);
        for entry in entries(m).iter_mut() {
            entry.password = None;
            entry.username = None;
            entry.email = None;
        }
    }
}

/// Runs one reflector until the process ends, trimming each object with `keep` and calling
/// `on_change` after each change (once per list, not once per listed object).
async fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    keep: impl FnMut(&mut K) + Send,
    on_change: impl Fn(),
) where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    watch::reflect(api, config, writer, keep, |event| {
        if watch::is_change(event) {
            on_change();
        }
    })
    .await;
}

/// Whether this identity may list Secrets cluster-wide, asked with a
/// SelfSubjectAccessReview (every authenticated identity may ask). An error counts as no:
/// a webhook that waits for a Secret watch it may not run would never become ready.
async fn may_list_secrets(client: &Client) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("list".to_owned()),
                resource: Some("secrets".to_owned()),
                group: Some(String::new()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    match api.create(&Default::default(), &review).await {
        Ok(answer) => answer.status.is_some_and(|s| s.allowed),
        Err(e) => {
            tracing::warn!(error = %crate::message::api_error(&e), "cannot ask whether Secrets may be listed; not watching them");
            false
        }
    }
}

impl ClusterSource {
    /// Checks that the CRDs are served, then starts watching. Returns the source and the
    /// future that drives the watches (spawn it; it runs until dropped).
    pub async fn start(
        client: Client,
    ) -> Result<(Arc<Self>, impl Future<Output = ()> + Send), ApiCheckError> {
        ensure_crds(&client).await?;
        let watch_secrets = may_list_secrets(&client).await;
        if !watch_secrets {
            tracing::info!(
                "this identity may not list Secrets (the split install's webhook): answering \
                 without warnings about pull secrets missing from a namespace"
            );
        }

        let (namespaced, namespaced_writer) = reflector::store();
        let (cluster, cluster_writer) = reflector::store();
        let namespaces = NamespaceIndex::default();
        let (secrets, secrets_writer) = reflector::store();
        let (secrets, secrets_writer) = if watch_secrets {
            (Some(secrets), Some(secrets_writer))
        } else {
            (None, None)
        };
        let source = Arc::new(Self {
            view: ClusterView {
                managers: Arc::new(RwLock::new(Arc::from(Vec::new()))),
                namespaced,
                cluster,
                namespaces: namespaces.clone(),
                secrets,
            },
            ready: AtomicBool::new(false),
            client: client.clone(),
        });

        let all = watcher::Config::default();
        let view = source.view.clone();
        let recompile = move || view.recompile();
        let watches = future::join5(
            reflect(
                Api::all(client.clone()),
                all.clone(),
                namespaced_writer,
                trim_manager(|m: &mut ImagePullSecretManager| &mut m.spec.secrets),
                recompile.clone(),
            ),
            reflect(
                Api::all(client.clone()),
                all.clone(),
                cluster_writer,
                trim_manager(|m: &mut ClusterImagePullSecretManager| &mut m.spec.secrets),
                recompile,
            ),
            watcher(
                Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
                all,
            )
            .default_backoff()
            .for_each(move |event| {
                match event {
                    Ok(event) => namespaces.apply(&event),
                    Err(e) => {
                        tracing::warn!(kind = "Namespace", error = %e, "watch failed; retrying")
                    }
                }
                future::ready(())
            }),
            async move {
                if let Some(writer) = secrets_writer {
                    reflect(
                        Api::<PartialObjectMeta<Secret>>::all(client),
                        watcher::Config::default().labels(&label::managed_by_selector()),
                        writer,
                        trim,
                        || {},
                    )
                    .await;
                }
            },
            Self::mark_ready(source.clone()),
        );
        Ok((source, async move {
            watches.await;
        }))
    }

    async fn mark_ready(self: Arc<Self>) {
        let v = &self.view;
        let secrets = async {
            match &v.secrets {
                Some(store) => store.wait_until_ready().await,
                None => Ok(()),
            }
        };
        let synced = future::try_join3(
            v.namespaced.wait_until_ready(),
            v.cluster.wait_until_ready(),
            secrets,
        )
        .await;
        while !v.namespaces.is_ready() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        if synced.is_ok() {
            v.recompile();
            self.ready.store(true, Ordering::Release);
            tracing::info!(
                managers = v.managers().len(),
                namespaces = v.namespaces.len(),
                secrets = v.secrets.as_ref().map(Store::len),
                "caches synced; ready"
            );
        }
    }

    /// The stores, for reuse by the controller.
    pub fn stores(&self) -> &ClusterView {
        &self.view
    }
}

impl Source for ClusterSource {
    fn view(&self) -> &dyn View {
        &self.view
    }

    /// Reads the namespace's metadata live. The name becomes part of the API path, so
    /// anything that is not a namespace name (`kube-system/secrets/x`, `a?watch=1`) is
    /// refused here, whatever the caller checked.
    fn lookup_namespace<'a>(&'a self, name: &'a str) -> BoxFuture<'a, NamespaceLookup> {
        Box::pin(async move {
            if !super::is_namespace_name(name) {
                // Not logged: the name is the client's, of any length.
                tracing::warn!(
                    bytes = name.len(),
                    "refusing to look up a namespace whose name is not a DNS-1123 label"
                );
                return NamespaceLookup::Unknown;
            }
            let api: Api<Namespace> = Api::all(self.client.clone());
            match tokio::time::timeout(NAMESPACE_LOOKUP_TIMEOUT, api.get_metadata_opt(name)).await {
                Ok(Ok(Some(ns))) => NamespaceLookup::Found(NamespaceMeta {
                    name: name.to_owned(),
                    labels: ns.metadata.labels.unwrap_or_default(),
                    annotations: ns.metadata.annotations.unwrap_or_default(),
                }),
                Ok(Ok(None)) => NamespaceLookup::Unknown,
                Ok(Err(e)) => {
                    tracing::warn!(namespace = name, error = %e, "namespace lookup failed");
                    NamespaceLookup::Unknown
                }
                Err(_) => {
                    tracing::warn!(namespace = name, "namespace lookup timed out");
                    NamespaceLookup::Unknown
                }
            }
        })
    }
}

impl Readiness for ClusterSource {
    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::store::Writer;

    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn fill<K>(objects: Vec<K>) -> Store<K>
    where
        K: Resource + Clone + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + Default,
    {
        let mut writer = Writer::default();
        writer.apply_watcher_event(&watcher::Event::Init);
        for o in objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(o));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        writer.as_reader()
    }

    fn meta<K: Resource>(
        value: serde_json::Value,
    ) -> Result<PartialObjectMeta<K>, serde_json::Error> {
        serde_json::from_value(value)
    }

    #[test]
    fn view_compiles_managers_oldest_first_and_answers_from_the_stores() -> TestResult {
        let newer: ClusterImagePullSecretManager = serde_json::from_value(serde_json::json!({
            "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
            "metadata": {"name": "newer", "creationTimestamp": "2026-02-01T00:00:00Z"},
            "spec": {"secrets": [{"existingSecretRef": {"name": "b", "namespace": "cheiron"}}]},
        }))?;
        let older: ImagePullSecretManager = serde_json::from_value(serde_json::json!({
            "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ImagePullSecretManager",
            "metadata": {"name": "older", "namespace": "team", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"secrets": [{"existingSecretRef": {"name": "a"}}]},
        }))?;
        let view = ClusterView {
            managers: Arc::new(RwLock::new(Arc::from(Vec::new()))),
            namespaced: fill(vec![older]),
            cluster: fill(vec![newer]),
            namespaces: {
                let index = NamespaceIndex::default();
                index.apply(&watcher::Event::Init);
                index.apply(&watcher::Event::InitApply(meta::<Namespace>(
                    serde_json::json!({
                        "apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": "team", "labels": {"tier": "apps"}},
                    }),
                )?));
                index.apply(&watcher::Event::InitDone);
                index
            },
            secrets: Some(fill(vec![meta::<Secret>(serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "a", "namespace": "team"},
            }))?])),
        };
        assert!(
            view.managers().is_empty(),
            "nothing compiled before the first recompile"
        );
        view.recompile();
        let names: Vec<_> = view.managers().iter().map(|m| m.id.name.clone()).collect();
        assert_eq!(names, ["older", "newer"]);
        let team = view.namespace("team").ok_or("team missing")?;
        assert_eq!(team.labels.get("tier").map(String::as_str), Some("apps"));
        assert_eq!(view.namespace("elsewhere"), None);
        assert_eq!(view.secret_exists("team", "a"), Some(true));
        assert_eq!(view.secret_exists("team", "b"), Some(false));
        assert_eq!(view.secret_exists("other", "a"), Some(false));
        Ok(())
    }

    #[test]
    fn the_webhook_keeps_no_credential_of_a_manager() -> TestResult {
        let mut manager: ImagePullSecretManager = serde_json::from_value(serde_json::json!({
            "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ImagePullSecretManager",
            "metadata": {"name": "m", "namespace": "team",
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...s3cr3t...}"}},
            "spec": {"secrets": [{"name": "hub", "registry": "docker.io", "username": "alice",
                                  "password": "s3cr3t", "email": "a@example.com"}]},
        }))?;
        trim_manager(|m: &mut ImagePullSecretManager| &mut m.spec.secrets)(&mut manager);
        let kept = serde_json::to_string(&manager)?;
        for gone in ["s3cr3t", "alice", "a@example.com"] {
            assert!(!kept.contains(gone), "{gone} kept in {kept}");
        }
        let compiled = Manager::from_namespaced(&manager)?;
        assert_eq!(
            compiled.secret_names(),
            ["hub"],
            "admission still has what it needs"
        );
        Ok(())
    }

    #[test]
    fn without_a_secret_cache_the_view_says_it_cannot_tell() {
        let view = ClusterView {
            managers: Arc::new(RwLock::new(Arc::from(Vec::new()))),
            namespaced: fill(vec![]),
            cluster: fill(vec![]),
            namespaces: NamespaceIndex::default(),
            secrets: None,
        };
        assert_eq!(
            view.secret_exists("team", "a"),
            None,
            "no warning either way"
        );
    }
}
