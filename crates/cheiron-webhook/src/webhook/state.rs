//! What the handlers of both routers share ([`WebhookState`]): the source of the view, the
//! admin state, and the limits a request handler applies.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use cheiron_runtime::{
    admin::{AdminState, MetricsAccess, Readiness},
    metrics::Metrics,
    tls::CertResolver,
};
use tokio_util::sync::CancellationToken;

use super::{budget::BodyBudget, limits::Limits};
use crate::source::{LISTING_LOOKUPS_IN_FLIGHT, LookupGuard, Source};

/// What the handlers of both routers share: the source, and the admin state (readiness from
/// the same source, metrics, shutdown, certificate).
#[derive(Clone)]
pub struct WebhookState {
    pub(super) source: Arc<dyn Source>,
    admin: AdminState,
    pub(super) requests: Arc<RequestLimits>,
}

/// The limits a request handler applies.
pub(super) struct RequestLimits {
    pub(super) budget: BodyBudget,
    pub(super) body_timeout: Duration,
    pub(super) lookups: LookupGuard,
    /// Lookups the rate refused that may go ahead anyway while the first list of namespaces
    /// is coming in ([`LISTING_LOOKUPS_IN_FLIGHT`] at once; none when lookups are off).
    pub(super) listing_lookups: tokio::sync::Semaphore,
}

impl RequestLimits {
    fn new(limits: &Limits, metrics: &Metrics) -> Self {
        Self {
            budget: BodyBudget::new(
                limits.body_budget,
                metrics.connections.body_budget_used.clone(),
            ),
            body_timeout: limits.body_timeout,
            lookups: LookupGuard::new(limits.namespace_lookups, Instant::now()),
            listing_lookups: tokio::sync::Semaphore::new(
                if limits.namespace_lookups.rate_per_second == 0 {
                    0
                } else {
                    LISTING_LOOKUPS_IN_FLIGHT
                },
            ),
        }
    }
}

impl WebhookState {
    /// State answering from `source` and recording into `metrics`, never shutting down,
    /// without a certificate to report, and with the default [`Limits`].
    pub fn new(source: Arc<dyn Source>, metrics: Arc<Metrics>) -> Self {
        let ready: Arc<dyn Readiness> = source.clone();
        let requests = Arc::new(RequestLimits::new(&Limits::default(), &metrics));
        Self {
            source,
            admin: AdminState::new(ready, metrics),
            requests,
        }
    }

    /// Requests are held to `limits` (the body budget and timeout, namespace lookups).
    pub fn with_limits(mut self, limits: &Limits) -> Self {
        self.requests = Arc::new(RequestLimits::new(limits, self.admin.metrics()));
        self
    }

    /// Once `shutdown` is cancelled, `/readyz` answers 503 and HTTP/1 responses carry
    /// `Connection: close`.
    pub fn with_shutdown(mut self, shutdown: CancellationToken) -> Self {
        self.admin = self.admin.with_shutdown(shutdown);
        self
    }

    /// `/metrics` reports this resolver's certificate expiry.
    pub fn with_certificate(mut self, certificate: Arc<CertResolver>) -> Self {
        self.admin = self.admin.with_certificate(certificate);
        self
    }

    /// `/metrics` answers only who `access` lets in.
    pub fn with_metrics_access(mut self, access: MetricsAccess) -> Self {
        self.admin = self.admin.with_metrics_access(access);
        self
    }

    /// The state of the admin router serving alongside this webhook.
    pub fn admin(&self) -> AdminState {
        self.admin.clone()
    }

    pub(super) fn metrics(&self) -> &Metrics {
        self.admin.metrics()
    }

    pub(super) fn shutdown(&self) -> &CancellationToken {
        self.admin.shutdown()
    }
}
