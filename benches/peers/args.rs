//! The options of `cargo bench --bench peers -- …`.

use std::path::PathBuf;

use cheiron_harness::Result;

/// Options after `cargo bench --bench peers --`.
#[derive(Clone, Debug)]
pub struct Args {
    /// Phases to run.
    pub phases: Vec<String>,
    /// Alternating rounds of the latency and throughput phases.
    pub rounds: usize,
    /// Sequential Pod CREATEs per configuration per round.
    pub pods: usize,
    /// Pod CREATEs per configuration per round with `concurrency` clients.
    pub concurrent_pods: usize,
    /// Clients of the concurrent latency runs.
    pub concurrency: usize,
    /// Requests per h2load run.
    pub requests: usize,
    /// Namespaces for the memory phase.
    pub namespaces: usize,
    /// Configurations to leave out (e.g. `kyverno`).
    pub skip: Vec<String>,
    /// Where the figures go.
    pub out: PathBuf,
}

impl Args {
    pub fn parse() -> Result<Self> {
        let mut args = Self {
            phases: ["latency", "throughput", "controller", "memory"]
                .map(str::to_owned)
                .to_vec(),
            rounds: 3,
            pods: 1000,
            concurrent_pods: 2000,
            concurrency: 8,
            requests: 20_000,
            namespaces: 10_000,
            skip: Vec::new(),
            out: PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/benches/results/peers.json"
            )),
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--bench" => {}
                "--phases" => args.phases = value()?.split(',').map(str::to_owned).collect(),
                "--skip" => args.skip = value()?.split(',').map(str::to_owned).collect(),
                "--rounds" => args.rounds = value()?.parse()?,
                "--pods" => args.pods = value()?.parse()?,
                "--concurrent-pods" => args.concurrent_pods = value()?.parse()?,
                "--concurrency" => args.concurrency = value()?.parse()?,
                "--requests" => args.requests = value()?.parse()?,
                "--namespaces" => args.namespaces = value()?.parse()?,
                "--out" => args.out = PathBuf::from(value()?),
                other => return Err(format!("unknown option {other}").into()),
            }
        }
        Ok(args)
    }

    pub fn phase(&self, name: &str) -> bool {
        self.phases.iter().any(|p| p == name)
    }

    pub fn runs(&self, config: &str) -> bool {
        !self.skip.iter().any(|s| s == config)
    }
}
