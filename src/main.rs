use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cheiron::cli::Cli::parse_env();
    let failure = cli.failure_code();
    match cli.run().await {
        Ok(code) => ExitCode::from(code),
        // The reader of our output went away (`cheiron crds | head`): stop quietly, with the
        // status of a process SIGPIPE ended, as kubectl and other Unix tools do.
        Err(e) if cheiron::cli::is_broken_pipe(&e) => {
            ExitCode::from(cheiron::cli::BROKEN_PIPE_EXIT)
        }
        Err(e) => {
            // One clear line, every cause said once.
            eprintln!("cheiron: {}", cheiron::cli::error_line(&e));
            ExitCode::from(failure)
        }
    }
}

/// jemalloc, with background threads returning freed memory to the system: glibc's malloc
/// keeps what a burst of connections took for ever (Cargo.toml says what was measured).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
