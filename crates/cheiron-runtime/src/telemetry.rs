//! Logging setup: `tracing`, plain or JSON, filtered by `CHEIRON_LOG` (default `info`).

use std::io::IsTerminal;

use clap::{Args, ValueEnum};
use tracing_subscriber::{EnvFilter, fmt};

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Plain,
    /// One JSON object per line.
    Json,
}

/// Logging flags shared by every command.
#[derive(Args, Clone, Debug)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Plain, env = "CHEIRON_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter in `tracing` syntax, e.g. `info` or `cheiron=debug`.
    #[arg(long, global = true, default_value = "info", env = "CHEIRON_LOG")]
    pub log: String,
}

impl LogArgs {
    /// Installs the global subscriber, writing to stderr. Fails if the filter does not parse.
    pub fn init(&self) -> anyhow::Result<()> {
        let Self { log_format, log } = self;
        let filter = EnvFilter::try_new(log).map_err(|e| anyhow::anyhow!("--log {log:?}: {e}"))?;
        let builder = fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal());
        let result = match log_format {
            LogFormat::Plain => builder.try_init(),
            LogFormat::Json => builder.json().flatten_event(true).try_init(),
        };
        result.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
    }
}
