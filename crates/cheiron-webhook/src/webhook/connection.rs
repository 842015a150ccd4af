//! One connection's timers, the ones hyper does not have. Hyper bounds an HTTP/1 connection's wait for request
//! headers, but nothing bounds an HTTP/2 connection that never sends its preface, or one
//! that keeps answering PINGs without ever sending a request, and nothing ends a connection
//! stuck writing to a client that does not read. [`drive`] adds those timers around hyper's
//! connection future.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use cheiron_runtime::metrics::ConnectionMetrics;
use hyper_util::server::graceful::GracefulConnection;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    sync::watch,
    time::Instant,
};
use tokio_util::sync::CancellationToken;

/// Length of the HTTP/2 client preface (`PRI * HTTP/2.0…`), RFC 9113 §3.4.
const HTTP2_PREFACE_BYTES: u64 = 24;

/// What a connection has been doing: bytes read, and requests in progress (HTTP/2 streams
/// whose handler has not answered yet), with the moment the last one ended.
#[derive(Debug)]
pub struct Activity {
    bytes_read: AtomicU64,
    requests: watch::Sender<Requests>,
}

#[derive(Clone, Copy, Debug)]
struct Requests {
    in_progress: usize,
    idle_since: Instant,
}

/// One request in progress; ends when dropped.
#[derive(Debug)]
pub struct RequestGuard(Arc<Activity>);

impl Activity {
    /// A connection that has just started: nothing read, idle from now.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            bytes_read: AtomicU64::new(0),
            requests: watch::Sender::new(Requests {
                in_progress: 0,
                idle_since: Instant::now(),
            }),
        })
    }

    /// Marks a request in progress until the guard drops.
    pub fn begin(self: &Arc<Self>) -> RequestGuard {
        self.requests.send_modify(|r| r.in_progress += 1);
        RequestGuard(Arc::clone(self))
    }

    /// True when no request is in progress.
    pub fn is_idle(&self) -> bool {
        self.requests.borrow().in_progress == 0
    }

    fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// Completes once no request has been in progress for `timeout`.
    async fn idle_for(&self, timeout: Duration) {
        let mut changes = self.requests.subscribe();
        loop {
            let now = *changes.borrow_and_update();
            if now.in_progress == 0 {
                tokio::select! {
                    () = tokio::time::sleep_until(now.idle_since + timeout) => return,
                    _ = changes.changed() => {}
                }
            } else if changes.changed().await.is_err() {
                // Cannot happen: `self` holds the sender.
                std::future::pending::<()>().await;
            }
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.requests.send_modify(|r| {
            r.in_progress = r.in_progress.saturating_sub(1);
            if r.in_progress == 0 {
                r.idle_since = Instant::now();
            }
        });
    }
}

/// A connection's IO, counting the bytes read (to tell whether the HTTP/2 preface came).
#[derive(Debug)]
pub struct Watched<I> {
    io: I,
    activity: Arc<Activity>,
}

impl<I> Watched<I> {
    /// `io`, counting into `activity`.
    pub fn new(io: I, activity: Arc<Activity>) -> Self {
        Self { io, activity }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        let read = buf.filled().len().saturating_sub(before);
        self.activity
            .bytes_read
            .fetch_add(read as u64, Ordering::Relaxed);
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The service of one connection: the router's, marking each request in progress until its
/// response is ready.
#[derive(Clone, Debug)]
pub struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Tracked<S> {
    /// `inner`, tracked in `activity`.
    pub fn new(inner: S, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<S, R> hyper::service::Service<R> for Tracked<S>
where
    S: hyper::service::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn call(&self, request: R) -> Self::Future {
        let guard = self.activity.begin();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            drop(guard);
            response
        })
    }
}

/// The timers of one connection.
#[derive(Clone, Copy, Debug)]
pub struct Timers {
    /// HTTP/2 only: longest wait for the client preface.
    pub preface: Duration,
    /// HTTP/2 only: longest time without a request in progress.
    pub idle: Duration,
    /// Age at which the connection is closed gracefully; `None` for never.
    pub max_age: Option<Duration>,
    /// Longest a connection closed gracefully (idle, age, shutdown) may take to finish.
    pub close_grace: Duration,
}

/// Why the server ended a connection (the `reason` of `cheiron_connections_closed_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// The TLS handshake did not finish in time.
    HandshakeTimeout,
    /// An HTTP/1 request's headers did not arrive in time.
    HeaderTimeout,
    /// No HTTP/2 preface in time.
    PrefaceTimeout,
    /// An HTTP/2 connection without requests for the idle timeout.
    Idle,
    /// The maximum age.
    MaxAge,
    /// A connection closed gracefully did not finish in time.
    CloseTimeout,
    /// Closed gracefully to give its slot to a peer holding less than its fair share.
    Evicted,
}

impl Closed {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Closed::HandshakeTimeout => "handshake_timeout",
            Closed::HeaderTimeout => "header_timeout",
            Closed::PrefaceTimeout => "preface_timeout",
            Closed::Idle => "idle",
            Closed::MaxAge => "max_age",
            Closed::CloseTimeout => "close_timeout",
            Closed::Evicted => "evicted",
        }
    }
}

/// Serves `connection` to its end under `timers`, watching its `activity`: HTTP/2 connections
/// without a preface in time are dropped; idle HTTP/2 connections, connections past their
/// age, connections `evicted` from their slot and, once `draining` is cancelled, all
/// connections are closed gracefully, and dropped if that takes longer than
/// `timers.close_grace`.
pub async fn drive<C: GracefulConnection>(
    connection: C,
    http2: bool,
    activity: &Activity,
    evicted: &CancellationToken,
    timers: Timers,
    draining: &CancellationToken,
    metrics: &ConnectionMetrics,
) -> Result<(), C::Error> {
    tokio::pin!(connection);
    let started = Instant::now();
    let preface = tokio::time::sleep(timers.preface);
    tokio::pin!(preface);
    let mut awaiting_preface = http2;
    let old = tokio::time::sleep_until(started + timers.max_age.unwrap_or(Duration::ZERO));
    tokio::pin!(old);
    let closing = loop {
        tokio::select! {
            result = connection.as_mut() => return result,
            () = &mut preface, if awaiting_preface => {
                if activity.bytes_read() < HTTP2_PREFACE_BYTES {
                    metrics.record_closed(Closed::PrefaceTimeout.as_str());
                    return Ok(());
                }
                awaiting_preface = false;
            }
            () = activity.idle_for(timers.idle), if http2 => break Some(Closed::Idle),
            () = &mut old, if timers.max_age.is_some() => break Some(Closed::MaxAge),
            () = evicted.cancelled() => break Some(Closed::Evicted),
            () = draining.cancelled() => break None,
        }
    };
    if let Some(reason) = closing {
        metrics.record_closed(reason.as_str());
    }
    connection.as_mut().graceful_shutdown();
    match tokio::time::timeout(timers.close_grace, connection).await {
        Ok(result) => result,
        Err(_) => {
            metrics.record_closed(Closed::CloseTimeout.as_str());
            Ok(())
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_for_waits_for_the_last_request_to_end() {
        let timeout = Duration::from_millis(200);
        let activity = Activity::new();
        let first = activity.begin();
        let second = activity.begin();
        let idle = activity.idle_for(timeout);
        tokio::pin!(idle);
        // Requests in progress: never idle, however long.
        assert!(tokio::time::timeout(timeout * 3, &mut idle).await.is_err());
        drop(first);
        assert!(
            tokio::time::timeout(timeout * 3, &mut idle).await.is_err(),
            "idle with a request still in progress"
        );
        drop(second);
        let ended = Instant::now();
        idle.await;
        let waited = ended.elapsed();
        assert!(
            waited >= timeout && waited < timeout * 5,
            "idle after {waited:?}"
        );
    }
}
