//! Fleet benchmark (docs/fleet.md) on real kube-apiservers, through the e2e harness: the
//! management cluster (etcd, kube-apiserver, kube-controller-manager, the shared webhook) and
//! workload clusters, each one more kube-apiserver on the same etcd under its own
//! `--etcd-prefix`, reached through Cluster API-style kubeconfig Secrets.
//!
//! With one `cheiron controller --fleet` and one manager selecting every workload cluster
//! (`NAMESPACES` target namespaces in each, and here):
//!
//! 1. the controller's VmRSS with 0, 2 and 10 workload clusters, sampled once every copy is in
//!    place (max of `SAMPLES` samples at 1 s);
//! 2. at 2 and at 10 clusters, source rotation → every copy in every cluster holds the new
//!    content (median of `ROTATIONS`), polled every 20 ms through each cluster's API.
//!
//! Run: `cargo bench --bench fleet`. Progress goes to stderr, the results table to stdout.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    time::{Duration, Instant},
};

use cheiron_harness::{
    self as harness, Result, Scenario,
    controller::{CheironProcess, READY_WITHIN},
    workload::{WorkloadCluster, write_kubeconfig_secret},
};
use k8s_openapi::{
    ByteString,
    api::core::v1::{Namespace, Secret},
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};
use serde_json::json;

/// Target namespaces per cluster.
const NAMESPACES: usize = 5;
/// Rotations timed at each fleet size.
const ROTATIONS: usize = 3;
/// VmRSS samples, one a second.
const SAMPLES: usize = 5;
/// Label on every target namespace.
const TARGET: &str = "bench.cheiron.anny.co/fleet";
const COPY: &str = "fleet-pull";

fn main() -> Result {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

fn dockerconfig(password: &str) -> Vec<u8> {
    json!({"auths": {"registry.example.com": {"username": "bench", "password": password}}})
        .to_string()
        .into_bytes()
}

async fn create_targets(client: &Client, prefix: &str) -> Result<Vec<String>> {
    let api: Api<Namespace> = Api::all(client.clone());
    let mut out = Vec::new();
    for i in 0..NAMESPACES {
        let name = format!("{prefix}-{i}");
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(TARGET.to_owned(), "yes".to_owned())])),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        api.create(&PostParams::default(), &ns).await?;
        out.push(name);
    }
    Ok(out)
}

/// Every copy in every cluster holds `content`.
async fn all_hold(clusters: &[(Client, Vec<String>)], content: &[u8]) -> bool {
    for (client, namespaces) in clusters {
        for ns in namespaces {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            let holds = api.get_opt(COPY).await.ok().flatten().is_some_and(|s| {
                s.data
                    .and_then(|d| d.get(".dockerconfigjson").cloned())
                    .is_some_and(|v| v.0 == content)
            });
            if !holds {
                return false;
            }
        }
    }
    true
}

async fn until_all_hold(clusters: &[(Client, Vec<String>)], content: &[u8]) -> Result<Duration> {
    let started = Instant::now();
    while !all_hold(clusters, content).await {
        if started.elapsed() > Duration::from_secs(180) {
            return Err("the copies did not all arrive within 180 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(started.elapsed())
}

async fn max_rss(controller: &CheironProcess) -> Result<f64> {
    let mut max = 0u64;
    for _ in 0..SAMPLES {
        tokio::time::sleep(Duration::from_secs(1)).await;
        max = max.max(controller.rss_bytes()?);
    }
    Ok(max as f64 / (1024.0 * 1024.0))
}

async fn run() -> Result {
    let started = Instant::now();
    eprintln!("[fleet] starting the management cluster…");
    let scenario = Scenario::new(harness::cheiron!(), "fleet-bench").await?;
    let cluster = scenario.cluster()?;
    let client = scenario.client().clone();
    let id = scenario.id().to_owned();
    let capi = scenario.create_namespace(&[], &[]).await?;
    let sources = scenario.create_namespace(&[], &[]).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &sources);
    let mut source = Secret {
        metadata: ObjectMeta {
            name: Some(COPY.to_owned()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".to_owned()),
        data: Some(BTreeMap::from([(
            ".dockerconfigjson".to_owned(),
            ByteString(dockerconfig("v0")),
        )])),
        ..Secret::default()
    };
    secrets.create(&PostParams::default(), &source).await?;
    let mut clusters = vec![(
        client.clone(),
        create_targets(&client, &format!("{id}-local")).await?,
    )];

    let controller = CheironProcess::controller(
        &format!("{id}-fleet"),
        &[
            "--no-leader-election",
            "--resync",
            "600",
            "--fleet",
            "--fleet-namespace",
            &capi,
        ],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    scenario
        .apply_manager(&format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {id}-fleet
spec:
  namespaceSelector:
    matchLabels:
      {TARGET}: \"yes\"
  secrets:
    - existingSecretRef:
        name: {COPY}
        namespace: {sources}
  clusters:
    selector: {{}}
"
        ))
        .await?;
    until_all_hold(&clusters, &dockerconfig("v0")).await?;
    let mut rows: Vec<(String, String)> = Vec::new();
    let rss0 = max_rss(&controller).await?;
    rows.push((
        "controller RSS, 0 workload clusters".to_owned(),
        format!("{rss0:.1} MiB"),
    ));
    eprintln!("[fleet] 0 workload clusters: {rss0:.1} MiB");

    let mut workloads: Vec<WorkloadCluster> = Vec::new();
    let mut version = 0;
    for size in [2usize, 10] {
        while workloads.len() < size {
            let name = format!("{id}-w{}", workloads.len());
            eprintln!("[fleet] starting workload cluster {name}…");
            let w = cluster.start_workload(&name).await?;
            let wclient = w.client()?;
            let namespaces = create_targets(&wclient, &name).await?;
            write_kubeconfig_secret(&client, &capi, &w.name, &w.kubeconfig(), &[]).await?;
            clusters.push((wclient, namespaces));
            workloads.push(w);
        }
        until_all_hold(&clusters, &dockerconfig(&format!("v{version}"))).await?;
        let rss = max_rss(&controller).await?;
        eprintln!("[fleet] {size} workload clusters: {rss:.1} MiB");
        rows.push((
            format!("controller RSS, {size} workload clusters"),
            format!(
                "{rss:.1} MiB ({:.1} MiB per workload cluster over 0)",
                (rss - rss0) / size as f64
            ),
        ));
        let mut times = Vec::new();
        for _ in 0..ROTATIONS {
            version += 1;
            let content = dockerconfig(&format!("v{version}"));
            source.data = Some(BTreeMap::from([(
                ".dockerconfigjson".to_owned(),
                ByteString(content.clone()),
            )]));
            let existing = secrets.get(COPY).await?;
            source.metadata.resource_version = existing.metadata.resource_version;
            let rotated = Instant::now();
            secrets
                .replace(COPY, &PostParams::default(), &source)
                .await?;
            until_all_hold(&clusters, &content).await?;
            times.push(rotated.elapsed());
        }
        times.sort();
        let median = times[times.len() / 2];
        eprintln!("[fleet] {size} workload clusters: rotation {median:?} ({times:?})");
        rows.push((
            format!(
                "rotation → all copies in {} clusters ({size} workload + this), {NAMESPACES} namespaces each (median of {ROTATIONS})",
                size + 1
            ),
            format!(
                "{} ms (runs: {})",
                median.as_millis(),
                times
                    .iter()
                    .map(|t| t.as_millis().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }

    let mut table = String::new();
    writeln!(table, "| metric | value |")?;
    writeln!(table, "|---|---|")?;
    for (metric, value) in &rows {
        writeln!(table, "| {metric} | {value} |")?;
    }
    println!("\n{table}");
    eprintln!("[fleet] total runtime {:.1?}", started.elapsed());
    drop(workloads);
    Ok(())
}
