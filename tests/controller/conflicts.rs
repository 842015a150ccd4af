//! Nothing lost, ever: a Secret cheiron does not manage is never touched, and of two managers
//! claiming one Secret name in a namespace the older wins.

use std::time::{Duration, Instant};

use kube::ResourceExt;
use serde_json::json;

use crate::{
    dockerconfig::{holds, registry_entry, secret},
    harness::Result,
    scenario::{ControllerScenario, describe_ready, ready},
};

/// cheiron looks at a name held by an unmanaged Secret again every 30 s (its deletion is not
/// watched); a little headroom on top.
const CLASH_RECHECK: Duration = Duration::from_secs(45);

#[tokio::test]
async fn unmanaged_secret_of_the_same_name_survives_byte_for_byte_and_is_reported_as_a_conflict()
-> Result {
    let s = ControllerScenario::new("unmanaged").await?;
    let clash = s.create_target_namespace(&[], &[]).await?;
    let clear = s.create_target_namespace(&[], &[]).await?;
    let mut theirs = secret("docker-hub", "Opaque", &[("config", "someone else's")]);
    theirs.metadata.labels = Some([("owner".to_owned(), "another-team".to_owned())].into());
    theirs.metadata.annotations = Some([("note".to_owned(), "hands off".to_owned())].into());
    let before = s.create_secret(&clash, &theirs).await?;

    let manager = s
        .apply(&s.cluster_manager(
            "unmanaged",
            "  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: alice-password
",
        ))
        .await?;
    let expected =
        json!({"https://index.docker.io/v1/": registry_entry("alice", "alice-password", None)});
    s.until_secret(&clear, "docker-hub", |c| holds(c, &expected))
        .await?;
    let status = s.until_ready_reason(&manager, "Conflict").await?;
    let message = describe_ready(&status);
    assert_eq!(ready(&status).map(|c| c.status.as_str()), Some("False"));
    assert!(
        message.contains(&clash) && message.contains("docker-hub"),
        "the condition names the clashing Secret: {message}"
    );
    assert_eq!(status.namespaces.as_deref(), Some("1/2"), "{message}");
    assert!(
        status
            .failures
            .iter()
            .any(|f| f.namespace == clash && f.message.contains("docker-hub")),
        "status.failures lists the clash: {:?}",
        status.failures
    );
    let event = s.until_event_about_manager(&manager, "Conflict").await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    let now = s
        .secret(&clash, "docker-hub")
        .await?
        .ok_or("the unmanaged Secret was deleted")?;
    assert_eq!(
        now.resource_version(),
        before.resource_version(),
        "never written"
    );
    assert_eq!(now.data, before.data, "data unchanged");
    assert_eq!(now.type_, before.type_, "type unchanged");
    assert_eq!(now.labels(), before.labels(), "labels unchanged");
    assert_eq!(
        now.annotations(),
        before.annotations(),
        "annotations unchanged"
    );
    assert_eq!(
        now.owner_references(),
        before.owner_references(),
        "no ownerReference added"
    );

    // Once the name is free, the copy follows (the clash is re-checked every 30 s).
    s.delete_secret(&clash, "docker-hub").await?;
    let freed = Instant::now();
    s.eventually_within(
        format!("the copy in {clash} after the unmanaged Secret is gone"),
        CLASH_RECHECK,
        || async {
            let copy = s.secret(&clash, "docker-hub").await?.ok_or("not yet")?;
            holds(&copy, &expected)
        },
    )
    .await?;
    println!(
        "conflict: copy written {:?} after the unmanaged Secret was deleted",
        freed.elapsed()
    );
    // (status.failures is checked by the test below: it is not cleared, a known bug.)
    s.until_status(&manager, "InlineCredentials, 2/2", |st| {
        ready(st).is_some_and(|c| c.reason == "InlineCredentials")
            && st.namespaces.as_deref() == Some("2/2")
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn older_manager_wins_a_contested_secret_name_and_the_younger_takes_over_when_it_is_deleted()
-> Result {
    let s = ControllerScenario::new("contest").await?;
    let ns = s.create_target_namespace(&[], &[]).await?;
    // The older is the cluster manager, whose kind and name would sort after the younger's:
    // only the creation times can make it win.
    let older = s
        .apply(&s.cluster_manager(
            "zz-older",
            "  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: older
      password: older-password
",
        ))
        .await?;
    let older_content =
        json!({"https://index.docker.io/v1/": registry_entry("older", "older-password", None)});
    let written = s
        .until_secret(&ns, "docker-hub", |c| holds(c, &older_content))
        .await?;
    // creationTimestamp has one-second resolution.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let younger = s
        .apply(&format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: aa-younger
  namespace: {ns}
spec:
  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: younger
      password: younger-password
"
        ))
        .await?;

    let status = s.until_ready_reason(&younger, "Conflict").await?;
    let message = describe_ready(&status);
    assert!(
        message.contains("docker-hub") && message.contains(&older.name),
        "the younger names the Secret and the older manager: {message}"
    );
    s.until_ready_reason(&older, "InlineCredentials").await?;
    let now = s
        .secret(&ns, "docker-hub")
        .await?
        .ok_or("the copy is gone")?;
    holds(&now, &older_content).map_err(|e| format!("the older's content must stay: {e}"))?;
    assert_eq!(
        now.labels().get("cheiron.anny.co/manager-name"),
        Some(&older.name)
    );
    assert_eq!(
        now.resource_version(),
        written.resource_version(),
        "the younger never wrote the older's Secret"
    );

    let (older_object, _) = s.manager_status(&older).await?;
    s.delete_manager(&older_object).await?;
    let younger_content =
        json!({"https://index.docker.io/v1/": registry_entry("younger", "younger-password", None)});
    let taken = s
        .until_secret(&ns, "docker-hub", |c| {
            holds(c, &younger_content)?;
            match c.labels().get("cheiron.anny.co/manager-name") {
                Some(name) if *name == younger.name => Ok(()),
                other => Err(format!("labelled for {other:?}").into()),
            }
        })
        .await?;
    assert_eq!(
        taken
            .labels()
            .get("cheiron.anny.co/manager-kind")
            .map(String::as_str),
        Some("ImagePullSecretManager")
    );
    s.until_ready_reason(&younger, "InlineCredentials").await?;
    Ok(())
}

#[tokio::test]
async fn status_failures_are_cleared_once_a_conflict_is_resolved() -> Result {
    let s = ControllerScenario::new("failures-cleared").await?;
    let ns = s.create_target_namespace(&[], &[]).await?;
    let entry = |user: &str| {
        format!(
            "  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: {user}
      password: {user}-password
"
        )
    };
    let older = s
        .apply(&s.cluster_manager("older", &entry("older")))
        .await?;
    s.until_secret(&ns, "docker-hub", |_| Ok(())).await?;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let younger = s
        .apply(&s.cluster_manager("younger", &entry("younger")))
        .await?;
    let status = s.until_ready_reason(&younger, "Conflict").await?;
    assert_eq!(status.failures.len(), 1, "{:?}", status.failures);

    let (older_object, _) = s.manager_status(&older).await?;
    s.delete_manager(&older_object).await?;
    s.until_ready_reason(&younger, "InlineCredentials").await?;
    // Give the controller every chance to write the status again.
    s.until_status(&younger, "no failures listed once Ready", |st| {
        st.failures.is_empty()
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn the_original_cheiron_manager_whose_source_is_its_own_target_is_ready_and_untouched()
-> Result {
    use crate::dockerconfig::dockerconfigjson_secret;

    let s = ControllerScenario::new("own-source").await?;
    let ns = s.create_target_namespace(&[], &[]).await?;
    let source = s
        .create_secret(
            &ns,
            &dockerconfigjson_secret(
                "gitlab-registry",
                &json!({"registry.gitlab.com": registry_entry("carol", "carol-token", None)}),
            ),
        )
        .await?;
    // As the original Cheiron README writes it: the target name defaults to the source's.
    let manager = s
        .apply(&format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: gitlab
  namespace: {ns}
spec:
  secrets:
    - existingSecretRef: {{name: gitlab-registry}}
"
        ))
        .await?;
    let status = s.until_ready_reason(&manager, "Synced").await?;
    assert_eq!(status.namespaces.as_deref(), Some("1/1"));
    let after = s
        .secret(&ns, "gitlab-registry")
        .await?
        .ok_or("the source is gone")?;
    assert_eq!(
        after.metadata.resource_version, source.metadata.resource_version,
        "the source is never written"
    );
    let warnings: Vec<String> = s
        .events_about_manager(&manager)
        .await?
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.reason)
        .collect();
    assert!(warnings.is_empty(), "no Warning Event: {warnings:?}");
    Ok(())
}
