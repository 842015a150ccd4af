//! Which cluster a command talks to: kubectl's global `--kubeconfig` and `--context`. Without
//! either, the client is inferred as kubectl and client-go do: `$KUBECONFIG` or
//! `~/.kube/config`, else the Pod's ServiceAccount (how the chart's Pods run).

use std::path::PathBuf;

use anyhow::Context;
use cheiron_runtime::runtime::{API_REQUEST_DEADLINE, bounded_client};
use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// `--kubeconfig` and `--context`, accepted by every command (offline ones ignore them).
#[derive(Args, Clone, Debug, Default)]
pub struct ClusterArgs {
    /// The kubeconfig file to use (default: $KUBECONFIG, ~/.kube/config, or the Pod's
    /// ServiceAccount).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    context: Option<String>,
}

impl ClusterArgs {
    /// The client configuration; `hint` says how to give one when there is none.
    pub async fn config(&self, hint: &'static str) -> anyhow::Result<kube::Config> {
        let Self {
            kubeconfig,
            context,
        } = self;
        if kubeconfig.is_none() && context.is_none() {
            return kube::Config::infer().await.context(hint);
        }
        let options = KubeConfigOptions {
            context: context.clone(),
            ..KubeConfigOptions::default()
        };
        match kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read --kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .with_context(|| format!("--kubeconfig {}", path.display()))
            }
            None => kube::Config::from_kubeconfig(&options).await.context(
                "cannot use --context with the kubeconfig of $KUBECONFIG or ~/.kube/config",
            ),
        }
    }

    /// A client of [`ClusterArgs::config`], each request bounded in time
    /// (docs/reliability.md, "A connection that stops answering").
    pub async fn client(&self, hint: &'static str) -> anyhow::Result<kube::Client> {
        Ok(self.client_and_namespace(hint).await?.0)
    }

    /// [`ClusterArgs::client`] and the namespace of the kubeconfig's context (or the Pod's).
    pub async fn client_and_namespace(
        &self,
        hint: &'static str,
    ) -> anyhow::Result<(kube::Client, String)> {
        let config = self.config(hint).await?;
        let namespace = config.default_namespace.clone();
        let client = bounded_client(config, API_REQUEST_DEADLINE)
            .context("cannot build the Kubernetes client")?;
        Ok((client, namespace))
    }
}
