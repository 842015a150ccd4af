//! `cheiron audit` after the webhook was missing: a Pod created before the webhook was
//! registered, and one created while it was stopped (`failurePolicy: Ignore` admits it
//! unchanged), each reported with its reason and the command that fixes it. A control plane of
//! its own, because the e2e binaries' shared webhook is registered before any test runs.

use std::time::Duration;

use cheiron::install::FailurePolicy;
use kube::ResourceExt;
use serde_json::Value;

use crate::{
    CHEIRON,
    fault_cluster::{FaultCluster, serial},
    harness::{Admitted, ControlPlaneOptions, Result, pod},
};

/// `cheiron audit -n NS -o json` as `admin` of `cluster`: exit code and findings.
async fn audit(cluster: &FaultCluster, ns: &str) -> Result<(Option<i32>, Vec<Value>)> {
    CHEIRON
        .audit_json(&cluster.control_plane.admin_kubeconfig, ns)
        .await
}

fn finding<'a>(findings: &'a [Value], name: &str) -> Result<&'a Value> {
    findings
        .iter()
        .find(|f| f["name"] == name)
        .ok_or_else(|| format!("no finding for {name}: {findings:?}").into())
}

#[tokio::test]
async fn audit_reports_pods_created_before_the_webhook_was_registered_and_while_it_was_stopped()
-> Result {
    let _serial = serial().await;
    let cluster = FaultCluster::start("audit-webhook", ControlPlaneOptions::default()).await?;
    let s = cluster.scenario();
    let ns = s.create_namespace(&[], &[]).await?;
    s.default_service_account(&ns).await?;
    s.apply_pod_mode_manager(&ns, "pull").await?;
    // Creation timestamps have a one-second resolution: the Pods come after the manager.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // No webhook registered at all.
    let early = s.create_pod(&ns, &pod("early-", &[], &[], &[])).await?;
    assert!(early.pull_secret_names().is_empty());
    let (code, findings) = audit(&cluster, &ns).await?;
    assert_eq!(code, Some(1));
    let f = finding(&findings, &early.name_any())?;
    assert_eq!(f["why"], "webhookAbsent", "{f}");
    assert_eq!(
        f["fix"],
        format!(
            "kubectl delete pod {} -n {ns}, then create it again",
            early.name_any()
        )
    );

    // The webhook registered and answering: new Pods get the Secret.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let webhook = cluster
        .start_registered_webhook("audit-webhook", FailurePolicy::Ignore)
        .await?;
    s.until_new_pod_gets(&ns, &[], &["pull"]).await?;

    // Stopped: failurePolicy Ignore admits the Pod unchanged.
    webhook.kill();
    let stopped = s.create_pod(&ns, &pod("stopped-", &[], &[], &[])).await?;
    assert!(
        stopped.pull_secret_names().is_empty(),
        "admitted without the webhook: {:?}",
        stopped.pull_secret_names()
    );

    let (code, findings) = audit(&cluster, &ns).await?;
    assert_eq!(code, Some(1));
    let names: Vec<&str> = findings.iter().filter_map(|f| f["name"].as_str()).collect();
    assert_eq!(names.len(), 2, "only the two Pods: {names:?}");
    let f = finding(&findings, &early.name_any())?;
    assert_eq!(f["why"], "admittedBeforeWebhook", "{f}");
    assert_eq!(f["reason"], "admitted before the webhook was registered");
    let f = finding(&findings, &stopped.name_any())?;
    assert_eq!(f["why"], "admittedWithoutWebhook", "{f}");
    assert_eq!(f["missing"], serde_json::json!(["pull"]));
    assert_eq!(
        f["fix"],
        format!(
            "kubectl delete pod {} -n {ns}, then create it again",
            stopped.name_any()
        )
    );
    Ok(())
}
