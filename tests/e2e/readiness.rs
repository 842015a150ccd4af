//! The webhook never admits with an empty view: `/readyz` fails until its managers are listed
//! and its Namespaces' list has begun to arrive (so an identity that may not list Namespaces
//! stays unready). An identity that may not list Secrets at all (the split
//! install's webhook) serves without the Secret cache instead of never becoming ready.

use std::time::{Duration, Instant};

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

use crate::{
    CHEIRON,
    harness::{LIMITED_USER, Result, Scenario},
};

/// How long `/readyz` must keep failing while namespaces cannot be listed.
const UNREADY_SAMPLE: Duration = Duration::from_secs(3);

fn rule(group: &str, resources: &[&str]) -> Value {
    json!({"apiGroups": [group], "resources": resources, "verbs": ["get", "list", "watch"]})
}

async fn grant(s: &Scenario, role: &str, rules: Vec<Value>) -> Result {
    let role: ClusterRole = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": role},
        "rules": rules,
    }))?;
    Api::<ClusterRole>::all(s.client().clone())
        .patch(
            role.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::apply("cheiron-e2e").force(),
            &Patch::Apply(&role),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn webhook_is_not_ready_until_its_caches_sync_and_needs_no_access_to_secrets() -> Result {
    let s = Scenario::new(CHEIRON, "readiness").await?;
    let role = s.unique_name("webhook");
    let managers = rule(
        "cheiron.anny.co",
        &["imagepullsecretmanagers", "clusterimagepullsecretmanagers"],
    );
    let namespaces = rule("", &["namespaces"]);
    grant(&s, &role, vec![managers.clone()]).await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": LIMITED_USER}],
    }))?;
    let bindings = Api::<ClusterRoleBinding>::all(s.client().clone());
    bindings.create(&Default::default(), &binding).await?;

    let mut webhook = s.start_webhook_as_limited_user()?;
    webhook
        .wait_for_admin_status("/healthz", 200, Duration::from_secs(20))
        .await?;
    let sampled = Instant::now();
    let mut statuses = Vec::new();
    while sampled.elapsed() < UNREADY_SAMPLE {
        statuses.push(webhook.admin_status("/readyz").await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    webhook.check_running()?;
    let log = webhook.log().display().to_string();
    assert!(
        statuses.iter().all(|s| *s == Some(503)),
        "/readyz while namespaces are forbidden: {statuses:?} (log: {log})"
    );

    // Namespaces, still no Secrets: ready, without the Secret cache.
    grant(&s, &role, vec![managers, namespaces]).await?;
    let granted = Instant::now();
    webhook
        .wait_for_admin_status("/readyz", 200, Duration::from_secs(30))
        .await?;
    eprintln!(
        "ready {:?} after namespaces were granted",
        granted.elapsed()
    );
    let text = std::fs::read_to_string(webhook.log())?;
    assert!(
        text.contains("may not list Secrets"),
        "the webhook says it serves without the Secret cache (log: {log})"
    );

    webhook.stop();
    bindings.delete(&role, &Default::default()).await?;
    Api::<ClusterRole>::all(s.client().clone())
        .delete(&role, &Default::default())
        .await?;
    Ok(())
}
