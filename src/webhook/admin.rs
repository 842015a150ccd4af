//! The plain-HTTP admin server: `/healthz`, `/readyz`, `/metrics`.

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    middleware,
    response::{IntoResponse, Response},
    routing::get,
};

use super::{RequestError, WebhookState, close_when_shutting_down};
use crate::metrics::CONTENT_TYPE;

/// The admin router: `/healthz` (200 while the process serves), `/readyz` (200 once the
/// source is ready, 503 before that and from the moment shutdown begins) and `/metrics`.
pub fn admin_router(state: WebhookState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            close_when_shutting_down,
        ))
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<WebhookState>) -> (StatusCode, &'static str) {
    if state.shutdown.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    } else if !state.source.is_ready() {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    } else {
        (StatusCode::OK, "ok")
    }
}

async fn metrics(State(state): State<WebhookState>) -> Result<Response, RequestError> {
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
