//! Pod CREATE through the apiserver, per configuration, in alternating rounds: sequential,
//! then with N concurrent clients. Every create is real (stored, then deleted between
//! rounds), so each webhook sees exactly what a user's create brings.

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use serde_json::{Value, json};

use cheiron_harness::Result;

use crate::{
    args::Args,
    fixture::{mutated, pod},
    setup::{Bench, histogram_sum_count, quantile_ms},
};

/// cheiron's own handler-time histogram (request received to response written).
const HANDLER_HISTOGRAM: &str = "cheiron_admission_duration_seconds";

/// Creates before each configuration's timed run, not counted.
const WARM_UP: usize = 20;

struct Samples {
    took: Vec<Duration>,
    wrong: usize,
    refused: usize,
}

/// `count` creates with `clients` clients in flight.
async fn creates(
    pods: &Api<Pod>,
    body: &Pod,
    count: usize,
    clients: usize,
    mutates: bool,
) -> Samples {
    let results: Vec<_> = stream::iter(0..count)
        .map(|_| async move {
            let sent = Instant::now();
            let created = pods.create(&PostParams::default(), body).await;
            (sent.elapsed(), created)
        })
        .buffer_unordered(clients)
        .collect()
        .await;
    let mut samples = Samples {
        took: Vec::with_capacity(count),
        wrong: 0,
        refused: 0,
    };
    for (took, created) in results {
        match created {
            Ok(pod) => {
                if mutated(&pod) != mutates {
                    samples.wrong += 1;
                }
                samples.took.push(took);
            }
            Err(_) => samples.refused += 1,
        }
    }
    samples
}

pub async fn run(bench: &mut Bench, args: &Args) -> Result<Value> {
    let body = pod()?;
    eprintln!(
        "[peers] latency: Pod of {} bytes, {} rounds × {} sequential + {} at {} clients per configuration",
        serde_json::to_vec(&body)?.len(),
        args.rounds,
        args.pods,
        args.concurrent_pods,
        args.concurrency
    );
    let configs = bench.configs.clone();
    let mut out = serde_json::Map::new();
    for (mode, clients, count) in [
        ("sequential", 1, args.pods),
        ("concurrent", args.concurrency, args.concurrent_pods),
    ] {
        let mut all: Vec<Vec<Duration>> = vec![Vec::new(); configs.len()];
        let mut wrong = vec![0; configs.len()];
        let mut refused = vec![0; configs.len()];
        // cheiron's handler time summed over its timed creates: (seconds, reviews).
        let mut handler = (0.0, 0.0);
        for round in 0..args.rounds {
            // Alternate, and rotate the order each round.
            for k in 0..configs.len() {
                let i = (k + round) % configs.len();
                let c = &configs[i];
                for s in &mut bench.servers {
                    s.check_running()?;
                }
                let pods: Api<Pod> = Api::namespaced(bench.client.clone(), &c.namespace);
                creates(&pods, &body, WARM_UP, clients, c.mutates).await;
                let metrics = bench
                    .cheiron_metrics
                    .as_deref()
                    .filter(|_| c.name == "cheiron");
                let before = match metrics {
                    Some(url) => Some(histogram_sum_count(url, HANDLER_HISTOGRAM).await?),
                    None => None,
                };
                let started = Instant::now();
                let s = creates(&pods, &body, count, clients, c.mutates).await;
                if let (Some(url), Some(before)) = (metrics, before) {
                    let after = histogram_sum_count(url, HANDLER_HISTOGRAM).await?;
                    handler.0 += after.0 - before.0;
                    handler.1 += after.1 - before.1;
                }
                let mut sorted = s.took.clone();
                sorted.sort();
                eprintln!(
                    "[peers] latency {mode} round {round} {:>8}: p50 {:.2} ms p99 {:.2} ms ({} creates in {:.1?}, {} not as expected, {} refused)",
                    c.name,
                    quantile_ms(&sorted, 0.5),
                    quantile_ms(&sorted, 0.99),
                    sorted.len(),
                    started.elapsed(),
                    s.wrong,
                    s.refused
                );
                all[i].extend(s.took);
                wrong[i] += s.wrong;
                refused[i] += s.refused;
                pods.delete_collection(&DeleteParams::default(), &ListParams::default())
                    .await?;
            }
        }
        let mut table = serde_json::Map::new();
        let mut none = [f64::NAN; 3];
        for (i, c) in configs.iter().enumerate() {
            all[i].sort();
            let q = [0.5, 0.99, 0.999].map(|q| quantile_ms(&all[i], q));
            if c.name == "none" {
                none = q;
            }
            table.insert(
                c.name.to_owned(),
                json!({
                    "samples": all[i].len(),
                    "p50_ms": q[0], "p99_ms": q[1], "p999_ms": q[2],
                    "added_p50_ms": q[0] - none[0],
                    "added_p99_ms": q[1] - none[1],
                    "added_p999_ms": q[2] - none[2],
                    "not_as_expected": wrong[i],
                    "refused": refused[i],
                }),
            );
            eprintln!(
                "[peers] latency {mode} {:>8}: p50 {:.2} p99 {:.2} p999 {:.2} ms; added p50 {:+.2} p99 {:+.2} p999 {:+.2} ms ({} samples, {} not as expected, {} refused)",
                c.name,
                q[0],
                q[1],
                q[2],
                q[0] - none[0],
                q[1] - none[1],
                q[2] - none[2],
                all[i].len(),
                wrong[i],
                refused[i]
            );
        }
        if handler.1 > 0.0 {
            let mean_ms = handler.0 / handler.1 * 1000.0;
            eprintln!(
                "[peers] latency {mode} cheiron handler time: mean {mean_ms:.3} ms over {} reviews",
                handler.1
            );
            table.insert(
                "cheiron_handler_mean_ms".into(),
                json!({"mean_ms": mean_ms, "reviews": handler.1}),
            );
        }
        table.insert("clients".into(), json!(clients));
        out.insert(mode.to_owned(), Value::Object(table));
    }
    Ok(Value::Object(out))
}
