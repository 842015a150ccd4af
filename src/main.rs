use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cheiron::cli::Cli::parse();
    match cli.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One clear line, every cause said once.
            eprintln!("cheiron: {}", cheiron::cli::error_line(&e));
            ExitCode::FAILURE
        }
    }
}
