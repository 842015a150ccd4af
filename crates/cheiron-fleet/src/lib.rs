//! Workload clusters (docs/fleet.md): a `ClusterImagePullSecretManager` in a management
//! cluster whose `spec.clusters.selector` selects workload clusters does in each of them what
//! it does here, from the same sources (which stay here).
//!
//! The workload clusters are found from their kubeconfig Secrets (Cluster API's convention:
//! `<cluster>-kubeconfig`, key `value`, label `cluster.x-k8s.io/cluster-name`), watched as
//! metadata only; a Secret's data is read once per `resourceVersion`, so a rotated kubeconfig
//! is picked up without a restart. Each cluster gets one client and one set of the watches
//! the controller keeps here (Namespaces and cheiron's Secrets as metadata, ServiceAccounts),
//! filling caches of its own, and a [`Cluster`] over them: the reconcile of a manager runs the
//! very same planning and writes against it ([`crate::controller::sync_in`]). A Cluster API `Cluster`
//! (when its CRD is served) decides with its labels whether a cluster is selected, and one
//! being deleted is released: cheiron stops acting there without cleaning up.
//!
//! Only an administrator enrols a workload cluster (docs/fleet.md, "Who can enrol a
//! cluster"): kubeconfig Secrets and `Cluster`s are read only in the fleet namespaces (cheiron's
//! own by default), a kubeconfig Secret's own labels select nothing unless
//! `--fleet-select-by-secret-labels` says they may, a kubeconfig skipping TLS verification or
//! naming a plain `http://` server is refused without `--fleet-allow-insecure`, at most
//! `--fleet-max-clusters` clusters are connected to, nothing a workload cluster answers is
//! shown (`guard.rs`), and none of its lists takes more than `--fleet-max-list-pages` pages
//! (`pages.rs`).

// The rooms this crate builds on, under the names the code uses.
use cheiron_controller as controller;
use cheiron_core::{content, policy};
use cheiron_runtime::{api, message, metrics, runtime};

mod guard;
mod pages;
mod sync;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{StreamExt, future};
use k8s_openapi::{
    api::core::v1::Secret,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject},
    config::{KubeConfigOptions, Kubeconfig},
    core::{PartialObjectMeta, Selector, SelectorExt},
    discovery,
    runtime::{
        WatchStreamExt,
        events::Reporter,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tokio::task::AbortHandle;

use crate::{
    api::{
        ClusterImagePullSecretManager,
        fleet::{CAPI_GROUP, CLUSTER_NAME_LABEL, KUBECONFIG_KEY, KUBECONFIG_SUFFIX},
    },
    controller::{
        Cluster, ClusterCaches, CompiledManagers, ManagerRef, NamespaceCache, Routing, SecretCache,
        ServiceAccountCache, Triggers,
    },
    metrics::Metrics,
    policy::Manager,
    runtime::{
        Backoff,
        events::{self, EventPublisher},
    },
};

/// How long the connection to a workload cluster may take before it counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest sync of one manager into one workload cluster (a probe, then the writes): a slow
/// cluster is reported and retried, never waited on by the others.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// How long after a manager's deletion its cleanup in an unreachable (or refusing) workload
/// cluster is retried before the finalizer is released anyway (`--fleet-cleanup-timeout`).
pub const DEFAULT_CLEANUP_TIMEOUT: Duration = Duration::from_secs(600);

/// The CustomResourceDefinition of Cluster API's `Cluster`: its Cluster watch starts when it
/// appears, also after the controller started.
pub const CAPI_CLUSTERS_CRD: &str = "clusters.cluster.x-k8s.io";

/// Most workload clusters connected to at once (`--fleet-max-clusters`): those wanted beyond
/// it are reported, not connected to.
pub const DEFAULT_MAX_CLUSTERS: usize = 100;

pub use guard::DEFAULT_MAX_RESPONSE_BYTES;
pub use pages::DEFAULT_MAX_LIST_PAGES;

/// Settings of the fleet (`--fleet`, `--fleet-namespace`, `--fleet-cleanup-timeout`,
/// `--fleet-select-by-secret-labels`, `--fleet-allow-insecure`, `--fleet-max-clusters`,
/// `--fleet-max-response-bytes`, `--fleet-max-list-pages`).
#[derive(Clone, Debug)]
pub struct FleetOptions {
    /// Whether to act in workload clusters at all (reading kubeconfig Secrets needs RBAC the
    /// chart grants only with `fleet.enabled`).
    pub enabled: bool,
    /// The namespaces whose kubeconfig Secrets and Cluster API `Cluster`s are read: namespaces
    /// only an administrator writes. Empty: the namespace of the controller's client (the
    /// command line puts cheiron's own namespace here); never every namespace.
    pub namespaces: Vec<String>,
    /// How long a deleted manager waits for its cleanup in workload clusters.
    pub cleanup_timeout: Duration,
    /// Whether a kubeconfig Secret's own labels select its cluster when no Cluster API
    /// `Cluster` of that name is in its namespace. Off: only a `Cluster` selects.
    pub select_by_secret_labels: bool,
    /// Whether a kubeconfig may skip TLS verification or name a plain `http://` server.
    pub allow_insecure: bool,
    /// Most workload clusters connected to at once.
    pub max_clusters: usize,
    /// Most bytes of one answer of a workload cluster.
    pub max_response_bytes: usize,
    /// Most pages of one list of a workload cluster.
    pub max_list_pages: usize,
}

impl Default for FleetOptions {
    fn default() -> Self {
        Self {
            enabled: false,
            namespaces: Vec::new(),
            cleanup_timeout: DEFAULT_CLEANUP_TIMEOUT,
            select_by_secret_labels: false,
            allow_insecure: false,
            max_clusters: DEFAULT_MAX_CLUSTERS,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_list_pages: DEFAULT_MAX_LIST_PAGES,
        }
    }
}

/// How a manager last stood in a workload cluster, for the Events about it: one per change,
/// never one per retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Health {
    /// Everything there is in step.
    Synced,
    /// The cluster is being connected to (its watches list): not a change worth an Event.
    Connecting,
    /// It does not answer, or its kubeconfig does not work.
    Unreachable,
    /// It answers, but refused or failed a write.
    WriteFailed,
}

impl Health {
    /// The Event's type and reason for a manager entering this state.
    fn reason(self) -> Option<(bool, &'static str)> {
        match self {
            Self::Synced => Some((false, "WorkloadClusterSynced")),
            Self::Connecting => None,
            Self::Unreachable => Some((true, "WorkloadClusterUnreachable")),
            Self::WriteFailed => Some((true, "WorkloadClusterWriteFailed")),
        }
    }
}

/// Whether going from `previous` to `now` is worth an Event: a change into trouble, a change
/// of trouble, and the recovery from it; not the first sync, nor a repeat, nor connecting.
fn is_transition(previous: Option<Health>, now: Health) -> bool {
    match (previous, now) {
        (_, Health::Connecting) => false,
        (None, Health::Synced) => false,
        (Some(p), n) => p != n,
        (None, _) => true,
    }
}

/// A workload cluster as the management cluster describes it.
#[derive(Clone, Default)]
struct Member {
    /// Labels of its kubeconfig Secret.
    secret_labels: BTreeMap<String, String>,
    /// `resourceVersion` of its kubeconfig Secret.
    secret_version: String,
    /// The connection, or why there is none (never the kubeconfig's content).
    workload: Option<Result<Arc<Workload>, String>>,
    /// Wanted, but beyond `--fleet-max-clusters`: not connected to.
    capped: bool,
}

/// A Cluster API `Cluster`'s metadata.
#[derive(Clone, Debug, Default)]
struct CapiCluster {
    labels: BTreeMap<String, String>,
    deleting: bool,
}

#[derive(Default)]
struct State {
    /// `--fleet-select-by-secret-labels`.
    by_secret_labels: bool,
    /// By `<namespace>/<cluster>`.
    members: BTreeMap<String, Member>,
    /// By `<namespace>/<name>`.
    capi: BTreeMap<String, CapiCluster>,
    /// By manager uid: the workload clusters where its last sync left (or may have left)
    /// copies: those it selects and those whose cleanup is pending. Unknown for a manager not
    /// synced since the start: its `status.clusters` stands in.
    holds: HashMap<String, BTreeSet<String>>,
    /// By manager uid and cluster: how it last stood there.
    health: HashMap<(String, String), Health>,
}

impl State {
    /// The labels that decide whether the cluster `name` is selected: those of its Cluster
    /// API `Cluster`, or, only with `--fleet-select-by-secret-labels`, those of its kubeconfig
    /// Secret; none (selected by nothing) otherwise.
    fn labels<'a>(
        &'a self,
        name: &str,
        member: &'a Member,
    ) -> Option<&'a BTreeMap<String, String>> {
        match self.capi.get(name) {
            Some(c) => Some(&c.labels),
            None => self.by_secret_labels.then_some(&member.secret_labels),
        }
    }
}

/// The workload clusters worth a connection: those a manager that is not being deleted
/// selects, and those where a manager may still have copies to clean up (what it holds, or
/// while that is unknown, its `status.clusters`). A cluster whose Cluster API `Cluster` is
/// being deleted is never worth one: it is released, not cleaned.
fn wanted(state: &State, managers: &[Arc<ClusterImagePullSecretManager>]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (name, member) in &state.members {
        let capi = state.capi.get(name);
        if capi.is_some_and(|c| c.deleting) {
            continue;
        }
        let labels = state.labels(name, member);
        let needed = managers.iter().any(|m| {
            let selects = m.metadata.deletion_timestamp.is_none()
                && labels.is_some_and(|l| cluster_selector(m).is_some_and(|s| s.matches(l)));
            let holds = match state.holds.get(&m.uid().unwrap_or_default()) {
                Some(held) => held.contains(name),
                None => m
                    .status
                    .as_ref()
                    .is_some_and(|s| s.clusters.iter().any(|c| c.name == *name)),
            };
            selects || holds
        });
        if needed {
            out.insert(name.clone());
        }
    }
    out
}

/// Of the `wanted` clusters, those to connect to: at most `max`, those connected already
/// first (a new cluster never takes the place of one in use), then by name.
fn within_cap(state: &State, wanted: &BTreeSet<String>, max: usize) -> BTreeSet<String> {
    let connected = |name: &String| {
        state
            .members
            .get(name)
            .is_some_and(|m| matches!(m.workload, Some(Ok(_))))
    };
    wanted
        .iter()
        .filter(|n| connected(n))
        .chain(wanted.iter().filter(|n| !connected(n)))
        .take(max)
        .cloned()
        .collect()
}

/// One connected workload cluster: its client, caches and watches, as a [`Cluster`].
struct Workload {
    /// `<namespace>/<cluster>`.
    pub name: String,
    /// What a reconcile writes through there.
    pub cluster: Cluster,
    routing: AbortHandle,
    /// The pages of its lists: one cut off at the bound makes the cluster unusable until it
    /// completes.
    pages: pages::ListPages,
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.routing.abort();
    }
}

impl Workload {
    /// True once its watches have listed everything.
    pub fn synced(&self) -> bool {
        self.cluster.synced()
    }
}

/// How one manager stands towards one workload cluster.
enum Role {
    /// Selected: act there.
    Selected(Arc<Workload>),
    /// Not selected (any more): take away what this manager left there.
    Unselected(Arc<Workload>),
    /// Selected, or holding copies there to clean up (`selected` false), but there is no
    /// connection: why.
    Unusable {
        why: sync::NotSynced,
        selected: bool,
    },
}

/// The workload clusters, as found from the management cluster.
pub struct Fleet {
    management: Client,
    options: FleetOptions,
    state: Mutex<State>,
    metrics: Arc<Metrics>,
    triggers: Triggers,
    managers: Store<ClusterImagePullSecretManager>,
    reporter: Reporter,
    /// Failed syncs in a row, by manager name and cluster, for the backoff.
    failures: Backoff<(String, String)>,
    /// Held while the connections are brought in line with [`wanted`], so that two reconciles
    /// never connect to one cluster twice.
    refreshing: tokio::sync::Mutex<()>,
}

impl Fleet {
    /// The fleet of the management cluster `management`: its workload clusters reached by the
    /// cluster managers in `managers`, each change asking `triggers` for their reconcile.
    pub fn new(
        management: Client,
        options: FleetOptions,
        metrics: Arc<Metrics>,
        triggers: Triggers,
        managers: Store<ClusterImagePullSecretManager>,
        reporter: Reporter,
    ) -> Self {
        let state = State {
            by_secret_labels: options.select_by_secret_labels,
            ..State::default()
        };
        Self {
            management,
            options,
            state: Mutex::new(state),
            metrics,
            triggers,
            managers,
            reporter,
            failures: Backoff::default(),
            refreshing: tokio::sync::Mutex::default(),
        }
    }

    /// How long a deleted manager waits for its cleanup in workload clusters.
    fn cleanup_timeout(&self) -> Duration {
        self.options.cleanup_timeout
    }

    /// Records where the manager `uid` may have copies after a sync (or, empty, after its
    /// cleanup), so that the clusters no manager needs any more are let go.
    fn record_holds(&self, uid: &str, clusters: BTreeSet<String>) {
        if let Ok(mut state) = self.state.lock() {
            state.holds.insert(uid.to_owned(), clusters);
        }
    }

    /// Records how the manager `uid` now stands in `cluster`: true when that is a change
    /// worth an Event.
    fn record_health(&self, uid: &str, cluster: &str, now: Health) -> bool {
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        let key = (uid.to_owned(), cluster.to_owned());
        let previous = state.health.get(&key).copied();
        if now != Health::Connecting {
            state.health.insert(key, now);
        }
        is_transition(previous, now)
    }

    /// Brings the connections in line with [`wanted`]: connects to the clusters that are
    /// wanted and have none (a kubeconfig Secret read once per `resourceVersion`), drops the
    /// client and watches of those no manager needs any more.
    async fn refresh(&self) {
        let _one = self.refreshing.lock().await;
        let managers = self.managers.state();
        let (connect, dropped, open) = {
            let Ok(mut state) = self.state.lock() else {
                return;
            };
            let live: BTreeSet<String> = managers.iter().filter_map(|m| m.uid()).collect();
            state.holds.retain(|uid, _| live.contains(uid));
            state.health.retain(|(uid, _), _| live.contains(uid));
            let wanted = wanted(&state, &managers);
            let allowed = within_cap(&state, &wanted, self.options.max_clusters);
            let mut connect = Vec::new();
            let mut dropped = Vec::new();
            for (name, member) in &mut state.members {
                member.capped = wanted.contains(name) && !allowed.contains(name);
                if member.capped {
                    if member.workload.take().is_some() {
                        dropped.push(name.clone());
                    }
                    continue;
                }
                match (wanted.contains(name), member.workload.is_some()) {
                    (true, false) => connect.push((name.clone(), member.secret_version.clone())),
                    (false, true) => {
                        member.workload = None;
                        dropped.push(name.clone());
                    }
                    _ => {}
                }
            }
            let open = state
                .members
                .values()
                .filter(|m| matches!(m.workload, Some(Ok(_))))
                .count();
            (connect, dropped, open)
        };
        for name in dropped {
            self.metrics.fleet.forget(&name);
            tracing::info!(
                cluster = name,
                "no manager needs this workload cluster any more: its client and watches are stopped"
            );
        }
        let mut open = open;
        for (name, version) in connect {
            let Some((namespace, cluster)) = name.split_once('/') else {
                continue;
            };
            let api: Api<Secret> = Api::namespaced(self.management.clone(), namespace);
            let secret_name = format!("{cluster}{KUBECONFIG_SUFFIX}");
            let workload = match api.get(&secret_name).await {
                Ok(secret) => self.connect(&name, &secret).await.map(Arc::new),
                Err(e) => Err(format!(
                    "reading its kubeconfig Secret {secret_name}: {}",
                    crate::message::api_error(&e)
                )),
            };
            if let Err(why) = &workload {
                tracing::warn!(cluster = name, error = why, "workload cluster not usable");
                self.metrics.fleet.set_connected(&name, false);
            } else {
                tracing::info!(cluster = name, "connected to a workload cluster");
                open += 1;
            }
            if let Ok(mut state) = self.state.lock()
                && let Some(member) = state.members.get_mut(&name)
                && member.secret_version == version
            {
                member.workload = Some(workload);
            }
        }
        self.metrics
            .fleet
            .connections
            .set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    /// Each workload cluster, with what `manager` is to do there. Clusters whose Cluster API
    /// `Cluster` is being deleted are left out: released, not cleaned. A manager being
    /// deleted selects none.
    fn roles(&self, manager: &ClusterImagePullSecretManager) -> Vec<(String, Role)> {
        let selector =
            cluster_selector(manager).filter(|_| manager.metadata.deletion_timestamp.is_none());
        let Ok(state) = self.state.lock() else {
            return Vec::new();
        };
        let uid = manager.uid().unwrap_or_default();
        let holds = |name: &String| match state.holds.get(&uid) {
            Some(held) => held.contains(name),
            None => manager
                .status
                .as_ref()
                .is_some_and(|s| s.clusters.iter().any(|c| c.name == *name)),
        };
        let mut out = Vec::new();
        for (name, member) in &state.members {
            if state.capi.get(name).is_some_and(|c| c.deleting) {
                continue;
            }
            let selected = state
                .labels(name, member)
                .is_some_and(|l| selector.as_ref().is_some_and(|s| s.matches(l)));
            if member.capped && (selected || holds(name)) {
                out.push((
                    name.clone(),
                    Role::Unusable {
                        why: sync::NotSynced::Unreachable(format!(
                            "refused: more than {} workload clusters are wanted (--fleet-max-clusters)",
                            self.options.max_clusters
                        )),
                        selected,
                    },
                ));
                continue;
            }
            let role = match (&member.workload, selected) {
                // Cleaned only where the manager may have copies: a manager that never selected
                // the cluster has nothing to clean there, and must not be held up (or report
                // it, or keep its connection) when the cluster is down.
                // A list cut off at `--fleet-max-list-pages`: reported, and retried on the
                // backoff of a failing cluster (its watches list again on theirs).
                (Some(Ok(w)), selected) if selected || holds(name) => match w.pages.refused() {
                    Some(why) => Role::Unusable {
                        why: sync::NotSynced::Unreachable(why),
                        selected,
                    },
                    None if selected => Role::Selected(w.clone()),
                    None => Role::Unselected(w.clone()),
                },
                (Some(Err(why)), selected) if selected || holds(name) => Role::Unusable {
                    why: sync::NotSynced::Unreachable(why.clone()),
                    selected,
                },
                (None, selected) if selected || holds(name) => Role::Unusable {
                    why: sync::NotSynced::Connecting("connecting".to_owned()),
                    selected,
                },
                _ => continue,
            };
            out.push((name.clone(), role));
        }
        out
    }

    /// The live cluster managers that select the workload cluster `cluster`, compiled for
    /// workload clusters, oldest first: who may claim a Secret name there.
    fn claimants_in(&self, cluster: &str) -> Vec<Manager> {
        let labels = {
            let Ok(state) = self.state.lock() else {
                return Vec::new();
            };
            let Some(member) = state.members.get(cluster) else {
                return Vec::new();
            };
            match state.labels(cluster, member) {
                Some(labels) => labels.clone(),
                None => return Vec::new(),
            }
        };
        let mut out: Vec<Manager> = self
            .managers
            .state()
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .filter(|m| cluster_selector(m).is_some_and(|s| s.matches(&labels)))
            .filter_map(|m| Manager::from_cluster_for_workloads(m).ok())
            .collect();
        out.sort_by(|a, b| a.seniority().cmp(&b.seniority()));
        out
    }

    /// Counts a failed sync of `manager` into `cluster`; how many came before it.
    fn record_failure(&self, manager: &str, cluster: &str) -> u32 {
        self.failures
            .record_failure((manager.to_owned(), cluster.to_owned()))
    }

    fn reset_failures(&self, manager: &str, cluster: &str) {
        self.failures
            .reset(&(manager.to_owned(), cluster.to_owned()));
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Asks every cluster manager to reconcile: the fleet changed.
    fn trigger_all(&self) {
        for m in self.managers.state() {
            self.triggers
                .send(ManagerRef::Cluster(ObjectRef::from_obj(&*m)));
        }
    }

    /// Watches the kubeconfig Secrets, and Cluster API's CRD, running the `Cluster` watches
    /// while it is served, until dropped.
    pub async fn run(self: Arc<Self>) {
        // Never every namespace: whoever may write a Secret there could enrol a cluster.
        let namespaces: Vec<Option<String>> = if self.options.namespaces.is_empty() {
            vec![Some(self.management.default_namespace().to_owned())]
        } else {
            self.options.namespaces.iter().cloned().map(Some).collect()
        };
        let clusters = self.clone().watch_capi_crd(namespaces.clone());
        let secrets = future::join_all(
            namespaces
                .into_iter()
                .map(|ns| self.clone().watch_kubeconfigs(ns)),
        );
        future::join(clusters, secrets).await;
    }

    /// Watches Cluster API's CRD `clusters.cluster.x-k8s.io`: while it is there and its
    /// `Cluster` is served, the `Cluster` watches run (started when it appears, also after
    /// the controller started; restarted on another served version; stopped when it goes).
    async fn watch_capi_crd(self: Arc<Self>, namespaces: Vec<Option<String>>) {
        let api: Api<PartialObjectMeta<CustomResourceDefinition>> =
            Api::all(self.management.clone());
        let stream = watcher(
            api,
            watcher::Config::default().fields(&format!("metadata.name={CAPI_CLUSTERS_CRD}")),
        )
        .default_backoff();
        futures::pin_mut!(stream);
        // The Cluster watches, aborted when dropped.
        let mut running: Option<(ApiResource, tokio::task::JoinSet<()>)> = None;
        let mut present = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init) => present = false,
                Ok(watcher::Event::InitApply(_) | watcher::Event::Apply(_)) => {
                    present = true;
                    let Some(resource) = served_capi_cluster(&self.management).await else {
                        tracing::warn!(
                            crd = CAPI_CLUSTERS_CRD,
                            "Cluster API's CRD is there but its Cluster is not served; workload clusters are selected by the labels of their kubeconfig Secrets"
                        );
                        continue;
                    };
                    if running.as_ref().is_some_and(|(r, _)| *r == resource) {
                        continue;
                    }
                    tracing::info!(
                        version = resource.version,
                        "Cluster API's Cluster is served: watching Clusters"
                    );
                    let mut tasks = tokio::task::JoinSet::new();
                    for ns in namespaces.iter().cloned() {
                        tasks.spawn(self.clone().watch_capi(resource.clone(), ns));
                    }
                    running = Some((resource, tasks));
                }
                Ok(watcher::Event::InitDone) => {
                    if !present {
                        if running.take().is_some() {
                            self.capi_gone();
                        } else {
                            tracing::info!(
                                "Cluster API's Cluster is not served: workload clusters are selected by the labels of their kubeconfig Secrets, until its CRD appears"
                            );
                        }
                    }
                }
                Ok(watcher::Event::Delete(_)) => {
                    present = false;
                    if running.take().is_some() {
                        self.capi_gone();
                    }
                }
                Err(e) => {
                    tracing::warn!(kind = "CustomResourceDefinition", error = %message::watch_error(&e), "Cluster API CRD watch failed; retrying")
                }
            }
        }
    }

    /// Cluster API's CRD went: its `Cluster`s with it.
    fn capi_gone(&self) {
        tracing::info!("Cluster API's CRD is gone: Clusters are no longer watched");
        if let Ok(mut state) = self.state.lock() {
            state.capi.clear();
        }
        self.trigger_all();
    }

    async fn watch_kubeconfigs(self: Arc<Self>, namespace: Option<String>) {
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let metadata: Api<PartialObjectMeta<Secret>> = match &namespace {
            Some(ns) => Api::namespaced(self.management.clone(), ns),
            None => Api::all(self.management.clone()),
        };
        let stream = watcher(
            metadata,
            watcher::Config::default().labels(CLUSTER_NAME_LABEL),
        )
        .default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init) => seen.clear(),
                Ok(watcher::Event::InitApply(meta)) => {
                    if let Some(name) = self.kubeconfig_applied(&meta) {
                        seen.insert(name);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    self.forget_unseen(namespace.as_deref(), &seen);
                    self.refresh().await;
                    self.trigger_all();
                }
                Ok(watcher::Event::Apply(meta)) => {
                    if self.kubeconfig_applied(&meta).is_some() {
                        self.refresh().await;
                        self.trigger_all();
                    }
                }
                Ok(watcher::Event::Delete(meta)) => {
                    if let Some(name) = member_name(&meta) {
                        self.forget(&name);
                        self.refresh().await;
                        self.trigger_all();
                    }
                }
                Err(e) => {
                    tracing::warn!(kind = "Secret", error = %message::watch_error(&e), "kubeconfig watch failed; retrying")
                }
            }
        }
    }

    /// Takes in a kubeconfig Secret's metadata; a changed `resourceVersion` drops the
    /// connection, which [`Self::refresh`] makes again from the new kubeconfig if the cluster
    /// is wanted. The cluster's name, if it is a kubeconfig Secret.
    fn kubeconfig_applied(&self, meta: &PartialObjectMeta<Secret>) -> Option<String> {
        let name = member_name(meta)?;
        let version = meta.resource_version().unwrap_or_default();
        let labels = meta.labels().clone();
        if let Ok(mut state) = self.state.lock() {
            let member = state.members.entry(name.clone()).or_default();
            member.secret_labels = labels;
            if member.secret_version != version {
                member.secret_version = version;
                member.workload = None;
            }
        }
        Some(name)
    }

    fn forget(&self, name: &str) {
        if let Ok(mut state) = self.state.lock() {
            state.members.remove(name);
        }
        self.metrics.fleet.forget(name);
        tracing::info!(
            cluster = name,
            "a workload cluster left: its kubeconfig Secret is gone"
        );
    }

    fn forget_unseen(&self, namespace: Option<&str>, seen: &BTreeSet<String>) {
        let gone: Vec<String> = self
            .state
            .lock()
            .map(|state| {
                state
                    .members
                    .keys()
                    .filter(|k| namespace.is_none_or(|ns| k.split('/').next() == Some(ns)))
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for name in gone {
            self.forget(&name);
        }
    }

    /// A connection to the cluster `name` from its kubeconfig Secret.
    async fn connect(&self, name: &str, secret: &Secret) -> Result<Workload, String> {
        let value = secret
            .data
            .as_ref()
            .and_then(|d| d.get(KUBECONFIG_KEY))
            .ok_or_else(|| format!("its kubeconfig Secret has no key {KUBECONFIG_KEY}"))?;
        let text = std::str::from_utf8(&value.0)
            .map_err(|_| format!("key {KUBECONFIG_KEY} of its kubeconfig Secret is not text"))?;
        let config = client_config(text, self.options.allow_insecure).await?;
        let pages = pages::ListPages::new(self.options.max_list_pages);
        let client = kube::client::ClientBuilder::try_from(config)
            .map_err(|_| "no client can be built from its kubeconfig".to_owned())?
            .with_layer(&guard::layer(self.options.max_response_bytes))
            .with_layer(&pages)
            .build();
        Ok(self.workload(name, client, pages))
    }

    /// The caches, watches and context of one workload cluster reached through `client`.
    fn workload(&self, name: &str, client: Client, pages: pages::ListPages) -> Workload {
        let (namespaces, secrets, service_accounts) = (
            NamespaceCache::default(),
            SecretCache::default(),
            ServiceAccountCache::default(),
        );
        let routing = Routing {
            triggers: self.triggers.clone(),
            // No namespaced manager acts in a workload cluster.
            namespaced: reflector::store().0,
            cluster: self.managers.clone(),
            namespaces: namespaces.clone(),
            secrets: secrets.clone(),
            service_accounts: service_accounts.clone(),
            compiled: CompiledManagers::for_workloads(),
            describe_error: guard::watch_error_line,
        };
        let caches = ClusterCaches {
            namespaces,
            secrets,
            service_accounts,
        };
        let recorder = EventPublisher::new(
            client.clone(),
            self.reporter.clone(),
            events::MAX_CACHED_EVENTS,
        );
        let cluster = Cluster::new(client.clone(), caches, recorder, self.metrics.clone());
        let routing = tokio::spawn(crate::controller::route(client, routing)).abort_handle();
        Workload {
            name: name.to_owned(),
            cluster,
            routing,
            pages,
        }
    }

    /// Watches Cluster API `Cluster`s (metadata only) in `namespace` (or every namespace).
    async fn watch_capi(self: Arc<Self>, resource: ApiResource, namespace: Option<String>) {
        let api: Api<PartialObjectMeta<DynamicObject>> = match &namespace {
            Some(ns) => Api::namespaced_with(self.management.clone(), ns, &resource),
            None => Api::all_with(self.management.clone(), &resource),
        };
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        let mut seen: BTreeSet<String> = BTreeSet::new();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init) => seen.clear(),
                Ok(watcher::Event::InitApply(meta)) => {
                    seen.insert(self.capi_applied(&meta));
                }
                Ok(watcher::Event::InitDone) => {
                    if let Ok(mut state) = self.state.lock() {
                        state.capi.retain(|k, _| {
                            seen.contains(k)
                                || namespace
                                    .as_deref()
                                    .is_some_and(|ns| k.split('/').next() != Some(ns))
                        });
                    }
                    self.trigger_all();
                }
                Ok(watcher::Event::Apply(meta)) => {
                    self.capi_applied(&meta);
                    self.trigger_all();
                }
                Ok(watcher::Event::Delete(meta)) => {
                    let key = format!(
                        "{}/{}",
                        meta.namespace().unwrap_or_default(),
                        meta.name_any()
                    );
                    if let Ok(mut state) = self.state.lock() {
                        state.capi.remove(&key);
                    }
                    self.trigger_all();
                }
                Err(e) => {
                    tracing::warn!(kind = "Cluster", error = %message::watch_error(&e), "Cluster watch failed; retrying")
                }
            }
        }
    }

    fn capi_applied(&self, meta: &PartialObjectMeta<DynamicObject>) -> String {
        let key = format!(
            "{}/{}",
            meta.namespace().unwrap_or_default(),
            meta.name_any()
        );
        let cluster = CapiCluster {
            labels: meta.labels().clone(),
            deleting: meta.metadata.deletion_timestamp.is_some(),
        };
        if let Ok(mut state) = self.state.lock() {
            state.capi.insert(key.clone(), cluster);
        }
        key
    }
}

/// `<namespace>/<cluster>` of a kubeconfig Secret: named `<cluster>-kubeconfig` and labelled
/// with the cluster's name.
fn member_name<K: ResourceExt>(meta: &K) -> Option<String> {
    let cluster = meta.labels().get(CLUSTER_NAME_LABEL)?;
    let name = meta.name_any();
    (name.strip_suffix(KUBECONFIG_SUFFIX) == Some(cluster.as_str()))
        .then(|| format!("{}/{cluster}", meta.namespace().unwrap_or_default()))
}

/// `spec.clusters.selector`, compiled; `None` when absent (no workload cluster) or invalid
/// (the manager's compile reports it).
fn cluster_selector(manager: &ClusterImagePullSecretManager) -> Option<Selector> {
    let selector = manager.spec.clusters.as_ref()?.selector.clone()?;
    Selector::try_from(selector).ok()
}

/// The served version of Cluster API's `Cluster`, if any. Discovery may lag a CRD that just
/// appeared by a moment: asked a few times.
async fn served_capi_cluster(client: &Client) -> Option<ApiResource> {
    for _ in 0..10 {
        let found = discovery::group(client, CAPI_GROUP)
            .await
            .ok()
            .and_then(|group| {
                group
                    .recommended_resources()
                    .into_iter()
                    .find(|(r, _)| r.kind == "Cluster")
                    .map(|(r, _)| r)
            });
        if found.is_some() {
            return found;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    None
}

/// The client configuration of a kubeconfig read from a Secret. Only what the kubeconfig
/// itself carries is used: credentials and certificates inline. A kubeconfig naming a file,
/// an exec plugin or an auth provider is refused, since whoever may write the Secret would
/// otherwise make cheiron run a command or send a file of its own Pod (its ServiceAccount
/// token) to a server of their choosing. A cluster skipping TLS verification, naming a server
/// that is not `https://` or a proxy is refused unless `allow_insecure` (`--fleet-allow-insecure`;
/// a proxy always). Errors never quote the kubeconfig.
pub(crate) async fn client_config(
    text: &str,
    allow_insecure: bool,
) -> Result<kube::Config, String> {
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|_| {
        format!("key {KUBECONFIG_KEY} of its kubeconfig Secret is not a kubeconfig")
    })?;
    refuse_outside_references(&kubeconfig)?;
    refuse_insecure(&kubeconfig, allow_insecure)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|_| {
                "its kubeconfig has no usable current context, cluster and user".to_owned()
            })?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    Ok(config)
}

fn refuse_insecure(kubeconfig: &Kubeconfig, allow_insecure: bool) -> Result<(), String> {
    for named in &kubeconfig.clusters {
        let Some(cluster) = &named.cluster else {
            continue;
        };
        let name = &named.name;
        if cluster.proxy_url.is_some() {
            return Err(format!(
                "refused: its kubeconfig's cluster {name} uses proxy-url, which cheiron does not follow (docs/fleet.md)"
            ));
        }
        if allow_insecure {
            continue;
        }
        if cluster.insecure_skip_tls_verify == Some(true) {
            return Err(format!(
                "refused: its kubeconfig's cluster {name} sets insecure-skip-tls-verify; allowed only with --fleet-allow-insecure (docs/fleet.md)"
            ));
        }
        let https = cluster
            .server
            .as_deref()
            .is_some_and(|s| s.trim().to_ascii_lowercase().starts_with("https://"));
        if !https {
            return Err(format!(
                "refused: its kubeconfig's cluster {name} has a server that is not https://; allowed only with --fleet-allow-insecure (docs/fleet.md)"
            ));
        }
    }
    Ok(())
}

fn refuse_outside_references(kubeconfig: &Kubeconfig) -> Result<(), String> {
    for user in &kubeconfig.auth_infos {
        let Some(auth) = &user.auth_info else {
            continue;
        };
        let refused = [
            ("exec", auth.exec.is_some()),
            ("auth-provider", auth.auth_provider.is_some()),
            ("tokenFile", auth.token_file.is_some()),
            ("client-certificate", auth.client_certificate.is_some()),
            ("client-key", auth.client_key.is_some()),
        ];
        if let Some((field, _)) = refused.iter().find(|(_, set)| *set) {
            return Err(format!(
                "its kubeconfig's user {} uses {field}: only inline credentials are accepted (docs/fleet.md)",
                user.name
            ));
        }
    }
    for cluster in &kubeconfig.clusters {
        if cluster
            .cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            return Err(format!(
                "its kubeconfig's cluster {} uses certificate-authority (a file): only certificate-authority-data is accepted (docs/fleet.md)",
                cluster.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const INLINE: &str = "apiVersion: v1
kind: Config
clusters:
- name: w
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: the-token-value
contexts:
- name: w
  context: {cluster: w, user: u}
current-context: w
";

    #[tokio::test]
    async fn an_inline_kubeconfig_gives_a_client_configuration() {
        let config = client_config(INLINE, true).await;
        assert!(config.is_ok(), "{:?}", config.err());
    }

    #[tokio::test]
    async fn a_kubeconfig_that_runs_a_command_or_reads_a_file_is_refused() {
        for (field, replacement) in [
            (
                "exec",
                "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'cat /var/run/secrets/kubernetes.io/serviceaccount/token']}",
            ),
            (
                "tokenFile",
                "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
            ),
            (
                "client-certificate",
                "client-certificate: /etc/ssl/cert.pem",
            ),
            ("client-key", "client-key: /etc/ssl/key.pem"),
            ("auth-provider", "auth-provider: {name: oidc, config: {}}"),
        ] {
            let text = INLINE.replace("token: the-token-value", replacement);
            let err = client_config(&text, true).await.err();
            assert!(
                err.as_deref().is_some_and(|e| e.contains(field)),
                "{field}: {err:?}"
            );
        }
        let text = INLINE.replace(
            "insecure-skip-tls-verify: true",
            "certificate-authority: /etc/ssl/ca.pem",
        );
        let err = client_config(&text, true).await.err();
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("certificate-authority")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn an_error_never_quotes_the_kubeconfig() {
        for text in [
            "the-token-value: [",
            "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: the-token-value\n",
            "not: a\nkubeconfig: the-token-value\n",
        ] {
            let err = client_config(text, true).await.err().unwrap_or_default();
            assert!(!err.is_empty(), "{text}: accepted");
            assert!(!err.contains("the-token-value"), "{err}");
        }
    }

    fn manager(
        uid: &str,
        selector: serde_json::Value,
        status_clusters: &[&str],
        deleting: bool,
    ) -> Arc<ClusterImagePullSecretManager> {
        let clusters: Vec<serde_json::Value> = status_clusters
            .iter()
            .map(|c| serde_json::json!({"name": c, "ready": false, "targetNamespaces": 0, "syncedNamespaces": 0}))
            .collect();
        let mut m: ClusterImagePullSecretManager = serde_json::from_value(serde_json::json!({
            "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
            "metadata": {"name": uid, "uid": uid},
            "spec": {
                "secrets": [{"existingSecretRef": {"name": "pull", "namespace": "src"}}],
                "clusters": {"selector": selector},
            },
            "status": {"clusters": clusters},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        if deleting {
            m.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        Arc::new(m)
    }

    fn member(env: &str) -> Member {
        Member {
            secret_labels: [("env".to_owned(), env.to_owned())].into(),
            ..Member::default()
        }
    }

    #[test]
    fn only_selected_clusters_and_those_with_copies_to_clean_are_connected_to() {
        let mut state = State {
            by_secret_labels: true,
            ..State::default()
        };
        for (name, env) in [
            ("capi/prod", "prod"),
            ("capi/dev", "dev"),
            ("capi/old", "old"),
        ] {
            state.members.insert(name.to_owned(), member(env));
        }
        let prod = serde_json::json!({"matchLabels": {"env": "prod"}});
        // Nobody selects dev or old: no connection.
        let a = manager("a", prod.clone(), &[], false);
        assert_eq!(
            wanted(&state, std::slice::from_ref(&a)),
            ["capi/prod".to_owned()].into()
        );

        // A manager not synced since the start that lists old in its status may have copies
        // there: old is wanted until a sync of that manager says otherwise.
        let b = manager("b", prod.clone(), &["capi/old"], false);
        let both = [a.clone(), b.clone()];
        assert_eq!(
            wanted(&state, &both),
            ["capi/old".to_owned(), "capi/prod".to_owned()].into()
        );
        state
            .holds
            .insert("b".to_owned(), ["capi/prod".to_owned()].into());
        assert_eq!(wanted(&state, &both), ["capi/prod".to_owned()].into());
        // A failed cleanup keeps it.
        state.holds.insert(
            "b".to_owned(),
            ["capi/prod".to_owned(), "capi/old".to_owned()].into(),
        );
        assert!(wanted(&state, &both).contains("capi/old"));

        // A Cluster API Cluster's labels win over the Secret's.
        state.capi.insert(
            "capi/dev".to_owned(),
            CapiCluster {
                labels: [("env".to_owned(), "prod".to_owned())].into(),
                deleting: false,
            },
        );
        assert!(wanted(&state, std::slice::from_ref(&a)).contains("capi/dev"));
        // A Cluster being deleted is released: never connected to, even with copies there.
        state.capi.insert(
            "capi/dev".to_owned(),
            CapiCluster {
                labels: [("env".to_owned(), "prod".to_owned())].into(),
                deleting: true,
            },
        );
        state
            .holds
            .insert("a".to_owned(), ["capi/dev".to_owned()].into());
        assert!(!wanted(&state, &[a]).contains("capi/dev"));

        // A manager being deleted selects nothing; it needs only where its cleanup is
        // pending, and nothing once that is done.
        let gone = manager("gone", prod, &[], true);
        state
            .holds
            .insert("gone".to_owned(), ["capi/old".to_owned()].into());
        assert_eq!(
            wanted(&state, std::slice::from_ref(&gone)),
            ["capi/old".to_owned()].into()
        );
        state.holds.insert("gone".to_owned(), BTreeSet::new());
        assert!(wanted(&state, &[gone]).is_empty());
    }

    #[test]
    fn a_kubeconfig_secrets_own_labels_select_nothing_unless_allowed() {
        let mut state = State::default();
        state
            .members
            .insert("fleet/hers".to_owned(), member("prod"));
        state.members.insert("fleet/east".to_owned(), member("dev"));
        let a = manager(
            "a",
            serde_json::json!({"matchLabels": {"env": "prod"}}),
            &[],
            false,
        );
        let every = manager("every", serde_json::json!({}), &[], false);
        // Not even an empty selector selects a cluster only its Secret's labels describe.
        assert!(wanted(&state, &[a.clone(), every]).is_empty());
        // A Cluster API Cluster (in the Secret's namespace) decides.
        state.capi.insert(
            "fleet/east".to_owned(),
            CapiCluster {
                labels: [("env".to_owned(), "prod".to_owned())].into(),
                deleting: false,
            },
        );
        assert_eq!(
            wanted(&state, std::slice::from_ref(&a)),
            ["fleet/east".to_owned()].into()
        );
        // --fleet-select-by-secret-labels: the Secret's labels count where no Cluster is.
        state.by_secret_labels = true;
        assert_eq!(
            wanted(&state, &[a]),
            ["fleet/east".to_owned(), "fleet/hers".to_owned()].into()
        );
    }

    #[test]
    fn at_most_the_cap_is_connected_to_and_a_new_cluster_never_takes_a_connected_ones_place() {
        let mut state = State::default();
        for name in ["f/a", "f/b", "f/c"] {
            state.members.insert(name.to_owned(), member("prod"));
        }
        let all: BTreeSet<String> = state.members.keys().cloned().collect();
        assert_eq!(
            within_cap(&state, &all, 2),
            ["f/a".to_owned(), "f/b".to_owned()].into()
        );
        if let Some(c) = state.members.get_mut("f/c") {
            c.workload = Some(Err("stands in for a connection".to_owned()));
        }
        // An error is no connection: still by name.
        assert_eq!(within_cap(&state, &all, 1), ["f/a".to_owned()].into());
        assert_eq!(within_cap(&state, &all, 5), all);
    }

    #[tokio::test]
    async fn an_insecure_or_plain_http_kubeconfig_is_refused_unless_allowed() {
        let plain = INLINE
            .replace("https://127.0.0.1:6443", "http://127.0.0.1:6443")
            .replace("    insecure-skip-tls-verify: true\n", "");
        let verified = INLINE.replace(
            "insecure-skip-tls-verify: true",
            "certificate-authority-data: bm90LWEtY2VydA==",
        );
        for (text, field) in [
            (INLINE, "insecure-skip-tls-verify"),
            (plain.as_str(), "https://"),
        ] {
            let err = client_config(text, false).await.err().unwrap_or_default();
            assert!(
                err.starts_with("refused:")
                    && err.contains(field)
                    && err.contains("--fleet-allow-insecure"),
                "{err}"
            );
            assert!(!err.contains("127.0.0.1"), "the server is quoted: {err}");
        }
        assert!(client_config(INLINE, true).await.is_ok());
        assert!(client_config(&plain, true).await.is_ok());
        // https with a CA is what is accepted by default (the CA is checked when connecting).
        let err = client_config(&verified, false)
            .await
            .err()
            .unwrap_or_default();
        assert!(!err.starts_with("refused:"), "{err}");
        // A proxy is never followed.
        let proxied = INLINE.replace(
            "    insecure-skip-tls-verify: true",
            "    insecure-skip-tls-verify: true\n    proxy-url: http://10.0.0.1:3128",
        );
        let err = client_config(&proxied, true)
            .await
            .err()
            .unwrap_or_default();
        assert!(err.contains("proxy-url"), "{err}");
    }

    #[test]
    fn an_event_marks_each_change_of_a_clusters_health_once() {
        use Health::*;
        // The first sync in step and connecting say nothing.
        assert!(!is_transition(None, Synced));
        assert!(!is_transition(None, Connecting));
        assert!(!is_transition(Some(Unreachable), Connecting));
        // Trouble, a change of trouble and the recovery do; a repeat does not.
        assert!(is_transition(None, Unreachable));
        assert!(is_transition(Some(Synced), Unreachable));
        assert!(!is_transition(Some(Unreachable), Unreachable));
        assert!(is_transition(Some(Unreachable), WriteFailed));
        assert!(!is_transition(Some(WriteFailed), WriteFailed));
        assert!(is_transition(Some(WriteFailed), Synced));
        assert!(!is_transition(Some(Synced), Synced));
        assert_eq!(
            Unreachable.reason(),
            Some((true, "WorkloadClusterUnreachable"))
        );
        assert_eq!(
            WriteFailed.reason(),
            Some((true, "WorkloadClusterWriteFailed"))
        );
        assert_eq!(Synced.reason(), Some((false, "WorkloadClusterSynced")));
    }

    #[test]
    fn a_kubeconfig_secret_is_named_after_its_labelled_cluster() {
        let secret = |name: &str, cluster: Option<&str>| {
            let mut s = Secret::default();
            s.metadata.name = Some(name.to_owned());
            s.metadata.namespace = Some("fleet".to_owned());
            s.metadata.labels =
                cluster.map(|c| [(CLUSTER_NAME_LABEL.to_owned(), c.to_owned())].into());
            s
        };
        assert_eq!(
            member_name(&secret("east-kubeconfig", Some("east"))).as_deref(),
            Some("fleet/east")
        );
        // CAPI's other Secrets of a cluster (CA, etcd, service-account keys) carry the label too.
        assert_eq!(member_name(&secret("east-ca", Some("east"))), None);
        assert_eq!(member_name(&secret("east-kubeconfig", Some("west"))), None);
        assert_eq!(member_name(&secret("east-kubeconfig", None)), None);
    }
}
