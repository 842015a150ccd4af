//! Each server's endpoint driven directly by `h2load` (Debian's `nghttp2-client`), HTTP/1.1
//! and HTTP/2, with the same ~15 KB review (its namespace the server's own), in alternating
//! rounds.

use std::process::Command;

use serde_json::{Value, json};

use cheiron_harness::Result;

use crate::{args::Args, fixture::review_json, setup::Bench};

/// Connections (h2load clients).
const CLIENTS: usize = 8;
/// Concurrent streams per HTTP/2 connection.
const STREAMS: usize = 8;
/// Longest a counted h2load run should take: a server whose warm-up rate says `--requests`
/// would take longer gets fewer requests (never fewer than [`MIN_REQUESTS`]), so a slow peer
/// (Kyverno answers tens of reviews a second) does not stretch the phase to many minutes.
const RUN_SECONDS: f64 = 20.0;
/// See [`RUN_SECONDS`].
const MIN_REQUESTS: usize = 300;

/// `h2load` on PATH, installed with apt-get when it is missing and we may.
fn h2load() -> Result<String> {
    let found = |p: &str| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if found("h2load") {
        return Ok("h2load".into());
    }
    eprintln!("[peers] h2load not found: apt-get install -y nghttp2-client");
    let installed = Command::new("apt-get")
        .args(["install", "-y", "nghttp2-client"])
        .status()
        .is_ok_and(|s| s.success());
    if installed && found("h2load") {
        return Ok("h2load".into());
    }
    Err(
        "h2load not found and could not be installed: install Debian's nghttp2-client \
         (`apt-get install -y nghttp2-client`) or put h2load on PATH"
            .into(),
    )
}

struct Run {
    rps: f64,
    succeeded: u64,
    requests: u64,
    mean_ms: f64,
}

fn parse(out: &str) -> Result<Run> {
    // "finished in 1.23s, 16260.16 req/s, 250.30MB/s"
    let rps = out
        .lines()
        .find(|l| l.starts_with("finished in"))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|s| s.strip_suffix(" req/s"))
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| format!("no throughput in h2load output:\n{out}"))?;
    // "requests: 20000 total, 20000 started, 20000 done, 20000 succeeded, 0 failed, …"
    let requests_line = out
        .lines()
        .find(|l| l.starts_with("requests:"))
        .unwrap_or("");
    let count = |word: &str| -> u64 {
        requests_line
            .split(", ")
            .find(|p| p.ends_with(word))
            .and_then(|p| p.trim_start_matches("requests:").trim().split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    // "time for request:   123us  4.56ms  789us  …" (min max mean sd)
    let mean_ms = out
        .lines()
        .find(|l| l.starts_with("time for request:"))
        .and_then(|l| l.split_whitespace().nth(5))
        .map(duration_ms)
        .unwrap_or(f64::NAN);
    Ok(Run {
        rps,
        succeeded: count("succeeded"),
        requests: count("total"),
        mean_ms,
    })
}

fn duration_ms(s: &str) -> f64 {
    let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().unwrap_or(f64::NAN);
    match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        _ => f64::NAN,
    }
}

pub async fn run(bench: &mut Bench, args: &Args) -> Result<Value> {
    let h2load = h2load()?;
    let mut bodies = Vec::new();
    for (name, _) in &bench.endpoints {
        let mut review = review_json()?;
        review["request"]["namespace"] = format!("peers-{name}").into();
        let path = bench.dir.join(format!("review-{name}.json"));
        std::fs::write(&path, serde_json::to_vec(&review)?)?;
        bodies.push(path);
    }
    let mut out = serde_json::Map::new();
    for protocol in ["http/1.1", "h2"] {
        let mut runs: Vec<Vec<Run>> = bench.endpoints.iter().map(|_| Vec::new()).collect();
        let mut warm_up_rps = vec![f64::INFINITY; bench.endpoints.len()];
        for round in 0..=args.rounds {
            for k in 0..bench.endpoints.len() {
                let i = (k + round) % bench.endpoints.len();
                let (name, url) = &bench.endpoints[i];
                let mut command = Command::new(&h2load);
                command
                    .args(["-t", "1", "-c", &CLIENTS.to_string()])
                    .args(["-H", "Content-Type: application/json"])
                    .arg("-d")
                    .arg(&bodies[i]);
                if protocol == "h2" {
                    command.args(["-m", &STREAMS.to_string()]);
                } else {
                    command.args(["--h1", "-m", "1"]);
                }
                // Round 0 warms up (a tenth of the requests) and is not counted.
                let n = if round == 0 {
                    args.requests / 10
                } else {
                    let affordable = (warm_up_rps[i] * RUN_SECONDS) as usize;
                    args.requests.min(affordable.max(MIN_REQUESTS))
                };
                let output = command.args(["-n", &n.to_string()]).arg(url).output()?;
                let text = String::from_utf8_lossy(&output.stdout).into_owned();
                let run = parse(&text)?;
                eprintln!(
                    "[peers] h2load {protocol} round {round} {name:>8}: {:.0} req/s, {}/{} succeeded, mean {:.2} ms",
                    run.rps, run.succeeded, run.requests, run.mean_ms
                );
                if round > 0 {
                    runs[i].push(run);
                } else {
                    warm_up_rps[i] = run.rps;
                }
            }
        }
        let mut table = serde_json::Map::new();
        for (i, (name, _)) in bench.endpoints.iter().enumerate() {
            let mut rps: Vec<f64> = runs[i].iter().map(|r| r.rps).collect();
            rps.sort_by(f64::total_cmp);
            let median = rps.get(rps.len() / 2).copied().unwrap_or(f64::NAN);
            let best = rps.last().copied().unwrap_or(f64::NAN);
            let failed: u64 = runs[i].iter().map(|r| r.requests - r.succeeded).sum();
            table.insert(
                (*name).to_owned(),
                json!({"median_rps": median, "best_rps": best, "runs_rps": rps, "failed": failed,
                       "mean_ms": runs[i].iter().map(|r| r.mean_ms).collect::<Vec<_>>(),
                       "requests": runs[i].iter().map(|r| r.requests).collect::<Vec<_>>()}),
            );
            eprintln!(
                "[peers] h2load {protocol} {name:>8}: median {median:.0} req/s, best {best:.0}, {failed} failed"
            );
        }
        let key = if protocol == "h2" { "http2" } else { "http1" };
        out.insert(key.into(), Value::Object(table));
    }
    out.insert("clients".into(), json!(CLIENTS));
    out.insert("http2_streams_per_client".into(), json!(STREAMS));
    out.insert(
        "review_bytes".into(),
        json!(serde_json::to_vec(&review_json()?)?.len()),
    );
    Ok(Value::Object(out))
}
