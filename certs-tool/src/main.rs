use std::process::ExitCode;

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = cheiron_certs::Cli::parse();
    match cli.run().await {
        Ok(outcome) => {
            println!("{outcome}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            // One line, whatever an API server or library put into its message.
            let message = e.to_string().replace(['\r', '\n'], " ");
            eprintln!("cheiron-certs: {message}");
            ExitCode::FAILURE
        }
    }
}
