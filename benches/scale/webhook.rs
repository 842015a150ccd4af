//! The webhook phase: N namespaces, N/10 managers and about 2 N of cheiron's Secrets; a fresh
//! `cheiron webhook`'s time to `/readyz` and RSS, and the pure decision timed on the same
//! watches run in this process.

use std::time::{Duration, Instant};

use cheiron::{
    admin::Readiness,
    admission,
    api::{ClusterImagePullSecretManager, ImagePullSecretManager},
    runtime::{self, InitialList},
    source::{ClusterSource, Source},
};
use cheiron_harness::Cluster;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{Api, Client, api::ListParams, core::PartialObjectMeta, runtime::watcher};
use serde_json::json;

use cheiron_harness::Result;

use crate::{
    objects::{self, CLUSTER_MANAGERS, cluster_manager_name, cluster_secret, many, namespace},
    process::{self, Cheiron, mib},
    row::Row,
};

/// Reviews timed in process.
const REVIEWS: usize = 20_000;

/// Reviews sent to each fresh webhook the moment `/readyz` says 200, in namespaces spread over
/// the whole set: most are not listed yet when they arrive.
const WARMUP_REVIEWS: usize = 200;

pub async fn run(client: &Client, cluster: &Cluster, n: usize) -> Result<Vec<Row>> {
    let namespaced = n / 10 - CLUSTER_MANAGERS;
    eprintln!(
        "[scale] webhook: {n} namespaces, {CLUSTER_MANAGERS} cluster and {namespaced} namespaced managers"
    );
    objects::create_plain_namespace(client, objects::SOURCES).await?;
    many("source Secrets", CLUSTER_MANAGERS, |j| {
        objects::create_source(client, j)
    })
    .await?;
    many("namespaces", n, |i| objects::create_namespace(client, i)).await?;
    many("cluster managers", CLUSTER_MANAGERS, |j| {
        objects::apply_cluster_manager(client, j)
    })
    .await?;
    many("namespaced managers", namespaced, |k| {
        objects::apply_namespaced_manager(client, k)
    })
    .await?;
    // cheiron's Secrets as the controller would have written them (it may have: creating one
    // that exists is a no-op here).
    let copies: Vec<(usize, usize)> = (0..n)
        .flat_map(|i| {
            objects::managers_of_namespace(i)
                .into_iter()
                .map(move |j| (i, j))
        })
        .collect();
    let copies = &copies;
    many("cluster managers' Secrets", copies.len(), |k| async move {
        let (i, j) = copies[k];
        let manager = cluster_manager_name(j);
        objects::create_copy(
            client,
            &namespace(i),
            &cluster_secret(j),
            "ClusterImagePullSecretManager",
            &manager,
            None,
        )
        .await
    })
    .await?;
    many("namespaced managers' Secrets", namespaced, |k| async move {
        let ns = namespace(k);
        objects::create_copy(
            client,
            &ns,
            &format!("own-{k}-pull"),
            "ImagePullSecretManager",
            &format!("own-{k}"),
            Some(&ns),
        )
        .await
    })
    .await?;
    let total_namespaces = objects::count::<Namespace>(client, &ListParams::default()).await?;
    let total_managers = objects::count::<ImagePullSecretManager>(client, &ListParams::default())
        .await?
        + objects::count::<ClusterImagePullSecretManager>(client, &ListParams::default()).await?;
    let total_secrets = objects::count::<Secret>(
        client,
        &ListParams::default().labels("app.kubernetes.io/managed-by=cheiron"),
    )
    .await?;
    let shape = format!(
        "{total_namespaces} namespaces, {total_managers} managers, {total_secrets} cheiron Secrets"
    );
    eprintln!("[scale] webhook: the cluster holds {shape}");

    let tls = cluster.webhook_tls_dir().to_string_lossy().into_owned();
    // Each strategy twice, alternating, on the same warm apiserver; the last run is sampled.
    let mut times: [Vec<(Duration, Duration)>; 2] = [Vec::new(), Vec::new()];
    let mut listed_times: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut warmups: Vec<Warmup> = Vec::new();
    let mut memory = None;
    for (round, strategy) in ["paged", "streaming", "paged", "streaming"]
        .iter()
        .enumerate()
    {
        let [port] = cheiron_harness::free_ports()?;
        let listen = format!("127.0.0.1:{port}");
        let mut webhook = Cheiron::start(
            cluster,
            &format!("scale-webhook-{round}-{strategy}"),
            &[
                "webhook",
                "--listen",
                &listen,
                "--tls-cert-dir",
                &tls,
                "--shutdown-delay",
                "0",
                "--initial-list",
                strategy,
            ],
            "info",
        )?;
        let ready = webhook.until_ready(Duration::from_secs(600)).await?;
        let url = format!("https://{listen}/mutate");
        let sent = warmup_reviews(&url, n, &webhook).await?;
        let namespaces = webhook
            .until_logged("namespaces listed", Duration::from_secs(600))
            .await?;
        let listed = webhook
            .until_logged("first list in kind=Secret", Duration::from_secs(600))
            .await?;
        // The same reviews again, answered from the whole view.
        let again = warmup_reviews(&url, n, &webhook).await?;
        let warmup = Warmup::compare(&sent, &again, namespaces);
        eprintln!(
            "[scale]   {strategy} lists: /readyz 200 after {ready:.1?}, namespaces listed after \
             {namespaces:.1?}, cheiron's Secrets listed after {listed:.1?}; {}",
            warmup.show()
        );
        times[usize::from(*strategy == "streaming")].push((ready, listed));
        listed_times[usize::from(*strategy == "streaming")].push(namespaces);
        warmups.push(warmup);
        if round == 3 {
            eprintln!("[scale]   sampling VmRSS");
            tokio::time::sleep(Duration::from_secs(5)).await;
            memory = Some(process::max_memory(webhook.pid(), 10).await?);
        }
        webhook.stop();
    }
    let m = memory.ok_or("the last webhook was not sampled")?;
    let [paged, streaming] = &times;
    // One row per (runs, which time): the worst of the runs, and every run.
    let timed = |key: &str, what: &str, runs: &[(Duration, Duration)], listed: bool| {
        let pick = |t: &(Duration, Duration)| if listed { t.1 } else { t.0 };
        let worst = runs.iter().map(pick).max().unwrap_or_default();
        let all: Vec<String> = runs
            .iter()
            .map(|t| format!("{:.1} s", pick(t).as_secs_f64()))
            .collect();
        let row = Row::info(
            key,
            format!("webhook: start → {what}, worst of {} ({shape})", runs.len()),
            format!("{:.1} s (runs: {})", worst.as_secs_f64(), all.join(", ")),
            worst.as_secs_f64(),
        );
        (row, worst)
    };
    let (ready_row, ready) = timed(
        "webhook_ready_seconds",
        "/readyz 200, streaming lists",
        streaming,
        false,
    );
    let (target, limit) = if n >= 100_000 {
        ("< 64 MiB", 64.0)
    } else if n >= 10_000 {
        ("< 40 MiB (10 000 ns, 1 000 managers, 20 000 Secrets)", 40.0)
    } else {
        ("—", f64::INFINITY)
    };
    let listed_row = |key: &str, what: &str, runs: &[Duration]| {
        let worst = runs.iter().max().copied().unwrap_or_default();
        let all: Vec<String> = runs
            .iter()
            .map(|t| format!("{:.1} s", t.as_secs_f64()))
            .collect();
        Row::info(
            key,
            format!("webhook: start → {what}, worst of {} ({shape})", runs.len()),
            format!("{:.1} s (runs: {})", worst.as_secs_f64(), all.join(", ")),
            worst.as_secs_f64(),
        )
    };
    let mut rows = vec![
        ready_row.target("≤ 3 s", ready <= Duration::from_secs(3)),
        listed_row(
            "webhook_namespaces_listed_seconds",
            "Namespaces listed (every decision from the cache), streaming lists",
            &listed_times[1],
        ),
        listed_row(
            "webhook_namespaces_listed_paged_seconds",
            "Namespaces listed, paged lists",
            &listed_times[0],
        ),
        Warmup::row(&warmups, &shape),
        timed(
            "webhook_ready_paged_seconds",
            "/readyz 200, paged lists (--initial-list paged)",
            paged,
            false,
        )
        .0,
        timed(
            "webhook_secrets_listed_seconds",
            "cheiron's Secrets listed (\"Secret missing\" warnings known), streaming lists",
            streaming,
            true,
        )
        .0,
        timed(
            "webhook_secrets_listed_paged_seconds",
            "cheiron's Secrets listed, paged lists",
            paged,
            true,
        )
        .0,
        {
            let row = Row::info(
                "webhook_rss_mib",
                format!("webhook RSS, cluster mode, streaming lists ({shape})"),
                format!(
                    "{:.1} MiB (max of 10 samples from 5 s after the Secrets were listed; RssAnon {:.1} + RssFile {:.1}; VmHWM {:.1})",
                    mib(m.rss),
                    mib(m.anon),
                    mib(m.file),
                    mib(m.hwm)
                ),
                json!({"rss": mib(m.rss), "anon": mib(m.anon), "file": mib(m.file), "hwm": mib(m.hwm)}),
            );
            if limit.is_finite() {
                row.target(target, mib(m.rss) < limit)
            } else {
                row
            }
        },
    ];
    rows.push(namespace_lists(client).await?);
    rows.push(decision(client, n, &shape).await?);
    Ok(rows)
}

/// One review of the warm-up: when it was answered (since the webhook's start), how long it
/// took, and its patch.
struct Sent {
    answered: Duration,
    took: Duration,
    patch: Option<String>,
}

/// Sends [`WARMUP_REVIEWS`] ServiceAccount CREATEs at once, in namespaces spread evenly over
/// the `n`, to the webhook at `url`.
async fn warmup_reviews(url: &str, n: usize, webhook: &Cheiron) -> Result<Vec<Sent>> {
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(30))
        .build()?;
    let reviews = (0..WARMUP_REVIEWS).map(|k| {
        // Spread over the set, the last namespaces included.
        let ns = namespace((k * n / WARMUP_REVIEWS + n / WARMUP_REVIEWS - 1).min(n - 1));
        let body = serde_json::to_vec(&service_account_review(&format!("warmup-{k}"), &ns));
        let client = client.clone();
        async move {
            let body = body?;
            let t = Instant::now();
            let answer: serde_json::Value = client
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let took = t.elapsed();
            Result::Ok(Sent {
                answered: webhook.elapsed(),
                took,
                patch: answer["response"]["patch"].as_str().map(str::to_owned),
            })
        }
    });
    futures::future::try_join_all(reviews).await
}

/// The warm-up reviews of one webhook against the same reviews answered from its whole view.
struct Warmup {
    sent: usize,
    /// Answered before the Namespaces' list was in.
    early: usize,
    /// Answered with the patch the whole view gives.
    same: usize,
    /// Patched at all (by the whole view).
    patched: usize,
    p50: Duration,
    max: Duration,
}

impl Warmup {
    fn compare(sent: &[Sent], again: &[Sent], namespaces_listed: Duration) -> Self {
        let mut took: Vec<Duration> = sent.iter().map(|s| s.took).collect();
        took.sort();
        Self {
            sent: sent.len(),
            early: sent
                .iter()
                .filter(|s| s.answered < namespaces_listed)
                .count(),
            same: sent
                .iter()
                .zip(again)
                .filter(|(a, b)| a.patch == b.patch)
                .count(),
            patched: again.iter().filter(|s| s.patch.is_some()).count(),
            p50: took.get(took.len() / 2).copied().unwrap_or_default(),
            max: took.last().copied().unwrap_or_default(),
        }
    }

    fn show(&self) -> String {
        format!(
            "{} reviews sent at /readyz: {} answered before the namespaces were listed, {} with \
             the patch the whole view gives ({} patched), latency p50 {:.0} ms, max {:.0} ms",
            self.sent,
            self.early,
            self.same,
            self.patched,
            self.p50.as_secs_f64() * 1e3,
            self.max.as_secs_f64() * 1e3
        )
    }

    fn row(runs: &[Warmup], shape: &str) -> Row {
        let all_same = runs.iter().all(|w| w.same == w.sent);
        let shown: Vec<String> = runs.iter().map(Warmup::show).collect();
        Row::info(
            "webhook_warmup_reviews",
            format!(
                "webhook: {WARMUP_REVIEWS} ServiceAccount reviews sent at once the moment /readyz says 200, against the same reviews once every list is in, each run ({shape})"
            ),
            shown.join("; "),
            json!(runs.iter().map(|w| json!({
                "sent": w.sent, "early": w.early, "same": w.same, "patched": w.patched,
                "p50_ms": w.p50.as_secs_f64() * 1e3, "max_ms": w.max.as_secs_f64() * 1e3,
            })).collect::<Vec<_>>()),
        )
        .target("every answer as from the whole view", all_same)
    }
}

/// A ServiceAccount CREATE review in `ns`.
fn service_account_review(uid: &str, ns: &str) -> serde_json::Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "ServiceAccount"},
            "resource": {"group": "", "version": "v1", "resource": "serviceaccounts"},
            "namespace": ns, "operation": "CREATE",
            "userInfo": {"username": "bench"},
            "object": {"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": format!("app-{uid}"), "namespace": ns, "labels": {"app": "web"}}},
        },
    })
}

/// How long one streaming list of every Namespace takes in this process, as the webhook's
/// watch asks for it (metadata only) and as full objects: the apiserver keeps the encodings of
/// full objects it sends to watchers, not of their metadata-only form. Alternating, 3 each.
async fn namespace_lists(client: &Client) -> Result<Row> {
    async fn first_list<K>(api: Api<K>) -> Result<(Duration, usize)>
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
    {
        let started = Instant::now();
        let mut events = runtime::watch(api, watcher::Config::default(), InitialList::Streaming);
        let mut objects = 0;
        while let Some(event) = events.try_next().await? {
            match event {
                watcher::Event::InitApply(_) => objects += 1,
                watcher::Event::InitDone => return Ok((started.elapsed(), objects)),
                _ => {}
            }
        }
        Err("the Namespaces' watch ended before its list".into())
    }
    let (mut metadata, mut full) = (Vec::new(), Vec::new());
    let mut count = 0;
    for _ in 0..3 {
        let (took, n) =
            first_list(Api::<PartialObjectMeta<Namespace>>::all(client.clone())).await?;
        metadata.push(took);
        let (took_full, _) = first_list(Api::<Namespace>::all(client.clone())).await?;
        full.push(took_full);
        count = n;
        eprintln!(
            "[scale]   Namespaces' streaming list in this process: metadata {took:.1?}, full objects {took_full:.1?}"
        );
    }
    let seconds =
        |runs: &[Duration]| -> Vec<f64> { runs.iter().map(Duration::as_secs_f64).collect() };
    let show = |runs: &[Duration]| -> String {
        runs.iter()
            .map(|d| format!("{:.1} s", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Ok(Row::info(
        "namespace_list_seconds",
        format!(
            "one streaming list of the {count} Namespaces in the bench's process: metadata only (as the webhook watches them) / full objects"
        ),
        format!("{} / {}", show(&metadata), show(&full)),
        json!({"metadata": seconds(&metadata), "full": seconds(&full)}),
    ))
}

/// Starts the webhook's watches in this process and times `admission::review` of a
/// ServiceAccount CREATE in random namespaces of the measured set.
async fn decision(client: &Client, n: usize, shape: &str) -> Result<Row> {
    let (source, watches) = ClusterSource::start(client.clone(), InitialList::Streaming).await?;
    let watches = tokio::spawn(watches);
    let started = Instant::now();
    while !source.is_ready() {
        if started.elapsed() > Duration::from_secs(600) {
            return Err("the in-process watches did not sync within 600 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let view = source.view();
    // Timed with every answer known, "Secret missing" warnings included.
    while view.secret_exists(&namespace(0), "any").is_none() {
        if started.elapsed() > Duration::from_secs(600) {
            return Err(
                "the in-process watch of cheiron's Secrets did not list within 600 s".into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A small xorshift: the namespaces are spread, the run is repeatable.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let bodies: Vec<Vec<u8>> = (0..1_000)
        .map(|k| {
            let ns = namespace((next() % n as u64) as usize);
            serde_json::to_vec(&service_account_review(&format!("bench-{k}"), &ns))
        })
        .collect::<std::result::Result<_, _>>()?;
    let mut samples = Vec::with_capacity(REVIEWS);
    let mut patched = 0;
    for k in 0..REVIEWS {
        let body = &bodies[k % bodies.len()];
        let t = Instant::now();
        let admission = admission::review(body, view)?;
        samples.push(t.elapsed());
        if admission.outcome == admission::Outcome::Patched {
            patched += 1;
        }
    }
    watches.abort();
    samples.sort();
    let pct = |p: usize| samples[((p * samples.len()).div_ceil(100)).clamp(1, samples.len()) - 1];
    let (p50, p99, max) = (
        pct(50),
        pct(99),
        samples.last().copied().unwrap_or_default(),
    );
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    Ok(Row::info(
        "decision_us",
        format!("pure decision: admission::review of a ServiceAccount CREATE in a random namespace, on the watches' view ({shape}; {REVIEWS} reviews, {patched} patched)"),
        format!("p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs", us(p50), us(p99), us(max)),
        json!({"p50": us(p50), "p99": us(p99), "max": us(max)}),
    )
    .target("p99 < 100 µs", p99 < Duration::from_micros(100)))
}
