//! The node agent's metrics (docs/node.md, "Metrics"), served on `/metrics` of its admin port
//! with the crate's other metrics machinery, and registered only in `cheiron node-agent`.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Unit,
};

use cheiron_runtime::metrics::Metrics;

/// Labels of `cheiron_node_sync_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    /// `synced`: every manager selecting the node is applied; `failed`: not.
    pub result: &'static str,
}

/// What one node agent reports about its syncs.
#[derive(Clone, Debug, Default)]
pub struct NodeMetrics {
    /// `cheiron_node_sync_total{result}`: sync passes, by result.
    pub syncs: Family<SyncLabels, Counter>,
    /// `cheiron_node_managers`: the mode Node managers selecting this node.
    pub managers: Gauge,
    /// `cheiron_node_last_synced_timestamp_seconds`: when a pass last ended with every
    /// manager synced, in seconds since the Unix epoch (0: never).
    pub last_synced: Gauge,
    /// `cheiron_node_config_json_leftovers`: entries of the kubelet's config.json that still
    /// hold a credential cheiron wrote but that another tool changed, so cheiron could not
    /// remove them (docs/node.md).
    pub config_json_leftovers: Gauge,
}

impl NodeMetrics {
    /// New metrics, registered in `metrics`.
    pub fn register(metrics: &mut Metrics) -> Self {
        let out = Self::default();
        let registry = metrics.registry_mut();
        registry.register(
            "node_sync",
            "Sync passes of this node agent, by result (synced: every manager selecting the node applied)",
            out.syncs.clone(),
        );
        registry.register(
            "node_managers",
            "Mode Node managers selecting this node",
            out.managers.clone(),
        );
        registry.register_with_unit(
            "node_last_synced_timestamp",
            "When a sync pass last ended with every manager synced, in seconds since the Unix epoch",
            Unit::Seconds,
            out.last_synced.clone(),
        );
        registry.register(
            "node_config_json_leftovers",
            "Entries of the kubelet's config.json holding a credential cheiron wrote that another tool changed, so cheiron could not remove them",
            out.config_json_leftovers.clone(),
        );
        out
    }

    /// Records one sync pass over `managers` managers, at `now` (Unix seconds).
    pub fn record(&self, managers: usize, synced: bool, now: i64) {
        self.managers
            .set(i64::try_from(managers).unwrap_or(i64::MAX));
        self.syncs
            .get_or_create(&SyncLabels {
                result: if synced { "synced" } else { "failed" },
            })
            .inc();
        if synced {
            self.last_synced.set(now);
        }
    }

    /// Records how many config.json entries cheiron could not remove.
    pub fn record_leftovers(&self, leftovers: usize) {
        self.config_json_leftovers
            .set(i64::try_from(leftovers).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_is_counted_by_result_and_only_a_synced_one_moves_the_timestamp() {
        let mut metrics = Metrics::new();
        let node = NodeMetrics::register(&mut metrics);
        node.record(2, true, 1_000);
        node.record(3, false, 2_000);
        node.record_leftovers(1);
        let text = metrics.encode().expect("encode");
        for line in [
            "cheiron_node_sync_total{result=\"synced\"} 1",
            "cheiron_node_sync_total{result=\"failed\"} 1",
            "cheiron_node_managers 3",
            "cheiron_node_last_synced_timestamp_seconds 1000",
            "cheiron_node_config_json_leftovers 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}
