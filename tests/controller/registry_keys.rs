//! Registry keys as the kubelet reads them, on the real apiserver: a key the kubelet would
//! never match is reported (status and Warning Event) while its Secret is still written and
//! copied byte for byte; an inline Docker Hub entry is written under the key the kubelet
//! matches; fixing the source clears the report.

use k8s_openapi::api::core::v1::Secret;
use serde_json::{Value, json};

use crate::{
    dockerconfig::{dockerconfigjson_secret, holds, registry_entry},
    harness::Result,
    scenario::{ControllerScenario, describe_ready, ready},
};

/// The `.dockerconfigjson` bytes of a Secret.
fn body(secret: &Secret) -> Vec<u8> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(".dockerconfigjson"))
        .map(|b| b.0.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn an_unusable_key_is_reported_while_its_secret_is_still_materialised() -> Result {
    let s = ControllerScenario::new("registry-keys").await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let target = s.create_target_namespace(&[], &[]).await?;
    let canary = format!("canary-password-{}", s.id());
    // The original Cheiron example's key: no final slash, so the kubelet reads
    // index.docker.io/v1 and matches no image.
    let unusable = json!({"https://index.docker.io/v1": registry_entry("ci", &canary, None)});
    let source = s
        .create_secret(&sources, &dockerconfigjson_secret("legacy-hub", &unusable))
        .await?;
    let manager = s
        .apply(&s.cluster_manager(
            "registry-keys",
            &format!(
                "  secrets:
    - name: hub
      registry: docker.io
      username: alice
      password: {canary}
    - existingSecretRef:
        name: legacy-hub
        namespace: {sources}
"
            ),
        ))
        .await?;

    let status = s
        .until_ready_reason(&manager, "UnusableRegistryKey")
        .await?;
    let message = describe_ready(&status);
    assert_eq!(
        ready(&status).map(|c| c.status.as_str()),
        Some("False"),
        "{message}"
    );
    assert!(
        message.contains(
            "spec.secrets[1] (Secret legacy-hub): registry key \"https://index.docker.io/v1\" is unusable"
        ) && message.contains("reads \"index.docker.io/v1\"")
            && message.contains("write \"https://index.docker.io/v1/\""),
        "the status names the entry, the key, how the kubelet reads it and the fix: {message}"
    );
    assert!(
        !message.contains("spec.secrets[0]"),
        "the inline entry is written canonically, so it is usable: {message}"
    );
    assert!(!message.contains(&canary), "no credential in the status");

    // Both Secrets are written all the same: the copy byte for byte, the inline entry under
    // the key the kubelet matches for Docker Hub images.
    let copy = s.until_secret(&target, "legacy-hub", |_| Ok(())).await?;
    assert_eq!(
        String::from_utf8_lossy(&body(&copy)),
        String::from_utf8_lossy(&body(&source)),
        "a source is copied as it is, never rewritten"
    );
    let hub = s.until_secret(&target, "hub", |_| Ok(())).await?;
    holds(
        &hub,
        &json!({"https://index.docker.io/v1/": registry_entry("alice", &canary, None)}),
    )?;

    let event = s
        .until_event_about_manager(&manager, "UnusableRegistryKey")
        .await?;
    let note = event.note.clone().unwrap_or_default();
    assert_eq!(event.type_.as_deref(), Some("Warning"), "{note}");
    assert!(
        note.contains("\"https://index.docker.io/v1\"") && !note.contains(&canary),
        "the Event names the key, never the credential: {note}"
    );

    // Fixing the key in the source clears the report; the copy follows.
    let fixed = json!({"https://index.docker.io/v1/": registry_entry("ci", &canary, None)});
    s.replace_secret_data(
        &sources,
        "legacy-hub",
        &dockerconfigjson_secret("legacy-hub", &fixed),
    )
    .await?;
    let status = s.until_ready_reason(&manager, "InlineCredentials").await?;
    assert_eq!(
        ready(&status).map(|c| c.status.as_str()),
        Some("True"),
        "{}",
        describe_ready(&status)
    );
    s.until_secret(&target, "legacy-hub", |copy| holds(copy, &fixed))
        .await?;
    let decoded: Value = serde_json::from_slice(&body(&hub))?;
    assert!(decoded["auths"].get("docker.io").is_none());
    Ok(())
}
