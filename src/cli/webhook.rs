//! `cheiron webhook`: the HTTPS admission webhook, over files (`--from`) or the cluster.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use clap::Args;
use tokio_util::sync::CancellationToken;

use super::ClusterArgs;
use crate::{
    admin::{
        AdminState, CacheLimits, MetricsAccess, MetricsAuth, access::DEFAULT_CACHE_SIZE,
        serve_admin,
    },
    metrics::Metrics,
    runtime::InitialList,
    source::{ClusterSource, FileSource, LookupLimits, Source},
    tls::{CertDir, RELOAD_PERIOD, TlsSource},
    webhook::{self, Limits, WebhookOptions},
};

/// The admin server (`/healthz`, `/readyz`, `/metrics`) and who may read its metrics.
#[derive(Args, Debug, Clone)]
pub struct AdminArgs {
    /// Address of /healthz, /readyz and /metrics (plain HTTP, or HTTPS with
    /// --admin-tls-cert-dir).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:8080",
        env = "CHEIRON_ADMIN_LISTEN"
    )]
    pub admin_listen: SocketAddr,
    /// Serve the admin port over HTTPS only, with tls.crt and tls.key from this directory
    /// (reloaded when they change; the webhook's --tls-cert-dir works), so that the bearer
    /// tokens of --metrics-auth kubernetes never cross the network in clear. Probes must then
    /// use HTTPS.
    #[arg(long, value_name = "DIR", env = "CHEIRON_ADMIN_TLS_CERT_DIR")]
    pub admin_tls_cert_dir: Option<PathBuf>,
    /// Who may read /metrics: `none`, anyone who reaches the admin port (restrict it with a
    /// NetworkPolicy); `kubernetes`, a bearer token the apiserver authenticates (TokenReview)
    /// of a user allowed to `get` the non-resource URL /metrics (SubjectAccessReview), which
    /// needs RBAC to create both reviews. /healthz and /readyz stay open.
    #[arg(
        long,
        value_name = "AUTH",
        value_enum,
        default_value_t = MetricsAuth::None,
        env = "CHEIRON_METRICS_AUTH"
    )]
    pub metrics_auth: MetricsAuth,
    /// Most /metrics decisions remembered at once (`--metrics-auth kubernetes`), by the
    /// token's SHA-256.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CACHE_SIZE, value_parser = parse_count, env = "CHEIRON_METRICS_AUTH_CACHE_SIZE")]
    pub metrics_auth_cache_size: usize,
    /// Seconds an allowed /metrics decision is remembered (`--metrics-auth kubernetes`);
    /// refusals at most 10. 0 asks the apiserver on every scrape.
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = parse_seconds, env = "CHEIRON_METRICS_AUTH_CACHE_TTL")]
    pub metrics_auth_cache_ttl: Duration,
}

/// Logged, once start-up has succeeded, by a server whose `/metrics` wants bearer tokens on a
/// plain-HTTP port.
const TOKENS_IN_CLEAR: &str = "--metrics-auth kubernetes without --admin-tls-cert-dir: scrapers send their bearer tokens over plain HTTP";

/// The admin port as [`AdminArgs`] describe it, resolved.
pub struct Admin {
    /// `--admin-listen`.
    pub listen: SocketAddr,
    /// Who may read `/metrics`.
    pub access: MetricsAccess,
    /// `--admin-tls-cert-dir`: serve HTTPS with the pair in this directory.
    pub tls_cert_dir: Option<PathBuf>,
}

impl Admin {
    /// Binds the admin port of a process without a webhook (the controller, the node agent)
    /// and returns its server, to run until `state`'s shutdown: over HTTPS with the pair of
    /// `--admin-tls-cert-dir` (reloaded until shutdown; its expiry is
    /// `cheiron_certificate_expiry_timestamp_seconds`), else plain HTTP.
    pub async fn serve(
        self,
        state: AdminState,
    ) -> anyhow::Result<futures::future::BoxFuture<'static, std::io::Result<()>>> {
        let Self {
            listen,
            access,
            tls_cert_dir,
        } = self;
        let tokens_in_clear =
            matches!(access, MetricsAccess::Reviewed(_)) && tls_cert_dir.is_none();
        let mut state = state.with_metrics_access(access);
        let certificate = match tls_cert_dir {
            Some(dir) => {
                let (certificate, reloader) = CertDir::new(dir).load().await?;
                tokio::spawn(reloader.run(RELOAD_PERIOD, state.shutdown().clone()));
                state = state.with_certificate(Arc::clone(&certificate));
                Some(certificate)
            }
            None => None,
        };
        let server = serve_admin(listen, state, certificate)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        if tokens_in_clear {
            tracing::warn!("{TOKENS_IN_CLEAR}");
        }
        Ok(server)
    }
}

impl AdminArgs {
    /// The admin address, who may read `/metrics` there, and whether it serves HTTPS. With
    /// `--metrics-auth kubernetes`, `client` reviews the tokens; without one (static mode), a
    /// client is built from the environment.
    pub async fn resolve(self, client: Option<&kube::Client>) -> anyhow::Result<Admin> {
        let Self {
            admin_listen,
            admin_tls_cert_dir,
            metrics_auth,
            metrics_auth_cache_size,
            metrics_auth_cache_ttl,
        } = self;
        let access = match metrics_auth {
            MetricsAuth::None => MetricsAccess::Open,
            MetricsAuth::Kubernetes => {
                let client = match client {
                    Some(client) => client.clone(),
                    None => kube::Client::try_default().await.context(
                        "--metrics-auth kubernetes reviews tokens with the apiserver, which \
                         cannot be reached (set KUBECONFIG or run in a Pod)",
                    )?,
                };
                MetricsAccess::kubernetes(
                    client,
                    CacheLimits {
                        size: metrics_auth_cache_size,
                        ttl: metrics_auth_cache_ttl,
                    },
                )
            }
        };
        Ok(Admin {
            listen: admin_listen,
            access,
            tls_cert_dir: admin_tls_cert_dir,
        })
    }
}

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

/// Parses `5`, `0.5` or `5s` as a duration in seconds.
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let number = text.strip_suffix('s').unwrap_or(text);
    number
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("{text:?} is not a number of seconds"))
}

/// [`parse_seconds`], above zero: a timeout of zero would refuse everything.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    match parse_seconds(text)? {
        zero if zero.is_zero() => Err("a timeout must be above zero".to_owned()),
        duration => Ok(duration),
    }
}

/// Parses a count of at least 1.
fn parse_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{text:?} is not a whole number")),
    }
}

/// Parses a number of HTTP/2 streams, at least 1.
fn parse_streams(text: &str) -> Result<u32, String> {
    let count = parse_count(text)?;
    u32::try_from(count).map_err(|_| format!("{text:?} is too large"))
}

/// Parses `1048576`, `1024Ki`, `64Mi` or `1Gi` (an optional `B` after the suffix) as bytes.
fn parse_bytes(text: &str) -> Result<usize, String> {
    let trimmed = text.strip_suffix('B').unwrap_or(text);
    let (number, unit) = [("Gi", 1usize << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)]
        .into_iter()
        .find_map(|(suffix, unit)| trimmed.strip_suffix(suffix).map(|n| (n, unit)))
        .unwrap_or((trimmed, 1));
    number
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("{text:?} is not a number of bytes (e.g. 67108864 or 64Mi)"))
}

impl WebhookArgs {
    /// Serves until `shutdown` is cancelled and connections have drained.
    pub async fn run(
        self,
        cluster: &ClusterArgs,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let Self { serve, from, lists } = self;
        let metrics = Arc::new(super::process_metrics());
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

    #[test]
    fn shutdown_delay_accepts_plain_fractional_and_suffixed_seconds() {
        assert_eq!(parse_seconds("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_seconds("2s"), Ok(Duration::from_secs(2)));
        assert!(parse_seconds("soon").is_err());
        assert!(parse_seconds("-1").is_err());
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("16Ki"), Ok(16 * 1024));
        assert_eq!(parse_bytes("64Mi"), Ok(64 * 1024 * 1024));
        assert_eq!(parse_bytes("64MiB"), Ok(64 * 1024 * 1024));
        assert_eq!(parse_bytes("1Gi"), Ok(1 << 30));
        assert!(parse_bytes("64M").is_err());
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("99999999999999999999Gi").is_err());
    }

    #[test]
    fn zero_timeouts_and_counts_are_refused() {
        assert!(parse_timeout("0").is_err());
        assert_eq!(parse_timeout("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_count("0").is_err());
        assert_eq!(parse_count("7"), Ok(7));
        assert!(parse_streams("5000000000").is_err());
    }

    #[derive(clap::Parser)]
    struct Admin {
        #[command(flatten)]
        admin: AdminArgs,
    }

    #[test]
    fn metrics_are_open_by_default_and_the_cache_flags_default_to_the_named_limits() {
        let parsed = <Admin as clap::Parser>::try_parse_from(["cheiron"]).unwrap();
        assert_eq!(parsed.admin.metrics_auth, MetricsAuth::None);
        assert_eq!(
            CacheLimits {
                size: parsed.admin.metrics_auth_cache_size,
                ttl: parsed.admin.metrics_auth_cache_ttl,
            },
            CacheLimits::default()
        );
    }

    #[test]
    fn metrics_auth_takes_none_or_kubernetes_and_a_cache_of_at_least_one() {
        let parse = |args: &[&str]| {
            <Admin as clap::Parser>::try_parse_from(
                std::iter::once("cheiron").chain(args.iter().copied()),
            )
            .map(|p| p.admin)
        };
        let admin = parse(&[
            "--metrics-auth=kubernetes",
            "--metrics-auth-cache-size=8",
            "--metrics-auth-cache-ttl=0",
        ])
        .unwrap();
        assert_eq!(admin.metrics_auth, MetricsAuth::Kubernetes);
        assert_eq!(admin.metrics_auth_cache_size, 8);
        assert_eq!(admin.metrics_auth_cache_ttl, Duration::ZERO);
        assert!(parse(&["--metrics-auth=basic"]).is_err());
        assert!(parse(&["--metrics-auth-cache-size=0"]).is_err());
    }

    #[tokio::test]
    async fn open_metrics_need_no_cluster() {
        let admin = <Admin as clap::Parser>::try_parse_from(["cheiron"])
            .unwrap()
            .admin;
        let resolved = admin.resolve(None).await.unwrap();
        assert_eq!(resolved.listen.port(), 8080);
        assert_eq!(resolved.access, MetricsAccess::Open);
        assert_eq!(resolved.tls_cert_dir, None, "plain HTTP by default");
    }

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
