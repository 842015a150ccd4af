//! The controller phase: the setup at N namespaces, a bare client's writes, then
//! `cheiron controller` converging, idling, resyncing and carrying unrelated objects.

use std::{
    collections::{BTreeMap, HashMap},
    time::{Duration, Instant},
};

use cheiron::api::ClusterImagePullSecretManager;
use cheiron_harness::Cluster;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::{
    core::v1::{Secret, ServiceAccount},
    events::v1::Event,
};
use kube::{
    Api, Client, Resource,
    api::{ListParams, Patch, PatchParams},
    core::{ObjectMeta, PartialObjectMeta},
};
use serde_json::json;

use cheiron_harness::Result;

use crate::{
    bare::{self, MANAGERS_AT_ONCE, WRITES_IN_FLIGHT},
    convergence::Convergence,
    objects::{self, SOURCES, Shape, cluster_manager_name, index_of, many, namespace},
    process::{self, Cheiron, CpuMeter, mib},
    row::Row,
};

/// The controller's `--resync`, in seconds.
const RESYNC: u64 = 60;
/// No-op reconciles of the manager over every namespace that are timed (100 in the wide
/// phase, where each takes longer).
const NOOP_SAMPLES: usize = 300;
/// The controller phase at `n` namespaces set up as `shape` says ([`Shape::MANY`] for the
/// `controller` phase, [`Shape::WIDE`] for `wide`).
pub async fn run(client: &Client, cluster: &Cluster, n: usize, shape: Shape) -> Result<Vec<Row>> {
    let mut rows = phase(client, cluster, n, shape).await?;
    for row in &mut rows {
        row.key = shape.key(&row.key);
    }
    Ok(rows)
}

async fn phase(client: &Client, cluster: &Cluster, n: usize, shape: Shape) -> Result<Vec<Row>> {
    setup(client, n, shape).await?;
    let secrets_expected: usize = (0..n).map(|i| shape.managers_of_namespace(i).len()).sum();
    let accounts_expected = n * shape.accounts;
    let managers = shape.managers;
    let mut rows = Vec::new();

    eprintln!("[scale] controller: the bare client's writes");
    let (bare, bare_writes, bare_conflicts) =
        bare::bare_client(client, n, "bare", shape, &bare::Copies::Plain).await?;
    eprintln!(
        "[scale]   bare client: {bare_writes} writes in {bare:.1?} ({bare_conflicts} patches made again)"
    );
    // In the wide phase, the same writes with Secrets shaped like cheiron's, before cheiron and
    // after it, as the plain ones.
    let shaped = if shape == Shape::WIDE {
        Some(bare::Copies::Shaped {
            owner: shape_owner(client).await?,
            watches: SHAPED_WATCHES,
        })
    } else {
        None
    };
    let shaped_before = match &shaped {
        Some(copies) => Some(shaped_round(client, n, shape, "bare3", copies).await?),
        None => None,
    };
    // The bare client's Secrets are the unrelated Secrets of the setup: top them up to 2 N
    // (the wide phase keeps its N).
    let top_up = if shape == Shape::WIDE {
        0
    } else {
        (2 * n).saturating_sub(secrets_expected)
    };
    many("unrelated Secrets (top-up)", top_up, |k| async move {
        objects::create_unrelated_secret(
            client,
            &namespace(k * (n / top_up.max(1))),
            "unrelated-top-up",
        )
        .await
    })
    .await?;

    let apiserver = process::control_plane_pid(&cluster.dir, "kube-apiserver")
        .ok_or("cannot find the kube-apiserver process")?;
    let etcd = process::control_plane_pid(&cluster.dir, "etcd").ok_or("cannot find etcd")?;
    let resync = RESYNC.to_string();
    let mut controller = Cheiron::start(
        cluster,
        "scale-controller",
        &["controller", "--no-leader-election", "--resync", &resync],
        "info,cheiron_controller::reconcile=debug",
    )?;
    let ready = controller.until_ready(Duration::from_secs(600)).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle = process::max_memory(controller.pid(), 5).await?;
    eprintln!(
        "[scale]   controller ready after {ready:.1?}; idle RSS {:.1} MiB",
        mib(idle.rss)
    );
    rows.push(
        Row::info(
            "controller_ready_seconds",
            format!("controller: start → /readyz 200 ({n} namespaces, {accounts_expected} ServiceAccounts cached)"),
            format!("{:.1} s", ready.as_secs_f64()),
            ready.as_secs_f64(),
        ),
    );
    rows.push(Row::info(
        "controller_idle_rss_mib",
        "controller RSS, idle before any manager".to_owned(),
        format!("{:.1} MiB (RssAnon {:.1})", mib(idle.rss), mib(idle.anon)),
        mib(idle.rss),
    ));

    // Converge.
    let observer = Convergence::start(client, n, shape).await?;
    let cpu = CpuMeter::start(&[
        ("controller", controller.pid()),
        ("kube-apiserver", apiserver),
        ("etcd", etcd),
    ]);
    eprintln!("[scale] controller: applying {managers} cluster managers at once");
    let applied = Instant::now();
    stream::iter(0..managers)
        .map(|j| objects::apply_cluster_manager(client, j))
        .buffer_unordered(objects::CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let pid = controller.pid();
    let peak = tokio::spawn(async move {
        let mut peak = 0;
        while let Ok(m) = process::memory(pid) {
            peak = peak.max(m.rss);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        peak
    });
    let converged = observer.done(Duration::from_secs(3600)).await?;
    let took = converged.saturating_duration_since(applied);
    let (used, wall) = cpu.read();
    peak.abort();
    eprintln!("[scale]   converged after {took:.1?}; CPU {used:?} over {wall:.1} s");
    let cpu_of = |name: &str| {
        used.iter()
            .find(|(n, _)| n == name)
            .map_or(0.0, |(_, s)| *s)
    };
    let (c, a, e) = (
        cpu_of("controller"),
        cpu_of("kube-apiserver"),
        cpu_of("etcd"),
    );
    rows.push(
        Row::info(
            "controller_cpu_seconds",
            "CPU while converging: controller / kube-apiserver / etcd".to_owned(),
            format!(
                "{c:.1} s / {a:.1} s / {e:.1} s (controller at {:.0} % of a core, apiserver {:.0} %)",
                100.0 * c / wall,
                100.0 * a / wall
            ),
            json!({"controller": c, "apiserver": a, "etcd": e, "wall": wall}),
        )
        .target("controller well below the apiserver", c < a / 2.0),
    );

    quiesce(&controller).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = process::max_memory(controller.pid(), 10).await?;
    let peak = memory_peak(after.hwm);
    rows.push(
        Row::info(
            "controller_rss_mib",
            "controller RSS after the backfill (VmHWM: the peak while converging)".to_owned(),
            format!(
                "{:.1} MiB (RssAnon {:.1}; VmHWM {:.1})",
                mib(after.rss),
                mib(after.anon),
                peak
            ),
            mib(after.rss),
        )
        .target(
            &format!("< {} MiB", rss_target(shape)),
            mib(after.rss) < rss_target(shape) && peak < rss_target(shape),
        ),
    );
    rows.push(Row::info(
        "controller_hwm_mib",
        "controller VmHWM".to_owned(),
        format!("{peak:.1} MiB"),
        peak,
    ));

    let patched = controller
        .metric("cheiron_service_accounts_patched_total")
        .await?;
    let written = controller.metric("cheiron_secrets_written_total").await?;
    rows.push(Row::info(
        "controller_writes",
        "controller writes while converging (Secrets written / ServiceAccounts patched)".to_owned(),
        format!("{written} / {patched}"),
        json!({"secrets": written, "service_accounts": patched}),
    ));
    let (events, by_reason) = cheiron_events(client).await?;
    let runs = controller.metric("cheiron_reconcile_runs_total").await?;
    // Per reconcile: the Events about single ServiceAccounts, one summary per reason (added,
    // removed) and one for a change of the Ready reason.
    let per_reconcile = cheiron::controller::SERVICE_ACCOUNT_EVENTS_PER_RECONCILE + 3;
    rows.push(
        Row::info(
            "events",
            format!(
                "Events published by cheiron ({managers} managers, {runs} reconciles, {patched} ServiceAccount patches)"
            ),
            format!("{events} ({by_reason})"),
            json!({"events": events, "reconciles": runs, "patches": patched}),
        )
        .target(
            &format!("≤ {per_reconcile} per reconcile, never one per object"),
            (events as f64) <= runs * per_reconcile as f64 && (events as f64) < patched,
        ),
    );

    // The bare client again, now that cheiron has converged (other names): machine load
    // drifts over a run of this length, so cheiron is compared with the mean of the two.
    eprintln!("[scale] controller: the bare client's writes again");
    let (bare_again, _, conflicts_again) =
        bare::bare_client(client, n, "bare2", shape, &bare::Copies::Plain).await?;
    eprintln!(
        "[scale]   bare client again: {bare_again:.1?} ({conflicts_again} patches made again)"
    );
    let bare_mean = (bare + bare_again) / 2;
    let ratio = took.as_secs_f64() / bare_mean.as_secs_f64();
    if let (Some(copies), Some(before)) = (&shaped, shaped_before) {
        let after = shaped_round(client, n, shape, "bare4", copies).await?;
        let mean = (before + after) / 2;
        rows.push(Row::info(
            "bare_shaped_seconds",
            format!(
                "bare client: the same writes with Secrets shaped like cheiron's copies (labels, annotation, ownerReference) under {SHAPED_WATCHES} metadata watches; before cheiron, after it"
            ),
            format!(
                "{:.1} s = {:.2} × the plain bare client (runs {:.1} s, {:.1} s)",
                mean.as_secs_f64(),
                mean.as_secs_f64() / bare_mean.as_secs_f64(),
                before.as_secs_f64(),
                after.as_secs_f64()
            ),
            mean.as_secs_f64(),
        ));
        let ratio = took.as_secs_f64() / mean.as_secs_f64();
        rows.push(Row::info(
            "converge_ratio_shaped",
            "converge time / the shaped and watched bare client's time (mean of the two)"
                .to_owned(),
            format!("{ratio:.2}"),
            ratio,
        ));
    }
    rows.push(Row::info(
        "bare_client_seconds",
        format!(
            "bare client: the same {bare_writes} writes ({secrets_expected} Secret creates, ServiceAccount patches), {} managers' worth at a time × {WRITES_IN_FLIGHT} in flight; before cheiron, after it",
            managers.min(MANAGERS_AT_ONCE)
        ),
        format!(
            "{:.1} s (runs {:.1} s, {:.1} s; {bare_conflicts} and {conflicts_again} patches lost a race and were made again)",
            bare_mean.as_secs_f64(),
            bare.as_secs_f64(),
            bare_again.as_secs_f64()
        ),
        bare_mean.as_secs_f64(),
    ));
    rows.push(
        Row::info(
            "controller_converge_seconds",
            format!(
                "controller: {managers} managers applied → all {secrets_expected} Secrets and all {accounts_expected} ServiceAccounts' entries seen"
            ),
            format!("{:.1} s = **{ratio:.2} × the bare client**", took.as_secs_f64()),
            took.as_secs_f64(),
        )
        .target("≤ 1.25 × bare", ratio <= 1.25),
    );
    rows.push(Row::info(
        "converge_ratio",
        "converge time / bare client time (mean of the two)".to_owned(),
        format!("{ratio:.2}"),
        ratio,
    ));

    let samples = if shape == Shape::WIDE {
        100
    } else {
        NOOP_SAMPLES
    };
    let no_op = no_op_reconciles(client, &controller, samples).await?;
    // The 50 ms target is set at 10 000 namespaces; at 100 000 the figure is reported only.
    rows.push(if shape == Shape::WIDE {
        Row {
            target: "—".to_owned(),
            met: None,
            ..no_op
        }
    } else {
        no_op
    });
    rows.push(steady_state(client, &controller).await?);
    if shape != Shape::WIDE {
        rows.extend(unrelated_objects(client, &controller, n, after.rss).await?);
    }
    controller.stop();
    Ok(rows)
}

/// Metadata watches of the bare client's shaped Secrets: as many as watch cheiron's copies
/// here (the controller's, the shared webhook's and the convergence observer's).
const SHAPED_WATCHES: usize = 3;

/// The owner of the bare client's shaped Secrets: cheiron's manager does not exist yet when
/// the first shaped round runs, so a ClusterRole made for the purpose, referenced as cheiron
/// references its manager (`controller: true`), stands in: an object that exists, so that the
/// garbage collector finds its owner as it does cheiron's.
async fn shape_owner(
    client: &Client,
) -> Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some("scale-shape-owner".to_owned()),
            ..ObjectMeta::default()
        },
        ..ClusterRole::default()
    };
    let role = roles.create(&Default::default(), &role).await?;
    Ok(role
        .controller_owner_ref(&())
        .ok_or("the ClusterRole has no uid")?)
}

/// One round of the bare client writing shaped Secrets, logged.
async fn shaped_round(
    client: &Client,
    n: usize,
    shape: Shape,
    tag: &str,
    copies: &bare::Copies,
) -> Result<Duration> {
    eprintln!(
        "[scale] controller: the bare client's writes, shaped like cheiron's copies under {SHAPED_WATCHES} metadata watches"
    );
    let (took, _, conflicts) = bare::bare_client(client, n, tag, shape, copies).await?;
    eprintln!(
        "[scale]   bare client, shaped and watched: {took:.1?} ({conflicts} patches made again)"
    );
    Ok(took)
}

/// The controller's RSS target, in MiB: 128 with 100 managers at N namespaces, 256 with one
/// manager at 100 000.
fn rss_target(shape: Shape) -> f64 {
    if shape == Shape::WIDE { 256.0 } else { 128.0 }
}

/// The peak RSS, in MiB, from a VmHWM reading.
fn memory_peak(hwm: u64) -> f64 {
    mib(hwm)
}

async fn setup(client: &Client, n: usize, shape: Shape) -> Result {
    let per_namespace = shape.accounts;
    eprintln!("[scale] controller: setting up {n} namespaces × {per_namespace} ServiceAccounts");
    objects::create_plain_namespace(client, SOURCES).await?;
    many("source Secrets", shape.managers, |j| {
        objects::create_source(client, j)
    })
    .await?;
    many("namespaces", n, |i| objects::create_namespace(client, i)).await?;
    // Every ServiceAccount, `default` included: this cluster's kube-controller-manager runs
    // without its serviceaccount-controller (main.rs), as it would create them at about 20 a
    // second and still be at it while the phase measures.
    many("ServiceAccounts", n * per_namespace, |k| async move {
        let ns = namespace(k / per_namespace);
        objects::create_service_account(client, &ns, &Shape::account_name(k % per_namespace)).await
    })
    .await
}

/// Waits until the controller's write counters have not moved for 5 s (at most 600 s).
async fn quiesce(controller: &Cheiron) -> Result {
    let since = Instant::now();
    let (mut last, mut stable) = (f64::NAN, 0);
    while stable < 5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = writes(controller).await?;
        if now == last {
            stable += 1;
        } else {
            (stable, last) = (0, now);
        }
        if since.elapsed() > Duration::from_secs(600) {
            eprintln!("[scale]   (the controller is still writing after 600 s; going on)");
            break;
        }
    }
    Ok(())
}

async fn writes(controller: &Cheiron) -> Result<f64> {
    Ok(controller.metric("cheiron_secrets_written_total").await?
        + controller
            .metric("cheiron_service_accounts_patched_total")
            .await?)
}

/// Events reported by cheiron, and a summary by reason.
async fn cheiron_events(client: &Client) -> Result<(usize, String)> {
    let api: Api<Event> = Api::all(client.clone());
    let mut by_reason: BTreeMap<String, usize> = BTreeMap::new();
    let mut params = ListParams::default().limit(5_000);
    loop {
        let page = api.list(&params).await?;
        for e in page
            .items
            .iter()
            .filter(|e| e.reporting_controller.as_deref() == Some("cheiron"))
        {
            *by_reason
                .entry(e.reason.clone().unwrap_or_default())
                .or_default() += 1;
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let total = by_reason.values().sum();
    let summary = by_reason
        .iter()
        .map(|(r, c)| format!("{r} {c}"))
        .collect::<Vec<_>>()
        .join(", ");
    Ok((total, summary))
}

// ---------------------------------------------------------------------------------------------
// No-op reconciles, steady state, unrelated objects

/// The durations the controller logged for reconciles of `name`, in ms, in log order.
fn logged_reconciles(log: &std::path::Path, name: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    // `name=x` or `name="x"`, as the log format writes it.
    let needles = [format!(" name={name} "), format!(" name=\"{name}\" ")];
    text.lines()
        .filter(|l| l.contains(" reconciled ") && needles.iter().any(|n| l.contains(n)))
        .filter_map(|l| {
            let at = l.find("elapsed_ms=")? + "elapsed_ms=".len();
            l[at..].split_whitespace().next()?.parse().ok()
        })
        .collect()
}

/// Touches the manager over every namespace (an annotation: a change that is not to its
/// spec) `count` times, waiting for each reconcile, and reads their durations.
async fn no_op_reconciles(client: &Client, controller: &Cheiron, count: usize) -> Result<Row> {
    let name = cluster_manager_name(0);
    let api: Api<ClusterImagePullSecretManager> = Api::all(client.clone());
    eprintln!("[scale] controller: {count} no-op reconciles of {name}");
    let before = writes(controller).await?;
    for i in 0..count {
        let seen = logged_reconciles(&controller.log, &name).len();
        let patch =
            json!({"metadata": {"annotations": {"bench.cheiron.anny.co/touch": i.to_string()}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let started = Instant::now();
        while logged_reconciles(&controller.log, &name).len() <= seen {
            if started.elapsed() > Duration::from_secs(120) {
                return Err(format!("no reconcile of {name} logged within 120 s").into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let after = writes(controller).await?;
    let all = logged_reconciles(&controller.log, &name);
    let mut samples: Vec<f64> = all[all.len().saturating_sub(count)..].to_vec();
    samples.sort_by(f64::total_cmp);
    let pct = |p: usize| samples[((p * samples.len()).div_ceil(100)).clamp(1, samples.len()) - 1];
    let (p50, p99, max) = (
        pct(50),
        pct(99),
        samples.last().copied().unwrap_or_default(),
    );
    eprintln!("[scale]   no-op reconcile p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms");
    Ok(Row::info(
        "noop_reconcile_ms",
        format!(
            "no-op reconcile of the manager over every namespace ({} samples)",
            samples.len()
        ),
        format!(
            "p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms; {} writes meanwhile",
            after - before
        ),
        json!({"p50": p50, "p99": p99, "max": max}),
    )
    .target("p99 < 50 ms", p99 < 50.0))
}

/// resourceVersions of cheiron's Secrets and of the measured ServiceAccounts.
async fn versions(client: &Client) -> Result<HashMap<String, String>> {
    let mut out = HashMap::new();
    let secrets: Api<PartialObjectMeta<Secret>> = Api::all(client.clone());
    let accounts: Api<PartialObjectMeta<ServiceAccount>> = Api::all(client.clone());
    let key = |kind: &str, m: &ObjectMeta| {
        format!(
            "{kind}/{}/{}",
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default()
        )
    };
    let rv = |m: &ObjectMeta| m.resource_version.clone().unwrap_or_default();
    for s in secrets
        .list_metadata(&ListParams::default().labels("app.kubernetes.io/managed-by=cheiron"))
        .await?
    {
        out.insert(key("Secret", &s.metadata), rv(&s.metadata));
    }
    for s in accounts.list_metadata(&ListParams::default()).await? {
        if s.metadata.namespace.as_deref().and_then(index_of).is_some() {
            out.insert(key("ServiceAccount", &s.metadata), rv(&s.metadata));
        }
    }
    Ok(out)
}

async fn steady_state(client: &Client, controller: &Cheiron) -> Result<Row> {
    let window = Duration::from_secs(RESYNC + 15);
    eprintln!("[scale] controller: steady state over {window:?} (resync {RESYNC} s)");
    quiesce(controller).await?;
    let before = versions(client).await?;
    let (runs_before, writes_before) = (
        controller.metric("cheiron_reconcile_runs_total").await?,
        writes(controller).await?,
    );
    tokio::time::sleep(window).await;
    let after = versions(client).await?;
    let runs = controller.metric("cheiron_reconcile_runs_total").await? - runs_before;
    let metric_writes = writes(controller).await? - writes_before;
    let changed = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(v))
        .count()
        + before.keys().filter(|k| !after.contains_key(*k)).count();
    Ok(Row::info(
        "resync_writes",
        format!(
            "writes in {} s (resync {RESYNC} s) to {} cheiron Secrets and ServiceAccounts",
            window.as_secs(),
            before.len()
        ),
        format!("{changed} (controller counters: {metric_writes} writes, {runs} reconciles)"),
        changed,
    )
    .target("0", changed == 0 && metric_writes == 0.0))
}

/// RSS after 10 N unrelated Secrets (in the measured namespaces) and 5 N unrelated
/// ServiceAccounts (in N/10 namespaces no manager selects).
async fn unrelated_objects(
    client: &Client,
    controller: &Cheiron,
    n: usize,
    rss_before: u64,
) -> Result<Vec<Row>> {
    let (secrets, namespaces, per_namespace) = (10 * n, n / 10, 50);
    eprintln!(
        "[scale] controller: adding {secrets} unrelated Secrets and {} unrelated ServiceAccounts",
        namespaces * per_namespace
    );
    many("unrelated Secrets", secrets, |k| async move {
        objects::create_unrelated_secret(client, &namespace(k % n), &format!("unrelated-{}", k / n))
            .await
    })
    .await?;
    many("plain namespaces", namespaces, |k| async move {
        objects::create_plain_namespace(client, &format!("other-{k}")).await
    })
    .await?;
    many(
        "unrelated ServiceAccounts",
        namespaces * per_namespace,
        |k| async move {
            objects::create_service_account(
                client,
                &format!("other-{}", k / per_namespace),
                &format!("app-{}", k % per_namespace),
            )
            .await
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(30)).await;
    quiesce(controller).await?;
    let m = process::max_memory(controller.pid(), 10).await?;
    let growth = mib(m.rss) - mib(rss_before);
    Ok(vec![Row::info(
        "controller_rss_unrelated_mib",
        format!(
            "controller RSS with {secrets} unrelated Secrets and {} unrelated ServiceAccounts more",
            namespaces * per_namespace
        ),
        format!("{:.1} MiB ({growth:+.1} MiB; VmHWM {:.1})", mib(m.rss), mib(m.hwm)),
        mib(m.rss),
    )
    .target("< 128 MiB, flat", mib(m.rss) < 128.0)])
}
