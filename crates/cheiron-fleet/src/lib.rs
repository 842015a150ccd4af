//! Workload clusters (docs/fleet.md): a `ClusterImagePullSecretManager` in a management
//! cluster whose `spec.clusters.selector` selects workload clusters does in each of them what
//! it does here, from the same sources (which stay here).
//!
//! The workload clusters are found from their kubeconfig Secrets (Cluster API's convention:
//! `<cluster>-kubeconfig`, key `value`, label `cluster.x-k8s.io/cluster-name`), watched as
//! metadata only; a Secret's data is read once per `resourceVersion`, so a rotated kubeconfig
//! is picked up without a restart. Each cluster gets one client and one set of the watches
//! the controller keeps here (Namespaces and cheiron's Secrets as metadata, ServiceAccounts),
//! filling caches of its own, and a [`Cluster`](cheiron_controller::Cluster) over them: the
//! reconcile of a manager runs the very same planning and writes against it
//! ([`cheiron_controller::sync_in`]). A Cluster API `Cluster` (when its CRD is served) decides
//! with its labels whether a cluster is selected, and one being deleted is released: cheiron
//! stops acting there without cleaning up.
//!
//! Only an administrator enrols a workload cluster (docs/fleet.md, "Who can enrol a
//! cluster"): kubeconfig Secrets and `Cluster`s are read only in the fleet namespaces (cheiron's
//! own by default), a kubeconfig Secret's own labels select nothing unless
//! `--fleet-select-by-secret-labels` says they may, a kubeconfig skipping TLS verification or
//! naming a plain `http://` server is refused without `--fleet-allow-insecure`, at most
//! `--fleet-max-clusters` clusters are connected to, nothing a workload cluster answers is
//! shown (`guard.rs`), and none of its lists takes more than `--fleet-max-list-pages` pages
//! (`pages.rs`).
//!
//! The rooms: `enrolment.rs` finds the clusters (kubeconfig Secrets, Cluster API), `members.rs`
//! decides which are worth a connection, `kubeconfig.rs` vets a kubeconfig, `workload.rs`
//! connects to one, `sync.rs` runs a manager's reconcile in each; this file holds them together.

mod enrolment;
mod guard;
mod kubeconfig;
mod members;
mod pages;
mod sync;
mod workload;

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use cheiron_controller::{ManagerRef, Triggers};
use cheiron_core::policy::Manager;
use cheiron_runtime::{
    api::{ClusterImagePullSecretManager, fleet::KUBECONFIG_SUFFIX},
    metrics::Metrics,
    runtime::Backoff,
};
use futures::future;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, ResourceExt,
    core::SelectorExt,
    runtime::{
        events::Reporter,
        reflector::{ObjectRef, Store},
    },
};

use crate::{
    members::{Health, NotSynced, State, cluster_selector, is_transition, wanted, within_cap},
    workload::{Connector, Workload},
};

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
pub use kubeconfig::CONNECT_TIMEOUT;
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

/// How one manager stands towards one workload cluster.
enum Role {
    /// Selected: act there.
    Selected(Arc<Workload>),
    /// Not selected (any more): take away what this manager left there.
    Unselected(Arc<Workload>),
    /// Selected, or holding copies there to clean up (`selected` false), but there is no
    /// connection: why.
    Unusable { why: NotSynced, selected: bool },
}

/// The workload clusters, as found from the management cluster.
pub struct Fleet {
    management: Client,
    options: FleetOptions,
    state: Mutex<State<Workload>>,
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

    /// What connecting to one of its workload clusters takes.
    fn connector(&self) -> Connector<'_> {
        Connector {
            allow_insecure: self.options.allow_insecure,
            max_list_pages: self.options.max_list_pages,
            max_response_bytes: self.options.max_response_bytes,
            triggers: &self.triggers,
            managers: &self.managers,
            reporter: &self.reporter,
            metrics: &self.metrics,
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
                Ok(secret) => self.connector().connect(&name, &secret).await.map(Arc::new),
                Err(e) => Err(format!(
                    "reading its kubeconfig Secret {secret_name}: {}",
                    cheiron_runtime::message::api_error(&e)
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
                        why: NotSynced::Unreachable(format!(
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
                        why: NotSynced::Unreachable(why),
                        selected,
                    },
                    None if selected => Role::Selected(w.clone()),
                    None => Role::Unselected(w.clone()),
                },
                (Some(Err(why)), selected) if selected || holds(name) => Role::Unusable {
                    why: NotSynced::Unreachable(why.clone()),
                    selected,
                },
                (None, selected) if selected || holds(name) => Role::Unusable {
                    why: NotSynced::Connecting("connecting".to_owned()),
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
}
