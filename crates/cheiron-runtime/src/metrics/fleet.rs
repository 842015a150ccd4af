//! The metrics of the workload clusters a management cluster reaches (docs/fleet.md).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

/// Labels of the fleet's gauges: one workload cluster, `<namespace>/<name>` of its kubeconfig
/// Secret's cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    /// `<namespace>/<cluster>`.
    pub cluster: String,
}

/// Labels of `cheiron_fleet_syncs_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterSyncLabels {
    /// `<namespace>/<cluster>`.
    pub cluster: String,
    /// `synced` or `failed`.
    pub outcome: &'static str,
}

/// Metrics of the workload clusters a management cluster reaches.
#[derive(Clone, Debug, Default)]
pub struct FleetMetrics {
    /// 1 while the workload cluster answers and its watches have listed, else 0; the series
    /// goes with the cluster.
    pub connected: Family<ClusterLabels, Gauge>,
    /// Syncs of one manager into one workload cluster, by outcome.
    pub syncs: Family<ClusterSyncLabels, Counter>,
    /// Workload clusters with a client and watches open: those a manager selects or still has
    /// copies in to clean up.
    pub connections: Gauge,
}

impl FleetMetrics {
    /// The fleet's metrics, registered in `registry`.
    pub(super) fn registered(registry: &mut Registry) -> Self {
        let fleet = Self::default();
        registry.register(
            "fleet_cluster_connected",
            "1 while a workload cluster answers and its watches have listed, by cluster",
            fleet.connected.clone(),
        );
        registry.register(
            "fleet_syncs",
            "Syncs of a manager into a workload cluster, by cluster and outcome",
            fleet.syncs.clone(),
        );
        registry.register(
            "fleet_connections",
            "Workload clusters with a client and watches open (selected by a manager, or with copies to clean up)",
            fleet.connections.clone(),
        );
        fleet
    }

    /// Sets whether `cluster` is connected.
    pub fn set_connected(&self, cluster: &str, connected: bool) {
        self.connected
            .get_or_create(&ClusterLabels {
                cluster: cluster.to_owned(),
            })
            .set(i64::from(connected));
    }

    /// Drops the series of a cluster that left the fleet.
    pub fn forget(&self, cluster: &str) {
        let labels = ClusterLabels {
            cluster: cluster.to_owned(),
        };
        self.connected.remove(&labels);
        for outcome in ["synced", "failed"] {
            self.syncs.remove(&ClusterSyncLabels {
                cluster: cluster.to_owned(),
                outcome,
            });
        }
    }

    /// Counts one sync of a manager into `cluster`.
    pub fn record_sync(&self, cluster: &str, synced: bool) {
        self.syncs
            .get_or_create(&ClusterSyncLabels {
                cluster: cluster.to_owned(),
                outcome: if synced { "synced" } else { "failed" },
            })
            .inc();
    }
}
