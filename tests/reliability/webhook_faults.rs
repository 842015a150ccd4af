//! Webhook replicas failing under Pod-create load through the apiserver: SIGKILL (a node
//! failure, the OOM killer), SIGTERM (a rolling update), and a serving certificate rotated
//! while the apiserver and fresh clients keep connecting.

use std::time::Duration;

use cheiron::install::FailurePolicy;
use kube::Client;

use crate::{
    fault_cluster::{FaultCluster, create_secret, pull_secret, serial},
    harness::{
        ControlPlaneOptions, Result,
        controller::{CheironProcess, READY_WITHIN},
        load::{PodLoad, Tally},
        service_proxy::{Endpoint, PROBE_PERIOD, ServiceProxy},
    },
};

/// The Secret every Pod of these tests should get.
const PULL_SECRET: &str = "pull";
/// Four workers, one create each every 50 ms: up to 80 Pod creates per second.
const WORKERS: usize = 4;
const INTERVAL: Duration = Duration::from_millis(50);
/// The chart's `shutdownDelaySeconds`.
const SHUTDOWN_DELAY: &str = "5";

/// One namespace with a mode-Pod manager adding [`PULL_SECRET`] to every Pod.
async fn pod_namespace(cluster: &FaultCluster) -> Result<String> {
    let s = cluster.scenario();
    let ns = s.create_namespace(&[], &[]).await?;
    create_secret(cluster.client(), &ns, &pull_secret(PULL_SECRET, &[], 0)).await?;
    s.apply_pod_mode_manager(&ns, PULL_SECRET).await?;
    Ok(ns)
}

/// Starts a `cheiron webhook` replica and waits until it is ready.
async fn replica(cluster: &FaultCluster, name: &str) -> Result<(CheironProcess, Endpoint)> {
    let process =
        CheironProcess::webhook_on(&cluster.host(), name, &["--shutdown-delay", SHUTDOWN_DELAY])?;
    process
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let endpoint = Endpoint {
        serve: process
            .listen()
            .ok_or("a webhook replica without a listen address")?,
        admin: process.admin(),
    };
    Ok((process, endpoint))
}

/// Two replicas behind a proxy, registered with `failure_policy`, serving the namespace.
async fn two_replicas(
    cluster: &FaultCluster,
    ns: &str,
    failure_policy: FailurePolicy,
) -> Result<(ServiceProxy, Vec<(CheironProcess, Endpoint)>)> {
    let proxy = ServiceProxy::start().await?;
    let replicas = vec![
        replica(cluster, "webhook-a").await?,
        replica(cluster, "webhook-b").await?,
    ];
    for (_, endpoint) in &replicas {
        proxy.add(*endpoint);
    }
    proxy.wait_for_ready(2, READY_WITHIN).await?;
    cluster
        .register_webhook(proxy.address(), failure_policy)
        .await?;
    cluster
        .scenario()
        .until_new_pod_gets(ns, &[], &[PULL_SECRET])
        .await?;
    Ok((proxy, replicas))
}

fn load(client: &Client, ns: &str) -> PodLoad {
    PodLoad::start(client, ns, PULL_SECRET, WORKERS, INTERVAL)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_webhook_replica_costs_only_the_creates_of_the_next_seconds() -> Result {
    let _serial = serial().await;
    let cluster = FaultCluster::start("webhook-sigkill", ControlPlaneOptions::default()).await?;
    let ns = pod_namespace(&cluster).await?;
    // The chart's default: a webhook that cannot answer never blocks the cluster.
    let (proxy, mut replicas) = two_replicas(&cluster, &ns, FailurePolicy::Ignore).await?;

    let load = load(cluster.client(), &ns);
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Both replicas are killed in turn, so whichever one the apiserver's connection uses dies.
    let mut kills = Vec::new();
    for index in 0..2 {
        let (killed, endpoint) = &replicas[index];
        kills.push(load.elapsed());
        killed.kill();
        // Its replacement (the ReplicaSet's new Pod) comes up and joins the Service; the dead
        // one leaves it once its Pod object is gone.
        let (process, new_endpoint) = replica(&cluster, &format!("webhook-{index}-again")).await?;
        proxy.add(new_endpoint);
        proxy.wait_for_ready(2, READY_WITHIN).await?;
        proxy.remove(*endpoint);
        replicas.push((process, new_endpoint));
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let tally = load.stop().await?;
    eprintln!(
        "SIGKILL of each of two replicas at {kills:.1?}: {}",
        tally.summary()
    );

    // A create can only miss the secret if it was in flight on the killed replica's connection
    // or was routed to it before the probe noticed (one probe period), plus scheduling slack.
    let window = PROBE_PERIOD + Duration::from_secs(3);
    for failure in tally.failed() {
        assert!(
            kills
                .iter()
                .any(|k| failure.at + Duration::from_secs(1) >= *k && failure.at <= *k + window),
            "a create at {:.1?} failed outside the {window:?} after a kill at {kills:.1?}: {:?}\n{}",
            failure.at,
            failure.outcome,
            tally.summary()
        );
    }
    assert_eq!(
        tally.refused(),
        0,
        "failurePolicy Ignore never refuses a Pod"
    );
    let last_kill = kills.last().copied().unwrap_or_default();
    let after = tally
        .samples
        .iter()
        .filter(|s| s.at > last_kill + window)
        .count();
    assert!(
        after > 20,
        "the load went on after the last kill ({after} creates): {}",
        tally.summary()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_of_the_webhook_under_load_fails_no_admission() -> Result {
    let _serial = serial().await;
    let cluster = FaultCluster::start("webhook-sigterm", ControlPlaneOptions::default()).await?;
    let ns = pod_namespace(&cluster).await?;
    // Fail: any request that does not reach a serving replica shows up as a refused create.
    let (proxy, replicas) = two_replicas(&cluster, &ns, FailurePolicy::Fail).await?;

    let load = load(cluster.client(), &ns);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut replacements = Vec::new();
    for (index, (old, endpoint)) in replicas.iter().enumerate() {
        // A Deployment's rolling update: the new Pod first, then SIGTERM to an old one, whose
        // Pod leaves the Service's endpoints once it has exited.
        let (process, new_endpoint) = replica(&cluster, &format!("webhook-{index}-new")).await?;
        proxy.add(new_endpoint);
        proxy.wait_for_ready(3, READY_WITHIN).await?;
        old.terminate();
        let status = exit_within(old, Duration::from_secs(30)).await;
        assert!(
            status.is_some_and(|s| s.success()),
            "{} exits cleanly within 30 s of SIGTERM: {status:?}\n{}",
            old.name(),
            old.log_excerpt(20)
        );
        proxy.remove(*endpoint);
        replacements.push(process);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tally = load.stop().await?;
    eprintln!("rolling update of two replicas: {}", tally.summary());
    assert_failed_none(&tally, "a rolling update");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_serving_certificate_under_load_fails_no_handshake_and_no_admission() -> Result
{
    let _serial = serial().await;
    let mut cluster =
        FaultCluster::start("certificate-rotation", ControlPlaneOptions::default()).await?;
    let ns = pod_namespace(&cluster).await?;
    let (_proxy, replicas) = two_replicas(&cluster, &ns, FailurePolicy::Fail).await?;
    let direct = replicas[0].1.serve;

    let load = load(cluster.client(), &ns);
    let handshakes = Handshakes::start(direct, &cluster.certificates.ca_pem)?;
    const ROTATIONS: usize = 5;
    for _ in 0..ROTATIONS {
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster.certificates.rotate()?;
    }
    // The webhook re-reads the directory on change; give it a moment, then every new
    // connection must present the last certificate.
    let expected = cluster.certificates.current_der.clone();
    let served_last = crate::harness::wait_for(
        "the webhook to serve the last rotated certificate",
        Duration::from_secs(15),
        || async {
            let served = handshake(direct, &cluster.certificates.ca_pem).await?;
            if served == expected {
                Ok(())
            } else {
                Err("an older certificate".into())
            }
        },
    )
    .await;
    let tally = load.stop().await?;
    let (attempts, failures) = handshakes.stop().await?;
    eprintln!(
        "{ROTATIONS} rotations: {attempts} fresh TLS handshakes, {} failed; admissions: {}",
        failures.len(),
        tally.summary()
    );
    served_last?;
    assert!(attempts > 100, "the handshake loop ran ({attempts})");
    assert!(
        failures.is_empty(),
        "{} of {attempts} handshakes failed during rotation, e.g. {:?}",
        failures.len(),
        failures.first()
    );
    assert_failed_none(&tally, "certificate rotation");
    Ok(())
}

fn assert_failed_none(tally: &Tally, during: &str) {
    let failed: Vec<_> = tally.failed().take(5).collect();
    assert!(
        failed.is_empty(),
        "admissions failed during {during}: {failed:?}\n{}",
        tally.summary()
    );
    assert!(
        tally.samples.len() > 100,
        "the load ran during {during}: {}",
        tally.summary()
    );
}

/// Polls until `process` has exited, up to `timeout`.
async fn exit_within(
    process: &CheironProcess,
    timeout: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = process.exited() {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One fresh TLS connection to `address` trusting only `ca_pem`: the DER of the certificate
/// it presented.
async fn handshake(address: std::net::SocketAddr, ca_pem: &str) -> Result<Vec<u8>> {
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes())?)
        .tls_info(true)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()?;
    let response = client
        .get(format!("https://{address}/healthz"))
        .send()
        .await?;
    let info = response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .ok_or("no TLS information on the response")?;
    Ok(info
        .peer_certificate()
        .ok_or("no peer certificate")?
        .to_vec())
}

/// Fresh TLS handshakes to one replica, back to back, counting failures.
struct Handshakes {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<(usize, Vec<String>)>,
}

impl Handshakes {
    fn start(address: std::net::SocketAddr, ca_pem: &str) -> Result<Self> {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ca_pem = ca_pem.to_owned();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut attempts = 0;
                let mut failures = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    attempts += 1;
                    if let Err(e) = handshake(address, &ca_pem).await {
                        failures.push(e.to_string());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                (attempts, failures)
            }
        });
        Ok(Self { stop, task })
    }

    async fn stop(self) -> Result<(usize, Vec<String>)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(self.task.await?)
    }
}
