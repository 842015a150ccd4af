//! cheiron side by side with its peers, through one real kube-apiserver (BENCHMARKS.md,
//! "Against peers"; docs/design.md §8):
//!
//! - **floor**: a do-nothing webhook on cheiron's TLS stack (`floor.rs`), answering
//!   `allowed: true` with no patch: what any webhook costs;
//! - **floor-patch**: the same server answering every review with one constant patch that
//!   adds the pull Secret: what any *mutating* webhook costs (the apiserver applies the patch);
//! - **cheiron**: `cheiron webhook` in cluster mode, a manager in mode Pod;
//! - **go**: a typical controller-runtime webhook (`benches/peers/go/baseline`): decode the
//!   typed Pod, append the pull Secret, diff to a JSON patch;
//! - **kyverno**: Kyverno's admission controller, out of cluster, with its
//!   `add-imagepullsecrets` sample policy (and `sync-secrets` for the controller phase, run by
//!   Kyverno's background controller).
//!
//! Every webhook is registered at once, each selecting only the namespace of its
//! configuration (`peers.cheiron.anny.co/target=NAME`), so rounds alternate without
//! re-registering; `none` is a namespace no webhook selects.
//!
//! Phases (`--phases latency,throughput,controller,memory`, all by default):
//! - **latency**: Pod CREATE through the apiserver, the same ~15 KB Pod everywhere, sequential
//!   and with 8 concurrent clients, in alternating rounds; added latency = configuration − none;
//! - **throughput**: `h2load` (HTTP/1.1 and HTTP/2) against each server's endpoint with the
//!   same ~15 KB review;
//! - **controller**: new namespace → pull Secret present, and rotation of the source copied to
//!   1 000 namespaces: cheiron's controller against Kyverno's generate (`synchronize: true`);
//! - **memory**: each process's RSS idle (at start) and with 10 000 namespaces.
//!
//! Run: `cargo bench --bench peers` (options after `--`, see `Args`). Kyverno and the Go
//! baseline are built by `benches/peers/build` on first use; `h2load` comes from Debian's
//! `nghttp2-client`. Never part of `cargo test`.

mod fixture;
mod floor;
mod generate;
mod latency;
mod servers;
mod setup;
mod throughput;

use std::{collections::BTreeMap, path::PathBuf, time::Instant};

use serde_json::{Value, json};

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
    fn parse() -> Result<Self> {
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

fn main() -> Result {
    let mut raw = std::env::args().skip(1);
    if raw.next().as_deref() == Some("--serve-floor") {
        let addr = raw.next().ok_or("--serve-floor ADDR CERT_DIR")?.parse()?;
        let dir = raw.next().ok_or("--serve-floor ADDR CERT_DIR")?;
        return floor::serve(addr, PathBuf::from(dir), raw.next());
    }
    let args = Args::parse()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> Result {
    let started = Instant::now();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut results: BTreeMap<String, Value> = BTreeMap::new();
    results.insert(
        "load_average_at_start".into(),
        json!(load.split_whitespace().next().unwrap_or("?")),
    );
    results.insert("args".into(), json!(format!("{args:?}")));

    let mut bench = setup::Bench::start(&args).await?;
    results.insert(
        "first_build_seconds".into(),
        json!(bench.first_build_seconds),
    );
    results.insert("memory_idle".into(), bench.memory_now().await?);

    if args.phase("latency") {
        results.insert("latency".into(), latency::run(&mut bench, &args).await?);
    }
    if args.phase("throughput") {
        results.insert(
            "throughput".into(),
            throughput::run(&mut bench, &args).await?,
        );
    }
    if args.phase("controller") {
        results.insert("controller".into(), generate::run(&mut bench, &args).await?);
    }
    if args.phase("memory") {
        bench.top_up_namespaces(args.namespaces).await?;
        results.insert("memory_namespaces".into(), bench.memory_now().await?);
    }
    let restarts: BTreeMap<&str, u32> =
        bench.servers.iter().map(|s| (s.name, s.restarts)).collect();
    results.insert("restarts".into(), json!(restarts));
    results.insert(
        "runtime_seconds".into(),
        json!(started.elapsed().as_secs_f64()),
    );
    let text = serde_json::to_string_pretty(&results)?;
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, format!("{text}\n"))?;
    eprintln!(
        "[peers] done in {:.0?}; figures in {}",
        started.elapsed(),
        args.out.display()
    );
    println!("{text}");
    Ok(())
}

/// Nearest-rank quantile (0..=1) of sorted samples, in milliseconds.
pub fn quantile_ms(sorted: &[std::time::Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64) * q).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1].as_secs_f64() * 1000.0
}
