//! The admin port over HTTPS (`--admin-tls-cert-dir`): a listener for `axum::serve` whose
//! connections have completed a TLS handshake with the current certificate of a
//! [`CertResolver`] (so a rotated certificate is served from the next handshake on).
//!
//! Handshakes run in tasks of their own, at most [`HandshakeLimits::max_pending`] at once and
//! each for at most [`HandshakeLimits::timeout`]: a client that connects and sends nothing holds
//! neither the accept loop nor a slot for long, and connections over the cap are closed at
//! once. A plain-HTTP request is not a TLS ClientHello: its handshake fails and the connection
//! is closed without an answer, so nothing, a bearer token least of all, is read in clear.

use std::{io, net::SocketAddr, sync::Arc, time::Duration};

use tokio::{
    net::{TcpListener, TcpStream},
    sync::{Semaphore, mpsc},
};
use tokio_rustls::{TlsAcceptor, server::TlsStream};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::tls::{self, CertResolver};

/// Longest a client of the admin port may take to complete its TLS handshake by default.
pub const ADMIN_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most TLS handshakes in progress at once on the admin port by default: probes and a
/// scraper or two need a few.
pub const MAX_ADMIN_HANDSHAKES: usize = 64;

/// Pause after a failed `accept` (typically out of file descriptors), so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// What a client of the admin port can hold before its TLS handshake completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeLimits {
    /// Longest one handshake may take; then the connection is closed.
    pub timeout: Duration,
    /// Most handshakes in progress at once; connections over it are closed at once.
    pub max_pending: usize,
}

impl Default for HandshakeLimits {
    fn default() -> Self {
        Self {
            timeout: ADMIN_HANDSHAKE_TIMEOUT,
            max_pending: MAX_ADMIN_HANDSHAKES,
        }
    }
}

/// A bound admin port that hands `axum::serve` connections with their TLS handshake done.
/// Dropping it stops accepting and closes the port.
pub struct HttpsListener {
    local: SocketAddr,
    established: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    _stop: DropGuard,
}

impl HttpsListener {
    /// Accepts on `listener`, serving `certificate`'s current key to every handshake. Fails
    /// only when rustls refuses the configuration ([`tls::TlsError::Config`], as an I/O error).
    pub fn new(
        listener: TcpListener,
        certificate: Arc<CertResolver>,
        limits: HandshakeLimits,
    ) -> io::Result<Self> {
        let config = tls::server_config(certificate).map_err(io::Error::other)?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let local = listener.local_addr()?;
        let max_pending = limits.max_pending.max(1);
        let (established, handed) = mpsc::channel(max_pending);
        let stop = CancellationToken::new();
        tokio::spawn(accept(
            listener,
            acceptor,
            established,
            HandshakeLimits {
                max_pending,
                ..limits
            },
            stop.clone(),
        ));
        Ok(Self {
            local,
            established: handed,
            _stop: stop.drop_guard(),
        })
    }
}

/// Accepts connections until `stop` or until the listener is gone, each handshake in a task
/// of its own under `limits`.
async fn accept(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    established: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    limits: HandshakeLimits,
    stop: CancellationToken,
) {
    let pending = Arc::new(Semaphore::new(limits.max_pending));
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => return,
            () = established.closed() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "cannot accept an admin connection");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        let Ok(slot) = Arc::clone(&pending).try_acquire_owned() else {
            tracing::debug!(%peer, "admin connection closed: too many TLS handshakes in progress");
            continue;
        };
        let (acceptor, established) = (acceptor.clone(), established.clone());
        tokio::spawn(async move {
            let handshake = tokio::time::timeout(limits.timeout, acceptor.accept(stream)).await;
            drop(slot);
            match handshake {
                Ok(Ok(stream)) => {
                    // Fails only once the server has stopped; the connection is then dropped.
                    let _ = established.send((stream, peer)).await;
                }
                Ok(Err(error)) => tracing::debug!(%peer, %error, "admin TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "admin TLS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for HttpsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.established.recv().await {
            Some(connection) => connection,
            // The accept loop has ended: no connection will ever come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
