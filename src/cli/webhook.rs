//! `cheiron webhook`: the HTTPS admission webhook, over files (`--from`) or the cluster.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::{
    admin::{Admin, AdminArgs, process_metrics},
    cluster::ClusterArgs,
    parse::{parse_bytes, parse_count, parse_seconds, parse_streams, parse_timeout},
};
use crate::{
    admin::MetricsAuth,
    metrics::Metrics,
    runtime::InitialList,
    source::{ClusterSource, FileSource, LookupLimits, Source},
    tls::TlsSource,
    webhook::{self, Limits, WebhookOptions},
};

/// Where the serving certificate comes from: exactly one of the two.
#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct TlsArgs {
    /// Directory holding tls.crt and tls.key, reloaded when they change (a mounted Secret works).
    #[arg(long, value_name = "DIR", env = "CHEIRON_TLS_CERT_DIR")]
    pub tls_cert_dir: Option<PathBuf>,
    /// Generate an in-memory certificate for localhost, 127.0.0.1 and ::1 instead (local trials).
    #[arg(long, env = "CHEIRON_SELF_SIGNED")]
    pub self_signed: bool,
}

impl TlsArgs {
    fn source(self) -> TlsSource {
        let Self {
            tls_cert_dir,
            self_signed: _,
        } = self;
        match tls_cert_dir {
            Some(dir) => TlsSource::Dir(dir),
            None => TlsSource::SelfSigned,
        }
    }
}

/// How the webhook serves, whatever its source: shared by `cheiron webhook` and `cheiron run`.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// HTTPS address of POST /mutate.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:8443",
        env = "CHEIRON_LISTEN"
    )]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Seconds to keep serving after SIGTERM while /readyz already fails, so that endpoints
    /// are updated before connections drain.
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = parse_seconds, env = "CHEIRON_SHUTDOWN_DELAY")]
    pub shutdown_delay: Duration,
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// What clients can hold of the webhook (docs/design.md §7, Limits). The defaults are the
/// constants of [`crate::webhook`]; a test keeps them equal.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Limits")]
pub struct LimitArgs {
    /// Connections open at once on the webhook port; more are accepted and closed at once.
    #[arg(long, value_name = "N", default_value = "1024", value_parser = parse_count, env = "CHEIRON_MAX_CONNECTIONS")]
    pub max_connections: usize,
    /// Connections open at once from one IP address on the webhook port. When the port is
    /// full, an address holding less than its fair share takes the oldest idle connection
    /// of the address holding the most (closed gracefully).
    #[arg(long, value_name = "N", default_value = "256", value_parser = parse_count, env = "CHEIRON_MAX_CONNECTIONS_PER_PEER")]
    pub max_connections_per_peer: usize,
    /// Connections open at once on the admin port.
    #[arg(long, value_name = "N", default_value = "64", value_parser = parse_count, env = "CHEIRON_MAX_ADMIN_CONNECTIONS")]
    pub max_admin_connections: usize,
    /// Bytes of request bodies held at once (suffixes Ki, Mi, Gi); a body that does not fit
    /// gets 503 with Retry-After before it is read.
    #[arg(long, value_name = "BYTES", default_value = "64Mi", value_parser = parse_bytes, env = "CHEIRON_BODY_BUDGET")]
    pub body_budget: usize,
    /// Seconds a client may take to send a request body (then 408).
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = parse_timeout, env = "CHEIRON_BODY_TIMEOUT")]
    pub body_timeout: Duration,
    /// Seconds a client may take to complete the TLS handshake.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = parse_timeout, env = "CHEIRON_TLS_HANDSHAKE_TIMEOUT")]
    pub tls_handshake_timeout: Duration,
    /// Seconds an HTTP/1 connection may take to send a request's headers, from its start
    /// or the previous response (so also its idle timeout).
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = parse_timeout, env = "CHEIRON_HTTP1_HEADER_TIMEOUT")]
    pub http1_header_timeout: Duration,
    /// Seconds an HTTP/2 connection may take to send its preface.
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = parse_timeout, env = "CHEIRON_HTTP2_PREFACE_TIMEOUT")]
    pub http2_preface_timeout: Duration,
    /// Seconds an HTTP/2 connection may stay open without a request in progress (PINGs do
    /// not count); then it gets GOAWAY.
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = parse_timeout, env = "CHEIRON_HTTP2_IDLE_TIMEOUT")]
    pub http2_idle_timeout: Duration,
    /// Requests in flight on one HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    #[arg(long, value_name = "N", default_value = "32", value_parser = parse_streams, env = "CHEIRON_HTTP2_MAX_STREAMS")]
    pub http2_max_streams: u32,
    /// Seconds after which a connection is closed gracefully (GOAWAY, Connection: close);
    /// 0 for never.
    #[arg(long, value_name = "SECONDS", default_value = "600", value_parser = parse_seconds, env = "CHEIRON_MAX_CONNECTION_AGE")]
    pub max_connection_age: Duration,
    /// Live namespace lookups per second on cache misses; 0 turns them off (such reviews
    /// are admitted unchanged, with a warning).
    #[arg(
        long,
        value_name = "N",
        default_value = "10",
        env = "CHEIRON_NAMESPACE_LOOKUP_RATE"
    )]
    pub namespace_lookup_rate: u32,
    /// Live namespace lookups allowed at once after a quiet spell.
    #[arg(
        long,
        value_name = "N",
        default_value = "20",
        env = "CHEIRON_NAMESPACE_LOOKUP_BURST"
    )]
    pub namespace_lookup_burst: u32,
    /// Seconds a namespace found missing is not looked up again.
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = parse_seconds, env = "CHEIRON_NAMESPACE_MISS_TTL")]
    pub namespace_miss_ttl: Duration,
    /// Most namespace names remembered as missing.
    #[arg(
        long,
        value_name = "N",
        default_value = "1024",
        env = "CHEIRON_NAMESPACE_MISS_CACHE_SIZE"
    )]
    pub namespace_miss_cache_size: usize,
}

impl LimitArgs {
    /// The TLS handshake timeout, and the limits.
    fn limits(self) -> (Duration, Limits) {
        let Self {
            max_connections,
            max_connections_per_peer,
            max_admin_connections,
            body_budget,
            body_timeout,
            tls_handshake_timeout,
            http1_header_timeout,
            http2_preface_timeout,
            http2_idle_timeout,
            http2_max_streams,
            max_connection_age,
            namespace_lookup_rate,
            namespace_lookup_burst,
            namespace_miss_ttl,
            namespace_miss_cache_size,
        } = self;
        let limits = Limits {
            max_connections,
            max_admin_connections,
            max_connections_per_peer,
            body_budget,
            body_timeout,
            http1_header_timeout,
            http2_preface_timeout,
            http2_idle_timeout,
            http2_max_streams,
            max_connection_age,
            namespace_lookups: LookupLimits {
                rate_per_second: namespace_lookup_rate,
                burst: namespace_lookup_burst,
                miss_ttl: namespace_miss_ttl,
                miss_cache_size: namespace_miss_cache_size,
            },
        };
        (tls_handshake_timeout, limits)
    }
}

impl ServeArgs {
    /// Serves admission from `source` until `shutdown` is cancelled and connections have
    /// drained. `client` (cluster mode) also reviews `/metrics` tokens.
    pub async fn run(
        self,
        source: Arc<dyn Source>,
        client: Option<&kube::Client>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        self.prepare(client)
            .await?
            .serve(source, metrics, shutdown)
            .await?;
        Ok(())
    }

    /// Everything of the webhook's start-up that can fail (the certificate, both addresses
    /// bound), before a source is started: a failure is then one line, with no INFO line
    /// before it. `client` (cluster mode) also reviews `/metrics` tokens.
    pub async fn prepare(self, client: Option<&kube::Client>) -> anyhow::Result<webhook::Prepared> {
        let Self {
            listen,
            admin,
            tls,
            shutdown_delay,
            limits,
        } = self;
        let Admin {
            listen: admin_listen,
            access,
            tls_cert_dir: admin_tls_cert_dir,
        } = admin.resolve(client).await?;
        let options = WebhookOptions {
            listen,
            admin_listen,
            tls: tls.source(),
            shutdown_delay,
        };
        let (handshake_timeout, limits) = limits.limits();
        let config = options
            .with_limits(handshake_timeout, limits)
            .with_metrics_access(access)
            .with_admin_tls(admin_tls_cert_dir);
        Ok(webhook::prepare(config).await?)
    }
}

/// Arguments of `cheiron webhook`.
#[derive(Args, Debug, Clone)]
pub struct WebhookArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Static mode: read managers and Namespaces from these files or directories instead of
    /// the cluster.
    #[arg(
        long = "from",
        value_name = "PATH",
        env = "CHEIRON_FROM",
        value_delimiter = ','
    )]
    pub from: Vec<PathBuf>,
    #[command(flatten)]
    pub lists: ListArgs,
}

/// How the webhook's watches list in cluster mode (docs/design.md §5, Cluster mode).
#[derive(Args, Debug, Clone)]
pub struct ListArgs {
    /// How the webhook's watches get their lists: `streaming` (one streaming list per watch,
    /// the apiserver's WatchList; paged lists where the apiserver refuses it) or `paged`
    /// (lists of 500, as before streaming lists).
    #[arg(
        long,
        value_name = "STRATEGY",
        value_enum,
        default_value = "streaming",
        env = "CHEIRON_INITIAL_LIST"
    )]
    pub initial_list: InitialList,
}

impl WebhookArgs {
    /// Serves until `shutdown` is cancelled and connections have drained.
    pub async fn run(
        self,
        cluster: &ClusterArgs,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let Self { serve, from, lists } = self;
        let metrics = Arc::new(process_metrics());
        if from.is_empty() {
            let client = cluster
                .client(
                    "cannot reach the cluster (set KUBECONFIG or --kubeconfig, run in a Pod, or \
                     use --from for static mode)",
                )
                .await?;
            // Bound first: the source logs what it found out about this identity, and a
            // failure after that line would be two lines.
            let prepared = serve.prepare(Some(&client)).await?;
            let (source, watches) =
                ClusterSource::start(client.clone(), lists.initial_list).await?;
            tokio::spawn(watches);
            prepared.serve(source, metrics, shutdown).await?;
        } else {
            let source = FileSource::load(&from)?;
            // Debug: an info line here would come before a start-up failure's one line.
            tracing::debug!(paths = ?from, "static mode");
            // Static mode talks to a cluster only to review /metrics tokens.
            let client = match serve.admin.metrics_auth {
                MetricsAuth::Kubernetes => Some(
                    cluster
                        .client(
                            "--metrics-auth kubernetes reviews tokens with the apiserver, which \
                             cannot be reached (set KUBECONFIG or --kubeconfig, or run in a Pod)",
                        )
                        .await?,
                ),
                MetricsAuth::None => None,
            };
            serve
                .run(Arc::new(source), client.as_ref(), metrics, shutdown)
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Limited {
        #[command(flatten)]
        limits: LimitArgs,
    }

    #[test]
    fn flag_defaults_are_the_documented_limits() {
        let parsed = <Limited as clap::Parser>::try_parse_from(["cheiron"]).unwrap();
        let (handshake_timeout, limits) = parsed.limits.limits();
        assert_eq!(handshake_timeout, webhook::HANDSHAKE_TIMEOUT);
        assert_eq!(limits, Limits::default());
    }

    #[test]
    fn every_limit_flag_reaches_the_limits() {
        let parsed = <Limited as clap::Parser>::try_parse_from([
            "cheiron",
            "--max-connections=200",
            "--max-connections-per-peer=20",
            "--max-admin-connections=8",
            "--body-budget=16Mi",
            "--body-timeout=3",
            "--tls-handshake-timeout=2",
            "--http1-header-timeout=1",
            "--http2-preface-timeout=0.5",
            "--http2-idle-timeout=1.5",
            "--http2-max-streams=4",
            "--max-connection-age=0",
            "--namespace-lookup-rate=0",
            "--namespace-lookup-burst=1",
            "--namespace-miss-ttl=2",
            "--namespace-miss-cache-size=10",
        ])
        .unwrap();
        let (handshake_timeout, limits) = parsed.limits.limits();
        assert_eq!(handshake_timeout, Duration::from_secs(2));
        assert_eq!(
            limits,
            Limits {
                max_connections: 200,
                max_admin_connections: 8,
                max_connections_per_peer: 20,
                body_budget: 16 << 20,
                body_timeout: Duration::from_secs(3),
                http1_header_timeout: Duration::from_secs(1),
                http2_preface_timeout: Duration::from_millis(500),
                http2_idle_timeout: Duration::from_millis(1500),
                http2_max_streams: 4,
                max_connection_age: Duration::ZERO,
                namespace_lookups: LookupLimits {
                    rate_per_second: 0,
                    burst: 1,
                    miss_ttl: Duration::from_secs(2),
                    miss_cache_size: 10,
                },
            }
        );
    }
}
