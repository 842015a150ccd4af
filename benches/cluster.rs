//! Cluster benchmark (docs/design.md §8) on a real kube-apiserver, through the e2e harness (etcd,
//! kube-apiserver, kube-controller-manager from `tests/k8s/assets`, one shared webhook):
//!
//! 1. new namespace → its Secret present: p50/p99 over namespaces created one by one, with a
//!    `cheiron controller --no-leader-election --resync 15` of this benchmark running;
//! 2. rotation of one source copied to 1 000 namespaces: source update → all copies hold the
//!    new content, against a bare kube client replacing 1 000 Secrets with 16 writes in flight
//!    (the controller's write concurrency), measured before and after;
//! 3. steady state: resourceVersions of every cheiron Secret, every manager and every
//!    ServiceAccount before and after a window longer than one resync: changes counted;
//! 4. credential-provider rotation (docs/credential-providers.md): a cluster manager whose
//!    entry is a `credentialProvider`, served by the fake plugin
//!    (`tests/support/fake_credential_provider.rs`) with a short `cacheDuration`, in the same
//!    1 000 namespaces: plugin calls and Secret writes per rotation, and plugin call → a watch
//!    saw all copies updated, against the bare client's writes in the same run (alternating);
//! 5. credential health's cost (docs/credential-health.md): the controller is stopped; 10 000
//!    namespaces and 100 cluster managers sharing 10 credentials of an in-process HTTPS
//!    registry that demands Basic credentials; a controller without registry checks writes
//!    the copies, then one without and one with `--verify-registries
//!    --registry-check-interval 60` restart into the converged cluster: each one's CPU and RSS
//!    over a 180 s steady window, registry checks per interval, and the time to converge;
//! 6. webhook memory: the controller is stopped, the cluster is topped up to 10 000 namespaces
//!    and 1 000 managers, a fresh `cheiron webhook` in cluster mode is started, and its VmRSS
//!    is sampled once `/readyz` is 200 (its caches have listed everything).
//!
//! Run: `cargo bench --bench cluster`, or only some phases with
//! `cargo bench --bench cluster -- --phases latency,rotation,steady,provider,health,memory` (the
//! rotation namespaces are created by whichever of `rotation` and `provider` runs first).
//! `--profiles DIR` adds CPU profiles of each provider round (kube-apiserver's pprof, and
//! `perf record` of the controller where perf is installed) to DIR.
//! Progress goes to stderr, the results table to stdout.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use cheiron::api::{ClusterImagePullSecretManager, ImagePullSecretManager};
use cheiron_harness::{
    self as harness, ControlPlaneOptions, Result, Scenario,
    controller::{CheironProcess, READY_WITHIN},
    free_ports,
    stats::{ms, percentile},
    watches::MetadataWatches,
};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::{
    ByteString,
    api::core::v1::{Namespace, Secret, ServiceAccount},
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams, PostParams},
    core::{ObjectMeta, PartialObjectMeta},
    runtime::watcher,
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// Namespaces created one by one for the latency measurement.
const LATENCY_NAMESPACES: usize = 100;
/// Namespaces one rotated source is copied to.
const ROTATION_NAMESPACES: usize = 1_000;
/// Writes in flight of the bare client: `WRITE_CONCURRENCY` of `crates/cheiron-controller/src/reconcile.rs`.
const BARE_WRITE_CONCURRENCY: usize = 16;
/// Rotations timed (each between two bare-client runs); the provider phase's can be raised
/// with `--rounds N`.
const ROTATION_ROUNDS: usize = 5;
/// Creations in flight while setting up.
const CREATE_CONCURRENCY: usize = 32;
/// The controller's `--resync`, in seconds.
const RESYNC: &str = "15";
/// Longer than one resync period.
const STEADY_WINDOW: Duration = Duration::from_secs(20);
/// Namespaces in the cluster for the memory measurement.
const MEMORY_NAMESPACES: usize = 10_000;
/// Managers in the cluster for the memory measurement, of which namespaced:
const MEMORY_MANAGERS: usize = 1_000;
const MEMORY_NAMESPACED_MANAGERS: usize = 900;
/// VmRSS samples, one a second.
const SAMPLES: usize = 10;
/// Label on every namespace this benchmark wants a manager to select.
const TARGET: &str = "bench.cheiron.anny.co/target";
/// Label on the bare client's Secrets.
const BARE: &str = "bench.cheiron.anny.co/bare";
/// Labels the bare client's Secrets shaped like cheiron's copies (same labels, annotations and
/// ownerReference, but not cheiron's managed-by value, so that cheiron does not watch them).
const SHAPED: &str = "bench.cheiron.anny.co/shaped";
/// The same for the credential-provider manager's copies (the provider phase).
const PROVIDER_SHAPED: &str = "bench.cheiron.anny.co/provider-shaped";
const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
/// The fake plugin's `cacheDuration`, in seconds: the credential is fetched again after about
/// half of it (`REFRESH_FRACTION` of `crates/cheiron-credential/src/refresh.rs`, ±10 %), which leaves room
/// for one bare-client run and a quiet controller between two rotations.
const PROVIDER_CACHE_SECONDS: u64 = 40;
/// The provider (and plugin file) name, and the image its manager entry names.
const PROVIDER: &str = "bench-provider";
const PROVIDER_IMAGE: &str = "provider.bench.example.com/team/app";
/// Every phase, in the order they run.
const PHASES: [&str; 6] = [
    "latency", "rotation", "steady", "provider", "health", "memory",
];

/// What the command line asks for: the phases `--phases a,b` names (all without it); with
/// `--profiles DIR`, where to write CPU profiles of each provider round; with `--rounds N`, how
/// many provider rotations to time (`ROTATION_ROUNDS` without it); with `--split-webhook`, the
/// shared webhook runs with the split install's rights, so that the copies have one watch (the
/// controller's) instead of two. `cargo bench` adds `--bench`.
struct Options {
    phases: Vec<String>,
    profiles: Option<PathBuf>,
    provider_rounds: usize,
    split_webhook: bool,
}

fn options() -> Result<Options> {
    let mut chosen: Option<Vec<String>> = None;
    let mut profiles = None;
    let mut provider_rounds = ROTATION_ROUNDS;
    let mut split_webhook = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bench" => {}
            "--phases" => {
                let list = args.next().ok_or("--phases needs a value")?;
                let names: Vec<String> = list.split(',').map(str::to_owned).collect();
                if let Some(bad) = names.iter().find(|n| !PHASES.contains(&n.as_str())) {
                    return Err(
                        format!("unknown phase {bad:?}; phases: {}", PHASES.join(",")).into(),
                    );
                }
                chosen = Some(names);
            }
            "--profiles" => {
                let dir = PathBuf::from(args.next().ok_or("--profiles needs a directory")?);
                std::fs::create_dir_all(&dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                profiles = Some(dir);
            }
            "--rounds" => {
                let n = args.next().ok_or("--rounds needs a number")?;
                provider_rounds = match n.parse() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--rounds {n:?}: expected a number above 0").into()),
                };
            }
            "--split-webhook" => split_webhook = true,
            other => {
                return Err(format!(
                    "unknown argument {other:?} (--phases {}, --profiles DIR, --rounds N, --split-webhook)",
                    PHASES.join(",")
                )
                .into());
            }
        }
    }
    Ok(Options {
        phases: chosen.unwrap_or_else(|| PHASES.iter().map(|p| (*p).to_owned()).collect()),
        profiles,
        provider_rounds,
        split_webhook,
    })
}

fn main() -> Result {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

struct Row {
    metric: String,
    value: String,
    target: String,
    met: Option<bool>,
}

fn row(metric: &str, value: String, target: &str, met: Option<bool>) -> Row {
    Row {
        metric: metric.to_owned(),
        value,
        target: target.to_owned(),
        met,
    }
}

async fn run() -> Result {
    let Options {
        phases,
        profiles,
        provider_rounds,
        split_webhook,
    } = options()?;
    let runs = |phase: &str| phases.iter().any(|p| p == phase);
    let started = Instant::now();
    eprintln!("[bench] starting the cluster (etcd, kube-apiserver, kcm, shared webhook)…");
    let scenario = Scenario::new_with(
        harness::cheiron!(),
        "bench",
        ControlPlaneOptions {
            split_webhook,
            ..ControlPlaneOptions::default()
        },
    )
    .await?;
    // The metadata watches of cheiron's copies besides the benchmark's own: the controller's,
    // and the shared webhook's unless it runs with the split install's rights.
    let copy_watches = CopyWatches(if split_webhook { 1 } else { 2 });
    eprintln!("[bench] copies watched by {copy_watches}");
    let cluster = scenario.cluster()?;
    let client = scenario.client().clone();
    eprintln!(
        "[bench] cluster up after {:.1?}; files and logs: {}",
        started.elapsed(),
        cluster.dir.display()
    );

    let plugin = FakePlugin::install(&cluster.dir.join("credential-providers"))?;
    let (config, bin) = (
        plugin.config.display().to_string(),
        plugin.bin.display().to_string(),
    );
    let controller = CheironProcess::controller(
        "bench-controller",
        &[
            "--no-leader-election",
            "--resync",
            RESYNC,
            "--credential-provider-config",
            &config,
            "--credential-provider-bin-dir",
            &bin,
        ],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    eprintln!(
        "[bench] cheiron controller ready ({})",
        controller.log().display()
    );

    let sources = create_namespace(&client, &format!("{}-sources", scenario.id()), &[]).await?;
    let meter = Meter::new(&client, &cluster.dir, &controller)?;

    let mut rows = Vec::new();
    if runs("latency") {
        rows.extend(latency(&scenario, &client, &sources).await?);
    }
    let mut bare_ready = false;
    if runs("rotation") {
        rotation_namespaces(&scenario, &client, &mut bare_ready).await?;
        rows.extend(
            rotation(
                &scenario,
                &client,
                &sources,
                &controller,
                &meter,
                copy_watches,
            )
            .await?,
        );
    }
    if runs("steady") {
        rows.extend(steady_state(&client, &controller).await?);
    }
    if runs("provider") {
        rotation_namespaces(&scenario, &client, &mut bare_ready).await?;
        let profiler = profiles
            .map(|dir| Profiler::new(&client, dir, &controller))
            .transpose()?;
        rows.extend(
            provider_rotation(
                &scenario,
                &client,
                &controller,
                &meter,
                &plugin,
                ProviderRounds {
                    profiler: profiler.as_ref(),
                    rounds: provider_rounds,
                    copy_watches,
                },
            )
            .await?,
        );
    }

    eprintln!("[bench] stopping the controller");
    let controller_stopped = tokio::task::spawn_blocking(move || controller.stop()).await?;
    eprintln!("[bench] controller exited: {controller_stopped:?}");

    if runs("health") {
        rows.extend(health(&scenario, &client).await?);
    }
    if runs("memory") {
        rows.extend(memory(&scenario, &client).await?);
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
    eprintln!("[bench] total runtime {:.1?}", started.elapsed());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 1. new namespace → Secret present

async fn latency(scenario: &Scenario, client: &Client, sources: &str) -> Result<Vec<Row>> {
    eprintln!("[bench] latency: new namespace → Secret present, {LATENCY_NAMESPACES} namespaces");
    create_source(client, sources, "latency-pull", "latency-v1").await?;
    let manager = format!("{}-latency", scenario.id());
    apply_cluster_manager(scenario, &manager, "latency", sources, "latency-pull").await?;

    let (tx, mut rx) = mpsc::unbounded_channel::<(String, Instant)>();
    let watch = tokio::spawn(watch_copies(client.clone(), manager.clone(), move |s| {
        let _ = tx.send((s.namespace().unwrap_or_default(), Instant::now()));
    }));

    let mut seen: HashMap<String, Instant> = HashMap::new();
    let mut wait_for = async |ns: &str| -> Result<Instant> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(at) = seen.get(ns) {
                return Ok(*at);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, rx.recv()).await {
                Ok(Some((n, at))) => {
                    seen.entry(n).or_insert(at);
                }
                Ok(None) => return Err("the Secret watch ended".into()),
                Err(_) => return Err(format!("no Secret in {ns} after 60 s").into()),
            }
        }
    };

    // Warm-up (not counted): the controller has seen the manager, the watch runs.
    let warm = format!("{}-lat-warm", scenario.id());
    create_namespace(client, &warm, &[(TARGET, "latency")]).await?;
    wait_for(&warm).await?;

    let mut samples = Vec::with_capacity(LATENCY_NAMESPACES);
    for i in 0..LATENCY_NAMESPACES {
        let ns = format!("{}-lat-{i}", scenario.id());
        let created = Instant::now();
        create_namespace(client, &ns, &[(TARGET, "latency")]).await?;
        let present = wait_for(&ns).await?;
        samples.push(present.saturating_duration_since(created));
        if (i + 1) % 25 == 0 {
            eprintln!("[bench]   {}/{LATENCY_NAMESPACES}", i + 1);
        }
    }
    watch.abort();
    samples.sort();
    let p50 = percentile(&samples, 50);
    let p99 = percentile(&samples, 99);
    let max = samples.last().copied().unwrap_or_default();
    eprintln!("[bench] latency p50 {p50:.1?} p99 {p99:.1?} max {max:.1?}");
    Ok(vec![
        row(
            &format!("new namespace → Secret present, p50 ({LATENCY_NAMESPACES} namespaces)"),
            ms(p50),
            "—",
            None,
        ),
        row(
            &format!("new namespace → Secret present, p99 ({LATENCY_NAMESPACES} namespaces)"),
            format!("{} (max {})", ms(p99), ms(max)),
            "< 1 s",
            Some(p99 < Duration::from_secs(1)),
        ),
    ])
}

// ---------------------------------------------------------------------------------------------
// 2. rotation

/// Creates the [`ROTATION_NAMESPACES`] namespaces labelled `TARGET=rotation` and the bare
/// client's Secret in each, once.
async fn rotation_namespaces(scenario: &Scenario, client: &Client, done: &mut bool) -> Result {
    if *done {
        return Ok(());
    }
    eprintln!("[bench] rotation: creating {ROTATION_NAMESPACES} namespaces");
    let id = scenario.id().to_owned();
    let namespaces: Vec<String> = (0..ROTATION_NAMESPACES)
        .map(|i| format!("{id}-rot-{i}"))
        .collect();
    stream::iter(namespaces.iter())
        .map(|ns| create_namespace(client, ns, &[(TARGET, "rotation")]))
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    eprintln!("[bench] rotation: creating {ROTATION_NAMESPACES} bare-client Secrets");
    let bare_v1 = docker_config("rotation-v1");
    stream::iter(namespaces.iter())
        .map(|ns| {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            let secret = docker_config_secret("bare-pull", &bare_v1, &[(BARE, "true")]);
            async move { api.create(&PostParams::default(), &secret).await }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    *done = true;
    Ok(())
}

async fn rotation(
    scenario: &Scenario,
    client: &Client,
    sources: &str,
    controller: &CheironProcess,
    meter: &Meter,
    copy_watches: CopyWatches,
) -> Result<Vec<Row>> {
    create_source(client, sources, "rotation-pull", "rotation-v1").await?;
    let manager = format!("{}-rotation", scenario.id());
    eprintln!("[bench] rotation: applying the manager, waiting for {ROTATION_NAMESPACES} copies");
    apply_cluster_manager(scenario, &manager, "rotation", sources, "rotation-pull").await?;
    let v1 = docker_config("rotation-v1");
    let since = Instant::now();
    loop {
        let copies = copies_of(client, &manager).await?;
        let holding = copies.iter().filter(|c| holds(c, &v1)).count();
        if holding == ROTATION_NAMESPACES {
            break;
        }
        if since.elapsed() > Duration::from_secs(600) {
            return Err(format!("only {holding}/{ROTATION_NAMESPACES} copies after 600 s").into());
        }
        eprintln!("[bench]   {holding}/{ROTATION_NAMESPACES} copies");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!(
        "[bench] rotation: all copies present after {:.1?}; creating {ROTATION_NAMESPACES} bare-client Secrets shaped like them",
        since.elapsed()
    );
    create_shaped(client, &manager, SHAPED, "shaped-pull").await?;
    eprintln!("[bench] rotation: waiting for the controller to go quiet");
    settle_service_accounts(client).await?;
    quiesce(controller).await?;
    garbage_collector_settled(meter).await?;

    // Alternating rounds (bare, cheiron, bare, …, bare) so that drift in the machine's load
    // hits both sides alike; medians are compared.
    let mut bare = Vec::new();
    let mut bare_observed = Vec::new();
    let mut cheiron = Vec::new();
    let mut cheiron_first = Vec::new();
    let (mut bare_costs, mut cheiron_costs) = (Vec::new(), Vec::new());
    let (mut shaped, mut shaped_costs) = (Vec::new(), Vec::new());
    let (mut watched, mut watched_costs) = (Vec::new(), Vec::new());
    for round in 0..=ROTATION_ROUNDS {
        let (written, observed, costs) =
            bare_replace(client, meter, &format!("bare-{round}")).await?;
        eprintln!(
            "[bench] rotation round {round}: bare client {written:.2?} (all seen through a watch: {observed:.2?}); {}",
            costs.describe()
        );
        bare.push(written);
        bare_observed.push(observed);
        bare_costs.push(costs);
        quiesce(controller).await?;
        if round == ROTATION_ROUNDS {
            break;
        }
        let (written, observed, costs) =
            bare_replace_labelled(client, meter, SHAPED, &format!("shaped-{round}")).await?;
        eprintln!(
            "[bench] rotation round {round}: bare client, cheiron-shaped Secrets {written:.2?} (all seen through a watch: {observed:.2?}); {}",
            costs.describe()
        );
        shaped.push(written);
        shaped_costs.push(costs);
        quiesce(controller).await?;
        // The same, with as many metadata watches of those Secrets open as cheiron's copies
        // have (the controller's and the webhook's): what watching the copies costs the
        // apiserver per write.
        let watches =
            MetadataWatches::open(client, &format!("{SHAPED}=true"), copy_watches.0).await?;
        let (written, observed, costs) =
            bare_replace_labelled(client, meter, SHAPED, &format!("watched-{round}")).await?;
        drop(watches);
        eprintln!(
            "[bench] rotation round {round}: bare client, cheiron-shaped Secrets under {copy_watches} {written:.2?} (all seen through a watch: {observed:.2?}); {}",
            costs.describe()
        );
        watched.push(written);
        watched_costs.push(costs);
        quiesce(controller).await?;
        let (first, took, costs) = rotate_once(
            client,
            meter,
            &manager,
            sources,
            &format!("rotation-{round}"),
        )
        .await?;
        eprintln!(
            "[bench] rotation round {round}: cheiron {took:.2?} (first copy after {first:.2?}); {}",
            costs.describe()
        );
        cheiron.push(took);
        cheiron_first.push(first);
        cheiron_costs.push(costs);
        quiesce(controller).await?;
    }

    let list = |v: &[Duration]| v.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ");
    let (bare_all, observed_all, cheiron_all) = (list(&bare), list(&bare_observed), list(&cheiron));
    let shaped_all = list(&shaped);
    let shaped_median = median(&mut shaped);
    let watched_all = list(&watched);
    let watched_median = median(&mut watched);
    let bare_median = median(&mut bare);
    let observed_median = median(&mut bare_observed);
    let cheiron_median = median(&mut cheiron);
    let first_median = median(&mut cheiron_first);
    let ratio = cheiron_median.as_secs_f64() / bare_median.as_secs_f64();
    let observed_ratio = cheiron_median.as_secs_f64() / observed_median.as_secs_f64();
    Ok(vec![
        row(
            &format!(
                "rotation, {ROTATION_NAMESPACES} copies: bare client, {BARE_WRITE_CONCURRENCY} replaces in flight, until the last write returned (median of {})",
                bare.len()
            ),
            format!("{} (runs: {bare_all})", ms(bare_median)),
            "—",
            None,
        ),
        row(
            &format!(
                "rotation, {ROTATION_NAMESPACES} copies: same bare writes, until a watch saw all of them (median of {})",
                bare_observed.len()
            ),
            format!("{} (runs: {observed_all})", ms(observed_median)),
            "—",
            None,
        ),
        row(
            &format!(
                "rotation, {ROTATION_NAMESPACES} copies: cheiron, source update → a watch saw all copies updated (median of {ROTATION_ROUNDS})"
            ),
            format!(
                "{} = **{ratio:.2} × bare writes**, {observed_ratio:.2} × bare seen; first copy after {} (runs: {cheiron_all})",
                ms(cheiron_median),
                ms(first_median)
            ),
            "≤ 1.25 × bare",
            Some(ratio <= 1.25),
        ),
        row(
            &format!(
                "rotation, {ROTATION_NAMESPACES} copies: bare client writing Secrets shaped like cheiron's copies (same labels, annotations, ownerReference; not watched by cheiron), until the last write returned (median of {})",
                shaped.len()
            ),
            format!(
                "{} = {:.2} × bare writes (runs: {shaped_all})",
                ms(shaped_median),
                shaped_median.as_secs_f64() / bare_median.as_secs_f64()
            ),
            "—",
            None,
        ),
        row(
            &format!(
                "rotation, {ROTATION_NAMESPACES} copies: the same cheiron-shaped writes under {copy_watches}, as cheiron's copies have, until the last write returned (median of {})",
                watched.len()
            ),
            format!(
                "{} = {:.2} × bare writes, {:.2} × shaped (runs: {watched_all})",
                ms(watched_median),
                watched_median.as_secs_f64() / bare_median.as_secs_f64(),
                watched_median.as_secs_f64() / shaped_median.as_secs_f64()
            ),
            "—",
            None,
        ),
        row(
            "rotation, what a bare round cost (medians, from its first write until a watch saw the last)",
            Costs::median(&bare_costs).describe(),
            "—",
            None,
        ),
        row(
            "rotation, what a bare round of cheiron-shaped Secrets cost (medians, the same window)",
            Costs::median(&shaped_costs).describe(),
            "—",
            None,
        ),
        row(
            "rotation, what a watched round of cheiron-shaped Secrets cost (medians, the same window)",
            Costs::median(&watched_costs).describe(),
            "—",
            None,
        ),
        row(
            "rotation, what a cheiron round cost (medians, from the source update until a watch saw the last copy)",
            Costs::median(&cheiron_costs).describe(),
            "—",
            None,
        ),
    ])
}

/// Creates in each rotation namespace a Secret `name` labelled `label`, with the labels,
/// annotations and ownerReference of `manager`'s copy there, but a managed-by value other
/// than cheiron's: what a bare client writing cheiron's objects would write, without cheiron
/// watching it.
async fn create_shaped(client: &Client, manager: &str, label: &str, name: &str) -> Result {
    let copies = copies_of(client, manager).await?;
    stream::iter(copies)
        .map(|copy| {
            let ns = copy.namespace().unwrap_or_default();
            let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
            let mut labels = copy.metadata.labels.clone().unwrap_or_default();
            labels.insert(
                "app.kubernetes.io/managed-by".to_owned(),
                "bench".to_owned(),
            );
            labels.insert(label.to_owned(), "true".to_owned());
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    namespace: Some(ns),
                    labels: Some(labels),
                    annotations: copy.metadata.annotations.clone(),
                    owner_references: copy.metadata.owner_references.clone(),
                    ..ObjectMeta::default()
                },
                type_: copy.type_.clone(),
                data: copy.data.clone(),
                ..Secret::default()
            };
            async move { api.create(&PostParams::default(), &secret).await }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// The median (upper one for an even count).
fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// Rotates the source to `password` and returns how long until every copy holds it, timed
/// from just before the source update (the copies' watch is synced before, so no event is
/// missed).
async fn rotate_once(
    client: &Client,
    meter: &Meter,
    manager: &str,
    sources: &str,
    password: &str,
) -> Result<(Duration, Duration, Costs)> {
    let expected = docker_config(password);
    let observer = Observer::start(client, copies_selector(manager), move |s| {
        holds(s, &expected)
    })
    .await?;
    let before = meter.sample().await?;
    let rotated = Instant::now();
    replace_source(client, sources, "rotation-pull", password).await?;
    let (first, done) = observer.done().await?;
    let costs = meter.sample().await?.since(&before);
    Ok((
        first.saturating_duration_since(rotated),
        done.saturating_duration_since(rotated),
        costs,
    ))
}

/// Waits (at most 180 s) until every namespace has its `default` ServiceAccount, so that
/// kube-controller-manager's backlog does not load the machine during a measurement.
async fn settle_service_accounts(client: &Client) -> Result {
    let namespaces: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
    let accounts: Api<PartialObjectMeta<ServiceAccount>> = Api::all(client.clone());
    let since = Instant::now();
    loop {
        let expected = namespaces
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
        let defaults = accounts
            .list_metadata(&ListParams::default().fields("metadata.name=default"))
            .await?
            .items
            .len();
        if defaults >= expected {
            eprintln!("[bench]   {defaults} default ServiceAccounts for {expected} namespaces");
            return Ok(());
        }
        if since.elapsed() > Duration::from_secs(180) {
            eprintln!(
                "[bench]   only {defaults}/{expected} default ServiceAccounts after 180 s; going on"
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Replaces every bare-client Secret with new content, `BARE_WRITE_CONCURRENCY` in flight,
/// from a list taken before the clock starts (cheiron holds its copies in a cache too).
async fn bare_replace(
    client: &Client,
    meter: &Meter,
    password: &str,
) -> Result<(Duration, Duration, Costs)> {
    bare_replace_labelled(client, meter, BARE, password).await
}

/// [`bare_replace`] of the Secrets labelled `label=true`.
async fn bare_replace_labelled(
    client: &Client,
    meter: &Meter,
    label: &str,
    password: &str,
) -> Result<(Duration, Duration, Costs)> {
    let all: Api<Secret> = Api::all(client.clone());
    let secrets = all
        .list(&ListParams::default().labels(&format!("{label}=true")))
        .await?
        .items;
    if secrets.len() != ROTATION_NAMESPACES {
        return Err(format!(
            "{} bare Secrets, expected {ROTATION_NAMESPACES}",
            secrets.len()
        )
        .into());
    }
    let content = docker_config(password);
    let expected = content.clone();
    let observer = Observer::start(client, format!("{label}=true"), move |s| {
        holds(s, &expected)
    })
    .await?;
    let before = meter.sample().await?;
    let started = Instant::now();
    stream::iter(secrets)
        .map(|mut secret| {
            let api: Api<Secret> =
                Api::namespaced(client.clone(), &secret.namespace().unwrap_or_default());
            secret.data = Some(docker_config_data(&content));
            // As cheiron writes: without the managedFields the list returned, which the
            // apiserver would otherwise decode and check on every write.
            secret.metadata.managed_fields = None;
            async move {
                let name = secret.name_any();
                api.replace(&name, &PostParams::default(), &secret).await
            }
        })
        .buffer_unordered(BARE_WRITE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let written = started.elapsed();
    let observed = observer.done().await?.1.saturating_duration_since(started);
    let costs = meter.sample().await?.since(&before);
    Ok((written, observed, costs))
}

/// How many metadata watches of cheiron's copies are open besides the benchmark's own, which the
/// shaped rounds open as many of.
#[derive(Clone, Copy, Debug)]
struct CopyWatches(usize);

impl std::fmt::Display for CopyWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            1 => f.write_str(
                "1 metadata watch (the controller's; the webhook has the split install's rights)",
            ),
            n => write!(
                f,
                "{n} metadata watches (the controller's and the webhook's)"
            ),
        }
    }
}

/// What a round cost whom: the CPU seconds of the control plane's processes, cheiron's
/// controller and this benchmark, and the apiserver's requests by verb and resource
/// (`apiserver_request_total`, every client's).
#[derive(Debug, Default)]
struct Costs {
    cpu: BTreeMap<String, f64>,
    requests: BTreeMap<String, f64>,
}

impl Costs {
    fn since(&self, before: &Self) -> Self {
        let minus = |now: &BTreeMap<String, f64>, then: &BTreeMap<String, f64>| {
            now.iter()
                .map(|(k, v)| (k.clone(), v - then.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, v)| *v > 0.0)
                .collect()
        };
        Self {
            cpu: minus(&self.cpu, &before.cpu),
            requests: minus(&self.requests, &before.requests),
        }
    }

    /// The per-key medians of `rounds`.
    fn median(rounds: &[Costs]) -> Self {
        let of = |pick: fn(&Costs) -> &BTreeMap<String, f64>| {
            let keys: HashSet<&String> = rounds.iter().flat_map(|r| pick(r).keys()).collect();
            keys.into_iter()
                .map(|k| {
                    let mut v: Vec<f64> = rounds
                        .iter()
                        .map(|r| pick(r).get(k).copied().unwrap_or(0.0))
                        .collect();
                    v.sort_by(f64::total_cmp);
                    (k.clone(), v.get(v.len() / 2).copied().unwrap_or(0.0))
                })
                .collect()
        };
        Self {
            cpu: of(|c| &c.cpu),
            requests: of(|c| &c.requests),
        }
    }

    fn describe(&self) -> String {
        let cpu: Vec<String> = self
            .cpu
            .iter()
            .map(|(k, v)| format!("{k} {v:.2} s"))
            .collect();
        let requests: Vec<String> = self
            .requests
            .iter()
            .filter(|(_, v)| **v >= 1.0)
            .map(|(k, v)| format!("{k} {v:.0}"))
            .collect();
        format!("CPU: {}; requests: {}", cpu.join(", "), requests.join(", "))
    }
}

/// Samples [`Costs`].
struct Meter {
    client: Client,
    pids: Vec<(&'static str, u32)>,
}

impl Meter {
    fn new(client: &Client, cluster_dir: &Path, controller: &CheironProcess) -> Result<Self> {
        let mut pids = vec![
            ("controller", controller.pid()?),
            ("bench", std::process::id()),
        ];
        for (name, binary) in [
            ("apiserver", "kube-apiserver"),
            ("etcd", "etcd"),
            ("kcm", "kube-controller-manager"),
        ] {
            let pid = harness::control_plane_pid(cluster_dir, binary)
                .ok_or_else(|| format!("cannot find {binary}"))?;
            pids.push((name, pid));
        }
        Ok(Self {
            client: client.clone(),
            pids,
        })
    }

    async fn sample(&self) -> Result<Costs> {
        let mut costs = Costs::default();
        for (name, pid) in &self.pids {
            costs
                .cpu
                .insert((*name).to_owned(), harness::cpu_seconds(*pid)?);
        }
        let text = self
            .client
            .request_text(http::Request::get("/metrics").body(Vec::new())?)
            .await?;
        for line in text.lines() {
            let Some(labels) = line
                .strip_prefix("apiserver_request_total{")
                .and_then(|l| l.split_once('}'))
            else {
                continue;
            };
            let label = |name: &str| {
                labels
                    .0
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or("")
                    .to_owned()
            };
            let Ok(value) = labels.1.trim().parse::<f64>() else {
                continue;
            };
            let key = format!("{} {}", label("verb"), label("resource"));
            *costs.requests.entry(key).or_default() += value;
        }
        Ok(costs)
    }
}

/// How long each profile of a provider round runs: a round takes about 1 s, and every kind of
/// round gets the same window, so that the apiserver's background work weighs the same in each.
const PROFILE_SECONDS: u64 = 3;

/// `--profiles DIR`: a CPU profile of kube-apiserver (its `/debug/pprof/profile`, served by
/// default to a client allowed `get` on that path) and a `perf record` of cheiron's controller
/// over each provider round, written to DIR as `ROUND-KIND-apiserver.pb.gz` (read with
/// `go tool pprof`) and `ROUND-KIND-controller.perf.data` (`perf report -i`).
struct Profiler {
    client: Client,
    dir: PathBuf,
    controller: u32,
}

/// The profiles of one round, running.
struct Profile {
    apiserver: tokio::task::JoinHandle<Result>,
    controller: Option<Child>,
}

impl Profiler {
    fn new(client: &Client, dir: PathBuf, controller: &CheironProcess) -> Result<Self> {
        Ok(Self {
            client: client.clone(),
            dir,
            controller: controller.pid()?,
        })
    }

    /// Starts the profiles of round `name` when there is a profiler, and returns once the
    /// apiserver's is running.
    async fn start(profiler: Option<&Self>, name: &str) -> Result<Option<Profile>> {
        let Some(profiler) = profiler else {
            return Ok(None);
        };
        let client = profiler.client.clone();
        let path = profiler.dir.join(format!("{name}-apiserver.pb.gz"));
        let apiserver = tokio::spawn(async move {
            let request =
                http::Request::get(format!("/debug/pprof/profile?seconds={PROFILE_SECONDS}"))
                    .body(Vec::new())?;
            let mut body = client.request_stream(request).await?;
            let mut bytes = Vec::new();
            futures::AsyncReadExt::read_to_end(&mut body, &mut bytes).await?;
            std::fs::write(&path, bytes)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(())
        });
        let perf_data = profiler.dir.join(format!("{name}-controller.perf.data"));
        // Without perf the apiserver's profile still says where the time goes.
        let controller = Command::new("perf")
            .args(["record", "-q", "-F", "999", "-p"])
            .arg(profiler.controller.to_string())
            .arg("-o")
            .arg(&perf_data)
            .args(["--", "sleep", &PROFILE_SECONDS.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        // The apiserver starts profiling when the request arrives.
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(Some(Profile {
            apiserver,
            controller,
        }))
    }
}

impl Profile {
    /// Waits for the profiles of a round, if any.
    async fn finish(profile: Option<Self>) -> Result {
        let Some(profile) = profile else {
            return Ok(());
        };
        profile.apiserver.await??;
        if let Some(mut perf) = profile.controller {
            tokio::task::spawn_blocking(move || perf.wait()).await??;
        }
        Ok(())
    }
}

/// A watch on the Secrets matching a selector that notes when all
/// [`ROTATION_NAMESPACES`] of them are `expected`.
struct Observer {
    first: oneshot::Receiver<Instant>,
    done: oneshot::Receiver<Instant>,
    watch: tokio::task::JoinHandle<()>,
}

impl Observer {
    /// Starts the watch and returns once its initial list is delivered, so that no later
    /// change is missed.
    async fn start(
        client: &Client,
        selector: String,
        expected: impl Fn(&Secret) -> bool + Send + 'static,
    ) -> Result<Self> {
        let (synced_tx, synced_rx) = oneshot::channel::<()>();
        let (done_tx, done) = oneshot::channel::<Instant>();
        let (first_tx, first) = oneshot::channel::<Instant>();
        let mut first_tx = Some(first_tx);
        let mut synced_tx = Some(synced_tx);
        let mut done_tx = Some(done_tx);
        let mut holding: HashSet<String> = HashSet::new();
        let watch = tokio::spawn(watch_copies_with_sync(
            client.clone(),
            selector,
            move |secret| {
                let ns = secret.namespace().unwrap_or_default();
                if expected(secret) {
                    if let Some(tx) = first_tx.take() {
                        let _ = tx.send(Instant::now());
                    }
                    holding.insert(ns);
                } else {
                    holding.remove(&ns);
                }
                if holding.len() == ROTATION_NAMESPACES
                    && let Some(tx) = done_tx.take()
                {
                    let _ = tx.send(Instant::now());
                }
            },
            move || {
                if let Some(tx) = synced_tx.take() {
                    let _ = tx.send(());
                }
            },
        ));
        tokio::time::timeout(Duration::from_secs(60), synced_rx)
            .await
            .map_err(|_| "the Secrets' watch did not sync within 60 s")??;
        Ok(Self { first, done, watch })
    }

    /// Stops watching.
    fn abort(self) {
        self.watch.abort();
    }

    /// When the first and when the last held the expected content (at most 300 s).
    async fn done(self) -> Result<(Instant, Instant)> {
        let done = tokio::time::timeout(Duration::from_secs(300), self.done)
            .await
            .map_err(|_| "not every Secret held the new content within 300 s")??;
        self.watch.abort();
        let first = self.first.await?;
        Ok((first, done))
    }
}

/// Reads `counter` every second until it has not moved for 3 s in a row, or `limit` has
/// passed. Returns how far it moved meanwhile, and whether it came to rest.
async fn until_at_rest<F, Fut>(limit: Duration, mut counter: F) -> Result<(f64, bool)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<f64>>,
{
    let since = Instant::now();
    let first = counter().await?;
    let mut last = first;
    let mut stable = 0;
    while stable < 3 {
        if since.elapsed() > limit {
            return Ok((last - first, false));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = counter().await?;
        if now == last {
            stable += 1;
        } else {
            stable = 0;
            last = now;
        }
    }
    Ok((last - first, true))
}

/// Waits until the controller's write counters have not moved for 3 s (at most 180 s).
async fn quiesce(controller: &CheironProcess) -> Result<()> {
    let (_, at_rest) = until_at_rest(Duration::from_secs(180), || writes(controller)).await?;
    if !at_rest {
        eprintln!("[bench]   (the controller is still writing after 180 s; going on)");
    }
    Ok(())
}

/// Waits until kube-controller-manager's garbage collector has stopped checking the owners of
/// new copies: the apiserver's count of `GET`s of cheiron's managers has not moved for 3 s (at
/// most 600 s). When a copy reaches the collector before it has the manager's kind mapped
/// (within its 30 s discovery period of the CRDs' install, as here), it checks every copy of
/// that manager once, with a `GET` of the copy and one of its owner, at the collector's own
/// client rate limit (20 requests a second by default): about 100 s of background load on the
/// apiserver for 1 000 copies, which must not overlap the measured rounds.
async fn garbage_collector_settled(meter: &Meter) -> Result<()> {
    let since = Instant::now();
    let owner_reads = || async {
        Ok(meter
            .sample()
            .await?
            .requests
            .iter()
            .filter(|(key, _)| key.starts_with("GET ") && key.ends_with("imagepullsecretmanagers"))
            .map(|(_, count)| count)
            .sum::<f64>())
    };
    let (reads, at_rest) = until_at_rest(Duration::from_secs(600), owner_reads).await?;
    if !at_rest {
        return Err(format!(
            "the apiserver still serves GETs of managers after 600 s ({reads} so far)"
        )
        .into());
    }
    eprintln!(
        "[bench]   the garbage collector's owner checks settled after {:.1?} ({reads} GETs of managers meanwhile)",
        since.elapsed()
    );
    Ok(())
}

async fn writes(controller: &CheironProcess) -> Result<f64> {
    Ok(controller.metric("cheiron_secrets_written_total").await?
        + controller
            .metric("cheiron_service_accounts_patched_total")
            .await?)
}

// ---------------------------------------------------------------------------------------------
// 3. steady state

async fn steady_state(client: &Client, controller: &CheironProcess) -> Result<Vec<Row>> {
    eprintln!(
        "[bench] steady state: waiting for quiet, then watching {STEADY_WINDOW:?} (resync {RESYNC} s)"
    );
    settle_service_accounts(client).await?;
    quiesce(controller).await?;
    let before = resource_versions(client).await?;
    let runs_before = controller.metric("cheiron_reconcile_runs_total").await?;
    let writes_before = writes(controller).await?;
    tokio::time::sleep(STEADY_WINDOW).await;
    let after = resource_versions(client).await?;
    let runs = controller.metric("cheiron_reconcile_runs_total").await? - runs_before;
    let metric_writes = writes(controller).await? - writes_before;

    let mut changed = Vec::new();
    for (key, rv) in &after {
        if before.get(key) != Some(rv) {
            changed.push(key.clone());
        }
    }
    for key in before.keys() {
        if !after.contains_key(key) {
            changed.push(format!("{key} (deleted)"));
        }
    }
    let counts = |prefix: &str| before.keys().filter(|k| k.starts_with(prefix)).count();
    eprintln!(
        "[bench] steady state: {} objects watched ({} Secrets, {} managers, {} ServiceAccounts), \
         {runs} reconciles, {} changed, metric writes {metric_writes}",
        before.len(),
        counts("Secret/"),
        counts("Manager/") + counts("ClusterManager/"),
        counts("ServiceAccount/"),
        changed.len()
    );
    for key in changed.iter().take(10) {
        eprintln!("[bench]   changed: {key}");
    }
    if changed.is_empty() && runs == 0.0 {
        eprintln!("[bench]   warning: no reconcile ran in the window; the resync was not observed");
    }
    Ok(vec![row(
        &format!(
            "steady state: writes in {}s (resync {RESYNC} s) to {} cheiron Secrets, {} managers, {} ServiceAccounts",
            STEADY_WINDOW.as_secs(),
            counts("Secret/"),
            counts("Manager/") + counts("ClusterManager/"),
            counts("ServiceAccount/"),
        ),
        format!(
            "{} (controller counters: {metric_writes} writes, {runs} reconciles)",
            changed.len()
        ),
        "0",
        Some(changed.is_empty() && metric_writes == 0.0),
    )])
}

async fn resource_versions(client: &Client) -> Result<BTreeMap<String, String>> {
    let mut versions = BTreeMap::new();
    let key = |kind: &str, meta: &ObjectMeta| {
        format!(
            "{kind}/{}/{}",
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or("")
        )
    };
    let rv = |meta: &ObjectMeta| meta.resource_version.clone().unwrap_or_default();
    let secrets: Api<PartialObjectMeta<Secret>> = Api::all(client.clone());
    for s in secrets
        .list_metadata(&ListParams::default().labels("app.kubernetes.io/managed-by=cheiron"))
        .await?
    {
        versions.insert(key("Secret", &s.metadata), rv(&s.metadata));
    }
    let accounts: Api<PartialObjectMeta<ServiceAccount>> = Api::all(client.clone());
    for s in accounts.list_metadata(&ListParams::default()).await? {
        versions.insert(key("ServiceAccount", &s.metadata), rv(&s.metadata));
    }
    for (kind, resource) in [
        ("Manager", ApiResource::erase::<ImagePullSecretManager>(&())),
        (
            "ClusterManager",
            ApiResource::erase::<ClusterImagePullSecretManager>(&()),
        ),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        for m in api.list(&ListParams::default()).await? {
            versions.insert(key(kind, &m.metadata), rv(&m.metadata));
        }
    }
    Ok(versions)
}

// ---------------------------------------------------------------------------------------------
// 4. credential-provider rotation

/// The fake credential-provider plugin (`tests/support/fake_credential_provider.rs`) installed
/// as [`PROVIDER`]: the controller's bin dir and config, and the plugin's state directory.
struct FakePlugin {
    bin: PathBuf,
    config: PathBuf,
    state: PathBuf,
}

impl FakePlugin {
    fn install(dir: &Path) -> Result<Self> {
        let bin = dir.join("bin");
        let state = dir.join("state");
        std::fs::create_dir_all(&bin)?;
        std::fs::create_dir_all(&state)?;
        std::fs::copy(
            env!("CARGO_BIN_EXE_cheiron-fake-credential-provider"),
            bin.join(PROVIDER),
        )?;
        let host = PROVIDER_IMAGE.split('/').next().unwrap_or_default();
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: {PROVIDER}
    matchImages: [\"{host}\"]
    defaultCacheDuration: 1h
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    args: [--state, {}, --cache-duration, {PROVIDER_CACHE_SECONDS}s]
",
                state.display()
            ),
        )?;
        Ok(Self { bin, config, state })
    }

    /// When each call started, by call number (the plugin's `calls.log`).
    fn calls(&self) -> Result<BTreeMap<u64, SystemTime>> {
        let log = std::fs::read_to_string(self.state.join("calls.log")).unwrap_or_default();
        let mut calls = BTreeMap::new();
        for line in log.lines() {
            let (n, millis) = line
                .split_once(' ')
                .ok_or_else(|| format!("calls.log line {line:?}"))?;
            calls.insert(
                n.parse()?,
                UNIX_EPOCH + Duration::from_millis(millis.parse()?),
            );
        }
        Ok(calls)
    }

    /// The number of the last call (0 before the first).
    fn last_call(&self) -> Result<u64> {
        Ok(self.calls()?.keys().next_back().copied().unwrap_or(0))
    }
}

/// N of the `user-N` a copy of the provider entry holds (the fake plugin's Nth credential).
fn credential_number(copy: &Secret) -> Option<u64> {
    let data = copy.data.as_ref()?.get(".dockerconfigjson")?;
    let config: Value = serde_json::from_slice(&data.0).ok()?;
    config["auths"]
        .as_object()?
        .values()
        .next()?
        .get("username")?
        .as_str()?
        .strip_prefix("user-")?
        .parse()
        .ok()
}

/// The wall-clock time of `at` (to compare with the plugin's own clock).
fn wall(at: Instant) -> SystemTime {
    let now = Instant::now();
    SystemTime::now() - now.saturating_duration_since(at)
}

/// How the provider phase's rounds are run: profiled or not, how many, and under how many
/// watches of the copies.
struct ProviderRounds<'a> {
    profiler: Option<&'a Profiler>,
    rounds: usize,
    copy_watches: CopyWatches,
}

async fn provider_rotation(
    scenario: &Scenario,
    client: &Client,
    controller: &CheironProcess,
    meter: &Meter,
    plugin: &FakePlugin,
    ProviderRounds {
        profiler,
        rounds,
        copy_watches,
    }: ProviderRounds<'_>,
) -> Result<Vec<Row>> {
    let manager = format!("{}-provider", scenario.id());
    eprintln!(
        "[bench] provider rotation: applying a credentialProvider manager ({PROVIDER_CACHE_SECONDS} s cacheDuration), waiting for {ROTATION_NAMESPACES} copies"
    );
    scenario
        .apply_manager(&format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {manager}
spec:
  namespaceSelector:
    matchLabels:
      {TARGET}: rotation
  secrets:
    - name: provider-pull
      credentialProvider:
        image: {PROVIDER_IMAGE}
"
        ))
        .await?;
    let since = Instant::now();
    loop {
        let copies = copies_of(client, &manager).await?;
        let held: HashSet<Option<u64>> = copies.iter().map(credential_number).collect();
        if copies.len() == ROTATION_NAMESPACES && held.len() == 1 && !held.contains(&None) {
            break;
        }
        if since.elapsed() > Duration::from_secs(600) {
            return Err(format!(
                "{} copies holding {held:?} after 600 s, expected {ROTATION_NAMESPACES} holding one credential",
                copies.len()
            )
            .into());
        }
        eprintln!("[bench]   {}/{ROTATION_NAMESPACES} copies", copies.len());
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!(
        "[bench] provider rotation: all copies present after {:.1?} (plugin calls so far: {}); waiting for the controller to go quiet",
        since.elapsed(),
        plugin.last_call()?
    );
    settle_service_accounts(client).await?;
    create_shaped(client, &manager, PROVIDER_SHAPED, "provider-shaped-pull").await?;
    quiesce(controller).await?;
    garbage_collector_settled(meter).await?;

    // Each round: the bare client's writes, the same writes of Secrets shaped like the copies
    // under as many metadata watches as the copies have, then the next refresh the controller makes on its
    // own (after about half the cacheDuration), timed from the plugin call's start to the
    // moment a watch saw every copy hold the new credential. A round in which the refresh
    // came during the bare writes is discarded.
    let mut bare = Vec::new();
    let mut watched = Vec::new();
    let mut took = Vec::new();
    let mut first = Vec::new();
    let mut calls_per_rotation = Vec::new();
    let mut metric_calls_per_rotation = Vec::new();
    let mut writes_per_rotation = Vec::new();
    let mut discarded = 0;
    while took.len() < rounds {
        let before = plugin.last_call()?;
        let writes_before = controller.metric("cheiron_secrets_written_total").await?;
        let metric_calls_before = controller
            .metric("cheiron_credential_provider_calls_total")
            .await?;
        let round = bare.len();
        let profile = Profiler::start(profiler, &format!("{round}-bare")).await?;
        let (written, _, _) =
            bare_replace(client, meter, &format!("provider-bare-{round}")).await?;
        Profile::finish(profile).await?;
        let watches =
            MetadataWatches::open(client, &format!("{PROVIDER_SHAPED}=true"), copy_watches.0)
                .await?;
        let profile = Profiler::start(profiler, &format!("{round}-shaped-watched")).await?;
        let (written_watched, _, _) = bare_replace_labelled(
            client,
            meter,
            PROVIDER_SHAPED,
            &format!("provider-watched-{round}"),
        )
        .await?;
        Profile::finish(profile).await?;
        drop(watches);
        let next = before + 1;
        let observer = Observer::start(client, copies_selector(&manager), move |s| {
            credential_number(s) == Some(next)
        })
        .await?;
        if plugin.last_call()? != before {
            discarded += 1;
            eprintln!(
                "[bench] provider round: the plugin was called during the bare client's writes; round discarded"
            );
            observer.abort();
            quiesce(controller).await?;
            if discarded > rounds {
                return Err("the refresh kept coming during the bare writes".into());
            }
            continue;
        }
        // Profiled from the moment the plugin's call is seen (polled every 2 ms): the
        // controller's first write follows the call by 14 to 28 ms.
        let profile = match profiler {
            Some(_) if plugin.last_call()? == before => {
                while plugin.last_call()? == before {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Profiler::start(profiler, &format!("{round}-cheiron")).await?
            }
            _ => None,
        };
        bare.push(written);
        watched.push(written_watched);
        let (first_at, done_at) = observer.done().await?;
        Profile::finish(profile).await?;
        let called = *plugin
            .calls()?
            .get(&next)
            .ok_or_else(|| format!("no call {next} in the plugin's calls.log"))?;
        let all = wall(done_at).duration_since(called)?;
        let one = wall(first_at).duration_since(called)?;
        quiesce(controller).await?;
        let calls = plugin.last_call()? - before;
        let metric_calls = controller
            .metric("cheiron_credential_provider_calls_total")
            .await?
            - metric_calls_before;
        let writes = controller.metric("cheiron_secrets_written_total").await? - writes_before;
        eprintln!(
            "[bench] provider round {}: bare client {written:.2?}, shaped and watched {written_watched:.2?}; plugin call {next} → all copies {all:.2?} (first after {one:.2?}); {calls} plugin call(s) (metric +{metric_calls}), {writes} Secret writes",
            took.len()
        );
        took.push(all);
        first.push(one);
        calls_per_rotation.push(calls);
        metric_calls_per_rotation.push(metric_calls);
        writes_per_rotation.push(writes);
    }
    let (written, _, _) =
        bare_replace(client, meter, &format!("provider-bare-{}", bare.len())).await?;
    eprintln!("[bench] provider, last bare client run {written:.2?}");
    bare.push(written);

    let list = |v: &[Duration]| v.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ");
    let (bare_all, took_all, watched_all) = (list(&bare), list(&took), list(&watched));
    // Round by round, against the bare rounds just before each rotation: this machine's speed
    // drifts within a run, and a ratio of one round's neighbours is less exposed to it than a
    // ratio of medians taken over all rounds.
    let pairs = |of: &[Duration]| {
        let mut ratios: Vec<f64> = took
            .iter()
            .zip(of)
            .map(|(t, b)| t.as_secs_f64() / b.as_secs_f64())
            .collect();
        ratios.sort_by(f64::total_cmp);
        let listed = ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ");
        (ratios[ratios.len() / 2], listed)
    };
    let (paired_bare, paired_bare_all) = pairs(&bare);
    let (paired_watched, paired_watched_all) = pairs(&watched);
    let bare_median = median(&mut bare);
    let watched_median = median(&mut watched);
    let took_median = median(&mut took);
    let first_median = median(&mut first);
    let ratio = took_median.as_secs_f64() / bare_median.as_secs_f64();
    let one_call = calls_per_rotation.iter().all(|c| *c == 1)
        && metric_calls_per_rotation.iter().all(|c| *c == 1.0);
    let one_write_each = writes_per_rotation
        .iter()
        .all(|w| *w == ROTATION_NAMESPACES as f64);
    let join = |v: &[String]| v.join(", ");
    Ok(vec![
        row(
            &format!(
                "credential provider, {ROTATION_NAMESPACES} copies: plugin calls per rotation ({rounds} rotations, {PROVIDER_CACHE_SECONDS} s cacheDuration)"
            ),
            format!(
                "{} (plugin's own count; `cheiron_credential_provider_calls_total`: {})",
                join(
                    &calls_per_rotation
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                ),
                join(
                    &metric_calls_per_rotation
                        .iter()
                        .map(f64::to_string)
                        .collect::<Vec<_>>()
                ),
            ),
            "1",
            Some(one_call),
        ),
        row(
            &format!(
                "credential provider, {ROTATION_NAMESPACES} copies: Secret writes per rotation"
            ),
            format!(
                "{} (`cheiron_secrets_written_total`)",
                join(
                    &writes_per_rotation
                        .iter()
                        .map(f64::to_string)
                        .collect::<Vec<_>>()
                )
            ),
            &format!("{ROTATION_NAMESPACES} (one per copy)"),
            Some(one_write_each),
        ),
        row(
            &format!(
                "credential provider, {ROTATION_NAMESPACES} copies: bare client in the same run, {BARE_WRITE_CONCURRENCY} replaces in flight (median of {})",
                bare.len()
            ),
            format!("{} (runs: {bare_all})", ms(bare_median)),
            "—",
            None,
        ),
        row(
            &format!(
                "credential provider, {ROTATION_NAMESPACES} copies: bare client writing Secrets shaped like the copies under {copy_watches}, as the copies have (median of {})",
                watched.len()
            ),
            format!(
                "{} = {:.2} × bare writes (runs: {watched_all})",
                ms(watched_median),
                watched_median.as_secs_f64() / bare_median.as_secs_f64()
            ),
            "—",
            None,
        ),
        row(
            &format!(
                "credential provider, {ROTATION_NAMESPACES} copies: plugin call → a watch saw all copies updated (median of {rounds})"
            ),
            format!(
                "{} = **{ratio:.2} × bare writes**, {:.2} × the shaped and watched writes; first copy after {} (runs: {took_all}; {discarded} rounds discarded)",
                ms(took_median),
                took_median.as_secs_f64() / watched_median.as_secs_f64(),
                ms(first_median)
            ),
            "≤ 1.1 × bare",
            Some(ratio <= 1.1),
        ),
        row(
            &format!(
                "credential provider, {ROTATION_NAMESPACES} copies: each rotation against the rounds just before it (median of {rounds} ratios)"
            ),
            format!(
                "**{paired_bare:.2} × the bare writes** (ratios: {paired_bare_all}); {paired_watched:.2} × the shaped and watched writes (ratios: {paired_watched_all})"
            ),
            "≤ 1.1 × bare",
            Some(paired_bare <= 1.1),
        ),
    ])
}

// ---------------------------------------------------------------------------------------------
// 6. webhook memory (after 5., whose code follows the shared helpers below)

async fn memory(scenario: &Scenario, client: &Client) -> Result<Vec<Row>> {
    let cluster = scenario.cluster()?;
    let id = scenario.id().to_owned();
    let namespaces: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
    let existing = namespaces
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len();
    let missing = MEMORY_NAMESPACES.saturating_sub(existing);
    eprintln!("[bench] memory: {existing} namespaces exist, creating {missing}");
    let names: Vec<String> = (0..missing).map(|i| format!("{id}-m-{i}")).collect();
    let grouped: Vec<(String, String)> = names
        .iter()
        .enumerate()
        .map(|(i, ns)| (ns.clone(), format!("g{}", i % 10)))
        .collect();
    create_namespaces(client, "memory", "bench.cheiron.anny.co/group", &grouped).await?;

    let existing_managers = count_managers(client).await?;
    let cluster_managers = MEMORY_MANAGERS
        .saturating_sub(MEMORY_NAMESPACED_MANAGERS)
        .saturating_sub(existing_managers);
    eprintln!(
        "[bench] memory: {existing_managers} managers exist, creating {MEMORY_NAMESPACED_MANAGERS} namespaced and {cluster_managers} cluster managers"
    );
    let homes: Vec<String> = if names.is_empty() {
        vec![format!("{id}-sources")]
    } else {
        names.clone()
    };
    let mut yamls = Vec::new();
    for i in 0..MEMORY_NAMESPACED_MANAGERS {
        let ns = &homes[i % homes.len()];
        yamls.push(format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: mem-{i}
  namespace: {ns}
spec:
  secrets:
    - name: reg-{i}
      registry: registry-{i}.example.com
      username: user-{i}
      password: password-{i}
"
        ));
    }
    for j in 0..cluster_managers {
        yamls.push(format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {id}-mem-{j}
spec:
  namespaceSelector:
    matchLabels:
      bench.cheiron.anny.co/group: g{}
  secrets:
    - name: cluster-reg-{j}
      registry: cluster-{j}.example.com
      username: user-{j}
      password: password-{j}
",
            j % 10
        ));
    }
    stream::iter(yamls.iter())
        .map(|yaml| scenario.apply_manager(yaml))
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let total_namespaces = namespaces
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len();
    let total_managers = count_managers(client).await?;
    eprintln!(
        "[bench] memory: cluster holds {total_namespaces} namespaces, {total_managers} managers"
    );

    let [listen_port, admin_port] = free_ports()?;
    let log = cluster.dir.join("cheiron-webhook-memory.log");
    let mut webhook = Guard(
        Command::new(env!("CARGO_BIN_EXE_cheiron"))
            .args([
                "webhook",
                "--listen",
                &format!("127.0.0.1:{listen_port}"),
                "--admin-listen",
                &format!("127.0.0.1:{admin_port}"),
                "--shutdown-delay",
                "0",
            ])
            .arg("--tls-cert-dir")
            .arg(cluster.webhook_tls_dir())
            .env("KUBECONFIG", cluster.admin_kubeconfig())
            .env("CHEIRON_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove("CHEIRON_FROM")
            .env_remove("CHEIRON_SELF_SIGNED")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(log.with_extension("stderr.log"))?)
            .spawn()?,
    );
    let pid = webhook.0.id();
    eprintln!(
        "[bench] memory: cheiron webhook pid {pid}, log {}",
        log.display()
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let started = Instant::now();
    loop {
        if let Some(status) = webhook.0.try_wait()? {
            return Err(format!("cheiron webhook exited ({status}); see {}", log.display()).into());
        }
        let ready = http
            .get(format!("http://127.0.0.1:{admin_port}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().as_u16() == 200);
        if ready {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err("cheiron webhook not ready after 120 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "[bench] memory: /readyz 200 after {:.1?}; sampling VmRSS",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let status = PathBuf::from(format!("/proc/{pid}/status"));
    let (mut max_rss, mut hwm, mut anon, mut file) = (0, 0, 0, 0);
    for _ in 0..SAMPLES {
        let text = std::fs::read_to_string(&status)?;
        let rss = kib(&text, "VmRSS:")?;
        if rss >= max_rss {
            max_rss = rss;
            anon = kib(&text, "RssAnon:")?;
            file = kib(&text, "RssFile:")?;
        }
        hwm = hwm.max(kib(&text, "VmHWM:")?);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    webhook.stop();
    let mib = |k: u64| k as f64 / 1024.0;
    eprintln!(
        "[bench] memory: VmRSS max {:.1} MiB (RssAnon {:.1}, RssFile {:.1}), VmHWM {:.1} MiB",
        mib(max_rss),
        mib(anon),
        mib(file),
        mib(hwm)
    );
    Ok(vec![row(
        &format!(
            "webhook RSS, cluster mode, {total_namespaces} namespaces + {total_managers} managers cached"
        ),
        format!(
            "{:.1} MiB (max VmRSS of {SAMPLES} samples at 1 s, from 5 s after /readyz; RssAnon {:.1} + RssFile {:.1}; VmHWM {:.1})",
            mib(max_rss),
            mib(anon),
            mib(file),
            mib(hwm)
        ),
        "< 40 MiB",
        Some(mib(max_rss) < 40.0),
    )])
}

fn kib(status: &str, field: &str) -> Result<u64> {
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .ok_or_else(|| format!("no {field} in /proc/PID/status"))?;
    let value = line
        .trim_start_matches(field)
        .trim()
        .trim_end_matches("kB")
        .trim();
    Ok(value.parse()?)
}

async fn count_managers(client: &Client) -> Result<usize> {
    let namespaced: Api<PartialObjectMeta<ImagePullSecretManager>> = Api::all(client.clone());
    let cluster: Api<PartialObjectMeta<ClusterImagePullSecretManager>> = Api::all(client.clone());
    Ok(namespaced
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len()
        + cluster
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len())
}

/// The memory benchmark's webhook, killed on every way out.
struct Guard(Child);

impl Guard {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------------------------
// helpers

/// Creates `namespaces` (each a name and its value of `label`), [`CREATE_CONCURRENCY`] at a
/// time, reporting progress for `phase` on stderr.
async fn create_namespaces(
    client: &Client,
    phase: &str,
    label: &str,
    namespaces: &[(String, String)],
) -> Result {
    let (started, total) = (Instant::now(), namespaces.len());
    stream::iter(namespaces.iter().enumerate())
        .map(|(i, (name, value))| async move {
            create_namespace(client, name, &[(label, value.as_str())]).await?;
            if (i + 1) % 1000 == 0 {
                eprintln!("[bench]   {}/{total} namespaces", i + 1);
            }
            Ok::<_, harness::Error>(())
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    eprintln!(
        "[bench] {phase}: namespaces created in {:.1?}",
        started.elapsed()
    );
    Ok(())
}

async fn create_namespace(client: &Client, name: &str, labels: &[(&str, &str)]) -> Result<String> {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .map_err(|e| format!("cannot create namespace {name}: {e}"))?;
    Ok(name.to_owned())
}

/// `{"auths": {"registry.bench.example.com": {...}}}` for user `bench` and `password`.
fn docker_config(password: &str) -> Value {
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("bench:{password}"));
    json!({"auths": {"registry.bench.example.com": {
        "username": "bench", "password": password, "auth": auth,
    }}})
}

fn docker_config_data(config: &Value) -> BTreeMap<String, ByteString> {
    BTreeMap::from([(
        ".dockerconfigjson".to_owned(),
        ByteString(config.to_string().into_bytes()),
    )])
}

fn docker_config_secret(name: &str, config: &Value, labels: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        type_: Some(DOCKER_CONFIG_JSON.to_owned()),
        data: Some(docker_config_data(config)),
        ..Secret::default()
    }
}

/// Whether a copy's `.dockerconfigjson` equals `config` (as JSON).
fn holds(copy: &Secret, config: &Value) -> bool {
    copy.data
        .as_ref()
        .and_then(|d| d.get(".dockerconfigjson"))
        .and_then(|b| serde_json::from_slice::<Value>(&b.0).ok())
        .is_some_and(|v| &v == config)
}

async fn create_source(client: &Client, ns: &str, name: &str, password: &str) -> Result {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    api.create(
        &PostParams::default(),
        &docker_config_secret(name, &docker_config(password), &[]),
    )
    .await?;
    Ok(())
}

async fn replace_source(client: &Client, ns: &str, name: &str, password: &str) -> Result {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut current = api.get(name).await?;
    current.data = Some(docker_config_data(&docker_config(password)));
    api.replace(name, &PostParams::default(), &current).await?;
    Ok(())
}

async fn apply_cluster_manager(
    scenario: &Scenario,
    name: &str,
    target: &str,
    sources: &str,
    source: &str,
) -> Result {
    scenario
        .apply_manager(&format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {name}
spec:
  namespaceSelector:
    matchLabels:
      {TARGET}: {target}
  secrets:
    - existingSecretRef:
        name: {source}
        namespace: {sources}
"
        ))
        .await?;
    Ok(())
}

fn copies_selector(manager: &str) -> String {
    format!(
        "app.kubernetes.io/managed-by=cheiron,cheiron.anny.co/manager-kind=ClusterImagePullSecretManager,cheiron.anny.co/manager-name={manager}"
    )
}

async fn copies_of(client: &Client, manager: &str) -> Result<Vec<Secret>> {
    let all: Api<Secret> = Api::all(client.clone());
    Ok(all
        .list(&ListParams::default().labels(&copies_selector(manager)))
        .await?
        .items)
}

/// Calls `on_secret` for every copy of `manager` as it appears or changes.
async fn watch_copies(client: Client, manager: String, on_secret: impl FnMut(&Secret)) {
    watch_copies_with_sync(client, copies_selector(&manager), on_secret, || {}).await;
}

/// Calls `on_secret` for every Secret matching `selector` as it appears or changes, and
/// `on_synced` once the initial list has been delivered.
async fn watch_copies_with_sync(
    client: Client,
    selector: String,
    mut on_secret: impl FnMut(&Secret),
    mut on_synced: impl FnMut(),
) {
    let api: Api<Secret> = Api::all(client);
    let config = watcher::Config::default().labels(&selector);
    let mut events = watcher(api, config).boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => on_secret(&s),
            Ok(watcher::Event::InitDone) => on_synced(),
            Ok(_) => {}
            Err(e) => {
                eprintln!("[bench]   watch error (retrying): {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5. the cost of credential health

/// Namespaces of the health phase: 100 per manager.
const HEALTH_NAMESPACES: usize = 10_000;
/// Cluster managers of the health phase, each selecting its own 100 namespaces.
const HEALTH_MANAGERS: usize = 100;
/// Distinct credentials the managers share: manager `j` distributes credential `j % 10`.
const HEALTH_CREDENTIALS: usize = 10;
/// `--registry-check-interval` of the measured controller (the shortest sensible period, so
/// that the window holds several; the default is 6 h).
const HEALTH_INTERVAL_SECONDS: u64 = 60;
/// The steady window over which CPU, RSS and registry requests are counted.
const HEALTH_WINDOW: Duration = Duration::from_secs(180);
/// Settling after convergence, before the window opens.
const HEALTH_SETTLE: Duration = Duration::from_secs(10);
/// How long a controller may take to bring every health manager to Ready (and Accepted).
const HEALTH_CONVERGE_WITHIN: Duration = Duration::from_secs(900);
const HEALTH_GROUP: &str = "bench.cheiron.anny.co/health";
/// The first controller of the health phase: it writes the copies and backfills the
/// ServiceAccounts before its window.
const WARM_UP: &str = "health-warm-up";

/// A registry on 127.0.0.1 that demands HTTP Basic credentials on `/v2/` (the handshake the
/// controller's check performs) and counts what it answers. Stops when dropped.
struct FakeRegistry {
    host: String,
    ca_file: PathBuf,
    challenged: Arc<AtomicU64>,
    accepted: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Counts of a [`FakeRegistry`]'s answers.
#[derive(Clone, Copy, Debug, Default)]
struct RegistryCounts {
    /// `401` to a request without credential.
    challenged: u64,
    /// `200` to a request with one of the known credentials.
    accepted: u64,
    /// `401` to a request with any other credential.
    refused: u64,
}

impl RegistryCounts {
    fn since(self, earlier: Self) -> Self {
        Self {
            challenged: self.challenged - earlier.challenged,
            accepted: self.accepted - earlier.accepted,
            refused: self.refused - earlier.refused,
        }
    }

    /// Completed checks: each is one challenged request followed by one with the credential.
    fn checks(self) -> u64 {
        self.accepted + self.refused
    }
}

fn health_user(k: usize) -> String {
    format!("user-{k}")
}

fn health_password(k: usize) -> String {
    format!("password-{k}")
}

impl FakeRegistry {
    async fn start(dir: &Path) -> Result<Self> {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

        let certificates = harness::WebhookCertificates::generate(dir)?;
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, &certificates.ca_pem)?;
        let chain = CertificateDer::pem_file_iter(dir.join("tls.crt"))?
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_file(dir.join("tls.key"))?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let host = listener.local_addr()?.to_string();
        let known: Arc<HashSet<String>> = Arc::new(
            (0..HEALTH_CREDENTIALS)
                .map(|k| {
                    use base64::Engine;
                    let pair = format!("{}:{}", health_user(k), health_password(k));
                    format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode(pair)
                    )
                })
                .collect(),
        );
        let counters = [
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        ];
        let [challenged, accepted, refused] = counters.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, known, counters) =
                    (acceptor.clone(), known.clone(), counters.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(
                        move |request: hyper::Request<hyper::body::Incoming>| {
                            let (known, counters) = (known.clone(), counters.clone());
                            async move {
                                let authorization = request
                                    .headers()
                                    .get(hyper::header::AUTHORIZATION)
                                    .and_then(|v| v.to_str().ok());
                                let (counter, status) = match authorization {
                                    None => (&counters[0], 401),
                                    Some(a) if known.contains(a) => (&counters[1], 200),
                                    Some(_) => (&counters[2], 401),
                                };
                                counter.fetch_add(1, Ordering::SeqCst);
                                let mut answer = hyper::Response::builder().status(status);
                                if status == 401 {
                                    answer = answer.header(
                                        "WWW-Authenticate",
                                        "Basic realm=\"cheiron-bench\"",
                                    );
                                }
                                answer.body(axum::body::Body::from("{}"))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Ok(Self {
            host,
            ca_file,
            challenged,
            accepted,
            refused,
            task,
        })
    }

    fn counts(&self) -> RegistryCounts {
        RegistryCounts {
            challenged: self.challenged.load(Ordering::SeqCst),
            accepted: self.accepted.load(Ordering::SeqCst),
            refused: self.refused.load(Ordering::SeqCst),
        }
    }
}

/// Waits until kube-controller-manager has created the `default` ServiceAccount of every health
/// namespace and the controller has backfilled it. kube-controller-manager creates them at its
/// own pace (about 20 a second here); until it is done, every new one is a backfill and a
/// window would measure that, not the steady state.
async fn until_service_accounts_backfilled(client: &Client, id: &str) -> Result {
    let prefix = format!("{id}-h-");
    let sas_at = Instant::now();
    let backfilled = |sa: &ServiceAccount| {
        sa.image_pull_secrets
            .iter()
            .flatten()
            .any(|r| r.name == "health-pull")
    };
    loop {
        let done = Api::<ServiceAccount>::all(client.clone())
            .list(&ListParams::default().fields("metadata.name=default"))
            .await?
            .items
            .iter()
            .filter(|sa| sa.namespace().is_some_and(|ns| ns.starts_with(&prefix)))
            .filter(|sa| backfilled(sa))
            .count();
        if done == HEALTH_NAMESPACES {
            break;
        }
        if sas_at.elapsed() > HEALTH_CONVERGE_WITHIN {
            return Err(format!(
                "{done}/{HEALTH_NAMESPACES} default ServiceAccounts backfilled after {HEALTH_CONVERGE_WITHIN:?}"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    eprintln!(
        "[bench] health: every default ServiceAccount created and backfilled {:.1?} later",
        sas_at.elapsed()
    );
    Ok(())
}

/// What one controller run of the health phase measured.
struct HealthRun {
    /// Start → every health manager Ready (and, with checks, CredentialsAccepted=True).
    converged: Duration,
    /// CPU seconds (`process_cpu_seconds_total`) over [`HEALTH_WINDOW`].
    cpu: f64,
    /// Largest and mean VmRSS over the window's samples, in MiB.
    rss_max: f64,
    rss_mean: f64,
    /// The registry's answers over the window.
    window: RegistryCounts,
    /// The registry's answers from start to convergence.
    converging: RegistryCounts,
    /// The first controller's backfill of the `default` ServiceAccounts that
    /// kube-controller-manager creates after the namespaces.
    backfill: Option<Backfill>,
}

/// The backfill of the ServiceAccounts kube-controller-manager creates, one by one.
struct Backfill {
    /// From the copies written to every `default` ServiceAccount backfilled.
    took: Duration,
    /// CPU seconds of the controller meanwhile.
    cpu: f64,
    /// Reconciles meanwhile (`cheiron_reconcile_runs_total`).
    reconciles: f64,
}

/// Whether `m` is one of this phase's managers, Ready, and (when `accepted`) has
/// `CredentialsAccepted=True` for its current generation.
fn health_converged(m: &ClusterImagePullSecretManager, accepted: bool) -> bool {
    let Some(status) = m.status.as_ref() else {
        return false;
    };
    let current = status.observed_generation == m.metadata.generation;
    let is_true = |kind: &str| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == kind && c.status == "True")
    };
    current && is_true("Ready") && (!accepted || is_true("CredentialsAccepted"))
}

async fn health_run(
    client: &Client,
    registry: &FakeRegistry,
    name: &str,
    checks: bool,
    id: &str,
) -> Result<HealthRun> {
    let prefix = format!("{id}-health-");
    let ca = registry.ca_file.display().to_string();
    let interval = HEALTH_INTERVAL_SECONDS.to_string();
    let mut args = vec!["--no-leader-election"];
    if checks {
        args.extend([
            "--verify-registries",
            "--registry-check-interval",
            &interval,
            "--registry-ca-file",
            &ca,
        ]);
    }
    let before = registry.counts();
    let started = Instant::now();
    let controller = CheironProcess::controller(name, &args)?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let managers: Api<ClusterImagePullSecretManager> = Api::all(client.clone());
    loop {
        controller.check_running()?;
        let done = managers
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|m| m.name_any().starts_with(&prefix))
            .filter(|m| health_converged(m, checks))
            .count();
        if done == HEALTH_MANAGERS {
            break;
        }
        if started.elapsed() > HEALTH_CONVERGE_WITHIN {
            return Err(format!(
                "{name}: {done}/{HEALTH_MANAGERS} health managers converged after {HEALTH_CONVERGE_WITHIN:?}\n{}",
                controller.log_excerpt(30)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let converged = started.elapsed();
    let converging = registry.counts().since(before);
    eprintln!("[bench] health: {name} converged in {converged:.1?}; registry {converging:?}");
    let backfill = if name == WARM_UP {
        let (cpu, runs, at) = (
            controller.metric("process_cpu_seconds_total").await?,
            controller.metric("cheiron_reconcile_runs_total").await?,
            Instant::now(),
        );
        until_service_accounts_backfilled(client, id).await?;
        Some(Backfill {
            took: at.elapsed(),
            cpu: controller.metric("process_cpu_seconds_total").await? - cpu,
            reconciles: controller.metric("cheiron_reconcile_runs_total").await? - runs,
        })
    } else {
        None
    };
    tokio::time::sleep(HEALTH_SETTLE).await;

    let cpu_before = controller.metric("process_cpu_seconds_total").await?;
    let counts_before = registry.counts();
    let opened = Instant::now();
    let mut rss = Vec::new();
    while opened.elapsed() < HEALTH_WINDOW {
        rss.push(controller.rss_bytes()? as f64 / (1024.0 * 1024.0));
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let cpu = controller.metric("process_cpu_seconds_total").await? - cpu_before;
    let window = registry.counts().since(counts_before);
    controller.check_running()?;
    let stopped = tokio::task::spawn_blocking(move || controller.stop()).await?;
    eprintln!("[bench] health: {name} stopped ({stopped:?}); window registry {window:?}");
    Ok(HealthRun {
        converged,
        cpu,
        rss_max: rss.iter().copied().fold(0.0, f64::max),
        rss_mean: rss.iter().sum::<f64>() / rss.len().max(1) as f64,
        window,
        converging,
        backfill,
    })
}

/// Credential health's cost (docs/credential-health.md, "Cost"): 10 000 namespaces, 100 cluster
/// managers sharing 10 credentials of one registry, a controller without registry checks
/// against one with `--verify-registries --registry-check-interval 60`: CPU and RSS over a
/// steady window, registry requests per interval, and the time to converge.
async fn health(scenario: &Scenario, client: &Client) -> Result<Vec<Row>> {
    let cluster = scenario.cluster()?;
    let id = scenario.id().to_owned();
    let registry = FakeRegistry::start(&cluster.dir.join("health-registry")).await?;
    eprintln!(
        "[bench] health: fake registry https://{}/v2/ (Basic, {HEALTH_CREDENTIALS} credentials); creating {HEALTH_NAMESPACES} namespaces",
        registry.host
    );
    let grouped: Vec<(String, String)> = (0..HEALTH_NAMESPACES)
        .map(|i| (format!("{id}-h-{i}"), format!("h{}", i % HEALTH_MANAGERS)))
        .collect();
    create_namespaces(client, "health", HEALTH_GROUP, &grouped).await?;
    let prefix = format!("{id}-health-");
    let yamls: Vec<String> = (0..HEALTH_MANAGERS)
        .map(|j| {
            let k = j % HEALTH_CREDENTIALS;
            format!(
                "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {prefix}{j}
spec:
  namespaceSelector:
    matchLabels:
      {HEALTH_GROUP}: h{j}
  secrets:
    - name: health-pull
      registry: {}
      username: {}
      password: {}
",
                registry.host,
                health_user(k),
                health_password(k)
            )
        })
        .collect();
    stream::iter(yamls.iter())
        .map(|yaml| scenario.apply_manager(yaml))
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;

    // The first controller writes the 10 000 copies and backfills the ServiceAccounts (its
    // window is measured too, as a third sample without checks); the measured ones restart
    // into the converged cluster, as a rolled-out controller does.
    eprintln!("[bench] health: materialising the copies (controller without checks)");
    let warm = health_run(client, &registry, WARM_UP, false, &id).await?;
    eprintln!(
        "[bench] health: {} copies written in {:.1?}",
        HEALTH_NAMESPACES, warm.converged
    );
    let without = health_run(client, &registry, "health-without", false, &id).await?;
    let with = health_run(client, &registry, "health-with", true, &id).await?;
    if without.window.challenged + without.window.checks() != 0 {
        return Err("the controller without checks talked to the registry".into());
    }

    let backfill = warm
        .backfill
        .as_ref()
        .ok_or("the first run measured no backfill")?;
    let window = HEALTH_WINDOW.as_secs_f64();
    let periods = window / HEALTH_INTERVAL_SECONDS as f64;
    let per_period = with.window.checks() as f64 / periods;
    let load = format!(
        "{HEALTH_NAMESPACES} namespaces, {HEALTH_MANAGERS} cluster managers sharing {HEALTH_CREDENTIALS} credentials"
    );
    Ok(vec![
        row(
            &format!(
                "health: backfill of the {HEALTH_NAMESPACES} `default` ServiceAccounts kube-controller-manager creates after the namespaces (no checks)"
            ),
            format!(
                "{:.0} s (kube-controller-manager's pace); controller CPU {:.1} s, {:.0} reconciles",
                backfill.took.as_secs_f64(),
                backfill.cpu,
                backfill.reconciles
            ),
            "—",
            None,
        ),
        row(
            &format!("health: controller CPU over a {window:.0} s steady window, {load}"),
            format!(
                "{:.2} s without checks ({:.2} s in the first controller's window), {:.2} s with (interval {HEALTH_INTERVAL_SECONDS} s)",
                without.cpu, warm.cpu, with.cpu
            ),
            "—",
            None,
        ),
        row(
            &format!("health: controller RSS over the window, {load}"),
            format!(
                "max {:.1} / mean {:.1} MiB without checks, max {:.1} / mean {:.1} MiB with",
                without.rss_max, without.rss_mean, with.rss_max, with.rss_mean
            ),
            "—",
            None,
        ),
        row(
            "health: registry checks per interval (one per distinct credential)",
            format!(
                "{per_period:.1} ({} checks, {} challenges, {} refused in {window:.0} s = {periods:.0} intervals)",
                with.window.checks(),
                with.window.challenged,
                with.window.refused
            ),
            &format!("{HEALTH_CREDENTIALS} (±10 % jitter)"),
            Some(
                (per_period - HEALTH_CREDENTIALS as f64).abs() <= HEALTH_CREDENTIALS as f64 * 0.25,
            ),
        ),
        row(
            "health: restart with checks → every manager CredentialsAccepted=True",
            format!(
                "{:.1} s ({} checks until then)",
                with.converged.as_secs_f64(),
                with.converging.checks()
            ),
            "—",
            None,
        ),
    ])
}
