//! Source Secrets over time: an invalid source is never propagated (and never quoted), a
//! deleted source leaves the copies in place, and a rotated source reaches every copy within
//! seconds.

use std::time::{Duration, Instant};

use base64::{Engine, engine::general_purpose::STANDARD};
use kube::ResourceExt;
use serde_json::{Value, json};

use crate::{
    dockerconfig::{dockerconfigjson_secret, holds, registry_entry, secret},
    harness::Result,
    scenario::{ControllerScenario, ManagerRef, describe_ready, ready},
};

/// Namespaces a rotated source is copied to.
const ROTATION_NAMESPACES: usize = 12;
/// A rotation slower than this fails the test (the target is "within seconds").
const ROTATION_LIMIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn invalid_source_is_not_copied_and_its_value_appears_in_no_status_event_or_log() -> Result {
    let s = ControllerScenario::new("invalid").await?;
    let controller = s.controller()?;
    let sources = s.create_namespace(&[], &[]).await?;
    let target = s.create_target_namespace(&[], &[]).await?;
    let canary = format!("leak-canary-{}", s.id());
    let auths_with_canary = json!({"auths": {"reg.example.com": {"auth": canary}}}).to_string();
    // Not a docker config at all, though it has the right key.
    s.create_secret(
        &sources,
        &secret(
            "opaque-pull",
            "Opaque",
            &[
                (".dockerconfigjson", &auths_with_canary),
                ("password", &canary),
            ],
        ),
    )
    .await?;
    // The right type, but a registry entry that is a string (the apiserver only checks JSON).
    s.create_secret(
        &sources,
        &secret(
            "broken-pull",
            "kubernetes.io/dockerconfigjson",
            &[(
                ".dockerconfigjson",
                &json!({"auths": {"reg.example.com": canary}}).to_string(),
            )],
        ),
    )
    .await?;
    let manager = s
        .apply(&s.cluster_manager(
            "invalid",
            &format!(
                "  secrets:
    - existingSecretRef:
        name: opaque-pull
        namespace: {sources}
    - existingSecretRef:
        name: broken-pull
        namespace: {sources}
"
            ),
        ))
        .await?;

    let status = s.until_ready_reason(&manager, "InvalidSource").await?;
    let message = describe_ready(&status);
    assert_eq!(
        ready(&status).map(|c| c.status.as_str()),
        Some("False"),
        "{message}"
    );
    assert!(
        message.contains(&format!("{sources}/opaque-pull")) && message.contains("Opaque"),
        "the message says which source is wrong and why: {message}"
    );
    assert!(
        message.contains(&format!("{sources}/broken-pull")),
        "every invalid source is named: {message}"
    );
    assert_eq!(status.namespaces.as_deref(), Some("0/1"), "{message}");
    let event = s
        .until_event_about_manager(&manager, "InvalidSource")
        .await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    for name in ["opaque-pull", "broken-pull"] {
        assert_eq!(
            s.secret(&target, name).await?.map(|c| c.name_any()),
            None,
            "an invalid source is never propagated"
        );
    }
    assert!(s.copies_of(&manager).await?.is_empty());

    let encoded = [
        canary.clone(),
        STANDARD.encode(&canary),
        STANDARD.encode(&auths_with_canary),
    ];
    let (object, _) = s.manager_status(&manager).await?;
    let stored = serde_json::to_string(&object)?;
    let events = serde_json::to_string(&s.events_about_manager(&manager).await?)?;
    let log = std::fs::read_to_string(controller.log())?;
    for (what, text) in [
        ("the manager", &stored),
        ("its Events", &events),
        ("the controller log", &log),
    ] {
        for needle in &encoded {
            assert!(
                !text.contains(needle.as_str()),
                "{what} contains a source Secret's value ({needle})"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn deleted_source_keeps_the_copies_and_reports_source_missing_until_it_is_recreated() -> Result
{
    let s = ControllerScenario::new("missing").await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let targets = [
        s.create_target_namespace(&[], &[]).await?,
        s.create_target_namespace(&[], &[]).await?,
    ];
    let before = json!({"registry.example.com": registry_entry("ci", "before", None)});
    s.create_secret(&sources, &dockerconfigjson_secret("shared-pull", &before))
        .await?;
    let manager = s
        .apply(&s.cluster_manager(
            "missing",
            &format!(
                "  secrets:
    - existingSecretRef:
        name: shared-pull
        namespace: {sources}
"
            ),
        ))
        .await?;
    s.until_ready_reason(&manager, "Synced").await?;
    let mut copies = Vec::new();
    for ns in &targets {
        copies.push(
            s.until_secret(ns, "shared-pull", |c| holds(c, &before))
                .await?,
        );
    }

    s.delete_secret(&sources, "shared-pull").await?;
    let status = s.until_ready_reason(&manager, "SourceMissing").await?;
    let message = describe_ready(&status);
    assert_eq!(
        ready(&status).map(|c| c.status.as_str()),
        Some("False"),
        "a missing source is not Ready: {message}"
    );
    assert!(
        message.contains(&format!("{sources}/shared-pull")),
        "{message}"
    );
    for copy in &copies {
        let ns = copy.namespace().unwrap_or_default();
        let now = s
            .secret(&ns, "shared-pull")
            .await?
            .ok_or_else(|| format!("the copy in {ns} was deleted with its source"))?;
        assert_eq!(
            now.resource_version(),
            copy.resource_version(),
            "the copy in {ns} is left as it was"
        );
    }

    let after = json!({"registry.example.com": registry_entry("ci", "after", None)});
    s.create_secret(&sources, &dockerconfigjson_secret("shared-pull", &after))
        .await?;
    s.until_ready_reason(&manager, "Synced").await?;
    for ns in &targets {
        s.until_secret(ns, "shared-pull", |c| holds(c, &after))
            .await?;
    }
    Ok(())
}

/// Polls every copy of the manager named `name` until all [`ROTATION_NAMESPACES`] hold
/// `auths`, returning how long it took from `since`.
async fn until_all_copies_hold(
    s: &ControllerScenario,
    manager: &ManagerRef,
    name: &str,
    auths: &Value,
    since: Instant,
) -> Result<Duration> {
    loop {
        let copies = s.copies_of(manager).await?;
        let matching = copies
            .iter()
            .filter(|c| c.name_any() == name && holds(c, auths).is_ok())
            .count();
        if matching == ROTATION_NAMESPACES {
            return Ok(since.elapsed());
        }
        if since.elapsed() > ROTATION_LIMIT {
            return Err(format!(
                "after {ROTATION_LIMIT:?} only {matching}/{ROTATION_NAMESPACES} copies of {name} hold the rotated credentials\n{}",
                s.controller()?.log_excerpt(30)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn rotated_sources_reach_every_copy_within_seconds() -> Result {
    let s = ControllerScenario::new("rotation").await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let mut targets = Vec::new();
    for _ in 0..ROTATION_NAMESPACES {
        targets.push(s.create_target_namespace(&[], &[]).await?);
    }
    s.create_secret(
        &sources,
        &secret("ghcr-token", "Opaque", &[("token", "token-v1")]),
    )
    .await?;
    let mirror_v1 = json!({"mirror.example.com": registry_entry("mirror", "mirror-v1", None)});
    s.create_secret(
        &sources,
        &dockerconfigjson_secret("mirror-pull", &mirror_v1),
    )
    .await?;
    let manager = s
        .apply(&s.cluster_manager(
            "rotation",
            &format!(
                "  secrets:
    - name: ghcr
      registry: ghcr.io
      username: bot
      passwordSecretRef:
        name: ghcr-token
        key: token
        namespace: {sources}
    - existingSecretRef:
        name: mirror-pull
        namespace: {sources}
"
            ),
        ))
        .await?;
    let status = s.until_ready_reason(&manager, "Synced").await?;
    assert_eq!(
        status.namespaces,
        Some(format!("{ROTATION_NAMESPACES}/{ROTATION_NAMESPACES}"))
    );
    let ghcr_v1 = json!({"ghcr.io": registry_entry("bot", "token-v1", None)});
    until_all_copies_hold(&s, &manager, "ghcr", &ghcr_v1, Instant::now()).await?;
    until_all_copies_hold(&s, &manager, "mirror-pull", &mirror_v1, Instant::now()).await?;

    let rotated = Instant::now();
    s.replace_secret_data(
        &sources,
        "ghcr-token",
        &secret("ghcr-token", "Opaque", &[("token", "token-v2")]),
    )
    .await?;
    let ghcr_v2 = json!({"ghcr.io": registry_entry("bot", "token-v2", None)});
    let token_took = until_all_copies_hold(&s, &manager, "ghcr", &ghcr_v2, rotated).await?;
    println!(
        "rotation: passwordSecretRef token -> all {ROTATION_NAMESPACES} copies updated in {token_took:?}"
    );

    let rotated = Instant::now();
    let mirror_v2 = json!({"mirror.example.com": registry_entry("mirror", "mirror-v2", None)});
    s.replace_secret_data(
        &sources,
        "mirror-pull",
        &dockerconfigjson_secret("mirror-pull", &mirror_v2),
    )
    .await?;
    let mirror_took =
        until_all_copies_hold(&s, &manager, "mirror-pull", &mirror_v2, rotated).await?;
    println!(
        "rotation: existingSecretRef source -> all {ROTATION_NAMESPACES} copies updated in {mirror_took:?}"
    );

    // The untouched source's copies stayed as they were.
    until_all_copies_hold(&s, &manager, "ghcr", &ghcr_v2, Instant::now()).await?;
    s.until_ready_reason(&manager, "Synced").await?;
    Ok(())
}
