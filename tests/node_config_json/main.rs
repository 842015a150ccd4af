//! Mode Node's other way, with a real kubelet: the node agent merges the node's credentials
//! into the kubelet's own docker `config.json` (`--kubelet-config-json`, the HyperShift way),
//! the file the kubelet reads from its root directory, and a plain Pod in a namespace no
//! manager targets pulls with them. The user's own entry in that file is kept, and the
//! manager's deletion gives the file back byte for byte.
//!
//! A test binary of its own, with a node of its own: the kubelet keeps what it read of
//! `config.json` for five minutes from its first pull (`NewDefaultDockerKeyring` in its
//! `pkg/credentialprovider`). Here no Pod is pulled before cheiron has merged its entry, so
//! the kubelet's first read sees it; in the `node` binary, another test's pull would have
//! filled that cache first. For the same reason the kubelet's side of the removal is not
//! waited for (it would take up to five minutes); the file's is checked. Needs root, like
//! `tests/node` (see tests/node/README.md).

use std::path::Path;

use base64::Engine;
use cheiron_harness as harness;
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

use harness::{
    Result, SETTLE, Scenario,
    controller::{CheironProcess, READY_WITHIN},
    node::{NODE_NAME, NodeCluster, PodOutcome},
    wait_for,
};

/// The cheiron these tests start their cluster with.
const CHEIRON: harness::Cheiron = harness::cheiron!();

/// The kubelet's `config.json` as its owner wrote it before cheiron: an entry of their own,
/// in their own layout, which the merge must keep and the removal give back exactly.
const OWN_CONFIG: &str = "{\n  \"auths\": {\n    \"registry.example.invalid\": {\"auth\": \"b3duZXI6b3duZXItcGFzc3dvcmQ=\"}\n  },\n  \"HttpHeaders\": {\"User-Agent\": \"node-owner\"}\n}\n";

/// The user whose credentials `config.json` holds for `host`, if any (never the password).
fn user_for(config: &Path, host: &str) -> Result<Option<String>> {
    let file: serde_json::Value = serde_json::from_slice(&std::fs::read(config)?)?;
    let Some(auths) = file["auths"].as_object() else {
        return Ok(None);
    };
    let Some(entry) = auths
        .iter()
        .find(|(key, _)| key.contains(host))
        .map(|(_, e)| e)
    else {
        return Ok(None);
    };
    if let Some(user) = entry["username"].as_str() {
        return Ok(Some(user.to_owned()));
    }
    let auth = entry["auth"].as_str().unwrap_or_default();
    let decoded = base64::engine::general_purpose::STANDARD.decode(auth)?;
    Ok(String::from_utf8(decoded)?
        .split_once(':')
        .map(|(user, _)| user.to_owned()))
}

#[tokio::test(flavor = "multi_thread")]
async fn node_mode_merged_into_the_kubelets_config_json_lets_a_plain_pod_pull() -> Result {
    let node = NodeCluster::start(CHEIRON)?;
    // Shown only when the test fails.
    eprintln!("node cluster files and logs: {}", node.dir.display());
    let s = Scenario::with_client(Client::try_from(node.admin_config())?, "config-json");
    let client = s.client().clone();
    let config = node.kubelet_root.join("config.json");
    std::fs::write(&config, OWN_CONFIG)?;

    // The agent keeps its credentials file apart from the one the kubelet's plugin reads, so
    // the plugin answers nothing: only config.json can let the Pod pull.
    let agent_dir = node.dir.join("config-json-agent");
    std::fs::create_dir_all(&agent_dir)?;
    let credentials = agent_dir.join("credentials.json").display().to_string();
    let config_arg = config.display().to_string();
    let agent = CheironProcess::node_agent_on(
        &node.cheiron_host,
        "node-agent-config-json",
        &[
            "--node-name",
            NODE_NAME,
            "--credentials-file",
            &credentials,
            "--kubelet-config-json",
            &config_arg,
            "--resync",
            "5s",
        ],
    )?;
    agent
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;

    let manager = node
        .apply_node_manager(&s, "config-json", &node.registry.host)
        .await?;
    let user = manager.user.clone();
    wait_for(
        "cheiron's entry in the kubelet's config.json",
        SETTLE,
        || async {
            match user_for(&config, &node.registry.host)? {
                Some(held) if held == user => Ok(()),
                held => Err(format!("config.json holds {held:?} for the registry").into()),
            }
        },
    )
    .await
    .map_err(|e| format!("{e}\n{}", agent.log_excerpt(20)))?;
    assert_eq!(
        user_for(&config, "registry.example.invalid")?.as_deref(),
        Some("owner"),
        "the owner's own entry is kept"
    );

    // The kubelet's first pull: it reads config.json now, with cheiron's entry in it.
    let ns = s.create_namespace(&[], &[]).await?;
    let plain = node.pod("plain", &node.image, &[])?;
    match node.run_pod(&client, &ns, &plain).await? {
        PodOutcome::Running => {}
        PodOutcome::PullFailed(message) => {
            return Err(format!(
                "the Pod should run on the credential merged into config.json, but its pull \
                 failed: {message}"
            )
            .into());
        }
    }
    let named = Api::<Pod>::namespaced(client.clone(), &ns)
        .get("plain")
        .await?
        .spec
        .and_then(|spec| spec.image_pull_secrets)
        .unwrap_or_default();
    assert!(named.is_empty(), "the Pod names pull secrets: {named:?}");

    // The control, from the same read of config.json: the same image under the registry's
    // other name, which config.json does not hold (and the plugin has no file for), is refused.
    let other_name = node
        .image
        .replacen(&node.registry.host, &node.node_mode_host, 1);
    let control = node.pod("control", &other_name, &[])?;
    match node.run_pod(&client, &ns, &control).await? {
        PodOutcome::PullFailed(message) if message.contains("401 Unauthorized") => {}
        other => {
            return Err(format!(
                "a pull the merged entry does not cover should be refused: {other:?}"
            )
            .into());
        }
    }

    // The manager goes: config.json is given back as its owner wrote it, byte for byte.
    s.delete_manager(&manager.object).await?;
    wait_for("config.json as its owner wrote it", SETTLE, || async {
        if std::fs::read_to_string(&config)? == OWN_CONFIG {
            Ok(())
        } else {
            Err("config.json still differs from the owner's".into())
        }
    })
    .await
    .map_err(|e| format!("{e}\n{}", agent.log_excerpt(20)))?;
    drop(agent);
    Ok(())
}
