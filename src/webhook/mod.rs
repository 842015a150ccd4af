//! The admission webhook as a library: the HTTPS router (`POST /mutate`) and the server that
//! runs it beside the admin router of [`crate::admin`] with TLS,
//! certificate reload and graceful shutdown. `cheiron webhook` is a thin shell around [`run`];
//! tests build the routers or call [`serve`] on sockets bound to port 0.
//!
//! ```text
//!              HTTPS :8443                                   HTTP :8080 (crate::admin)
//!   TLS (CertResolver, ArcSwap) ─► router: POST /mutate       /healthz /readyz /metrics
//!                                    │ read body (≤ 3 MiB, BODY_TIMEOUT)
//!                                    │ admission::parse(body) ─► Review      (pure)
//!                                    │ namespace not in the view? source.lookup_namespace
//!                                    │ review.answer(view) ─► Admission      (pure)
//!                                    └ metrics, one debug line (never the object)
//! ```

mod error;
mod mutate;
mod server;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use error::RequestError;
pub use mutate::router;
pub use server::{DRAIN_TIMEOUT, HANDSHAKE_TIMEOUT, Listeners, Timing, serve};

pub use crate::tls::TlsSource;
use crate::{
    admin::{AdminState, Readiness},
    metrics::Metrics,
    source::Source,
    tls::{CertDir, CertResolver, RELOAD_PERIOD, TlsError},
};

/// Largest AdmissionReview body accepted; larger ones get 413. The API server's own limit
/// for a request body is 3 MiB.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Longest a client may take to send a request body; then it gets 408.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// What `cheiron webhook` is told on its command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookOptions {
    /// `--listen`: the HTTPS address of `POST /mutate`.
    pub listen: SocketAddr,
    /// `--admin-listen`: the plain-HTTP address of `/healthz`, `/readyz` and `/metrics`.
    pub admin_listen: SocketAddr,
    /// `--tls-cert-dir` or `--self-signed`.
    pub tls: TlsSource,
    /// How long to keep serving after shutdown begins (see [`Timing::shutdown_delay`]).
    pub shutdown_delay: Duration,
}

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The serving certificate could not be loaded or generated.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// An address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// What the handlers of both routers share: the source, and the admin state (readiness from
/// the same source, metrics, shutdown, certificate).
#[derive(Clone)]
pub struct WebhookState {
    source: Arc<dyn Source>,
    admin: AdminState,
}

impl WebhookState {
    /// State answering from `source` and recording into `metrics`, never shutting down and
    /// without a certificate to report.
    pub fn new(source: Arc<dyn Source>, metrics: Arc<Metrics>) -> Self {
        let ready: Arc<dyn Readiness> = source.clone();
        Self {
            source,
            admin: AdminState::new(ready, metrics),
        }
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

    /// The state of the admin router serving alongside this webhook.
    pub fn admin(&self) -> AdminState {
        self.admin.clone()
    }

    fn metrics(&self) -> &Metrics {
        self.admin.metrics()
    }

    fn shutdown(&self) -> &CancellationToken {
        self.admin.shutdown()
    }
}

/// Runs the webhook until `shutdown` is cancelled and connections have drained: loads or
/// generates the certificate (and reloads it from `--tls-cert-dir` when the directory changes, re-reading every
/// [`RELOAD_PERIOD`] as a fallback),
/// binds both addresses and [`serve`]s.
pub async fn run(
    options: WebhookOptions,
    source: Arc<dyn Source>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Result<(), WebhookError> {
    let WebhookOptions {
        listen,
        admin_listen,
        tls,
        shutdown_delay,
    } = options;
    // Stops the reloader when serving ends, whichever way.
    let reloading = CancellationToken::new();
    let _stop_reloading = reloading.clone().drop_guard();
    let certificate = match tls {
        TlsSource::SelfSigned => {
            tracing::info!("serving a self-signed certificate for localhost");
            Arc::new(CertResolver::self_signed()?)
        }
        TlsSource::Dir(dir) => {
            let (certificate, reloader) = CertDir::new(dir).load().await?;
            tokio::spawn(reloader.run(RELOAD_PERIOD, reloading));
            certificate
        }
    };
    let listeners = Listeners {
        webhook: bind(listen).await?,
        admin: bind(admin_listen).await?,
    };
    tracing::info!(%listen, %admin_listen, not_after = certificate.not_after(), "webhook serving");
    serve(
        listeners,
        certificate,
        source,
        metrics,
        shutdown,
        Timing::new(shutdown_delay),
    )
    .await
}

async fn bind(address: SocketAddr) -> Result<TcpListener, WebhookError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| WebhookError::Bind { address, source })
}
