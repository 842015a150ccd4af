//! Mode Node with a real kubelet: a `cheiron node-agent` keeps the node's credentials file from
//! what the controller hands it, and the kubelet pulls through cheiron's credential-provider
//! plugin (installed as the chart's init container installs it). The Pod names no pull secret
//! and its namespace is one no manager targets: only the node-level credential can let it pull.
//! A rotation reaches the next pull, and deleting the manager takes the credential off the node
//! (the next pull is refused again).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::Api;

use crate::{
    harness::{
        Result, SETTLE,
        controller::{CheironProcess, READY_WITHIN},
        node::{NODE_NAME, PLUGIN_CACHE_DURATION, PodOutcome},
        wait_for,
    },
    support::NodeTest,
};

/// The user the node's credentials file holds for the mode Node host, if any.
fn file_holds(t: &NodeTest) -> Result<Option<(String, String)>> {
    let bytes = match std::fs::read(&t.node.node_credentials) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let file: serde_json::Value = serde_json::from_slice(&bytes)?;
    let entry = &file["auths"][&t.node.node_mode_host];
    Ok(entry["username"].as_str().map(|u| {
        (
            u.to_owned(),
            entry["password"].as_str().unwrap_or_default().to_owned(),
        )
    }))
}

async fn until_file_holds(t: &NodeTest, want: Option<(&str, &str)>) -> Result {
    let want = want.map(|(u, p)| (u.to_owned(), p.to_owned()));
    wait_for("the node's credentials file", SETTLE, || async {
        match file_holds(t)? {
            held if held == want => Ok(()),
            held => Err(format!(
                "it holds {:?}",
                held.map(|(user, _)| user) // never the password
            )
            .into()),
        }
    })
    .await
}

/// Runs a plain Pod of the private image, pulled from the mode Node host, in `ns`: whether it
/// runs, or the pull's error.
async fn run_plain_pod(t: &NodeTest, ns: &str, name: &str) -> Result<PodOutcome> {
    let image = t
        .node
        .image
        .replacen(&t.node.registry.host, &t.node.node_mode_host, 1);
    let pod = t.node.pod(name, &image, &[])?;
    t.node.run_pod(t.client(), ns, &pod).await
}

async fn expect_running(t: &NodeTest, ns: &str, name: &str) -> Result {
    match run_plain_pod(t, ns, name).await? {
        PodOutcome::Running => Ok(()),
        PodOutcome::PullFailed(message) => Err(format!(
            "Pod {ns}/{name} should run on the node's credential, but its pull failed: {message}"
        )
        .into()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn node_mode_a_plain_pod_in_an_untargeted_namespace_pulls_through_the_kubelets_plugin()
-> Result {
    let t = NodeTest::new("node-mode").await?;
    let credentials = t.node.node_credentials.display().to_string();
    let agent = CheironProcess::node_agent_on(
        &t.node.cheiron_host,
        "node-agent",
        &[
            "--node-name",
            NODE_NAME,
            "--credentials-file",
            &credentials,
            "--resync",
            "5s",
        ],
    )?;
    agent
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;

    // A namespace no manager targets, a Pod naming no pull secret: refused while the node has
    // no credential for the host.
    let ns = t.scenario.create_namespace(&[], &[]).await?;
    match run_plain_pod(&t, &ns, "before").await? {
        PodOutcome::PullFailed(message) if message.contains("401 Unauthorized") => {}
        other => return Err(format!("before the manager: {other:?}").into()),
    }

    let manager = t
        .node
        .apply_node_manager(&t.scenario, "node-manager", &t.node.node_mode_host)
        .await?;
    let (source_ns, user, password) = (&manager.source_ns, &manager.user, &manager.password);
    until_file_holds(&t, Some((user, password))).await?;
    // Past the plugin's cached answer of the refused pull (docs/node.md).
    tokio::time::sleep(PLUGIN_CACHE_DURATION + Duration::from_millis(500)).await;
    expect_running(&t, &ns, "plain").await?;
    let pod = Api::<Pod>::namespaced(t.client().clone(), &ns)
        .get("plain")
        .await?;
    let named = pod
        .spec
        .and_then(|s| s.image_pull_secrets)
        .unwrap_or_default();
    assert!(named.is_empty(), "the Pod names pull secrets: {named:?}");
    let account = Api::<ServiceAccount>::namespaced(t.client().clone(), &ns)
        .get_opt("default")
        .await?
        .and_then(|a| a.image_pull_secrets)
        .unwrap_or_default();
    assert!(account.is_empty(), "its ServiceAccount names: {account:?}");

    // Rotation: the registry takes only the new password; the next pull uses it.
    let rotated = t.node.registry.set_user(user)?;
    t.scenario
        .password_secret(source_ns, "registry-password", &rotated)
        .await?;
    until_file_holds(&t, Some((user, &rotated))).await?;
    // The kubelet may reuse the plugin's last answer for its cacheDuration (docs/node.md):
    // the next pull after that asks again.
    tokio::time::sleep(PLUGIN_CACHE_DURATION + Duration::from_millis(500)).await;
    expect_running(&t, &ns, "after-rotation").await?;

    // The manager goes: so does the credential, and the next pull is refused again.
    t.scenario.delete_manager(&manager.object).await?;
    until_file_holds(&t, None).await?;
    tokio::time::sleep(PLUGIN_CACHE_DURATION + Duration::from_millis(500)).await;
    match run_plain_pod(&t, &ns, "after-deletion").await? {
        PodOutcome::PullFailed(message) if message.contains("401 Unauthorized") => {}
        other => return Err(format!("after the manager's deletion: {other:?}").into()),
    }
    drop(agent);
    Ok(())
}
