//! The admin server shared by the webhook and the controller: `/healthz`, `/readyz` and
//! `/metrics`, plus the [`Readiness`] that `/readyz` reports, the shutdown behaviour both
//! servers share (`Connection: close` once shutdown has begun), who may read `/metrics`
//! ([`access`], `--metrics-auth`), and the port over HTTPS ([`https`],
//! `--admin-tls-cert-dir`) so that the tokens `/metrics` wants never cross the network in clear.

pub mod access;
pub mod https;

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{
    Router,
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, Version, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use access::{CacheLimits, MetricsAccess, MetricsAuth};
pub use https::{ADMIN_HANDSHAKE_TIMEOUT, HandshakeLimits, HttpsListener, MAX_ADMIN_HANDSHAKES};

use crate::{
    metrics::{CONTENT_TYPE, Metrics},
    tls::CertResolver,
};

/// Whether a component has the complete view it needs to act; `/readyz` reports it.
pub trait Readiness: Send + Sync + 'static {
    /// True once caches have synced; `/readyz` answers 503 until then, so the webhook never
    /// admits with an empty view and a controller never reconciles against half a cache.
    fn is_ready(&self) -> bool;
}

/// A readiness that its owner sets: the controller once its caches have synced (or while it
/// stands by for the lease), the node agent once its first watch is in.
#[derive(Debug, Default)]
pub struct ReadyFlag(AtomicBool);

impl ReadyFlag {
    /// Sets readiness.
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }
}

impl Readiness for ReadyFlag {
    fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// What the admin handlers read: whether the process is ready, its metrics, whether it is
/// shutting down, the certificate whose expiry it reports (webhook only), and who may read
/// the metrics.
#[derive(Clone)]
pub struct AdminState {
    ready: Arc<dyn Readiness>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    certificate: Option<Arc<CertResolver>>,
    metrics_access: MetricsAccess,
}

impl AdminState {
    /// Ready when `ready` says so, never shutting down, no certificate, `/metrics` open.
    pub fn new(ready: Arc<dyn Readiness>, metrics: Arc<Metrics>) -> Self {
        Self {
            ready,
            metrics,
            shutdown: CancellationToken::new(),
            certificate: None,
            metrics_access: MetricsAccess::Open,
        }
    }

    /// `/metrics` answers only who `access` lets in; `/healthz` and `/readyz` stay open.
    pub fn with_metrics_access(mut self, access: MetricsAccess) -> Self {
        self.metrics_access = access;
        self
    }

    /// Once `shutdown` is cancelled, `/readyz` answers 503 and HTTP/1 responses carry
    /// `Connection: close`.
    pub fn with_shutdown(mut self, shutdown: CancellationToken) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// `/metrics` reports this resolver's certificate expiry.
    pub fn with_certificate(mut self, certificate: Arc<CertResolver>) -> Self {
        self.certificate = Some(certificate);
        self
    }

    /// The metrics this state serves.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The token whose cancellation begins shutdown.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }
}

/// The admin router: `/healthz` (200 while the process serves), `/readyz` (200 once ready,
/// 503 before that and from the moment shutdown begins) and `/metrics` (to whom the state's
/// [`MetricsAccess`] lets in).
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

/// Serves the admin router on `address` until `state`'s shutdown token is cancelled: over
/// HTTPS with `tls`'s current certificate when given (plain HTTP is then not served), else
/// over plain HTTP. Binds before returning, so a taken port is reported at once.
pub async fn serve_admin(
    address: SocketAddr,
    state: AdminState,
    tls: Option<Arc<CertResolver>>,
) -> std::io::Result<futures::future::BoxFuture<'static, std::io::Result<()>>> {
    let listener = TcpListener::bind(address).await?;
    let stop = state.shutdown.clone();
    let router = admin_router(state);
    Ok(match tls {
        None => Box::pin(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        }),
        Some(certificate) => {
            let listener = HttpsListener::new(listener, certificate, HandshakeLimits::default())?;
            Box::pin(async move {
                axum::serve(listener, router)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await
            })
        }
    })
}

/// Middleware of every router: once shutdown has begun, ask HTTP/1 clients to close the
/// connection after this response, so they reconnect to a replica that is not leaving.
/// (HTTP/2 clients get GOAWAY when the connections drain; `Connection` is not valid there.)
pub async fn close_when_shutting_down(
    State(shutdown): State<CancellationToken>,
    request: Request,
    next: Next,
) -> Response {
    let http1 = matches!(
        request.version(),
        Version::HTTP_09 | Version::HTTP_10 | Version::HTTP_11
    );
    let mut response = next.run(request).await;
    if http1 && shutdown.is_cancelled() {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
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

async fn metrics(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    if let Some(refusal) = state
        .metrics_access
        .refusal(headers.get(header::AUTHORIZATION))
        .await
    {
        return refusal;
    }
    // Read at scrape time, like the certificate below: the alerts watch it.
    let ready = !state.shutdown.is_cancelled() && state.ready.is_ready();
    state.metrics.operations.ready.set(i64::from(ready));
    if let Some(certificate) = &state.certificate {
        // Read at scrape time, so a reloaded certificate shows without any bookkeeping.
        state
            .metrics
            .certificate_expiry
            .set(certificate.not_after());
    }
    match state.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use axum::body::{Body, to_bytes};
    use tower::ServiceExt;

    use super::*;

    struct Flag(bool);

    impl Readiness for Flag {
        fn is_ready(&self) -> bool {
            self.0
        }
    }

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    async fn get(
        state: AdminState,
        path: &str,
    ) -> Result<(StatusCode, String), Box<dyn std::error::Error>> {
        let response = admin_router(state)
            .oneshot(Request::get(path).body(Body::empty())?)
            .await?;
        let status = response.status();
        let body = to_bytes(response.into_body(), 1 << 20).await?;
        Ok((status, String::from_utf8(body.to_vec())?))
    }

    #[tokio::test]
    async fn readyz_follows_readiness_and_fails_once_shutdown_begins() -> TestResult {
        let metrics = Arc::new(Metrics::new());
        let not_ready = AdminState::new(Arc::new(Flag(false)), metrics.clone());
        assert_eq!(
            get(not_ready, "/readyz").await?.0,
            StatusCode::SERVICE_UNAVAILABLE
        );

        let shutdown = CancellationToken::new();
        let ready = AdminState::new(Arc::new(Flag(true)), metrics).with_shutdown(shutdown.clone());
        assert_eq!(
            get(ready.clone(), "/readyz").await?,
            (StatusCode::OK, "ok".to_owned())
        );
        assert_eq!(get(ready.clone(), "/healthz").await?.0, StatusCode::OK);
        shutdown.cancel();
        assert_eq!(
            get(ready.clone(), "/readyz").await?,
            (StatusCode::SERVICE_UNAVAILABLE, "shutting down".to_owned())
        );
        assert_eq!(
            get(ready, "/healthz").await?.0,
            StatusCode::OK,
            "alive while draining"
        );
        Ok(())
    }

    /// Authenticates no token: every `/metrics` request is a 401.
    struct NoOne;

    impl access::Reviewer for NoOne {
        fn authenticate<'a>(
            &'a self,
            _token: &'a str,
        ) -> futures::future::BoxFuture<
            'a,
            Result<Option<k8s_openapi::api::authentication::v1::UserInfo>, access::ReviewError>,
        > {
            Box::pin(async { Ok(None) })
        }

        fn may_read_metrics<'a>(
            &'a self,
            _user: &'a k8s_openapi::api::authentication::v1::UserInfo,
        ) -> futures::future::BoxFuture<'a, Result<bool, access::ReviewError>> {
            Box::pin(async { Ok(false) })
        }
    }

    #[tokio::test]
    async fn with_metrics_auth_only_metrics_need_a_token_and_probes_stay_open() -> TestResult {
        let guard = access::MetricsGuard::new(Arc::new(NoOne), CacheLimits::default());
        let state = AdminState::new(Arc::new(Flag(true)), Arc::new(Metrics::new()))
            .with_metrics_access(MetricsAccess::Reviewed(Arc::new(guard)));
        let (status, body) = get(state.clone(), "/metrics").await?;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert!(!body.contains("cheiron_"), "{body}");
        assert_eq!(get(state.clone(), "/healthz").await?.0, StatusCode::OK);
        assert_eq!(get(state, "/readyz").await?.0, StatusCode::OK);
        Ok(())
    }

    #[tokio::test]
    async fn metrics_are_served_as_openmetrics_text() -> TestResult {
        let state = AdminState::new(Arc::new(Flag(true)), Arc::new(Metrics::new()));
        let (status, body) = get(state, "/metrics").await?;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("cheiron_admission_patches_total 0"), "{body}");
        assert!(body.trim_end().ends_with("# EOF"), "{body}");
        Ok(())
    }
}
