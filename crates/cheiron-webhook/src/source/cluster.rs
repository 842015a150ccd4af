//! Cluster mode: the view kept current by watches. Managers of both kinds are compiled as they
//! arrive and filed in a [`ManagerIndex`] (the objects themselves, credentials included, are
//! not kept); Namespaces are watched as metadata and kept as interned labels; cheiron's own
//! Secrets (label selector) as metadata, kept as a set of interned `(namespace, name)`, and
//! only when this identity may list Secrets at all (the split install's webhook may not).
//! Memory does not grow with unrelated Secrets.

use std::{
    collections::HashSet,
    fmt::Debug,
    future::Future,
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, Ordering},
    },
};

use cheiron_core::policy::{
    InvalidManager, Manager, ManagerId, ManagerIndex, ManagerKind, NamespaceMeta, View,
};
use cheiron_runtime::{
    admin::Readiness,
    api::{
        ApiCheckError, ClusterImagePullSecretManager, ImagePullSecretManager, ensure_crds, label,
    },
    runtime::{InitialList, Relist, Step, WatchStream, watch},
};
use futures::{StreamExt, future, future::BoxFuture};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{Api, Client, Resource, core::PartialObjectMeta, runtime::watcher};
use serde::de::DeserializeOwned;

use super::{
    contract::Source,
    lookup::{NAMESPACE_LOOKUP_TIMEOUT, NamespaceLookup},
    namespaces::NamespaceTable,
    secrets::SecretSet,
    symbols::Symbols,
};

/// A [`Source`] over the webhook's watches. Ready once both manager kinds are listed and the
/// Namespaces' list has begun to arrive; the rest of that list may still be coming in (a
/// namespace not in it yet is looked up, or waited for), and cheiron's Secrets are listed
/// after it.
pub struct ClusterSource {
    view: ClusterView,
    ready: AtomicBool,
    /// True once the Namespaces' first list is in.
    namespaces_listed: tokio::sync::watch::Sender<bool>,
    client: Client,
}

/// Namespaces and cheiron's Secrets, over one table of interned strings (a namespace's name
/// is held once for the namespace and all of cheiron's Secrets in it).
#[derive(Debug, Default)]
struct Inventory {
    symbols: Symbols,
    namespaces: NamespaceTable,
    /// cheiron's Secrets, when this identity may list Secrets: the split install's webhook may
    /// not, and then answers without "Secret missing" warnings.
    secrets: Option<SecretSet>,
}

/// The managers, and the lists of each kind's watch: a relist drops, at its end, the managers
/// of its kind it did not list.
#[derive(Debug, Default)]
struct Managers {
    index: ManagerIndex,
    relists: [Relist<HashSet<ManagerId>>; 2],
}

/// What the watches of a [`ClusterSource`] keep; cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    managers: Arc<RwLock<Managers>>,
    inventory: Arc<RwLock<Inventory>>,
}

impl ClusterView {
    /// Whether both manager kinds' first lists are in.
    fn managers_listed(&self) -> bool {
        self.managers
            .read()
            .is_ok_and(|m| m.relists.iter().all(Relist::is_listed))
    }

    /// Whether the Namespaces' first list is in.
    fn namespaces_listed(&self) -> bool {
        self.inventory.read().is_ok_and(|i| i.namespaces.is_ready())
    }

    /// Whether the Namespaces' list has begun to arrive (or is in): this identity may list
    /// them, and the apiserver answers. Every cluster has namespaces, so a list that brings
    /// none yet has not begun.
    fn namespaces_arriving(&self) -> bool {
        self.inventory
            .read()
            .is_ok_and(|i| i.namespaces.is_ready() || i.namespaces.len() > 0)
    }
}

impl View for ClusterView {
    fn managers_in(&self, namespace: &NamespaceMeta) -> Vec<Arc<Manager>> {
        match self.managers.read() {
            Ok(m) => m.index.candidates(namespace),
            // A writer panicked mid-change; what it left is still a valid index.
            Err(poisoned) => poisoned.into_inner().index.candidates(namespace),
        }
    }

    fn namespace(&self, name: &str) -> Option<NamespaceMeta> {
        let inventory = self.inventory.read().ok()?;
        inventory.namespaces.get(&inventory.symbols, name)
    }

    /// Unknown until the first list of cheiron's Secrets is in: readiness does not wait for
    /// it (the answer only feeds a warning).
    fn secret_exists(&self, namespace: &str, name: &str) -> Option<bool> {
        let inventory = self.inventory.read().ok()?;
        let secrets = inventory.secrets.as_ref().filter(|s| s.is_ready())?;
        Some(secrets.contains(&inventory.symbols, namespace, name))
    }
}

/// One manager kind, as the webhook's watch sees it.
trait WatchedManager:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
    const KIND: ManagerKind;
    /// The policy's view of it, credentials left behind.
    fn compile(&self) -> Result<Manager, InvalidManager>;
}

impl WatchedManager for ImagePullSecretManager {
    const KIND: ManagerKind = ManagerKind::Namespaced;
    fn compile(&self) -> Result<Manager, InvalidManager> {
        Manager::from_namespaced(self)
    }
}

impl WatchedManager for ClusterImagePullSecretManager {
    const KIND: ManagerKind = ManagerKind::Cluster;
    fn compile(&self) -> Result<Manager, InvalidManager> {
        Manager::from_cluster(self)
    }
}

fn kind_slot(kind: ManagerKind) -> usize {
    match kind {
        ManagerKind::Namespaced => 0,
        ManagerKind::Cluster => 1,
    }
}

fn id_of<K: WatchedManager>(m: &K) -> ManagerId {
    ManagerId {
        kind: K::KIND,
        namespace: m.meta().namespace.clone(),
        name: m.meta().name.clone().unwrap_or_default(),
    }
}

impl Managers {
    /// Applies one watch event of kind `K`.
    fn apply_event<K: WatchedManager>(&mut self, event: &watcher::Event<K>) {
        match self.relists[kind_slot(K::KIND)].follow(event) {
            Step::Began { .. } => {}
            Step::Listed(m, listed) => {
                listed.insert(id_of(m));
                self.apply(m);
            }
            Step::Complete(listed) => {
                self.index
                    .retain(|id| id.kind != K::KIND || listed.contains(id));
                tracing::debug!(managers = self.index.len(), "manager view updated");
            }
            Step::Applied(m) => self.apply(m),
            Step::Deleted(m) => self.index.delete(&id_of(m)),
        }
    }

    /// Files a manager as it is now: compiled, or dropped when it is being deleted (it injects
    /// nothing while its finalizer cleans up) or does not compile (logged).
    fn apply<K: WatchedManager>(&mut self, m: &K) {
        let id = id_of(m);
        if m.meta().deletion_timestamp.is_some() {
            self.index.delete(&id);
            return;
        }
        match m.compile() {
            Ok(compiled) => self.index.apply(compiled),
            Err(e) => {
                tracing::warn!(error = %e, "ignoring invalid manager");
                self.index.delete(&id);
            }
        }
    }
}

/// Watches one manager kind into `view`'s index until the process ends. A relist drops, at its
/// end, the managers of this kind it did not list.
async fn watch_managers<K: WatchedManager>(
    client: Client,
    view: ClusterView,
    initial: InitialList,
) {
    watch(Api::<K>::all(client), watcher::Config::default(), initial)
        .for_each(|event| {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    tracing::warn!(kind = K::KIND.as_str(), error = %cheiron_runtime::message::watch_error(&e), "watch failed; retrying");
                    return future::ready(());
                }
            };
            if let Ok(mut managers) = view.managers.write() {
                managers.apply_event(&event);
            }
            future::ready(())
        })
        .await;
}

/// Hands each event of `events` (a metadata watch) to `apply` under the inventory's lock,
/// until the process ends.
async fn watch_inventory<K>(
    events: WatchStream<PartialObjectMeta<K>>,
    inventory: Arc<RwLock<Inventory>>,
    apply: impl Fn(&mut Inventory, &watcher::Event<PartialObjectMeta<K>>),
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    events
        .for_each(|event| {
            match event {
                Ok(event) => {
                    if let Ok(mut inventory) = inventory.write() {
                        apply(&mut inventory, &event);
                    }
                }
                Err(e) => {
                    tracing::warn!(kind = %K::kind(&()), error = %cheiron_runtime::message::watch_error(&e), "watch failed; retrying")
                }
            }
            future::ready(())
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
            tracing::warn!(error = %cheiron_runtime::message::api_error(&e), "cannot ask whether Secrets may be listed; not watching them");
            false
        }
    }
}

impl ClusterSource {
    /// Checks that the CRDs are served, then starts watching, listing as `initial` says.
    /// Returns the source and the future that drives the watches (spawn it; it runs until
    /// dropped).
    pub async fn start(
        client: Client,
        initial: InitialList,
    ) -> Result<(Arc<Self>, impl Future<Output = ()> + Send), ApiCheckError> {
        ensure_crds(&client).await?;
        let watch_secrets = may_list_secrets(&client).await;
        if !watch_secrets {
            tracing::info!(
                "this identity may not list Secrets (the split install's webhook): answering \
                 without warnings about pull secrets missing from a namespace"
            );
        }

        let view = ClusterView::default();
        if watch_secrets && let Ok(mut inventory) = view.inventory.write() {
            inventory.secrets = Some(SecretSet::default());
        }
        let source = Arc::new(Self {
            view: view.clone(),
            ready: AtomicBool::new(false),
            namespaces_listed: tokio::sync::watch::Sender::new(false),
            client: client.clone(),
        });

        let watches = future::join5(
            watch_managers::<ImagePullSecretManager>(client.clone(), view.clone(), initial),
            watch_managers::<ClusterImagePullSecretManager>(client.clone(), view.clone(), initial),
            watch_inventory(
                watch(
                    Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
                    watcher::Config::default(),
                    initial,
                ),
                view.inventory.clone(),
                |inventory, event| {
                    let Inventory {
                        symbols,
                        namespaces,
                        ..
                    } = inventory;
                    namespaces.apply(symbols, event);
                },
            ),
            {
                let source = source.clone();
                async move {
                    if watch_secrets {
                        // Listed after the Namespaces: a decision may wait for their list,
                        // none for this one, the largest by far, so it does not share the
                        // apiserver's and this process's time with theirs.
                        source.until_namespaces_listed().await;
                        watch_inventory(
                            watch(
                                Api::<PartialObjectMeta<Secret>>::all(client),
                                watcher::Config::default().labels(&label::managed_by_selector()),
                                initial,
                            ),
                            view.inventory.clone(),
                            |inventory, event| {
                                let Inventory {
                                    symbols, secrets, ..
                                } = inventory;
                                if let Some(secrets) = secrets {
                                    secrets.apply(symbols, event);
                                }
                            },
                        )
                        .await;
                    }
                }
            },
            Self::mark_ready(source.clone()),
        );
        Ok((source, async move {
            watches.await;
        }))
    }

    /// Sets readiness once both manager kinds' watches have applied their first lists (every
    /// decision reads every manager, and a manager missing from the view would change one) and
    /// the first namespaces have arrived (an identity that may not list them, or an apiserver
    /// that does not answer, stays unready, as the alert on readiness expects). Then says when
    /// the Namespaces' first list is in. Until it is, a namespace the view lacks is looked up
    /// live or waited for (`webhook::mutate`), never taken as unlabelled: at 100 000
    /// namespaces their list takes seconds, which readiness does not wait for.
    /// cheiron's Secrets are not waited for at all (at 100 000 namespaces, 200 000 of them):
    /// until their list is in, whether a referenced Secret exists is unknown, and an answer
    /// carries no "missing" warning (the watch logs `first list in` when it is in). Polled:
    /// the watches are plain loops that only flip flags.
    async fn mark_ready(self: Arc<Self>) {
        let v = &self.view;
        while !(v.managers_listed() && v.namespaces_arriving()) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        self.ready.store(true, Ordering::Release);
        let managers = v.managers.read().map(|m| m.index.len()).unwrap_or(0);
        tracing::info!(managers, "managers listed, namespaces arriving; ready");
        while !v.namespaces_listed() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        self.namespaces_listed.send_replace(true);
        let (namespaces, strings) = v
            .inventory
            .read()
            .map(|i| (i.namespaces.len(), i.symbols.len()))
            .unwrap_or_default();
        tracing::info!(namespaces, strings, "namespaces listed");
    }

    /// Resolves once the Namespaces' first list is in.
    async fn until_namespaces_listed(&self) {
        let mut listed = self.namespaces_listed.subscribe();
        // An error means the sender is gone, which it is not while `self` lives.
        let _ = listed.wait_for(|listed| *listed).await;
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
            if !super::lookup::is_namespace_name(name) {
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
                    labels: ns.metadata.labels.into_iter().flatten().collect(),
                    annotations: ns.metadata.annotations.into_iter().flatten().collect(),
                }),
                Ok(Ok(None)) => NamespaceLookup::Unknown,
                Ok(Err(e)) => {
                    tracing::warn!(namespace = name, error = %cheiron_runtime::message::api_error(&e), "namespace lookup failed");
                    NamespaceLookup::Unknown
                }
                Err(_) => {
                    tracing::warn!(namespace = name, "namespace lookup timed out");
                    NamespaceLookup::Unknown
                }
            }
        })
    }

    fn namespaces_listed(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.until_namespaces_listed())
    }
}

impl Readiness for ClusterSource {
    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn meta<K: Resource>(
        value: serde_json::Value,
    ) -> Result<PartialObjectMeta<K>, serde_json::Error> {
        serde_json::from_value(value)
    }

    fn feed<K: WatchedManager>(view: &ClusterView, events: Vec<watcher::Event<K>>) {
        for event in events {
            if let Ok(mut managers) = view.managers.write() {
                managers.apply_event(&event);
            }
        }
    }

    fn names(view: &ClusterView, namespace: &str) -> Vec<String> {
        let ns = view
            .namespace(namespace)
            .unwrap_or_else(|| NamespaceMeta::named(namespace));
        view.managers_in(&ns)
            .iter()
            .map(|m| m.id.name.clone())
            .collect()
    }

    #[test]
    fn view_files_managers_oldest_first_and_answers_from_the_watches() -> TestResult {
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
        let view = ClusterView::default();
        feed(
            &view,
            vec![
                watcher::Event::Init,
                watcher::Event::InitApply(older),
                watcher::Event::InitDone,
            ],
        );
        feed(
            &view,
            vec![
                watcher::Event::Init,
                watcher::Event::InitApply(newer),
                watcher::Event::InitDone,
            ],
        );
        if let Ok(mut inventory) = view.inventory.write() {
            let Inventory {
                symbols,
                namespaces,
                secrets,
            } = &mut *inventory;
            namespaces.apply(
                symbols,
                &watcher::Event::Apply(meta::<Namespace>(serde_json::json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "team", "labels": {"tier": "apps"}},
                }))?),
            );
            let secrets = secrets.get_or_insert_with(SecretSet::default);
            secrets.apply(symbols, &watcher::Event::Init);
            secrets.apply(
                symbols,
                &watcher::Event::InitApply(meta::<Secret>(serde_json::json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "a", "namespace": "team"},
                }))?),
            );
        }
        assert_eq!(
            view.secret_exists("team", "b"),
            None,
            "unknown until the Secrets' first list is in"
        );
        if let Ok(mut inventory) = view.inventory.write() {
            let Inventory {
                symbols, secrets, ..
            } = &mut *inventory;
            if let Some(secrets) = secrets {
                secrets.apply(symbols, &watcher::Event::InitDone);
            }
        }
        assert_eq!(names(&view, "team"), ["older", "newer"]);
        assert_eq!(names(&view, "elsewhere"), ["newer"]);
        let team = view.namespace("team").ok_or("team missing")?;
        assert_eq!(team.labels.get("tier"), Some("apps"));
        assert_eq!(view.namespace("elsewhere"), None);
        assert_eq!(view.secret_exists("team", "a"), Some(true));
        assert_eq!(view.secret_exists("team", "b"), Some(false));
        assert_eq!(view.secret_exists("other", "a"), Some(false));
        Ok(())
    }

    #[test]
    fn managers_being_deleted_invalid_or_not_relisted_are_dropped() -> TestResult {
        let manager = |name: &str, extra: serde_json::Value| {
            let mut value = serde_json::json!({
                "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
                "metadata": {"name": name},
                "spec": {"secrets": [{"existingSecretRef": {"name": "b", "namespace": "cheiron"}}]},
            });
            if let (Some(target), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
                for (k, v) in extra {
                    match target.get_mut(k) {
                        Some(serde_json::Value::Object(o)) => {
                            o.extend(v.as_object().cloned().unwrap_or_default())
                        }
                        _ => {
                            target.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            serde_json::from_value::<ClusterImagePullSecretManager>(value)
        };
        let view = ClusterView::default();
        feed(
            &view,
            vec![
                watcher::Event::Init,
                watcher::Event::InitApply(manager("kept", serde_json::json!({}))?),
                watcher::Event::InitApply(manager("leaving", serde_json::json!({}))?),
                watcher::Event::InitDone,
            ],
        );
        assert_eq!(names(&view, "x"), ["kept", "leaving"]);
        feed(
            &view,
            vec![watcher::Event::Apply(manager(
                "leaving",
                serde_json::json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
            )?)],
        );
        assert_eq!(
            names(&view, "x"),
            ["kept"],
            "being deleted: injects nothing"
        );
        feed(
            &view,
            vec![watcher::Event::Apply(manager(
                "kept",
                serde_json::json!({"spec": {"namespaces": ["NOT A GLOB"]}}),
            )?)],
        );
        assert!(names(&view, "x").is_empty(), "no longer compiles: dropped");
        feed(
            &view,
            vec![
                watcher::Event::Apply(manager("back", serde_json::json!({}))?),
                watcher::Event::Init,
                watcher::Event::InitDone,
            ],
        );
        assert!(names(&view, "x").is_empty(), "a relist that lists nothing");
        Ok(())
    }

    #[test]
    fn the_webhook_keeps_no_credential_of_a_manager() -> TestResult {
        let manager: ImagePullSecretManager = serde_json::from_value(serde_json::json!({
            "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ImagePullSecretManager",
            "metadata": {"name": "m", "namespace": "team",
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...s3cr3t...}"}},
            "spec": {"secrets": [{"name": "hub", "registry": "docker.io", "username": "alice",
                                  "password": "s3cr3t", "email": "a@example.com"}]},
        }))?;
        let view = ClusterView::default();
        feed(&view, vec![watcher::Event::Apply(manager)]);
        let kept = view.managers_in(&NamespaceMeta::named("team"));
        let kept_text = format!("{kept:?}");
        for gone in ["s3cr3t", "alice", "a@example.com"] {
            assert!(!kept_text.contains(gone), "{gone} kept in {kept_text}");
        }
        assert_eq!(
            kept.first().map(|m| m.secret_names().to_vec()),
            Some(vec!["hub".to_owned()]),
            "admission still has what it needs"
        );
        Ok(())
    }

    #[test]
    fn the_view_is_ready_with_both_manager_kinds_listed_and_the_first_namespaces_in() -> TestResult
    {
        let view = ClusterView::default();
        assert!(!view.managers_listed());
        feed::<ImagePullSecretManager>(&view, vec![watcher::Event::Init, watcher::Event::InitDone]);
        assert!(!view.managers_listed(), "one kind is not enough");
        feed::<ClusterImagePullSecretManager>(
            &view,
            vec![watcher::Event::Init, watcher::Event::InitDone],
        );
        assert!(view.managers_listed());
        let apply = |event: watcher::Event<PartialObjectMeta<Namespace>>| {
            if let Ok(mut inventory) = view.inventory.write() {
                let Inventory {
                    symbols,
                    namespaces,
                    ..
                } = &mut *inventory;
                namespaces.apply(symbols, &event);
            }
        };
        apply(watcher::Event::Init);
        assert!(
            !view.namespaces_arriving(),
            "a list that brought nothing may be one this identity may not make"
        );
        apply(watcher::Event::InitApply(meta::<Namespace>(
            serde_json::json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"},
            }),
        )?));
        assert!(view.namespaces_arriving(), "ready from here");
        assert!(
            !view.namespaces_listed(),
            "the rest of the list is still to come"
        );
        apply(watcher::Event::InitDone);
        assert!(view.namespaces_listed());
        Ok(())
    }

    #[test]
    fn without_a_secret_cache_the_view_says_it_cannot_tell() {
        let view = ClusterView::default();
        assert_eq!(
            view.secret_exists("team", "a"),
            None,
            "no warning either way"
        );
    }
}
