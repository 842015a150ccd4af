//! Scale benchmark (docs/design.md §8, the "scale" row) on a real kube-apiserver, through the
//! e2e harness (etcd, kube-apiserver, kube-controller-manager from `tests/k8s/assets`):
//!
//! 1. **controller** at N namespaces labelled `tier=apps`, 5 ServiceAccounts each, 2 N
//!    unrelated Secrets, and 100 cluster managers in mode ServiceAccount applied at once: one
//!    over all N namespaces, 99 over N/100 namespaces each. A bare kube client makes the same
//!    writes (as many Secret creates and ServiceAccount patches, 4 managers' worth at a time
//!    with 16 writes in flight each, the controller's concurrency, each patch computed from a
//!    watch-fed cache as the controller's is) before and after a release
//!    `cheiron controller --no-leader-election --resync 60` converges; the run records the
//!    controller's time against the bare client's mean, its RSS, CPU against the apiserver's,
//!    Events, no-op reconciles of the manager covering every namespace, writes per resync,
//!    and RSS again after 10 N unrelated Secrets and 5 N unrelated ServiceAccounts;
//! 2. **webhook** at N namespaces, N/10 managers (100 cluster managers as above, the rest
//!    namespaced) and about 2 N of cheiron's Secrets: a fresh `cheiron webhook` in cluster mode,
//!    its time to `/readyz` and to its list of cheiron's Secrets, with paged and with streaming
//!    lists (`--initial-list`), and its RSS; then the same watches in this process and the pure
//!    decision (`admission::review` of a ServiceAccount CREATE in a random namespace) timed;
//! 3. **wide** (not run by default, and not with `controller`): the controller phase with one
//!    cluster manager over all N namespaces, one Secret and one ServiceAccount (`default`) each
//!    — affordable at 100 000 namespaces; its figures are keyed `wide_…`.
//!
//! Run: `cargo bench --bench scale -- --namespaces 10000 [--phases controller,webhook|wide]`.
//! kube-controller-manager runs without its serviceaccount-controller: the phases create every
//! ServiceAccount themselves (kcm creates `default` ones at about 20 a second here, and at
//! 100 000 namespaces would still be at it, loading the apiserver, while a phase measures). The
//! mutating webhook registration of the harness is removed first, so that neither cheiron's
//! controller nor the bare client has its writes mutated by the shared webhook. Progress goes
//! to stderr, a table to stdout, and the figures to `benches/results/scale-N.json`
//! (`benches/plot.py` draws them).

mod bare;
mod controller;
mod convergence;
mod objects;
mod process;
mod row;
mod webhook;

use std::{collections::BTreeMap, fmt::Write as _, path::PathBuf, time::Instant};

use cheiron_harness::{self as harness, ControlPlaneOptions, Result, Scenario};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::{Api, api::ListParams};
use serde_json::Value;

/// `--name VALUE` from the command line.
fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() -> Result {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn run() -> Result {
    let namespaces: usize = arg("--namespaces")
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(1_000);
    if namespaces < 100 || !namespaces.is_multiple_of(100) {
        return Err("--namespaces must be a multiple of 100".into());
    }
    let phases = arg("--phases").unwrap_or_else(|| "controller,webhook".to_owned());
    let phases: Vec<&str> = phases.split(',').map(str::trim).collect();
    if let Some(unknown) = phases
        .iter()
        .find(|p| !["controller", "webhook", "wide"].contains(p))
    {
        return Err(format!("unknown phase {unknown:?}: say controller, webhook or wide").into());
    }
    if phases.contains(&"controller") && phases.contains(&"wide") {
        return Err(
            "the controller and wide phases set up the same namespaces differently: run them apart"
                .into(),
        );
    }
    let started = Instant::now();
    eprintln!("[scale] starting the cluster (etcd, kube-apiserver, kcm, shared webhook)…");
    let options = ControlPlaneOptions {
        without_controllers: vec!["serviceaccount-controller".to_owned()],
        ..ControlPlaneOptions::default()
    };
    let scenario = Scenario::new_with(harness::cheiron!(), "scale", options).await?;
    let cluster = scenario.cluster()?;
    let client = scenario.client().clone();
    eprintln!(
        "[scale] cluster up after {:.1?}; files and logs: {}",
        started.elapsed(),
        cluster.dir.display()
    );
    // Neither side's writes go through the shared webhook.
    let registrations: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    for r in registrations.list(&ListParams::default()).await? {
        if let Some(name) = r.metadata.name {
            registrations.delete(&name, &Default::default()).await?;
        }
    }
    let load = process::load_average();
    let mut rows = Vec::new();
    if phases.contains(&"controller") {
        rows.extend(controller::run(&client, cluster, namespaces, objects::Shape::MANY).await?);
    }
    if phases.contains(&"wide") {
        rows.extend(controller::run(&client, cluster, namespaces, objects::Shape::WIDE).await?);
    }
    if phases.contains(&"webhook") {
        rows.extend(webhook::run(&client, cluster, namespaces).await?);
    }

    let mut table = String::new();
    writeln!(table, "| metric | value | target | met |")?;
    writeln!(table, "|---|---|---|---|")?;
    for r in &rows {
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        writeln!(
            table,
            "| {} | {} | {} | {met} |",
            r.metric, r.value, r.target
        )?;
    }
    println!("\n{table}");

    let mut figures = BTreeMap::new();
    for r in &rows {
        figures.insert(r.key.clone(), r.number.clone());
    }
    let finished = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let run = serde_json::json!({
        "load_average_at_start": load,
        "runtime_seconds": started.elapsed().as_secs(),
        "finished_unix_seconds": finished,
    });
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/results");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("scale-{namespaces}.json"));
    let earlier: Value = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    let merged = merge_results(earlier, namespaces, &phases, run, figures);
    std::fs::write(&path, serde_json::to_vec_pretty(&merged)?)?;
    eprintln!(
        "[scale] figures written to {}; total runtime {:.1?}",
        path.display(),
        started.elapsed()
    );
    Ok(())
}

/// The results file after a run of `phases`: the figures of this run over those of earlier
/// runs at the same size (a webhook-only run keeps the controller figures), and under `runs`
/// the load and duration of the run that measured each phase, so that a figure is never shown
/// with another run's load. A file from before `runs` had one run's load and duration at the
/// top, for the phases it names; they move under `runs`.
fn merge_results(
    earlier: Value,
    namespaces: usize,
    phases: &[&str],
    run: Value,
    figures: BTreeMap<String, Value>,
) -> Value {
    let mut earlier = match earlier {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    let mut runs = match earlier.remove("runs") {
        Some(Value::Object(runs)) => runs,
        _ => serde_json::Map::new(),
    };
    if let Some(Value::String(old)) = earlier.get("phases")
        && let Some(load) = earlier.get("load_average_at_start")
    {
        for phase in old.split(',') {
            runs.entry(phase.to_owned()).or_insert_with(|| {
                serde_json::json!({
                    "load_average_at_start": load,
                    "runtime_seconds": earlier.get("runtime_seconds").cloned().unwrap_or(Value::Null),
                })
            });
        }
    }
    for phase in phases {
        runs.insert((*phase).to_owned(), run.clone());
    }
    let mut all_figures = match earlier.remove("figures") {
        Some(Value::Object(old)) => old,
        _ => serde_json::Map::new(),
    };
    all_figures.extend(figures);
    serde_json::json!({
        "namespaces": namespaces,
        "phases": runs.keys().cloned().collect::<Vec<_>>().join(","),
        "runs": runs,
        "figures": all_figures,
    })
}
