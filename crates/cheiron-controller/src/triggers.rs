//! What makes a manager reconcile besides its own changes: Namespaces, ServiceAccounts and
//! cheiron's own Secrets changing (one watch each, shared by both kinds, each filling the
//! cache the reconciles read), routed to the managers each change can concern. Source
//! Secrets have their own watches (see [`super::source_watches`]).

use std::{
    collections::{HashMap, HashSet},
    hash::{Hash, Hasher},
    sync::{Arc, Mutex},
};

use cheiron_core::policy::{Manager, ManagerId, ManagerIndex, NamespaceMeta, live_managers};
use cheiron_runtime::api::{
    ClusterImagePullSecretManager, ImagePullSecretManager, Mode, annotation, label,
};
use futures::{StreamExt, channel::mpsc, future};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::{
    Api, Client, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        reflector::{ObjectRef, Store},
        watcher,
    },
};

use super::{
    kinds::ManagerRef,
    namespaces::NamespaceCache,
    plan::{SecretMeta, labelled_owner},
    pull_entries,
    secrets::SecretCache,
    service_accounts::{ServiceAccountCache, ServiceAccountRecord},
};

/// Senders into the two controllers' `reconcile_on` streams.
#[derive(Clone)]
pub struct Triggers {
    namespaced: mpsc::UnboundedSender<ObjectRef<ImagePullSecretManager>>,
    cluster: mpsc::UnboundedSender<ObjectRef<ClusterImagePullSecretManager>>,
}

/// The receiving ends, handed to the controllers.
pub struct TriggerStreams {
    /// For the `ImagePullSecretManager` controller.
    pub namespaced: mpsc::UnboundedReceiver<ObjectRef<ImagePullSecretManager>>,
    /// For the `ClusterImagePullSecretManager` controller.
    pub cluster: mpsc::UnboundedReceiver<ObjectRef<ClusterImagePullSecretManager>>,
}

impl Triggers {
    /// A connected pair.
    pub fn new() -> (Self, TriggerStreams) {
        let (namespaced, namespaced_rx) = mpsc::unbounded();
        let (cluster, cluster_rx) = mpsc::unbounded();
        (
            Self {
                namespaced,
                cluster,
            },
            TriggerStreams {
                namespaced: namespaced_rx,
                cluster: cluster_rx,
            },
        )
    }

    /// Asks for a reconcile of `manager`. A closed channel means the controllers stopped.
    pub fn send(&self, manager: ManagerRef) {
        // Sending fails only once the controllers have stopped; then there is nothing to do.
        match manager {
            ManagerRef::Namespaced(r) => {
                let _ = self.namespaced.unbounded_send(r);
            }
            ManagerRef::Cluster(r) => {
                let _ = self.cluster.unbounded_send(r);
            }
        }
    }

    /// Asks for a reconcile of every manager that may act on `namespace`: every cluster manager
    /// and the namespaced managers in it.
    pub fn namespace_changed(
        &self,
        namespace: &str,
        namespaced: &Store<ImagePullSecretManager>,
        cluster: &Store<ClusterImagePullSecretManager>,
    ) {
        for m in cluster.state() {
            self.send(ManagerRef::Cluster(ObjectRef::from_obj(&*m)));
        }
        for m in namespaced.state() {
            if m.metadata.namespace.as_deref() == Some(namespace) {
                self.send(ManagerRef::Namespaced(ObjectRef::from_obj(&*m)));
            }
        }
    }

    /// Asks for a reconcile of the managers that `sa` (in `namespace`) needs something from:
    /// an entry to add, or an entry cheiron added that the manager no longer wants there. A
    /// ServiceAccount as cheiron left it (the watch event of cheiron's own patch) needs
    /// nothing, and re-queues nothing. Only the managers that could be concerned are looked
    /// at: those whose scope may hold the namespace, and those naming an entry cheiron added.
    pub fn service_account_changed(
        &self,
        sa: &ServiceAccountRecord,
        namespace: &NamespaceMeta,
        managers: &RoutableManagers,
    ) {
        let added = sa
            .annotation(annotation::RECONCILE_WITH)
            .into_iter()
            .flat_map(|a| a.split(','))
            .map(str::trim);
        let mut naming: Vec<&Arc<Manager>> = Vec::new();
        for m in added.flat_map(|n| managers.by_secret.get(n).into_iter().flatten()) {
            if !naming.iter().any(|n| n.id == m.id) {
                naming.push(m);
            }
        }
        // What every manager naming an entry cheiron added still wants here, decided once: an
        // entry one of them wants stays, whichever manager added it (as the reconcile's
        // removal decides), so it re-queues none of the others.
        let still_wanted = if naming.is_empty() {
            Vec::new()
        } else {
            pull_entries::wanted(sa, namespace, naming.iter().map(|m| m.as_ref()))
        };
        let mut seen: HashSet<&ManagerId> = HashSet::new();
        for m in managers
            .index
            .candidates(namespace)
            .iter()
            .chain(naming.iter().copied())
        {
            if seen.insert(&m.id) && concerns(sa, namespace, m, &still_wanted) {
                tracing::trace!(manager = %m.id, namespace = sa.namespace(), name = sa.name(), "a ServiceAccount needs a reconcile");
                self.send(ManagerRef::from(&m.id));
            }
        }
    }
}

/// The live managers, compiled, as routing reads them: filed by scope, and by Secret name.
#[derive(Debug, Default)]
pub struct RoutableManagers {
    index: ManagerIndex,
    by_secret: HashMap<String, Vec<Arc<Manager>>>,
}

impl RoutableManagers {
    /// Files `managers`.
    pub fn new(managers: Vec<Manager>) -> Self {
        let index = ManagerIndex::new(managers);
        let mut by_secret: HashMap<String, Vec<Arc<Manager>>> = HashMap::new();
        for m in index.all() {
            for name in m.secret_names() {
                by_secret.entry(name.clone()).or_default().push(m.clone());
            }
        }
        Self { index, by_secret }
    }
}

/// `RoutableManagers` compiled again only when a manager changed (a watch event of a
/// ServiceAccount used to compile every manager).
#[derive(Clone, Default)]
pub struct CompiledManagers {
    /// The managers, and a hash of the stores' uids and resourceVersions they were compiled from.
    cache: Arc<Mutex<Option<Stamped>>>,
    /// Compiled as they act in workload clusters (docs/fleet.md), not here.
    workloads: bool,
}

type Stamped = (u64, Arc<RoutableManagers>);

impl CompiledManagers {
    /// For the watches of a workload cluster: the cluster managers with their scope whatever
    /// `includeLocal` says (which of them select the cluster is the reconcile's business).
    pub fn for_workloads() -> Self {
        Self {
            cache: Arc::default(),
            workloads: true,
        }
    }

    /// The managers of the two stores as they are now.
    pub fn current(
        &self,
        namespaced: &Store<ImagePullSecretManager>,
        cluster: &Store<ClusterImagePullSecretManager>,
    ) -> Arc<RoutableManagers> {
        let (namespaced, cluster) = (namespaced.state(), cluster.state());
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        for meta in namespaced
            .iter()
            .map(|m| &m.metadata)
            .chain(cluster.iter().map(|m| &m.metadata))
        {
            (&meta.uid, &meta.resource_version).hash(&mut hasher);
        }
        let stamp = hasher.finish();
        let Ok(mut cache) = self.cache.lock() else {
            return Arc::default();
        };
        match &*cache {
            Some((at, compiled)) if *at == stamp => compiled.clone(),
            _ => {
                let live = if self.workloads {
                    let mut live: Vec<Manager> = cluster
                        .iter()
                        .filter(|m| m.metadata.deletion_timestamp.is_none())
                        .filter_map(|m| Manager::from_cluster_for_workloads(m).ok())
                        .collect();
                    live.sort_by(|a, b| a.seniority().cmp(&b.seniority()));
                    live
                } else {
                    live_managers(
                        namespaced.iter().map(|m| &**m),
                        cluster.iter().map(|m| &**m),
                    )
                    .0
                };
                let compiled = Arc::new(RoutableManagers::new(live));
                *cache = Some((stamp, compiled.clone()));
                compiled
            }
        }
    }
}

/// Whether `sa` needs something from `manager`: an entry it should have and lacks, or an
/// entry cheiron added for one of the manager's names that no manager naming it
/// (`still_wanted`: what they want on `sa`, the manager among them) wants there.
fn concerns(
    sa: &ServiceAccountRecord,
    namespace: &NamespaceMeta,
    manager: &Manager,
    still_wanted: &[String],
) -> bool {
    if manager.mode == Mode::ServiceAccount
        && manager.scope.contains(namespace)
        && pull_entries::backfill(sa, namespace, manager).is_some()
    {
        return true;
    }
    // Nothing of the manager's that cheiron added here, or the manager wants it all: nothing
    // to take away (the common case, said without computing a decision).
    if !manager
        .secret_names()
        .iter()
        .any(|n| sa.added_by_cheiron(n))
        || pull_entries::wants_every_service_account_in(manager, namespace)
    {
        return false;
    }
    let stale: Vec<String> = manager
        .secret_names()
        .iter()
        .filter(|n| !still_wanted.contains(n))
        .cloned()
        .collect();
    !stale.is_empty() && pull_entries::removal(sa, &stale).is_some()
}

/// Where watch events are routed: the trigger senders, and the caches that say which
/// managers a change can concern.
#[derive(Clone)]
pub struct Routing {
    pub triggers: Triggers,
    pub namespaced: Store<ImagePullSecretManager>,
    pub cluster: Store<ClusterImagePullSecretManager>,
    pub namespaces: NamespaceCache,
    pub secrets: SecretCache,
    pub service_accounts: ServiceAccountCache,
    pub compiled: CompiledManagers,
    /// How a watch error is logged: a workload cluster's (docs/fleet.md) without what the
    /// server said.
    pub describe_error: fn(&watcher::Error) -> String,
}

impl Routing {
    fn watch_error(&self, e: &watcher::Error) -> String {
        (self.describe_error)(e)
    }
}

/// How the controller's own watches' errors are logged: the apiserver's message and code
/// ([`cheiron_runtime::message::watch_error`]).
pub fn trusted_error(e: &watcher::Error) -> String {
    cheiron_runtime::message::watch_error(e)
}

/// Watches Namespaces (metadata only), cheiron's own Secrets (label selector) and
/// ServiceAccounts, keeps their caches through `writers`, and asks for a reconcile of the
/// managers each change can concern. The initial lists route nothing: the controllers
/// reconcile every manager once anyway. Runs until dropped.
pub async fn route(client: Client, routing: Routing) {
    let (r1, r2, r3) = (routing.clone(), routing.clone(), routing);
    future::join3(
        // Kept as the policy's view, not in a reflector store: see `namespaces`.
        watcher(
            Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .for_each(move |event| {
            match event {
                Ok(event) => {
                    r1.namespaces.apply(&event);
                    if let Some(ns) = changed(&event) {
                        r1.triggers
                            .namespace_changed(&ns.name_any(), &r1.namespaced, &r1.cluster);
                    }
                }
                Err(e) => tracing::warn!(
                    kind = "Namespace",
                    error = r1.watch_error(&e),
                    "watch failed; retrying"
                ),
            }
            future::ready(())
        }),
        // Metadata only, of the Secrets whose labels name a manager, and of those the cache
        // keeps only the ones a manager owns (an ownerReference, see `plan::is_managed`):
        // labels anyone can copy onto their own Secrets cost nothing here.
        watcher(
            Api::<SecretMeta>::all(client.clone()),
            watcher::Config::default().labels(&format!(
                "{},{}",
                label::managed_by_selector(),
                label::MANAGER_KIND
            )),
        )
        .default_backoff()
        .for_each(move |event| {
            match event {
                Ok(event) => {
                    let changed = r2.secrets.apply(&event);
                    if let Some(owner) = changed.as_ref().and_then(labelled_owner) {
                        tracing::trace!(manager = %owner, "one of its Secrets changed");
                        r2.triggers.send(ManagerRef::from(&owner));
                    }
                }
                Err(e) => tracing::warn!(
                    kind = "Secret",
                    error = r2.watch_error(&e),
                    "watch failed; retrying"
                ),
            }
            future::ready(())
        }),
        // Kept as records, not in a reflector store: see `service_accounts`.
        watcher(
            Api::<ServiceAccount>::all(client),
            watcher::Config::default(),
        )
        .default_backoff()
        .for_each(move |event| {
            match event {
                Ok(event) => {
                    // A deleted ServiceAccount needs nothing from anyone.
                    if let Some(sa) = r3.service_accounts.apply(&event) {
                        let ns = sa.namespace();
                        let meta = r3
                            .namespaces
                            .get(ns)
                            .unwrap_or_else(|| Arc::new(NamespaceMeta::named(ns)));
                        let managers = r3.compiled.current(&r3.namespaced, &r3.cluster);
                        r3.triggers.service_account_changed(&sa, &meta, &managers);
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        kind = "ServiceAccount",
                        error = r3.watch_error(&e),
                        "watch failed; retrying"
                    )
                }
            }
            future::ready(())
        }),
    )
    .await;
}

/// The object of an event that changes one object after the initial list.
fn changed<K>(event: &watcher::Event<K>) -> Option<&K> {
    match event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) => Some(o),
        watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => None,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::LocalObjectReference;

    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn cluster_manager(
        name: &str,
        spec: serde_json::Value,
    ) -> Result<Manager, Box<dyn std::error::Error>> {
        let mut spec = spec;
        spec["secrets"] = serde_json::json!([
            {"existingSecretRef": {"name": format!("{name}-pull"), "namespace": "src"}}]);
        let m: ClusterImagePullSecretManager = serde_json::from_value(serde_json::json!({
            "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
            "metadata": {"name": name}, "spec": spec,
        }))?;
        Ok(Manager::from_cluster(&m)?)
    }

    fn manager(spec: serde_json::Value) -> Result<Manager, Box<dyn std::error::Error>> {
        cluster_manager("m", spec)
    }

    fn sa(
        name: &str,
        entries: &[&str],
        added: Option<&str>,
    ) -> Result<ServiceAccountRecord, &'static str> {
        let mut sa = ServiceAccount::default();
        sa.metadata.namespace = Some("team".into());
        sa.metadata.name = Some(name.into());
        sa.metadata.resource_version = Some("1".into());
        sa.metadata.annotations = added.map(|a| {
            [
                (annotation::RECONCILE_WITH.to_owned(), a.to_owned()),
                (annotation::RECONCILED.to_owned(), "true".to_owned()),
            ]
            .into()
        });
        sa.image_pull_secrets = Some(
            entries
                .iter()
                .map(|n| LocalObjectReference { name: (*n).into() })
                .collect(),
        );
        ServiceAccountRecord::of(&sa).ok_or("no record")
    }

    #[test]
    fn the_event_of_cheirons_own_patch_concerns_no_manager() -> TestResult {
        let team = NamespaceMeta::named("team");
        let m = manager(serde_json::json!({}))?;
        assert!(
            !concerns(
                &sa("default", &["theirs", "m-pull"], Some("m-pull"))?,
                &team,
                &m,
                &["m-pull".to_owned()]
            ),
            "as cheiron left it: nothing to do"
        );
        assert!(
            concerns(&sa("default", &["theirs"], None)?, &team, &m, &[]),
            "lacks m-pull"
        );
        Ok(())
    }

    #[test]
    fn an_entry_the_manager_no_longer_wants_concerns_it() -> TestResult {
        let team = NamespaceMeta::named("team");
        let narrowed = manager(serde_json::json!({"serviceAccountNames": ["other"]}))?;
        let left_behind = sa("default", &["m-pull"], Some("m-pull"))?;
        assert!(concerns(&left_behind, &team, &narrowed, &[]));
        let pod_mode = manager(serde_json::json!({"mode": "Pod"}))?;
        assert!(concerns(&left_behind, &team, &pod_mode, &[]));
        // Not cheiron's entry (no record of adding it): never taken away.
        assert!(!concerns(
            &sa("default", &["m-pull"], None)?,
            &team,
            &pod_mode,
            &[]
        ));
        Ok(())
    }

    /// The managers a ServiceAccount event re-queues.
    fn routed(
        sa: &ServiceAccountRecord,
        namespace: &NamespaceMeta,
        managers: Vec<Manager>,
    ) -> Vec<String> {
        let (triggers, mut streams) = Triggers::new();
        triggers.service_account_changed(sa, namespace, &RoutableManagers::new(managers));
        drop(triggers);
        let mut names = Vec::new();
        while let Ok(r) = streams.cluster.try_recv() {
            names.push(r.name);
        }
        names.sort();
        names
    }

    #[test]
    fn a_service_account_event_reaches_only_the_managers_it_needs_something_from() -> TestResult {
        let apps = NamespaceMeta {
            name: "team".to_owned(),
            labels: [("tier".to_owned(), "apps".to_owned())].into(),
            ..NamespaceMeta::default()
        };
        let managers = || -> Result<Vec<Manager>, Box<dyn std::error::Error>> {
            Ok(vec![
                cluster_manager(
                    "apps",
                    serde_json::json!({"namespaceSelector": {"matchLabels": {"tier": "apps"}}}),
                )?,
                cluster_manager(
                    "web",
                    serde_json::json!({"namespaceSelector": {"matchLabels": {"tier": "web"}}}),
                )?,
                cluster_manager("pods", serde_json::json!({"mode": "Pod"}))?,
            ])
        };
        // Its own patch's event: as cheiron left it, nothing is re-queued.
        let done = sa("default", &["apps-pull"], Some("apps-pull"))?;
        assert!(routed(&done, &apps, managers()?).is_empty());
        // A new ServiceAccount lacks what the manager whose scope holds it adds.
        let new = sa("app", &[], None)?;
        assert_eq!(routed(&new, &apps, managers()?), ["apps"]);
        // An entry cheiron added for a manager whose scope no longer holds the namespace
        // reaches that manager, found by the Secret's name.
        let stale = sa(
            "default",
            &["apps-pull", "web-pull"],
            Some("apps-pull,web-pull"),
        )?;
        assert_eq!(routed(&stale, &apps, managers()?), ["web"]);
        Ok(())
    }

    #[test]
    fn an_entry_another_manager_of_the_same_name_wants_re_queues_nobody() -> TestResult {
        // Per-team managers that all call their Secret `regcred`, each in its own namespaces:
        // the backfill of one team's ServiceAccount used to re-queue every other team's
        // manager (each names `regcred`, and none of the others wants it there).
        let team = |t: &str| -> Result<Manager, Box<dyn std::error::Error>> {
            let m: ClusterImagePullSecretManager = serde_json::from_value(serde_json::json!({
                "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
                "metadata": {"name": t},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"team": t}},
                    "secrets": [{"existingSecretRef": {"name": "regcred", "namespace": "src"}}],
                },
            }))?;
            Ok(Manager::from_cluster(&m)?)
        };
        let blue = NamespaceMeta {
            name: "team".to_owned(),
            labels: [("team".to_owned(), "blue".to_owned())].into(),
            ..NamespaceMeta::default()
        };
        let managers = || -> Result<Vec<Manager>, Box<dyn std::error::Error>> {
            Ok(vec![team("blue")?, team("green")?, team("red")?])
        };
        let backfilled = sa("default", &["regcred"], Some("regcred"))?;
        assert!(routed(&backfilled, &blue, managers()?).is_empty());
        // Left by all of them (the namespace relabelled): the managers naming it look.
        let elsewhere = NamespaceMeta {
            labels: [("team".to_owned(), "none".to_owned())].into(),
            ..blue.clone()
        };
        assert_eq!(
            routed(&backfilled, &elsewhere, managers()?),
            ["blue", "green", "red"]
        );
        Ok(())
    }
}
