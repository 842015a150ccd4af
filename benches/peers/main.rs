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

mod args;
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

use crate::args::Args;

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
