//! The admin port every serving command has (`cheiron webhook`, `cheiron controller`,
//! `cheiron run`, `cheiron node-agent`): `/healthz`, `/readyz` and `/metrics`, who may read
//! the metrics, and the metrics a serving process reports.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use cheiron_runtime::runtime::{API_REQUEST_DEADLINE, bounded_client};
use clap::Args;

use super::parse::{parse_count, parse_seconds};
use crate::{
    admin::{
        AdminState, CacheLimits, MetricsAccess, MetricsAuth, access::DEFAULT_CACHE_SIZE,
        serve_admin,
    },
    tls::{CertDir, RELOAD_PERIOD},
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
                    None => {
                        let config = kube::Config::infer().await.context(
                            "--metrics-auth kubernetes reviews tokens with the apiserver, which \
                             cannot be reached (set KUBECONFIG or run in a Pod)",
                        )?;
                        bounded_client(config, API_REQUEST_DEADLINE)
                            .context("cannot build the Kubernetes client")?
                    }
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

/// The metrics of a serving process: cheiron's, `process_*`, and `cheiron_build_info` naming
/// this binary's version and commit.
pub(super) fn process_metrics() -> crate::metrics::Metrics {
    crate::metrics::Metrics::new()
        .with_build_info(env!("CARGO_PKG_VERSION"), env!("CHEIRON_GIT_COMMIT"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Parsed {
        #[command(flatten)]
        admin: AdminArgs,
    }

    #[test]
    fn metrics_are_open_by_default_and_the_cache_flags_default_to_the_named_limits() {
        let parsed = <Parsed as clap::Parser>::try_parse_from(["cheiron"]).unwrap();
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
            <Parsed as clap::Parser>::try_parse_from(
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
        let admin = <Parsed as clap::Parser>::try_parse_from(["cheiron"])
            .unwrap()
            .admin;
        let resolved = admin.resolve(None).await.unwrap();
        assert_eq!(resolved.listen.port(), 8080);
        assert_eq!(resolved.access, MetricsAccess::Open);
        assert_eq!(resolved.tls_cert_dir, None, "plain HTTP by default");
    }
}
