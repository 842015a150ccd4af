//! Webhook benchmark (docs/design.md §8): a ~15 KB Pod review from a ReplicaSet, 100 managers and 1 000
//! namespaces loaded, keep-alive TLS. Measures in one run:
//! - the pure admission path (`admission::review`) per request, p50/p99;
//! - the pure decision alone (`policy::decide` over the managers the index returns for the
//!   namespace, the object already read), p50/p99;
//! - the server's own handler time, from its latency histogram;
//! - throughput and client latency of `cheiron` against a do-nothing axum + rustls echo server
//!   served the same way (same TLS config, same HTTP stack), at the same concurrency.
//!
//! Run: `cargo bench --bench webhook` (optionally `-- --requests 20000 --concurrency 8`).
//! `-- --injection MatchingImages` (or `All`) puts all 100 managers in mode Pod with that
//! `spec.injection`, each copied Secret's registries reported in its status as the controller
//! writes them, so every manager matches the Pod's three images against its registries.

use std::{
    error::Error,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{Router, body::Bytes, routing::post};
use cheiron::{
    admin::Readiness,
    admission,
    api::{ClusterImagePullSecretManager, ImagePullSecretManager},
    metrics::Metrics,
    policy::{Manager, NamespaceMeta, StaticView, SubjectKind, View, decide},
    source::Source,
    tls::{CertResolver, server_config},
    webhook::{Listeners, Timing, serve},
};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
    service::TowerToHyperService,
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

type Result<T = ()> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

struct BenchSource(StaticView);

impl Readiness for BenchSource {
    fn is_ready(&self) -> bool {
        true
    }
}

impl Source for BenchSource {
    fn view(&self) -> &dyn View {
        &self.0
    }
}

/// 100 managers: 60 cluster managers (half Pod mode with selectors, half ServiceAccount mode,
/// with globs and namespace selectors) and 40 namespaced ones, over 1 000 namespaces.
///
/// With `injection`, every manager is in mode Pod with that `spec.injection`, and reports the
/// registries of its copied Secret in `status.pullSecrets`: three per Secret, a few of them
/// serving the review's images (`registry.example.com/orders/…`, `docker.io/envoyproxy/…`).
fn view(injection: Option<&str>) -> Result<StaticView> {
    let mut managers = Vec::new();
    for i in 0..60 {
        let mode = match injection {
            Some(_) => "Pod",
            None if i % 2 == 0 => "Pod",
            None => "ServiceAccount",
        };
        let selector = if mode == "Pod" {
            format!("  podSelector: {{matchLabels: {{app: web{}}}}}\n", i % 3)
        } else {
            String::new()
        };
        let shared = if i % 10 == 0 {
            "registry.example.com/orders"
        } else {
            "quay.io/mirror"
        };
        let (injection_line, status) = matching(
            injection,
            &format!("pull-{i}"),
            &[
                shared,
                &format!("*.mirror-{i}.example.net"),
                &format!("ghcr.io/team-{i}"),
            ],
        );
        let yaml = format!(
            "apiVersion: cheiron.anny.co/v1alpha1\nkind: ClusterImagePullSecretManager\nmetadata: {{name: c{i}, creationTimestamp: \"2026-01-01T00:00:{:02}Z\"}}\nspec:\n  mode: {mode}\n{injection_line}  namespaces: [\"team-*\", \"ns-{i}?\"]\n  excludeNamespaces: [\"team-scratch\"]\n  namespaceSelector: {{matchExpressions: [{{key: tier, operator: In, values: [apps, web]}}]}}\n{selector}  secrets:\n    - existingSecretRef: {{name: pull-{i}, namespace: cheiron}}\n    - {{name: inline-{i}, registry: r{i}.example.com, username: u, password: p}}\n{status}",
            i % 60
        );
        let m: ClusterImagePullSecretManager = serde_saphyr::from_str(&yaml)?;
        managers.push(Manager::from_cluster(&m)?);
    }
    for i in 0..40 {
        let hub = if i % 4 == 0 {
            "docker.io/envoyproxy"
        } else {
            "docker.io/team"
        };
        let (injection_line, status) = matching(
            injection,
            &format!("own-{i}"),
            &[
                hub,
                &format!("ghcr.io/team-{i}"),
                &format!("r{i}.example.com:5000"),
            ],
        );
        let yaml = format!(
            "apiVersion: cheiron.anny.co/v1alpha1\nkind: ImagePullSecretManager\nmetadata: {{name: n{i}, namespace: team-{i}}}\nspec:\n  mode: Pod\n{injection_line}  secrets:\n    - existingSecretRef: {{name: own-{i}}}\n{status}"
        );
        let m: ImagePullSecretManager = serde_saphyr::from_str(&yaml)?;
        managers.push(Manager::from_namespaced(&m)?);
    }
    let namespaces = (0..1000).map(|i| NamespaceMeta {
        name: format!("team-{i}"),
        labels: [("tier".to_owned(), "apps".to_owned())].into(),
        annotations: Default::default(),
    });
    Ok(StaticView::new(managers, namespaces))
}

/// The `injection:` line of a manager's spec and the status reporting `registries` for its
/// copied Secret `secret`; both empty without `injection`.
fn matching(injection: Option<&str>, secret: &str, registries: &[&str]) -> (String, String) {
    match injection {
        None => (String::new(), String::new()),
        Some(injection) => (
            format!("  injection: {injection}\n"),
            format!(
                "status:\n  pullSecrets: [{{name: {secret}, registries: [\"{}\"]}}]\n",
                registries.join("\", \"")
            ),
        ),
    }
}

/// The ReplicaSet Pod review fixture, in namespace team-3, labelled to match Pod managers.
fn review_body() -> Result<Vec<u8>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/pod-create-replicaset.json"
    );
    let mut review: serde_json::Value = serde_json::from_slice(&std::fs::read(path)?)?;
    review["request"]["namespace"] = "team-3".into();
    review["request"]["object"]["metadata"]["labels"]["app"] = "web0".into();
    // Grow the first container's environment until the review is ~15 KB, as docs/design.md §8 specifies.
    let mut i = 0;
    while serde_json::to_vec(&review)?.len() < 15 * 1024 {
        let env = review["request"]["object"]["spec"]["containers"][0]["env"]
            .as_array_mut()
            .ok_or("fixture container has no env list")?;
        env.push(serde_json::json!({"name": format!("SETTING_{i}"), "value": format!("value-of-setting-number-{i}")}));
        i += 1;
    }
    Ok(serde_json::to_vec(&review)?)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

async fn start_cheiron(
    view: StaticView,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> Result<SocketAddr> {
    let webhook = TcpListener::bind("127.0.0.1:0").await?;
    let admin = TcpListener::bind("127.0.0.1:0").await?;
    let addr = webhook.local_addr()?;
    let resolver = Arc::new(CertResolver::self_signed()?);
    let source: Arc<dyn Source> = Arc::new(BenchSource(view));
    tokio::spawn(serve(
        Listeners { webhook, admin },
        resolver,
        source,
        metrics,
        stop,
        Timing::new(Duration::ZERO),
    ));
    Ok(addr)
}

/// A do-nothing server: same rustls configuration and HTTP stack, echoes the body.
async fn start_echo(stop: CancellationToken) -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let acceptor = TlsAcceptor::from(Arc::new(server_config(Arc::new(
        CertResolver::self_signed()?,
    ))?));
    let app = Router::new().route("/mutate", post(|body: Bytes| async move { body }));
    tokio::spawn(async move {
        loop {
            let (tcp, _) = tokio::select! {
                accepted = listener.accept() => match accepted { Ok(a) => a, Err(_) => continue },
                () = stop.cancelled() => return,
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = auto::Builder::new(TokioExecutor::new())
                    .http1_only()
                    .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                    .await;
            });
        }
    });
    Ok(addr)
}

struct Run {
    throughput: f64,
    p50: Duration,
    p99: Duration,
}

/// `requests` POSTs spread over `concurrency` keep-alive HTTP/1.1 connections.
async fn load(
    addr: SocketAddr,
    body: Arc<Vec<u8>>,
    requests: usize,
    concurrency: usize,
) -> Result<Run> {
    let url = format!("https://{addr}/mutate");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .http1_only()
            .pool_max_idle_per_host(1)
            .build()?;
        let (url, body) = (url.clone(), body.clone());
        let per_task = requests / concurrency;
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_task);
            for _ in 0..per_task {
                let t = Instant::now();
                let response = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.as_ref().clone())
                    .send()
                    .await?;
                let status = response.status();
                let _ = response.bytes().await?;
                if !status.is_success() {
                    return Err(format!("HTTP {status}").into());
                }
                latencies.push(t.elapsed());
            }
            Ok::<_, Box<dyn Error + Send + Sync>>(latencies)
        }));
    }
    let mut all = Vec::with_capacity(requests);
    for task in tasks {
        all.extend(task.await??);
    }
    let elapsed = started.elapsed();
    all.sort();
    Ok(Run {
        throughput: all.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&all, 0.50),
        p99: percentile(&all, 0.99),
    })
}

/// Fraction of handler times at or under `bound` seconds, from the Prometheus histogram.
fn server_fraction_within(metrics: &Metrics, bound: &str) -> Result<(f64, u64)> {
    let text = metrics.encode()?;
    let value = |needle: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with("cheiron_admission_duration_seconds") && l.contains(needle))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let count = value("_count{resource=\"pods\"}");
    let within = value(&format!("le=\"{bound}\""));
    Ok((if count > 0.0 { within / count } else { 0.0 }, count as u64))
}

fn text_arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result {
    let requests = arg("--requests", 20_000);
    let concurrency = arg("--concurrency", 8);
    let injection = text_arg("--injection");
    if let Some(i) = injection.as_deref()
        && !matches!(i, "All" | "MatchingImages")
    {
        return Err(format!("--injection takes All or MatchingImages, not {i:?}").into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let view = view(injection.as_deref())?;
        let body = Arc::new(review_body()?);

        // 1. The pure path.
        let check = admission::review(&body, &view)?;
        if check.outcome != admission::Outcome::Patched {
            return Err(format!("the bench review is not patched: {:?}", check.outcome).into());
        }
        let added = check
            .review
            .response
            .as_ref()
            .and_then(|r| r.patch.as_ref())
            .map(|patch| String::from_utf8_lossy(patch).matches("\"name\"").count())
            .unwrap_or(0);
        let mut pure = Vec::with_capacity(requests);
        for _ in 0..requests {
            let t = Instant::now();
            let admission = admission::review(&body, &view)?;
            std::hint::black_box(admission);
            pure.push(t.elapsed());
        }
        pure.sort();

        // The decision alone: the object read once, then the managers looked up and decided.
        let review: serde_json::Value = serde_json::from_slice(&body)?;
        let pod = admission::interpret(&review["request"]["object"], SubjectKind::Pod)?;
        let namespace = view.namespace("team-3").ok_or("no namespace team-3")?;
        let mut decisions = Vec::with_capacity(requests);
        for _ in 0..requests {
            let t = Instant::now();
            let managers = view.managers_in(&namespace);
            let decision = decide(&pod.subject(), &namespace, managers.iter().map(|m| &**m));
            std::hint::black_box(decision);
            decisions.push(t.elapsed());
        }
        decisions.sort();

        // 2. Over TLS, both servers in the same run, alternating rounds.
        let stop = CancellationToken::new();
        let metrics = Arc::new(Metrics::new());
        let cheiron_addr = start_cheiron(view, metrics.clone(), stop.clone()).await?;
        let echo_addr = start_echo(stop.clone()).await?;
        load(cheiron_addr, body.clone(), 2_000, concurrency).await?;
        load(echo_addr, body.clone(), 2_000, concurrency).await?;
        let (mut cheiron_runs, mut echo_runs) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            echo_runs.push(load(echo_addr, body.clone(), requests, concurrency).await?);
            cheiron_runs.push(load(cheiron_addr, body.clone(), requests, concurrency).await?);
        }
        let sequential_cheiron = load(cheiron_addr, body.clone(), requests / 4, 1).await?;
        let sequential_echo = load(echo_addr, body.clone(), requests / 4, 1).await?;
        let (within_1ms, observed) = server_fraction_within(&metrics, "0.001")?;
        let (within_500us, _) = server_fraction_within(&metrics, "0.0005")?;
        stop.cancel();

        let best = |runs: &[Run]| runs.iter().map(|r| r.throughput).fold(0.0, f64::max);
        let median = |runs: &mut Vec<Run>| {
            runs.sort_by(|a, b| a.throughput.total_cmp(&b.throughput));
            runs[runs.len() / 2].throughput
        };
        let (cheiron_best, echo_best) = (best(&cheiron_runs), best(&echo_runs));
        let (cheiron_median, echo_median) = (median(&mut cheiron_runs), median(&mut echo_runs));
        println!("webhook benchmark: {} bytes per review, 100 managers, 1000 namespaces", body.len());
        match injection.as_deref() {
            Some(injection) => println!("every manager in mode Pod with injection {injection}; {added} pull secrets added per review"),
            None => println!("managers as in BENCHMARKS.md (60 in mode Pod); {added} pull secrets added per review"),
        }
        println!("requests per round: {requests}, concurrency: {concurrency}, rounds: 3");
        println!();
        println!("pure admission::review          p50 {:>8.1?}  p99 {:>8.1?}", percentile(&pure, 0.5), percentile(&pure, 0.99));
        println!("pure decision (policy::decide)  p50 {:>8.1?}  p99 {:>8.1?}", percentile(&decisions, 0.5), percentile(&decisions, 0.99));
        println!(
            "server handler time             {:.2}% <= 1 ms, {:.2}% <= 500 us  ({observed} observations)",
            within_1ms * 100.0,
            within_500us * 100.0
        );
        println!("throughput echo (axum+rustls)   best {echo_best:>8.0}/s  median {echo_median:>8.0}/s");
        println!("throughput cheiron              best {cheiron_best:>8.0}/s  median {cheiron_median:>8.0}/s");
        println!(
            "cheiron / echo                  {:.0}% (best), {:.0}% (median)   target >= 50%",
            100.0 * cheiron_best / echo_best,
            100.0 * cheiron_median / echo_median
        );
        println!(
            "client latency, 1 connection    cheiron p50 {:.1?} p99 {:.1?} | echo p50 {:.1?} p99 {:.1?}",
            sequential_cheiron.p50, sequential_cheiron.p99, sequential_echo.p50, sequential_echo.p99
        );
        Ok(())
    })
}
