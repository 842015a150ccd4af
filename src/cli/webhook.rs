//! `cheiron webhook`: the HTTPS admission webhook, over files (`--from`) or the cluster.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::{
    metrics::Metrics,
    source::{ClusterSource, FileSource, Source},
    tls::TlsSource,
    webhook::{self, WebhookOptions},
};

/// The admin server (`/healthz`, `/readyz`, `/metrics`).
#[derive(Args, Debug, Clone)]
pub struct AdminArgs {
    /// Plain-HTTP address of /healthz, /readyz and /metrics.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:8080",
        env = "CHEIRON_ADMIN_LISTEN"
    )]
    pub admin_listen: SocketAddr,
}

/// Where the serving certificate comes from: exactly one of the two.
#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct TlsArgs {
    /// Directory holding tls.crt and tls.key, reloaded when they change (a mounted Secret works).
    #[arg(long, value_name = "DIR", env = "CHEIRON_TLS_CERT_DIR")]
    pub tls_cert_dir: Option<PathBuf>,
    /// Generate an in-memory certificate for localhost and 127.0.0.1 instead (local trials).
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
}

impl ServeArgs {
    /// Serves admission from `source` until `shutdown` is cancelled and connections have
    /// drained.
    pub async fn run(
        self,
        source: Arc<dyn Source>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let Self {
            listen,
            admin: AdminArgs { admin_listen },
            tls,
            shutdown_delay,
        } = self;
        let options = WebhookOptions {
            listen,
            admin_listen,
            tls: tls.source(),
            shutdown_delay,
        };
        webhook::run(options, source, metrics, shutdown).await?;
        Ok(())
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

impl WebhookArgs {
    /// Serves until `shutdown` is cancelled and connections have drained.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let Self { serve, from } = self;
        let source: Arc<dyn Source> = if from.is_empty() {
            let client = kube::Client::try_default().await.context(
                "cannot reach the cluster (set KUBECONFIG, run in a Pod, or use --from for static mode)",
            )?;
            let (source, watches) = ClusterSource::start(client).await?;
            tokio::spawn(watches);
            source
        } else {
            let source = FileSource::load(&from)?;
            tracing::info!(paths = ?from, "static mode");
            Arc::new(source)
        };
        serve.run(source, Arc::new(Metrics::new()), shutdown).await
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
}
