//! The HTTP stack under every kube client cheiron builds: kube's own, with TCP keep-alive on
//! its connections (docs/reliability.md, "A connection that stops answering").
//!
//! kube's client opens its connections without `SO_KEEPALIVE`. client-go turns it on (every
//! 30 s), and two things depend on it:
//!
//! - A watch of something that rarely changes, and a pooled connection between requests, send
//!   nothing for minutes. A NAT, a conntrack table or a cloud load balancer forgets an idle
//!   flow after its own timeout (Azure's is 4 minutes) and drops its packets from then on,
//!   without a word to either end. Keep-alive probes make the flow never idle.
//! - When the apiserver's end is gone without closing the connection (its node lost, a
//!   partition), an idle connection never learns of it: a watch waits until kube-runtime's
//!   watcher gives up on its silence (the server-side timeout, 290 s, and 5 s). Probes that
//!   get no answer close it [`DEAD_AFTER`] after its last traffic instead, and the watcher
//!   resumes over a new connection.
//!
//! Everything else is what `kube::client::ClientBuilder::try_from(config)` builds, in the
//! same order: the connector's timeouts from the config, the base URI, the client's own retry
//! of `429`/`503`/`504` when `config.default_retry` asks for it, authentication and extra
//! headers. Not kept: kube's `debug` span per request (cheiron logs each outcome itself) and
//! the expiry of an exec plugin's client certificate, which only a caller that rebuilds its
//! client on it would read. A kubeconfig naming a proxy goes to kube's builder, which says
//! this build has no proxy support.

use std::time::Duration;

use http::{Request, Response};
use http_body_util::BodyExt as _;
use hyper_timeout::TimeoutConnector;
use hyper_util::{
    client::legacy::{self, connect::HttpConnector},
    rt::TokioExecutor,
};
use kube::client::{Body, ClientBuilder, ConfigExt as _, DynBody, retry::RetryPolicy};
use tower::{BoxError, ServiceBuilder, ServiceExt as _, retry::RetryLayer, util::BoxService};

/// How long a connection stays silent before its first keep-alive probe: client-go's
/// dialer's, shorter than any idle timeout a network device is known to apply.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Between two probes that got no answer.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// Probes without an answer after which the kernel closes the connection.
pub const KEEPALIVE_PROBES: u32 = 3;
/// How long after its last traffic a connection whose other end is gone is closed.
pub const DEAD_AFTER: Duration = Duration::from_secs(
    KEEPALIVE_IDLE.as_secs() + KEEPALIVE_INTERVAL.as_secs() * KEEPALIVE_PROBES as u64,
);

/// The service a [`ClientBuilder`] of [`client_builder`] wraps (kube's `GenericService`).
pub type Stack = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// kube's client stack for `config`, its connections kept alive (see the module); layers
/// go on top with [`ClientBuilder::with_layer`].
pub fn client_builder(config: kube::Config) -> kube::Result<ClientBuilder<Stack>> {
    if config.proxy_url.is_some() {
        return ClientBuilder::try_from(config);
    }
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_keepalive(Some(KEEPALIVE_IDLE));
    tcp.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    tcp.set_keepalive_retries(Some(KEEPALIVE_PROBES));
    let mut connector = TimeoutConnector::new(config.rustls_https_connector_with_connector(tcp)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http: legacy::Client<_, Body> = legacy::Builder::new(TokioExecutor::new()).build(connector);

    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http)
        .map_response(|answer| {
            answer.map(|body| Box::new(body.map_err(BoxError::from)) as Box<DynBody>)
        })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests;
