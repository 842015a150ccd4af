//! What a client can hold of the webhook, and for how long (docs/design.md §7, Limits).
//!
//! The webhook port is reachable from every Pod, and with `failurePolicy: Ignore` a webhook
//! killed for memory admits every Pod without pull secrets, silently. So everything a
//! client can make the server hold has a bound: connections (per listener and per peer),
//! bytes of request bodies in flight, HTTP/2 streams per connection, and the time a
//! connection may spend in each state. Each bound is a flag of `cheiron webhook` and
//! `cheiron run`; the defaults are the constants here.
//!
//! Rough worst case at the defaults: 1 024 connections, and 256 more evicted ones closing
//! ([`MAX_EVICTING_SHARE`]), × (TLS and HTTP buffers, about 50 KiB: rustls' record buffers,
//! [`HTTP1_MAX_BUF_BYTES`] or the HTTP/2 windows) ≈ 63 MiB, plus the 64 MiB body budget,
//! plus the caches.

use std::time::Duration;

use crate::source::LookupLimits;

/// Largest AdmissionReview body accepted; larger ones get 413. The API server's own limit
/// for a request body is 3 MiB.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Longest a client may take to send a request body by default; then it gets 408.
pub const BODY_TIMEOUT: Duration = DEFAULT_BODY_TIMEOUT;

/// Default of [`Limits::max_connections`]. Each idle TLS connection costs tens of KiB; this
/// many fit well inside the chart's memory limit, and the API server needs a handful (it
/// multiplexes reviews over HTTP/2).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// Default of [`Limits::max_admin_connections`]: probes and a Prometheus scraper need a few.
pub const DEFAULT_MAX_ADMIN_CONNECTIONS: usize = 64;

/// Default of [`Limits::max_connections_per_peer`]: one Pod (one IP address) cannot take
/// more than a quarter of the webhook's connections; and a legitimate client opening many
/// connections at once (HTTP/1, or a burst of dials before HTTP/2 is negotiated; the API
/// server needs one per [`DEFAULT_HTTP2_MAX_STREAMS`] reviews in flight) is far from it.
/// Several Pods together can still fill the listener: then fair sharing (a peer below its
/// share evicts the largest holder's oldest idle connection) keeps the API server in.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 256;

/// Connections evicted for a fairer share close gracefully, which may take up to the drain
/// timeout (a request in progress is answered first); meanwhile they no longer count
/// against the cap. At most one in this many of the cap may be closing so at once, beyond
/// the cap; a full listener refuses while that many are.
pub const MAX_EVICTING_SHARE: usize = 4;

/// Default of [`Limits::body_budget`]: 21 bodies of the 3 MiB maximum, or thousands of
/// typical 15 KB Pod reviews.
pub const DEFAULT_BODY_BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// Default of [`Limits::body_timeout`].
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Default of [`Limits::http1_header_timeout`]. A client sends a request's headers in one
/// go; 10 s is generous for that. Hyper also runs this timer between requests, so it is the
/// idle timeout of HTTP/1 keep-alive connections as well: the API server speaks HTTP/2 to
/// webhooks (ALPN `h2`), and other HTTP/1 clients reconnect.
pub const DEFAULT_HTTP1_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Default of [`Limits::http2_preface_timeout`]. A client sends the preface right after the
/// TLS handshake.
pub const DEFAULT_HTTP2_PREFACE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default of [`Limits::http2_idle_timeout`]. Closing an idle HTTP/2 connection is a
/// GOAWAY, which Go clients (the API server) handle by opening a new connection for the
/// next request; 60 s is below Go's own 90 s idle timeout, and keeps connections that only
/// answer PINGs from holding a slot for ever.
pub const DEFAULT_HTTP2_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Default of [`Limits::http2_max_streams`]. Go's HTTP/2 client opens another connection
/// when a connection's streams are all in use, so a small number costs the API server
/// nothing, and bounds the requests one connection can have in flight.
pub const DEFAULT_HTTP2_MAX_STREAMS: u32 = 32;

/// Default of [`Limits::max_connection_age`]. Connections are closed gracefully (HTTP/2
/// GOAWAY, HTTP/1 `Connection: close`) after this long, which also spreads the API server's
/// long-lived connection over replicas after a rollout, and ends connections stuck writing
/// to a client that never reads.
pub const DEFAULT_MAX_CONNECTION_AGE: Duration = Duration::from_secs(600);

/// Largest HTTP/1 read buffer of a connection (hyper's default is about 400 KiB). It holds
/// the request head, which must fit in it, and each piece of body read. A connection keeps
/// its buffer while it lives, so this times [`DEFAULT_MAX_CONNECTIONS`] is memory a client
/// can pin.
pub const HTTP1_MAX_BUF_BYTES: usize = 16 * 1024;

/// Largest request head of HTTP/2 (decoded header list), as hyper's default.
pub const HTTP2_MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

/// HTTP/2 flow-control windows: how much request body a client may send before the server
/// reads it, per stream and per connection (hyper's defaults are 1 MiB each).
pub const HTTP2_STREAM_WINDOW_BYTES: u32 = 256 * 1024;
/// See [`HTTP2_STREAM_WINDOW_BYTES`].
pub const HTTP2_CONNECTION_WINDOW_BYTES: u32 = 1024 * 1024;

/// Every bound on what clients can hold. [`Limits::default`] is the documented defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Connections open at once on the webhook port; more are accepted and closed at once.
    pub max_connections: usize,
    /// Connections open at once on the admin port.
    pub max_admin_connections: usize,
    /// Connections open at once from one IP address on the webhook port. When the port is
    /// full, a peer below its fair share still gets a slot from the largest holder.
    pub max_connections_per_peer: usize,
    /// Bytes of request bodies held at once, across connections. A body that does not fit
    /// gets 503 with `Retry-After` before it is read.
    pub body_budget: usize,
    /// Longest a client may take to send a request body (then 408).
    pub body_timeout: Duration,
    /// Longest an HTTP/1 connection may take to send a request's headers, counted from the
    /// connection's start or the previous response (so also its idle timeout).
    pub http1_header_timeout: Duration,
    /// Longest an HTTP/2 connection may take to send its preface.
    pub http2_preface_timeout: Duration,
    /// Longest an HTTP/2 connection may stay open without a request in progress, whatever
    /// else (PINGs, SETTINGS) it sends.
    pub http2_idle_timeout: Duration,
    /// Streams (requests) in flight on one HTTP/2 connection.
    pub http2_max_streams: u32,
    /// Age at which a connection is closed gracefully; zero for never.
    pub max_connection_age: Duration,
    /// Live namespace lookups on a cache miss.
    pub namespace_lookups: LookupLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_admin_connections: DEFAULT_MAX_ADMIN_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            body_budget: DEFAULT_BODY_BUDGET_BYTES,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            http1_header_timeout: DEFAULT_HTTP1_HEADER_TIMEOUT,
            http2_preface_timeout: DEFAULT_HTTP2_PREFACE_TIMEOUT,
            http2_idle_timeout: DEFAULT_HTTP2_IDLE_TIMEOUT,
            http2_max_streams: DEFAULT_HTTP2_MAX_STREAMS,
            max_connection_age: DEFAULT_MAX_CONNECTION_AGE,
            namespace_lookups: LookupLimits::default(),
        }
    }
}
