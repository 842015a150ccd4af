//! Node benchmark (issue "a real node"): the time from a Pod's CREATE to its `Running`, for a
//! plain Pod of a private image on the real kubelet of `tests/harness/src/node.rs` (containerd,
//! runc, a registry with TLS and htpasswd auth; needs root and `tests/node/tools`), in two
//! namespaces, one Pod at a time, alternating:
//!
//! - **without cheiron**: a namespace cheiron ignores (`cheiron.anny.co/ignore=true`, so the
//!   apiserver does not call the webhook at all), the Pod naming a Secret written by hand;
//! - **with cheiron**: a namespace a mode Pod manager targets, a Pod naming nothing: the webhook
//!   adds the Secret the controller wrote.
//!
//! Each Pod pulls (`imagePullPolicy: Always`) from the registry. The time is taken by this
//! process from sending the CREATE to a watch event with phase `Running`. Reports p50, p99 and
//! the mean of each, and what cheiron adds.
//!
//! Run (as root): `cargo bench --bench node` (`-- --pods N` for N Pods of each kind, default
//! 30). Progress goes to stderr, the results table to stdout.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use cheiron_harness::{
    self as harness, Result, Scenario,
    node::NodeCluster,
    stats::{ms, percentile},
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use tokio::sync::mpsc;

/// Pods of each kind, by default.
const PODS: usize = 30;
/// The longest one Pod may take to run.
const POD_RUNS_WITHIN: Duration = Duration::from_secs(60);
/// The label of the namespaces the benchmark's manager targets.
const TARGET: &str = "bench.cheiron.anny.co/target";

fn main() -> Result {
    let mut pods = PODS;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--pods" => {
                pods = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--pods needs a number")?;
            }
            "--bench" => {}
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(pods))
}

/// Sends `(name, when it was first seen Running)` for each Pod of `ns`.
fn watch_running(client: &Client, ns: &str) -> mpsc::UnboundedReceiver<(String, Instant)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    tokio::spawn(async move {
        let mut seen = std::collections::HashSet::new();
        let mut events = std::pin::pin!(
            watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
        );
        while let Some(event) = events.next().await {
            let Ok(pod) = event else { continue };
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            if running && seen.insert(pod.name_any()) {
                let _ = tx.send((pod.name_any(), Instant::now()));
            }
        }
    });
    rx
}

/// Creates `pod` in `ns` and returns the time until `running` reports it.
async fn time_to_running(
    client: &Client,
    ns: &str,
    pod: &Pod,
    running: &mut mpsc::UnboundedReceiver<(String, Instant)>,
    early: &mut HashMap<String, Instant>,
) -> Result<Duration> {
    let name = pod.name_any();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    api.create(&PostParams::default(), pod).await?;
    let deadline = tokio::time::Instant::now() + POD_RUNS_WITHIN;
    loop {
        if let Some(at) = early.remove(&name) {
            return Ok(at.duration_since(start));
        }
        match tokio::time::timeout_at(deadline, running.recv()).await {
            Ok(Some((seen, at))) if seen == name => return Ok(at.duration_since(start)),
            Ok(Some((seen, at))) => {
                early.insert(seen, at);
            }
            Ok(None) => return Err("the Pod watch ended".into()),
            Err(_) => {
                return Err(
                    format!("Pod {ns}/{name} did not run within {POD_RUNS_WITHIN:?}").into(),
                );
            }
        }
    }
}

async fn run(pods: usize) -> Result {
    let node = NodeCluster::start(harness::cheiron!())?;
    eprintln!("node cluster files and logs: {}", node.dir.display());
    let client = Client::try_from(node.admin_config())?;
    let scenario = Scenario::with_client(client.clone(), "node-bench");

    // Without cheiron: an ignored namespace and a Secret written by hand.
    let user = scenario.unique_name("user");
    let password = node.registry.set_user(&user)?;
    let plain_ns = scenario
        .create_namespace(&[(cheiron::api::annotation::IGNORE, "true")], &[])
        .await?;
    let by_hand: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "by-hand"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": node.registry.docker_config_json(&user, &password)},
    }))?;
    Api::<Secret>::namespaced(client.clone(), &plain_ns)
        .create(&PostParams::default(), &by_hand)
        .await?;

    // With cheiron: a mode Pod manager over a target namespace.
    let source_ns = scenario.create_namespace(&[], &[]).await?;
    let source: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "registry-password"},
        "stringData": {"password": password},
    }))?;
    Api::<Secret>::namespaced(client.clone(), &source_ns)
        .create(&PostParams::default(), &source)
        .await?;
    scenario
        .apply_cluster_manager(
            &scenario.unique_name("bench"),
            &format!(
                "  mode: Pod
  namespaceSelector:
    matchLabels:
      {TARGET}: {id}
  secrets:
    - name: bench-registry
      registry: {registry}
      username: {user}
      passwordSecretRef: {{name: registry-password, key: password, namespace: {source_ns}}}
",
                id = scenario.id(),
                registry = node.registry.host,
            ),
        )
        .await?;
    let cheiron_ns = scenario
        .create_namespace(&[(TARGET, scenario.id())], &[])
        .await?;
    harness::wait_for(
        "the manager's Secret in the target namespace",
        harness::SETTLE,
        || async {
            Api::<Secret>::namespaced(client.clone(), &cheiron_ns)
                .get_opt("bench-registry")
                .await?
                .map(|_| ())
                .ok_or_else(|| "not yet".into())
        },
    )
    .await?;

    let mut plain_running = watch_running(&client, &plain_ns);
    let mut cheiron_running = watch_running(&client, &cheiron_ns);
    let (mut plain_early, mut cheiron_early) = (HashMap::new(), HashMap::new());
    let (mut without, mut with) = (Vec::with_capacity(pods), Vec::with_capacity(pods));
    let delete = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    for i in 0..pods {
        let pod = node.pod(&format!("plain-{i}"), &node.image, &["by-hand"])?;
        without.push(
            time_to_running(
                &client,
                &plain_ns,
                &pod,
                &mut plain_running,
                &mut plain_early,
            )
            .await?,
        );
        Api::<Pod>::namespaced(client.clone(), &plain_ns)
            .delete(&pod.name_any(), &delete)
            .await?;
        let pod = node.pod(&format!("cheiron-{i}"), &node.image, &[])?;
        with.push(
            time_to_running(
                &client,
                &cheiron_ns,
                &pod,
                &mut cheiron_running,
                &mut cheiron_early,
            )
            .await?,
        );
        Api::<Pod>::namespaced(client.clone(), &cheiron_ns)
            .delete(&pod.name_any(), &delete)
            .await?;
        eprintln!(
            "pod {}/{pods}: without {}, with cheiron {}",
            i + 1,
            ms(without[i]),
            ms(with[i])
        );
    }
    without.sort();
    with.sort();
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / u32::try_from(v.len()).unwrap_or(1);
    let signed = |a: Duration, b: Duration| {
        let d = a.as_secs_f64() - b.as_secs_f64();
        format!("{:+.0} ms", d * 1000.0)
    };
    println!("| Pod CREATE → Running, {pods} Pods each | p50 | p99 | mean |");
    println!("|---|---|---|---|");
    for (what, v) in [
        (
            "without cheiron (ignored namespace, Secret by hand)",
            &without,
        ),
        (
            "with cheiron (mode Pod, the webhook adds the Secret)",
            &with,
        ),
    ] {
        println!(
            "| {what} | {} | {} | {} |",
            ms(percentile(v, 50)),
            ms(percentile(v, 99)),
            ms(mean(v))
        );
    }
    println!(
        "| added by cheiron | {} | {} | {} |",
        signed(percentile(&with, 50), percentile(&without, 50)),
        signed(percentile(&with, 99), percentile(&without, 99)),
        signed(mean(&with), mean(&without)),
    );
    Ok(())
}
