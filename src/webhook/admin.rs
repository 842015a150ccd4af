//! The plain-HTTP admin server: `/healthz`, `/readyz`, `/metrics`.

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    middleware,
    response::{IntoResponse, Response},
    routing::get,
};

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{RequestError, close_when_shutting_down};
use crate::{
    metrics::{CONTENT_TYPE, Metrics},
    source::Readiness,
    tls::CertResolver,
};

/// What the admin handlers read: whether the process is ready, its metrics, whether it is
/// shutting down, and the certificate whose expiry it reports (webhook only).
#[derive(Clone)]
pub struct AdminState {
    ready: Arc<dyn Readiness>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    certificate: Option<Arc<CertResolver>>,
}

impl AdminState {
    /// Ready when `ready` says so, never shutting down, no certificate.
    pub fn new(ready: Arc<dyn Readiness>, metrics: Arc<Metrics>) -> Self {
        Self {
            ready,
            metrics,
            shutdown: CancellationToken::new(),
            certificate: None,
        }
    }

    /// Once `shutdown` is cancelled, `/readyz` answers 503 and HTTP/1 responses carry
    /// `Connection: close`.
    pub fn with_shutdown(mut self, shutdown: CancellationToken) -> Self {
        self.shutdown = shutdown;
        self
    }

    pub(super) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub(super) fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// `/metrics` reports this resolver's certificate expiry.
    pub fn with_certificate(mut self, certificate: Arc<CertResolver>) -> Self {
        self.certificate = Some(certificate);
        self
    }
}

/// The admin router: `/healthz` (200 while the process serves), `/readyz` (200 once the
/// source is ready, 503 before that and from the moment shutdown begins) and `/metrics`.
pub fn admin_router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(middleware::from_fn_with_state(
            state.shutdown.clone(),
            close_when_shutting_down,
        ))
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AdminState>) -> (StatusCode, &'static str) {
    if state.shutdown.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    } else if !state.ready.is_ready() {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    } else {
        (StatusCode::OK, "ok")
    }
}

async fn metrics(State(state): State<AdminState>) -> Result<Response, RequestError> {
    if let Some(certificate) = &state.certificate {
        // Read at scrape time, so a reloaded certificate shows without any bookkeeping.
        state
            .metrics
            .certificate_expiry
            .set(certificate.not_after());
    }
    let text = state
        .metrics
        .encode()
        .map_err(RequestError::EncodeMetrics)?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}
