//! The webhook server's limits at work: connections open, refused and ended, and the bytes of
//! request bodies held.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Registry, Unit},
};

/// Labels of `cheiron_connections_open`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    /// `webhook` or `admin`.
    pub listener: &'static str,
}

/// Labels of `cheiron_connections_refused_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// `webhook` or `admin`.
    pub listener: &'static str,
    /// `max_connections` or `max_connections_per_peer`.
    pub reason: &'static str,
}

/// Labels of `cheiron_connections_closed_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClosedLabels {
    /// The limit that ended the connection, e.g. `idle` or `preface_timeout`.
    pub reason: &'static str,
}

/// The server's limits at work (docs/design.md §7, Limits).
#[derive(Clone, Debug, Default)]
pub struct ConnectionMetrics {
    /// `cheiron_connections_open{listener}`: connections holding a slot.
    pub open: Family<ListenerLabels, Gauge>,
    /// `cheiron_connections_refused_total{listener, reason}`: connections closed at accept
    /// because the listener or the peer had its maximum open.
    pub refused: Family<RefusedLabels, Counter>,
    /// `cheiron_connections_closed_total{reason}`: connections the server ended because of a
    /// limit (a timeout, the idle timeout or the maximum age).
    pub closed: Family<ClosedLabels, Counter>,
    /// `cheiron_body_budget_used_bytes`: bytes of request bodies reserved.
    pub body_budget_used: Gauge,
}

impl ConnectionMetrics {
    /// The server's metrics, registered in `registry`.
    pub(super) fn registered(registry: &mut Registry) -> Self {
        let connections = Self::default();
        registry.register(
            "connections_open",
            "Connections open, by listener",
            connections.open.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed at accept because the listener or the peer had its maximum open",
            connections.refused.clone(),
        );
        registry.register(
            "connections_closed",
            "Connections the server ended because of a limit, by limit",
            connections.closed.clone(),
        );
        registry.register_with_unit(
            "body_budget_used",
            "Bytes of request bodies held, out of the body budget",
            Unit::Bytes,
            connections.body_budget_used.clone(),
        );
        connections
    }

    /// Counts one connection refused at accept.
    pub fn record_refused(&self, listener: &'static str, reason: &'static str) {
        self.refused
            .get_or_create(&RefusedLabels { listener, reason })
            .inc();
    }

    /// Counts one connection ended by a limit.
    pub fn record_closed(&self, reason: &'static str) {
        self.closed.get_or_create(&ClosedLabels { reason }).inc();
    }

    /// The open-connections gauge of `listener`.
    pub fn open(&self, listener: &'static str) -> Gauge {
        self.open
            .get_or_create(&ListenerLabels { listener })
            .clone()
    }
}
