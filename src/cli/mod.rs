//! The `cheiron` command line (SPEC §6). Each subcommand's `Args::run` destructures every
//! field, so a new flag cannot be silently ignored.

mod mutate;

use clap::{Parser, Subcommand};

pub use mutate::{MutateArgs, OutputFormat};

use crate::telemetry::LogArgs;

/// Distributes registry pull secrets to every Pod that should have them, at admission.
#[derive(Parser, Debug)]
#[command(name = "cheiron", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    log: LogArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Offline: show what the webhook would do to Pods and ServiceAccounts in a manifest.
    Mutate(MutateArgs),
    /// Print both CustomResourceDefinitions as YAML.
    Crds,
}

impl Cli {
    /// Runs the chosen command.
    pub async fn run(self) -> anyhow::Result<()> {
        let Self { log, command } = self;
        log.init()?;
        match command {
            Command::Mutate(args) => args.run(&mut std::io::stdout().lock()),
            Command::Crds => {
                print!("{}", crate::api::crds_yaml()?);
                Ok(())
            }
        }
    }
}
