//! The admission webhook as a library: the HTTPS router (`POST /mutate`) and the server that
//! runs it beside the admin router of [`cheiron_runtime::admin`] with TLS,
//! certificate reload and graceful shutdown. `cheiron webhook` is a thin shell around [`run`];
//! tests build the routers or call [`serve`] on sockets bound to port 0.
//!
//! ```text
//!              HTTPS :8443                         HTTP :8080, or HTTPS (cheiron_runtime::admin)
//!   accept: a slot under the cap (per listener, per peer; when full, a peer below its fair
//!   share evicts the largest holder's oldest idle connection), else closed at once
//!   TLS (CertResolver, ArcSwap), handshake timeout; HTTP/1 header, HTTP/2 preface and
//!   idle timeouts, maximum connection age (connection::drive)
//!                                  ─► router: POST /mutate       /healthz /readyz /metrics
//!                                    │ reserve the body's bytes in the budget, else 503
//!                                    │ read body (≤ 3 MiB, body timeout)
//!                                    │ admission::parse(body) ─► Review      (pure)
//!                                    │ namespace not in the view? LookupGuard (name, misses,
//!                                    │   rate), then source.lookup_namespace; before the
//!                                    │   first list of namespaces is in, past the rate
//!                                    │   16 at a time, else wait for that list (≤ 3 s)
//!                                    │ review.answer(view) ─► Admission      (pure)
//!                                    └ metrics, one debug line (never the object)
//! ```

mod budget;
mod connection;
mod error;
mod limits;
mod mutate;
mod server;
mod slots;
mod state;

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

pub use budget::{BodyBudget, Reservation, SMALL_BODY_BYTES};
pub use cheiron_runtime::tls::TlsSource;
use cheiron_runtime::{
    admin::MetricsAccess,
    metrics::Metrics,
    tls::{CertDir, CertResolver, RELOAD_PERIOD},
};
pub use error::{RequestError, WebhookError};
pub use limits::{
    BODY_TIMEOUT, DEFAULT_BODY_BUDGET_BYTES, DEFAULT_BODY_TIMEOUT, DEFAULT_HTTP1_HEADER_TIMEOUT,
    DEFAULT_HTTP2_IDLE_TIMEOUT, DEFAULT_HTTP2_MAX_STREAMS, DEFAULT_HTTP2_PREFACE_TIMEOUT,
    DEFAULT_MAX_ADMIN_CONNECTIONS, DEFAULT_MAX_CONNECTION_AGE, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_PEER, HTTP1_MAX_BUF_BYTES, HTTP2_CONNECTION_WINDOW_BYTES,
    HTTP2_MAX_HEADER_LIST_BYTES, HTTP2_STREAM_WINDOW_BYTES, Limits, MAX_BODY_BYTES,
    MAX_EVICTING_SHARE,
};
pub use mutate::router;
pub use server::{DRAIN_TIMEOUT, HANDSHAKE_TIMEOUT, Listeners, Timing, Tuning, serve};
pub use state::WebhookState;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::source::Source;

/// What `cheiron webhook` is told on its command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookOptions {
    /// `--listen`: the HTTPS address of `POST /mutate`.
    pub listen: SocketAddr,
    /// `--admin-listen`: the address of `/healthz`, `/readyz` and `/metrics`.
    pub admin_listen: SocketAddr,
    /// `--tls-cert-dir` or `--self-signed`.
    pub tls: TlsSource,
    /// How long to keep serving after shutdown begins (see [`Timing::shutdown_delay`]).
    pub shutdown_delay: Duration,
}

/// [`WebhookOptions`] and the tuning that has defaults: what [`run`] needs.
#[derive(Clone, Debug, PartialEq)]
pub struct WebhookConfig {
    /// Addresses, certificate and shutdown delay.
    pub options: WebhookOptions,
    /// Longest a client may take to complete the TLS handshake.
    pub handshake_timeout: Duration,
    /// What clients can hold.
    pub limits: Limits,
    /// Who may read `/metrics` (default: anyone who reaches the admin port).
    pub metrics_access: MetricsAccess,
    /// `--admin-tls-cert-dir`: the admin port serves HTTPS only, with the pair in this
    /// directory (default: plain HTTP).
    pub admin_tls: Option<PathBuf>,
}

impl WebhookOptions {
    /// These options with a TLS handshake timeout and limits other than the defaults.
    pub fn with_limits(self, handshake_timeout: Duration, limits: Limits) -> WebhookConfig {
        WebhookConfig {
            options: self,
            handshake_timeout,
            limits,
            metrics_access: MetricsAccess::Open,
            admin_tls: None,
        }
    }
}

impl WebhookConfig {
    /// `/metrics` answers only who `access` lets in (`--metrics-auth`).
    pub fn with_metrics_access(mut self, access: MetricsAccess) -> Self {
        self.metrics_access = access;
        self
    }

    /// The admin port serves HTTPS only, with `tls.crt` and `tls.key` of `dir`
    /// (`--admin-tls-cert-dir`; `None`: plain HTTP). The webhook's own `--tls-cert-dir` shares
    /// its certificate and reloader.
    pub fn with_admin_tls(mut self, dir: Option<PathBuf>) -> Self {
        self.admin_tls = dir;
        self
    }
}

impl From<WebhookOptions> for WebhookConfig {
    fn from(options: WebhookOptions) -> Self {
        options.with_limits(HANDSHAKE_TIMEOUT, Limits::default())
    }
}

/// Runs the webhook until `shutdown` is cancelled and connections have drained: [`prepare`]s
/// it, then [`Prepared::serve`]s. Plain [`WebhookOptions`] serve with the default limits;
/// [`WebhookOptions::with_limits`] sets others.
pub async fn run(
    config: impl Into<WebhookConfig>,
    source: Arc<dyn Source>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Result<(), WebhookError> {
    prepare(config)
        .await?
        .serve(source, metrics, shutdown)
        .await
}

/// Loads or generates the certificate (and reloads it from `--tls-cert-dir` when the
/// directory changes, re-reading every [`RELOAD_PERIOD`] as a fallback) and binds both
/// addresses: everything of the webhook's start-up that can fail, so that a command does it
/// before starting anything that logs (a cluster source), and a failure stays one line.
pub async fn prepare(config: impl Into<WebhookConfig>) -> Result<Prepared, WebhookError> {
    let WebhookConfig {
        options:
            WebhookOptions {
                listen,
                admin_listen,
                tls,
                shutdown_delay,
            },
        handshake_timeout,
        limits,
        metrics_access,
        admin_tls,
    } = config.into();
    // Stops the reloaders when serving ends, whichever way.
    let reloading = CancellationToken::new();
    let stop_reloading = reloading.clone().drop_guard();
    let self_signed = matches!(tls, TlsSource::SelfSigned);
    let shares_certificate = matches!((&tls, &admin_tls), (TlsSource::Dir(a), Some(b)) if a == b);
    let certificate = match tls {
        TlsSource::SelfSigned => Arc::new(CertResolver::self_signed()?),
        TlsSource::Dir(dir) => {
            let (certificate, reloader) = CertDir::new(dir).load().await?;
            tokio::spawn(reloader.run(RELOAD_PERIOD, reloading.clone()));
            certificate
        }
    };
    let admin_certificate = match admin_tls {
        None => None,
        Some(_) if shares_certificate => Some(Arc::clone(&certificate)),
        Some(dir) => {
            let (certificate, reloader) = CertDir::new(dir).load().await?;
            tokio::spawn(reloader.run(RELOAD_PERIOD, reloading));
            Some(certificate)
        }
    };
    let listeners = Listeners {
        webhook: bind(listen).await?,
        admin: bind(admin_listen).await?,
    };
    Ok(Prepared {
        listen,
        admin_listen,
        listeners,
        certificate,
        self_signed,
        _stop_reloading: stop_reloading,
        tuning: Tuning {
            timing: Timing {
                handshake_timeout,
                ..Timing::new(shutdown_delay)
            },
            limits,
            metrics_access,
            admin_certificate,
        },
    })
}

/// A webhook whose certificate is loaded and whose addresses are bound ([`prepare`]).
pub struct Prepared {
    listen: SocketAddr,
    admin_listen: SocketAddr,
    listeners: Listeners,
    certificate: Arc<CertResolver>,
    self_signed: bool,
    _stop_reloading: tokio_util::sync::DropGuard,
    tuning: Tuning,
}

impl Prepared {
    /// Serves admission from `source` until `shutdown` is cancelled and connections have
    /// drained.
    pub async fn serve(
        self,
        source: Arc<dyn Source>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> Result<(), WebhookError> {
        let Self {
            listen,
            admin_listen,
            listeners,
            certificate,
            self_signed,
            _stop_reloading,
            tuning,
        } = self;
        // The first info line of the webhook, once nothing at start-up can fail.
        let admin_https = tuning.admin_certificate.is_some();
        tracing::info!(%listen, %admin_listen, admin_https, not_after = certificate.not_after(), self_signed, "webhook serving");
        if !admin_https && matches!(tuning.metrics_access, MetricsAccess::Reviewed(_)) {
            tracing::warn!(
                "--metrics-auth kubernetes without --admin-tls-cert-dir: scrapers send their \
                 bearer tokens over plain HTTP"
            );
        }
        serve(listeners, certificate, source, metrics, shutdown, tuning).await
    }
}

async fn bind(address: SocketAddr) -> Result<TcpListener, WebhookError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| WebhookError::Bind { address, source })
}
