//! The `cheiron` command line (docs/design.md §6). Each subcommand's `Args::run` destructures every
//! field, so a new flag cannot be silently ignored.

mod admin;
mod audit;
mod cluster;
mod controller;
mod credential_provider;
mod dry_run;
mod explain;
mod manifests;
mod mutate;
mod node_agent;
mod parse;
mod webhook;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub use admin::{Admin, AdminArgs};
pub use audit::AuditArgs;
pub use cluster::ClusterArgs;
pub use controller::{ControllerArgs, ControllerCommand, RunCommand};
pub use credential_provider::CredentialProviderArgs;
pub use dry_run::{DryRunArgs, DryRunFormat};
pub use explain::{ExplainArgs, ReportFormat};
pub use manifests::ManifestsArgs;
pub use mutate::{MutateArgs, OutputFormat};
pub use node_agent::NodeAgentArgs;
pub use webhook::{ListArgs, ServeArgs, TlsArgs, WebhookArgs};

use std::path::PathBuf;

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::telemetry::LogArgs;

/// An error as the one line `cheiron` prints: the message and each cause not already said.
/// Errors from libraries often repeat their source in their own message (kube's config
/// inference error holds its causes two and three times over), and a plain `{:#}` would then
/// print the same words again and again.
pub fn error_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(text.trim()) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text.trim());
    }
    line.replace('\n', " ")
}

/// The exit status when the reader of the output closed it early: 128 + SIGPIPE (13), what a
/// shell reports for a process SIGPIPE ended (Rust ignores SIGPIPE, so a write fails instead).
pub const BROKEN_PIPE_EXIT: u8 = 141;

/// Whether `error` comes from writing to a pipe whose reader has gone (`| head`).
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A token cancelled on the first SIGTERM or SIGINT.
fn shutdown_on_signal() -> anyhow::Result<CancellationToken> {
    let token = CancellationToken::new();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        cancel.cancel();
    });
    Ok(token)
}

/// `0.1.0 (commit 0123456789ab)`: the Cargo version and the git commit built from
/// (`unknown` outside a git checkout; build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("CHEIRON_GIT_COMMIT"),
    ")"
);

/// Distributes registry pull secrets to every Pod that should have them, at admission.
#[derive(Parser, Debug)]
#[command(name = "cheiron", version = VERSION, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    log: LogArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the HTTPS mutating admission webhook.
    Webhook(WebhookArgs),
    /// Materialise pull Secrets, backfill ServiceAccounts and report status (leader-elected).
    Controller(Box<ControllerCommand>),
    /// Webhook and controller in one process; the controller part is leader-elected.
    Run(Box<RunCommand>),
    /// Offline: show what the webhook would do to Pods and ServiceAccounts in a manifest.
    Mutate(MutateArgs),
    /// Why a Pod or ServiceAccount has (or lacks) each pull secret, manager by manager.
    Explain(ExplainArgs),
    /// Pods and ServiceAccounts lacking what policy wants; exit 0 clean, 1 findings, 2 error.
    Audit(AuditArgs),
    /// A Pod created as a server-side dry run: the pull secrets the cluster's admission (cheiron
    /// included) gives it; with --expect, exit 1 unless it gets them.
    DryRun(DryRunArgs),
    /// Print both CustomResourceDefinitions as YAML.
    Crds,
    /// Print (or write with --out) the plain manifests for installing without Helm.
    Manifests(ManifestsArgs),
    /// The kubelet's credential-provider exec plugin: answers from the node agent's file.
    CredentialProvider(CredentialProviderArgs),
    /// Keep this node's credentials file (and optionally the kubelet's config.json) in step
    /// with the mode Node managers selecting it.
    NodeAgent(NodeAgentArgs),
    /// Print the version and the git commit this binary was built from.
    Version {
        /// `text` (`cheiron 0.1.0 (commit …)`) or `json` (`{"version": …, "commit": …}`).
        #[arg(long, short = 'o', value_enum, default_value_t = VersionFormat::Text)]
        output: VersionFormat,
    },
    /// Print a shell completion script, e.g. `source <(cheiron completion bash)`.
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// What `cheiron version` prints.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum VersionFormat {
    /// One line, as `--version` prints it.
    Text,
    /// A JSON object with `version` and `commit`.
    Json,
}

/// The file name under which kubectl finds cheiron as a plugin (`kubectl cheiron …`).
pub const KUBECTL_PLUGIN_NAME: &str = "kubectl-cheiron";

/// Whether this process runs as `kubectl-cheiron` (a symlink kubectl finds on the PATH).
fn invoked_as_kubectl_plugin() -> bool {
    std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n == KUBECTL_PLUGIN_NAME))
        .unwrap_or(false)
}

/// Writes what `cheiron version` prints.
fn print_version(format: VersionFormat, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    match format {
        VersionFormat::Text => writeln!(out, "cheiron {VERSION}")?,
        VersionFormat::Json => writeln!(
            out,
            "{}",
            serde_json::json!({
                "version": env!("CARGO_PKG_VERSION"),
                "commit": env!("CHEIRON_GIT_COMMIT"),
            })
        )?,
    }
    out.flush().map_err(Into::into)
}

impl Cli {
    /// Parses the process's arguments. Invoked as `kubectl-cheiron` (a symlink kubectl finds
    /// on the PATH), help and errors name the command `kubectl cheiron`.
    pub fn parse_env() -> Self {
        if !invoked_as_kubectl_plugin() {
            return Self::parse();
        }
        let matches = Self::command().bin_name("kubectl cheiron").get_matches();
        Self::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }

    /// The exit code of a failure of the chosen command: 2 for `audit` (1 means findings).
    pub fn failure_code(&self) -> u8 {
        match self.command {
            Command::Audit(_) => 2,
            _ => 1,
        }
    }

    /// Runs the chosen command; returns the exit code of a success (`audit`: 1 with findings).
    pub async fn run(self) -> anyhow::Result<u8> {
        let Self {
            log,
            cluster,
            command,
        } = self;
        log.init()?;
        match command {
            Command::Webhook(args) => args.run(&cluster, shutdown_on_signal()?).await,
            Command::Controller(args) => (*args).run(&cluster, shutdown_on_signal()?).await,
            Command::Run(args) => (*args).run(&cluster, shutdown_on_signal()?).await,
            Command::Mutate(args) => args.run(&mut std::io::stdout().lock()),
            Command::Explain(args) => args.run(&cluster, &mut std::io::stdout()).await,
            Command::DryRun(args) => args.run(&cluster, &mut std::io::stdout()).await,
            Command::Audit(args) => {
                return Ok(u8::from(args.run(&cluster, &mut std::io::stdout()).await?));
            }
            Command::Crds => {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                out.write_all(crate::api::crds_yaml()?.as_bytes())?;
                out.flush().map_err(Into::into)
            }
            Command::Manifests(args) => args.run(&mut std::io::stdout().lock()),
            Command::NodeAgent(args) => args.run(&cluster, shutdown_on_signal()?).await,
            Command::CredentialProvider(args) => {
                args.run(&mut std::io::stdin().lock(), &mut std::io::stdout().lock())
            }
            Command::Version { output } => print_version(output, &mut std::io::stdout().lock()),
            Command::Completion { shell } => {
                let name = if invoked_as_kubectl_plugin() {
                    KUBECTL_PLUGIN_NAME
                } else {
                    "cheiron"
                };
                // Into memory first: clap_complete panics when its writer fails (`| head`).
                let mut script = Vec::new();
                clap_complete::generate(shell, &mut Self::command(), name, &mut script);
                let mut out = std::io::stdout().lock();
                std::io::Write::write_all(&mut out, &script)?;
                std::io::Write::flush(&mut out).map_err(Into::into)
            }
        }
        .map(|()| 0)
    }
}

#[cfg(test)]
mod tests {
    use super::error_line;

    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error = anyhow::Error::new(Repeats(io)).context("reading /x");
        assert_eq!(error_line(&error), "reading /x: outer: no such file");
    }

    #[test]
    fn new_causes_are_chained_on_one_line() {
        let error = anyhow::anyhow!("root\ncause")
            .context("middle")
            .context("top");
        assert_eq!(error_line(&error), "top: middle: root cause");
    }
}
