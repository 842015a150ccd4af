use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cheiron::cli::Cli::parse();
    match cli.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One clear line, the whole cause chain.
            eprintln!("cheiron: {e:#}");
            ExitCode::FAILURE
        }
    }
}
