//! A ClusterImagePullSecretManager gives a plain Pod in a new namespace what the kubelet needs
//! to pull the private image, in mode ServiceAccount and in mode Pod, and keeps it working when
//! the registry password rotates. The Pods name no pull secret: whatever they pull with, cheiron
//! put there (the negative control shows the registry refuses a Pod without one).

use crate::{harness::Result, support::NodeTest};

/// The target Secret the managers write.
const TARGET_SECRET: &str = "node-registry";

/// A source namespace holding the registry password of a fresh user, and a cluster manager of
/// `mode` that writes it as [`TARGET_SECRET`] into this test's target namespaces.
async fn manager(t: &NodeTest, mode: &str) -> Result<(String, String, String)> {
    manager_with(t, mode, "").await
}

/// [`manager`] with `extra` (YAML) after its Secret entry: more entries, then spec fields.
async fn manager_with(t: &NodeTest, mode: &str, extra: &str) -> Result<(String, String, String)> {
    let source_ns = t.scenario.create_namespace(&[], &[]).await?;
    let user = t.scenario.unique_name("user");
    let password = t.node.registry.set_user(&user)?;
    t.scenario
        .password_secret(&source_ns, "registry-password", &password)
        .await?;
    t.scenario
        .apply_cluster_manager(
            &t.scenario.unique_name("manager"),
            &format!(
                "  mode: {mode}
  namespaceSelector:
    matchLabels:
      {label}: {id}
  secrets:
    - name: {TARGET_SECRET}
      registry: {registry}
      username: {user}
      passwordSecretRef: {{name: registry-password, key: password, namespace: {source_ns}}}
{extra}",
                label = crate::support::TARGET_LABEL,
                id = t.scenario.id(),
                registry = t.node.registry.host,
            ),
        )
        .await?;
    Ok((source_ns, user, password))
}

/// Mode ServiceAccount: the `default` ServiceAccount of a new namespace references cheiron's
/// Secret, and a plain Pod (no `imagePullSecrets`) runs.
#[tokio::test(flavor = "multi_thread")]
async fn service_account_mode_a_plain_pod_in_a_new_namespace_runs() -> Result {
    let t = NodeTest::new("sa-mode").await?;
    let (_, user, password) = manager(&t, "ServiceAccount").await?;
    let ns = t.target_namespace().await?;
    t.until_secret_holds(&ns, TARGET_SECRET, &user, &password)
        .await?;
    t.until_default_service_account_has(&ns, TARGET_SECRET)
        .await?;
    t.expect_running(&ns, "plain", &[]).await
}

/// Mode Pod: the webhook puts cheiron's Secret into a plain Pod of a new namespace, and it runs.
#[tokio::test(flavor = "multi_thread")]
async fn pod_mode_a_plain_pod_in_a_new_namespace_runs() -> Result {
    let t = NodeTest::new("pod-mode").await?;
    let (_, user, password) = manager(&t, "Pod").await?;
    let ns = t.target_namespace().await?;
    t.until_secret_holds(&ns, TARGET_SECRET, &user, &password)
        .await?;
    t.expect_running(&ns, "plain", &[]).await
}

/// Rotation: the registry password changes and the source Secret with it. A Pod with a
/// hand-written Secret of the old password gets 401; cheiron's copy follows the source, and a
/// new plain Pod (pull policy `Always`) runs.
#[tokio::test(flavor = "multi_thread")]
async fn after_a_rotation_a_new_pod_pulls_with_the_new_password() -> Result {
    let t = NodeTest::new("rotation").await?;
    let (source_ns, user, old_password) = manager(&t, "ServiceAccount").await?;
    let ns = t.target_namespace().await?;
    t.until_secret_holds(&ns, TARGET_SECRET, &user, &old_password)
        .await?;
    t.until_default_service_account_has(&ns, TARGET_SECRET)
        .await?;
    t.expect_running(&ns, "before", &[]).await?;
    t.docker_secret(&ns, "old-by-hand", &user, &old_password)
        .await?;

    let new_password = t.node.registry.set_user(&user)?;
    t.scenario
        .password_secret(&source_ns, "registry-password", &new_password)
        .await?;
    t.expect_unauthorized(&ns, "old-by-hand", &["old-by-hand"])
        .await?;
    t.until_secret_holds(&ns, TARGET_SECRET, &user, &new_password)
        .await?;
    t.expect_running(&ns, "after", &[]).await
}

/// `injection: MatchingImages`: of the manager's two Secrets, the Pod gets only the one whose
/// registry its image is pulled from, and that is what the kubelet pulls with.
#[tokio::test(flavor = "multi_thread")]
async fn matching_images_a_pod_gets_only_the_secret_of_its_registry_and_runs() -> Result {
    use k8s_openapi::api::core::v1::Pod;
    use kube::Api;

    let t = NodeTest::new("matching").await?;
    let (_, user, password) = manager_with(
        &t,
        "Pod",
        "    - name: elsewhere
      registry: registry.example.com
      username: nobody
      password: not-this-registry
  injection: MatchingImages
",
    )
    .await?;
    let ns = t.target_namespace().await?;
    t.until_secret_holds(&ns, TARGET_SECRET, &user, &password)
        .await?;
    t.expect_running(&ns, "plain", &[]).await?;
    let pod = Api::<Pod>::namespaced(t.client().clone(), &ns)
        .get("plain")
        .await?;
    let named: Vec<String> = pod
        .spec
        .and_then(|s| s.image_pull_secrets)
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(named, [TARGET_SECRET]);
    Ok(())
}

/// The kubelet's `KubeletEnsureSecretPulledImages` gate (on in the node cluster, policy
/// `NeverVerifyPreloadedImages`): the private image is on the node once a Pod pulled it with
/// cheiron's Secret, yet a Pod without credentials that asks for it `IfNotPresent` is refused
/// (the kubelet verifies credentials per Pod), while a Pod with cheiron's Secret is admitted
/// again.
#[tokio::test(flavor = "multi_thread")]
async fn with_ensure_secret_pulled_images_a_cached_image_still_needs_cheirons_secret() -> Result {
    let t = NodeTest::new("ensure-pulled").await?;
    let (_, user, password) = manager(&t, "Pod").await?;
    let ns = t.target_namespace().await?;
    t.until_secret_holds(&ns, TARGET_SECRET, &user, &password)
        .await?;
    t.expect_running(&ns, "pulls", &[]).await?;

    let cached = |name: &str| -> Result<k8s_openapi::api::core::v1::Pod> {
        let mut pod = t.node.pod(name, &t.node.image, &[])?;
        if let Some(spec) = pod.spec.as_mut() {
            spec.containers[0].image_pull_policy = Some("IfNotPresent".to_owned());
        }
        Ok(pod)
    };
    let elsewhere = t.scenario.create_namespace(&[], &[]).await?;
    match t
        .node
        .run_pod(t.client(), &elsewhere, &cached("no-credentials")?)
        .await?
    {
        crate::harness::node::PodOutcome::PullFailed(message)
            if message.contains("401 Unauthorized") => {}
        other => {
            return Err(format!(
                "a Pod without credentials should not get the cached private image: {other:?}"
            )
            .into());
        }
    }
    match t
        .node
        .run_pod(t.client(), &ns, &cached("with-cheirons-secret")?)
        .await?
    {
        crate::harness::node::PodOutcome::Running => Ok(()),
        other => Err(format!("a Pod with cheiron's Secret should run: {other:?}").into()),
    }
}
