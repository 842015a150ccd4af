//! What the reconciles of every manager share: the controller's own [`Cluster`], the manager
//! stores, the source watches and trigger senders, the credential providers, the other
//! clusters a cluster manager reaches, the node agents mode Node hands credentials to, and the
//! failure counts for backoff. What one write
//! into one cluster needs is in [`Cluster`]; this is the controller-wide rest.

use std::{sync::Arc, time::Duration};

use cheiron_core::policy::{Manager, ManagerId};
use cheiron_credential::CredentialProviders;
use cheiron_runtime::{metrics::Metrics, runtime::Backoff};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::Event;

use crate::{
    cluster::Cluster,
    health::Health,
    kinds::{ManagerRef, ManagerStores},
    nodes::Nodes,
    other_clusters::OtherClusters,
    source_watches::SourceWatches,
    triggers::Triggers,
};

/// What the reconciles of every manager share.
pub struct Context {
    /// The controller's own cluster: where the managers and their sources are.
    pub(super) home: Cluster,
    pub(super) managers: ManagerStores,
    pub(super) sources: SourceWatches,
    pub(super) triggers: Triggers,
    pub(super) resync: Duration,
    pub(super) credentials: CredentialProviders,
    /// The other clusters a cluster manager's Secrets are written to: the workload clusters,
    /// when `--fleet` is on.
    pub(super) others: Option<Arc<dyn OtherClusters>>,
    /// Where mode Node managers' credentials are handed to the node agents.
    pub(super) nodes: Option<Arc<dyn Nodes>>,
    /// The registry checks of the managers' credentials (docs/credential-health.md).
    pub(super) health: Option<Arc<dyn Health>>,
    failures: Backoff<String>,
}

impl Context {
    /// A context over the `home` cluster and the managers in `managers`.
    pub(super) fn new(
        home: Cluster,
        managers: ManagerStores,
        triggers: Triggers,
        resync: Duration,
        max_source_watches: usize,
    ) -> Self {
        Self {
            sources: SourceWatches::new(home.client.clone(), triggers.clone(), max_source_watches),
            home,
            managers,
            triggers,
            resync,
            credentials: CredentialProviders::new(Default::default(), None, None),
            others: None,
            nodes: None,
            health: None,
            failures: Backoff::default(),
        }
    }

    /// The context with these credential providers (none by default).
    pub(super) fn with_credentials(mut self, credentials: CredentialProviders) -> Self {
        self.credentials = credentials;
        self
    }

    /// The context handing mode Node managers' credentials to `nodes` (docs/node.md).
    pub(super) fn with_nodes(mut self, nodes: Arc<dyn Nodes>) -> Self {
        self.nodes = Some(nodes);
        self
    }

    /// The context checking credentials through `health`.
    pub(super) fn with_health(mut self, health: Arc<dyn Health>) -> Self {
        self.health = Some(health);
        self
    }

    /// The context acting in other clusters too.
    pub(super) fn with_other_clusters(mut self, others: Arc<dyn OtherClusters>) -> Self {
        self.others = Some(others);
        self
    }

    /// The metrics every reconcile records.
    pub(super) fn metrics(&self) -> &Metrics {
        &self.home.metrics
    }

    /// Managers of both kinds that act, oldest first.
    pub(super) fn live_managers(&self) -> Vec<Manager> {
        self.managers.live()
    }

    /// Asks for a reconcile of each of `managers`.
    pub(super) fn trigger(&self, managers: &[ManagerId]) {
        for id in managers {
            self.triggers.send(ManagerRef::from(id));
        }
    }

    /// Counts a failed reconcile of `r` and returns how many came before it.
    pub(super) fn record_failure(&self, r: &ObjectReference) -> u32 {
        self.failures.record_failure(failure_key(r))
    }

    pub(super) fn reset_failures(&self, r: &ObjectReference) {
        self.failures.reset(&failure_key(r));
    }

    /// Publishes an Event in the controller's cluster; a failure is logged, never fatal.
    pub(super) async fn publish(&self, event: &Event, reference: &ObjectReference) {
        self.home.publish(event, reference).await;
    }
}

fn failure_key(r: &ObjectReference) -> String {
    format!("{:?}/{:?}/{:?}", r.kind, r.namespace, r.name)
}
