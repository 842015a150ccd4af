//! `cheiron node-agent`: keeps one node's credentials file (and optionally the kubelet's
//! config.json) in step with the mode Node managers selecting the node (docs/node.md).

use std::{path::PathBuf, sync::Arc, time::Duration};

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::{
    admin::{AdminArgs, process_metrics},
    cluster::ClusterArgs,
};
use crate::{
    admin::{AdminState, ReadyFlag},
    credential::duration,
    node::{
        agent::{self, AgentConfig},
        install::Install,
        metrics::NodeMetrics,
        provider::DEFAULT_CACHE_DURATION,
    },
};

/// Arguments of `cheiron node-agent`.
#[derive(Args, Debug)]
pub struct NodeAgentArgs {
    /// The admin server: `/healthz`, `/readyz` (ready once the watches have listed) and
    /// `/metrics` (`cheiron_node_*`, docs/node.md).
    #[command(flatten)]
    admin: AdminArgs,
    /// This node's name (in a DaemonSet: the downward API's `spec.nodeName`).
    #[arg(long, value_name = "NAME", env = "CHEIRON_NODE_NAME")]
    node_name: String,
    /// The node namespace, where the agent writes its node's report Lease (in a cluster, the
    /// Pod's namespace from the downward API; default: the client's default namespace).
    #[arg(long, value_name = "NS", env = "CHEIRON_POD_NAMESPACE")]
    pod_namespace: Option<String>,
    /// The node-local credentials file to keep (mode 0600, written atomically).
    #[arg(long, value_name = "PATH", env = "CHEIRON_CREDENTIALS_FILE")]
    credentials_file: PathBuf,
    /// Also merge the credentials into this kubelet config.json (HyperShift compatible);
    /// entries cheiron did not add are kept byte for byte, and restored exactly on removal.
    #[arg(long, value_name = "PATH", env = "CHEIRON_KUBELET_CONFIG_JSON")]
    kubelet_config_json: Option<PathBuf>,
    /// Where the config.json merge is remembered (default: beside the credentials file,
    /// `kubelet-config-json.cheiron-state`). Holds the original file: keep it private.
    #[arg(long, value_name = "PATH", env = "CHEIRON_MERGE_STATE_FILE")]
    merge_state_file: Option<PathBuf>,
    /// Install the `cheiron` binary here as the kubelet's credential-provider plugin (its
    /// `--image-credential-provider-bin-dir`). Needs --install-provider-config.
    #[arg(
        long,
        value_name = "DIR",
        requires = "install_provider_config",
        env = "CHEIRON_INSTALL_BIN_DIR"
    )]
    install_bin_dir: Option<PathBuf>,
    /// Write the kubelet's `CredentialProviderConfig` here (its
    /// `--image-credential-provider-config`); a file cheiron did not write is refused.
    #[arg(
        long,
        value_name = "PATH",
        requires = "install_bin_dir",
        env = "CHEIRON_INSTALL_PROVIDER_CONFIG"
    )]
    install_provider_config: Option<PathBuf>,
    /// Install the plugin and its configuration (--install-bin-dir, --install-provider-config),
    /// then exit without contacting the apiserver: the chart's init container, so that the
    /// agent itself never mounts the plugin the kubelet runs as root writable.
    #[arg(long, requires = "install_bin_dir", env = "CHEIRON_INSTALL_ONLY")]
    install_only: bool,
    /// The credentials file's path on the host, as the kubelet's plugin reads it (default:
    /// --credentials-file).
    #[arg(long, value_name = "PATH", env = "CHEIRON_HOST_CREDENTIALS_FILE")]
    host_credentials_file: Option<PathBuf>,
    /// Extra `matchImages` of the installed configuration: registries with a port.
    #[arg(
        long,
        value_name = "PATTERN",
        value_delimiter = ',',
        env = "CHEIRON_EXTRA_MATCH_IMAGES"
    )]
    extra_match_images: Vec<String>,
    /// The plugin's answer lifetime in the kubelet (a Go duration).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration, env = "CHEIRON_CACHE_DURATION")]
    cache_duration: Duration,
    /// How often to read the sources again without a watch event (a Go duration).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration, env = "CHEIRON_NODE_RESYNC")]
    resync: Duration,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    match duration::parse(text) {
        Ok(d) if d.is_zero() => Err("must be more than 0s".to_owned()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

impl NodeAgentArgs {
    /// Runs the agent until `shutdown`.
    pub async fn run(
        self,
        cluster: &ClusterArgs,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let Self {
            admin,
            node_name,
            pod_namespace,
            credentials_file,
            kubelet_config_json,
            merge_state_file,
            install_bin_dir,
            install_provider_config,
            install_only,
            host_credentials_file,
            extra_match_images,
            cache_duration,
            resync,
        } = self;
        let merge_state_file = merge_state_file.unwrap_or_else(|| {
            credentials_file.with_file_name("kubelet-config-json.cheiron-state")
        });
        let install = match (install_bin_dir, install_provider_config) {
            (Some(bin_dir), Some(config)) => Some(Install {
                bin_dir,
                config,
                host_credentials_file: host_credentials_file
                    .unwrap_or_else(|| credentials_file.clone()),
                cache_duration,
                extra_match_images,
            }),
            _ => None,
        };
        if install_only {
            if let Some(install) = &install {
                install.apply()?;
            }
            tracing::info!(node = node_name, "credential-provider plugin installed");
            return Ok(());
        }
        let client = cluster
            .client("cannot reach the cluster (set KUBECONFIG or --kubeconfig, or run in a Pod)")
            .await?;
        let config = AgentConfig {
            node_name,
            namespace: pod_namespace.unwrap_or_else(|| client.default_namespace().to_owned()),
            credentials_file,
            kubelet_config_json,
            merge_state_file,
            resync,
        };
        let admin = admin.resolve(Some(&client)).await?;
        let admin_listen = admin.listen;
        let mut metrics = process_metrics();
        let node_metrics = NodeMetrics::register(&mut metrics);
        let ready = Arc::new(ReadyFlag::default());
        let state =
            AdminState::new(ready.clone(), Arc::new(metrics)).with_shutdown(shutdown.clone());
        let admin_server = admin.serve(state).await?;
        // Every start-up step that can fail comes before the first log line: a failure is
        // one line on stderr.
        if let Some(install) = &install {
            install.apply()?;
        }
        let admin_server = tokio::spawn(admin_server);
        tracing::info!(%admin_listen, "node agent admin server listening");
        let result = agent::run(client, config, node_metrics, ready, shutdown.clone()).await;
        shutdown.cancel();
        let _ = admin_server.await;
        result
    }
}

/// `--cache-duration`'s default, as the plugin's.
const _: () = assert!(DEFAULT_CACHE_DURATION.as_secs() == 60);
