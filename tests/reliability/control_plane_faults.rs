//! The control plane failing under the controller: kube-apiserver restarted and etcd
//! restarted in the middle of a reconcile, and an apiserver that throttles cheiron (API Priority
//! and Fairness rejecting its requests with 429). Each time the controller stays up and the
//! cluster ends in the state the rules say, with each ServiceAccount entry added exactly once.

use std::time::{Duration, Instant};

use cheiron::install::rbac;
use k8s_openapi::api::{
    flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration},
    rbac::v1::{ClusterRole, ClusterRoleBinding},
};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use serde_json::json;

use crate::{
    fault_cluster::{FaultCluster, serial},
    harness::{
        ControlPlaneOptions, LIMITED_USER, Result,
        controller::{CheironProcess, READY_WITHIN},
    },
};

/// Namespaces of the manager the faults interrupt: enough that its first reconcile takes
/// seconds of writes (a Secret and a ServiceAccount patch per namespace).
const NAMESPACES: usize = 300;

#[derive(Clone, Copy, Debug)]
enum Fault {
    ApiserverRestart,
    EtcdRestart,
}

/// Starts a controller, applies a manager over [`NAMESPACES`] namespaces, and as soon as the
/// first Secrets appear, injects `fault` for `outage`; then asserts convergence.
async fn interrupted_reconcile(fault: Fault) -> Result {
    let _serial = serial().await;
    let mut cluster = FaultCluster::start(
        &format!("{fault:?}").to_lowercase(),
        ControlPlaneOptions::default(),
    )
    .await?;
    let namespaces = cluster.create_target_namespaces(NAMESPACES).await?;
    let controller = CheironProcess::controller_on(
        &cluster.host(),
        "controller",
        &["--no-leader-election", "--resync", "30"],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let started = cluster
        .apply_manager_until_writing("interrupted", "pull", "p4ss")
        .await?;

    let outage = Instant::now();
    match fault {
        Fault::ApiserverRestart => {
            // A crash (SIGKILL): a graceful stop would wait up to a minute for its watches.
            cluster.control_plane.stop_apiserver(true);
            tokio::time::sleep(Duration::from_secs(3)).await;
            cluster.control_plane.start_apiserver().await?;
        }
        Fault::EtcdRestart => {
            cluster.control_plane.stop_etcd(true);
            tokio::time::sleep(Duration::from_secs(5)).await;
            cluster.control_plane.start_etcd().await?;
        }
    }
    let outage = outage.elapsed();
    controller.check_running()?;
    let converged = cluster
        .until_converged(&namespaces, "pull")
        .await
        .map_err(|e| format!("{e}\n{}", controller.log_excerpt(30)))?;
    controller.check_running()?;
    assert_eq!(
        controller.admin_status("/readyz").await,
        Some(200),
        "the controller is ready again"
    );
    eprintln!(
        "{fault:?} with {started}/{NAMESPACES} Secrets written: outage {outage:.1?}, \
         converged {converged:.1?} after the control plane was back"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_apiserver_restart_mid_reconcile_leaves_the_controller_up_and_converging() -> Result
{
    interrupted_reconcile(Fault::ApiserverRestart).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_restart_mid_reconcile_leaves_the_controller_up_and_converging() -> Result {
    interrupted_reconcile(Fault::EtcdRestart).await
}

/// The priority level cheiron's user is put in: one seat, and requests beyond it are rejected
/// with 429 instead of queued.
const THROTTLED: &str = "cheiron-throttled";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_apiserver_slows_the_controller_down_without_breaking_it() -> Result {
    let _serial = serial().await;
    let cluster = FaultCluster::start(
        "throttled",
        ControlPlaneOptions {
            // A small server: API Priority and Fairness shares 15 seats among its levels.
            apiserver_args: vec![
                "--max-requests-inflight=10".to_owned(),
                "--max-mutating-requests-inflight=5".to_owned(),
            ],
            ..ControlPlaneOptions::default()
        },
    )
    .await?;
    let client = cluster.client().clone();
    throttle(&client).await?;
    grant_controller_rights(&client).await?;
    let namespaces = cluster.create_target_namespaces(150).await?;

    let controller = CheironProcess::controller_on(
        &cluster.host_as(&cluster.control_plane.limited_kubeconfig),
        "throttled-controller",
        &["--no-leader-election", "--resync", "30"],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, Duration::from_secs(120))
        .await?;
    cluster
        .scenario()
        .apply_manager(&cluster.service_account_manager("throttled", "pull", "p4ss"))
        .await?;
    let converged = cluster
        .until_converged(&namespaces, "pull")
        .await
        .map_err(|e| format!("{e}\n{}", controller.log_excerpt(30)))?;
    controller.check_running()?;
    let rejected = rejected_requests(&cluster).await?;
    eprintln!(
        "throttled to one seat: {} namespaces converged in {converged:.1?}; the apiserver \
         rejected {rejected} of cheiron's requests with 429",
        namespaces.len()
    );
    assert!(
        rejected > 0.0,
        "the apiserver throttled cheiron (else this test proves nothing)"
    );
    Ok(())
}

/// Puts [`LIMITED_USER`] (the controller's identity in this test) in a priority level of its own
/// with one seat that rejects what it cannot serve at once.
async fn throttle(client: &kube::Client) -> Result {
    let level: PriorityLevelConfiguration = serde_json::from_value(json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": THROTTLED},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 1,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    }))?;
    Api::<PriorityLevelConfiguration>::all(client.clone())
        .create(&PostParams::default(), &level)
        .await?;
    let schema: FlowSchema = serde_json::from_value(json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": THROTTLED},
        "spec": {
            "priorityLevelConfiguration": {"name": THROTTLED},
            "matchingPrecedence": 500,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "User", "user": {"name": LIMITED_USER}}],
                "resourceRules": [{
                    "verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                    "clusterScope": true, "namespaces": ["*"],
                }],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            }],
        },
    }))?;
    Api::<FlowSchema>::all(client.clone())
        .create(&PostParams::default(), &schema)
        .await?;
    Ok(())
}

/// The controller's ClusterRole, exactly as installed, bound to [`LIMITED_USER`].
async fn grant_controller_rights(client: &kube::Client) -> Result {
    let name = "cheiron-reliability-controller";
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        rules: Some(rbac::controller_rules()),
        ..ClusterRole::default()
    };
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": LIMITED_USER}],
    }))?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// `apiserver_flowcontrol_rejected_requests_total` of the [`THROTTLED`] level.
async fn rejected_requests(cluster: &FaultCluster) -> Result<f64> {
    let text = cluster.control_plane.apiserver_metrics().await?;
    let mut sum = 0.0;
    for line in text.lines().filter(|l| {
        l.starts_with("apiserver_flowcontrol_rejected_requests_total{")
            && l.contains(&format!("priority_level=\"{THROTTLED}\""))
    }) {
        if let Some((_, value)) = line.rsplit_once(' ') {
            sum += value.parse::<f64>().unwrap_or(0.0);
        }
    }
    Ok(sum)
}
