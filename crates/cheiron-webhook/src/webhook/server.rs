//! Serving the two routers: accepting connections, TLS handshakes, one task per connection,
//! and the SIGTERM sequence (docs/design.md §7).

use std::{io, net::SocketAddr, sync::Arc, time::Duration};

use axum::Router;
use cheiron_runtime::{
    admin::{MetricsAccess, admin_router},
    metrics::{ConnectionMetrics, Metrics},
    tls::{self, CertResolver},
};
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
    service::TowerToHyperService,
};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{TcpListener, TcpStream},
    task::JoinSet,
};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::{
    connection::{Closed, Timers, Tracked, Watched, drive},
    error::WebhookError,
    limits::{
        HTTP1_MAX_BUF_BYTES, HTTP2_CONNECTION_WINDOW_BYTES, HTTP2_MAX_HEADER_LIST_BYTES,
        HTTP2_STREAM_WINDOW_BYTES, Limits,
    },
    mutate::router,
    slots::{ConnectionLimiter, ConnectionPermit, Refusal},
    state::WebhookState,
};
use crate::source::Source;

/// Longest a client may take to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest connections may take to finish after serving stops; then they are closed.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2 pings: how often, and how long to wait for the answer before closing. They find
/// peers that went away without closing; the idle timeout ends connections that answer them
/// but send nothing else.
const HTTP2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const HTTP2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Pause after a failed `accept` (typically out of file descriptors), so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// The two bound sockets [`serve`] accepts on.
#[derive(Debug)]
pub struct Listeners {
    /// HTTPS, `POST /mutate`.
    pub webhook: TcpListener,
    /// `/healthz`, `/readyz`, `/metrics`: plain HTTP, or HTTPS with
    /// [`Tuning::admin_certificate`].
    pub admin: TcpListener,
}

/// The durations of the shutdown sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long serving continues after shutdown begins, with `/readyz` failing and HTTP/1
    /// responses carrying `Connection: close`, so that endpoints are updated before the
    /// listeners close.
    pub shutdown_delay: Duration,
    /// How long open connections may take to finish once the listeners are closed.
    pub drain_timeout: Duration,
    /// Longest a client may take to complete the TLS handshake.
    pub handshake_timeout: Duration,
}

impl Timing {
    /// `shutdown_delay` with the default drain and handshake timeouts.
    pub fn new(shutdown_delay: Duration) -> Self {
        Self {
            shutdown_delay,
            drain_timeout: DRAIN_TIMEOUT,
            handshake_timeout: HANDSHAKE_TIMEOUT,
        }
    }
}

/// How [`serve`] is tuned: the shutdown sequence, the limits on clients and who may read
/// `/metrics`. A [`Timing`] alone means the default [`Limits`] and an open `/metrics`.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// The durations of the shutdown sequence, and the TLS handshake timeout.
    pub timing: Timing,
    /// What clients can hold.
    pub limits: Limits,
    /// Who may read `/metrics` on the admin port (`--metrics-auth`).
    pub metrics_access: MetricsAccess,
    /// `--admin-tls-cert-dir`: the admin port serves HTTPS only, with this certificate;
    /// `None`, plain HTTP.
    pub admin_certificate: Option<Arc<CertResolver>>,
}

/// Equal when everything is, and both serve the admin port over plain HTTP or share one
/// certificate.
impl PartialEq for Tuning {
    fn eq(&self, other: &Self) -> bool {
        self.timing == other.timing
            && self.limits == other.limits
            && self.metrics_access == other.metrics_access
            && match (&self.admin_certificate, &other.admin_certificate) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl From<Timing> for Tuning {
    fn from(timing: Timing) -> Self {
        Self {
            timing,
            limits: Limits::default(),
            metrics_access: MetricsAccess::Open,
            admin_certificate: None,
        }
    }
}

/// The `listener` label of the connection metrics.
const WEBHOOK: &str = "webhook";
const ADMIN: &str = "admin";

/// Serves `POST /mutate` over HTTPS on `listeners.webhook` and the admin endpoints on
/// `listeners.admin` (plain HTTP, or HTTPS with [`Tuning::admin_certificate`]), until `shutdown` is cancelled and the sequence of [`Timing`]
/// has run: `/readyz` fails at once, serving goes on for `shutdown_delay`, then the listeners
/// close and connections drain (HTTP/1 finishes its request and closes, HTTP/2 gets GOAWAY),
/// at most for `drain_timeout`.
///
/// Connections over a listener's cap are accepted and closed at once, unless their peer holds
/// less than its fair share and another holds more: then that one closes a connection
/// gracefully (see `ConnectionLimiter` and `Limits`).
pub async fn serve(
    listeners: Listeners,
    certificate: Arc<CertResolver>,
    source: Arc<dyn Source>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    tuning: impl Into<Tuning>,
) -> Result<(), WebhookError> {
    let Tuning {
        timing,
        limits,
        metrics_access,
        admin_certificate,
    } = tuning.into();
    let acceptor = TlsAcceptor::from(Arc::new(tls::server_config(Arc::clone(&certificate))?));
    let admin_acceptor = match admin_certificate {
        Some(admin) => Some(TlsAcceptor::from(Arc::new(tls::server_config(admin)?))),
        None => None,
    };
    metrics.certificate_expiry.set(certificate.not_after());
    let state = WebhookState::new(source, Arc::clone(&metrics))
        .with_limits(&limits)
        .with_shutdown(shutdown.clone())
        .with_certificate(certificate)
        .with_metrics_access(metrics_access);
    let (webhook, admin) = doors(state, acceptor, admin_acceptor, &limits, &timing, &metrics);

    let draining = CancellationToken::new();
    let mut connections = JoinSet::new();
    let stop = serve_on_after_shutdown(shutdown, timing.shutdown_delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            accepted = listeners.webhook.accept() => {
                webhook.admit(accepted, &mut connections, &draining).await;
            }
            accepted = listeners.admin.accept() => {
                admin.admit(accepted, &mut connections, &draining).await;
            }
            Some(finished) = connections.join_next(), if !connections.is_empty() => {
                if let Err(error) = finished {
                    tracing::error!(%error, "connection task failed");
                }
            }
        }
    }

    drop(listeners);
    draining.cancel();
    drain(connections, timing.drain_timeout).await;
    tracing::info!("webhook stopped");
    Ok(())
}

/// The webhook's door (its router over TLS, up to `max_connections`, fairly shared between
/// peers) and the admin port's (plain HTTP or TLS, up to `max_admin_connections`).
fn doors(
    state: WebhookState,
    acceptor: TlsAcceptor,
    admin_acceptor: Option<TlsAcceptor>,
    limits: &Limits,
    timing: &Timing,
    metrics: &Arc<Metrics>,
) -> (Door, Door) {
    let protocols = Arc::new(Protocols::new(limits));
    let timers = Timers {
        preface: limits.http2_preface_timeout,
        idle: limits.http2_idle_timeout,
        max_age: (!limits.max_connection_age.is_zero()).then_some(limits.max_connection_age),
        close_grace: timing.drain_timeout,
    };
    let endpoint = |service, tls| Endpoint {
        service,
        tls,
        protocols: Arc::clone(&protocols),
        handshake_timeout: timing.handshake_timeout,
        timers,
        metrics: Arc::clone(metrics),
    };
    let connections = &metrics.connections;
    let webhook = Door {
        listener: WEBHOOK,
        endpoint: endpoint(
            TowerToHyperService::new(router(state.clone())),
            Some(acceptor),
        ),
        slots: ConnectionLimiter::new(
            limits.max_connections,
            limits.max_connections_per_peer,
            connections.open(WEBHOOK),
        ),
    };
    let admin = Door {
        listener: ADMIN,
        endpoint: endpoint(
            TowerToHyperService::new(admin_router(state.admin())),
            admin_acceptor,
        ),
        slots: ConnectionLimiter::new(
            limits.max_admin_connections,
            limits.max_admin_connections,
            connections.open(ADMIN),
        ),
    };
    (webhook, admin)
}

/// Waits up to `timeout` for the connections to finish after the listeners closed, then
/// closes those still open.
async fn drain(mut connections: JoinSet<()>, timeout: Duration) {
    tracing::info!(
        connections = connections.len(),
        "listeners closed; draining connections"
    );
    let drained = tokio::time::timeout(timeout, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(timeout = ?timeout, "connections still open after the drain timeout; closing them");
    }
    connections.shutdown().await;
}

/// One listener's endpoint and the slots its connections take.
struct Door {
    /// The `listener` label of the connection metrics.
    listener: &'static str,
    endpoint: Endpoint,
    slots: ConnectionLimiter,
}

impl Door {
    /// Serves an accepted connection in a task of `connections` if it gets a slot, and
    /// refuses it at once if not.
    async fn admit(
        &self,
        accepted: io::Result<(TcpStream, SocketAddr)>,
        connections: &mut JoinSet<()>,
        draining: &CancellationToken,
    ) {
        match accepted {
            Ok((stream, peer)) => match self.slots.try_admit(peer.ip()) {
                Ok(slot) => {
                    let serving = self
                        .endpoint
                        .clone()
                        .serve(stream, peer, slot, draining.clone());
                    connections.spawn(serving);
                }
                Err(refusal) => refuse(
                    stream,
                    peer,
                    self.listener,
                    refusal,
                    &self.endpoint.metrics.connections,
                ),
            },
            Err(error) => pause_after_accept_error(error).await,
        }
    }
}

/// Closes a connection over the cap at once, with a reset rather than a FIN, so that
/// neither side keeps the socket in TIME_WAIT. Accepting and closing, rather than leaving
/// connections in the kernel's backlog, tells a refused client at once (instead of after
/// its own timeout) and keeps the backlog free for when slots come back.
fn refuse(
    stream: TcpStream,
    peer: SocketAddr,
    listener: &'static str,
    refusal: Refusal,
    metrics: &ConnectionMetrics,
) {
    metrics.record_refused(listener, refusal.as_str());
    tracing::debug!(%peer, listener, reason = refusal.as_str(), "connection refused");
    if let Err(error) = stream.set_zero_linger() {
        tracing::debug!(%peer, %error, "cannot set SO_LINGER");
    }
}

/// Completes `delay` after `shutdown` is cancelled. Until then the routers keep answering,
/// with `/readyz` failing and `Connection: close` on HTTP/1 responses.
async fn serve_on_after_shutdown(shutdown: CancellationToken, delay: Duration) {
    shutdown.cancelled().await;
    tracing::info!(delay = ?delay, "shutting down: /readyz fails, serving on before closing the listeners");
    tokio::time::sleep(delay).await;
}

async fn pause_after_accept_error(error: io::Error) {
    tracing::warn!(%error, "cannot accept a connection");
    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
}

/// The HTTP/1.1 and HTTP/2 connection builders. Over TLS the protocol is the one ALPN chose
/// (no ALPN means HTTP/1.1); the admin port over plain HTTP speaks HTTP/1.1, which probes
/// and Prometheus use. Fixing the protocol up front, instead of sniffing the first bytes, puts
/// every connection under a read timeout from its first byte.
struct Protocols {
    http1: auto::Builder<TokioExecutor>,
    http2: auto::Builder<TokioExecutor>,
}

impl Protocols {
    fn new(limits: &Limits) -> Self {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.http1_header_timeout)
            .max_buf_size(HTTP1_MAX_BUF_BYTES);
        builder
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(HTTP2_KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(HTTP2_KEEP_ALIVE_TIMEOUT)
            .max_concurrent_streams(limits.http2_max_streams)
            .max_header_list_size(HTTP2_MAX_HEADER_LIST_BYTES)
            .initial_stream_window_size(HTTP2_STREAM_WINDOW_BYTES)
            .initial_connection_window_size(HTTP2_CONNECTION_WINDOW_BYTES);
        Self {
            http1: builder.clone().http1_only(),
            http2: builder.http2_only(),
        }
    }
}

/// One listening endpoint: a router, with or without TLS.
#[derive(Clone)]
struct Endpoint {
    service: TowerToHyperService<Router>,
    tls: Option<TlsAcceptor>,
    protocols: Arc<Protocols>,
    handshake_timeout: Duration,
    timers: Timers,
    metrics: Arc<Metrics>,
}

impl Endpoint {
    /// Serves one accepted connection to its end, holding its slot until then. Once
    /// `draining` is cancelled or the slot is evicted, a handshake in progress is
    /// abandoned, and a connection serving is closed gracefully.
    async fn serve(
        self,
        stream: TcpStream,
        peer: SocketAddr,
        slot: ConnectionPermit,
        draining: CancellationToken,
    ) {
        // Responses are small and latency matters more than packet count.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%peer, %error, "cannot set TCP_NODELAY");
        }
        let Some(acceptor) = &self.tls else {
            return self.serve_http(stream, false, peer, &slot, &draining).await;
        };
        let handshake = tokio::select! {
            () = draining.cancelled() => return,
            () = slot.evicted().cancelled() => {
                tracing::debug!(%peer, "connection evicted during the TLS handshake");
                self.metrics.connections.record_closed(Closed::Evicted.as_str());
                return;
            }
            handshake = tokio::time::timeout(self.handshake_timeout, acceptor.accept(stream)) => handshake,
        };
        let stream = match handshake {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                tracing::debug!(%peer, %error, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake timed out");
                self.metrics
                    .connections
                    .record_closed(Closed::HandshakeTimeout.as_str());
                return;
            }
        };
        let http2 = stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
        self.serve_http(stream, http2, peer, &slot, &draining).await;
    }

    async fn serve_http<I>(
        &self,
        io: I,
        http2: bool,
        peer: SocketAddr,
        slot: &ConnectionPermit,
        draining: &CancellationToken,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let builder = if http2 {
            &self.protocols.http2
        } else {
            &self.protocols.http1
        };
        let activity = slot.activity();
        let io = TokioIo::new(Watched::new(io, Arc::clone(activity)));
        let service = Tracked::new(self.service.clone(), Arc::clone(activity));
        let connection = builder.serve_connection(io, service);
        let metrics = &self.metrics.connections;
        if let Err(error) = drive(
            connection,
            http2,
            slot.activity(),
            slot.evicted(),
            self.timers,
            draining,
            metrics,
        )
        .await
        {
            if error
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_timeout)
            {
                metrics.record_closed(Closed::HeaderTimeout.as_str());
            }
            tracing::debug!(%peer, %error, "connection closed with an error");
        }
    }
}
