//! ServiceAccounts that existed before their manager get its entries from the controller
//! (backfill), appended after their own, with every opt-out and `serviceAccountNames`
//! honoured and another writer's later entries kept.

use cheiron::api::annotation::{IGNORE, RECONCILABLE, RECONCILE_WITH, RECONCILED};
use kube::ResourceExt;

use crate::{
    harness::{Admitted, Result, service_account},
    scenario::{ControllerScenario, has_pull_secrets},
};

#[tokio::test]
async fn service_accounts_that_predate_the_manager_are_backfilled_and_opt_outs_are_left_alone()
-> Result {
    let s = ControllerScenario::new("backfill").await?;
    let ns = s.create_target_namespace(&[], &[]).await?;
    let annotated_ns = s.create_target_namespace(&[], &[(IGNORE, "true")]).await?;
    let labelled_ns = s.create_target_namespace(&[(IGNORE, "true")], &[]).await?;

    // All created before the manager exists, so the webhook has nothing to add to them.
    let mut untouched = Vec::new();
    s.create_service_account(&ns, &service_account("pre-existing", &["own-a"], &[]))
        .await?;
    for sa in [
        service_account("ignored", &["own-b"], &[(IGNORE, "true")]),
        service_account("not-reconcilable", &[], &[(RECONCILABLE, "false")]),
        service_account("not-named", &[], &[]),
    ] {
        untouched.push(s.create_service_account(&ns, &sa).await?);
    }
    s.default_service_account(&ns).await?;
    for opted_out in [&annotated_ns, &labelled_ns] {
        untouched.push(s.default_service_account(opted_out).await?);
    }

    let spec = |extra: &str| {
        format!(
            "  serviceAccountNames: [default, pre-existing, ignored, not-reconcilable]
  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: alice-password
    - name: ghcr
      registry: ghcr.io
      username: bob
      password: bob-password
{extra}"
        )
    };
    let manager = s.apply(&s.cluster_manager("backfill", &spec(""))).await?;

    let backfilled = s
        .until_service_account(
            &ns,
            "pre-existing",
            has_pull_secrets(&["own-a", "docker-hub", "ghcr"]),
        )
        .await?;
    assert_eq!(backfilled.annotation(RECONCILED), Some("true"));
    assert_eq!(
        backfilled.annotation(RECONCILE_WITH),
        Some("docker-hub,ghcr")
    );
    s.until_service_account(&ns, "default", has_pull_secrets(&["docker-hub", "ghcr"]))
        .await?;
    let status = s.until_ready_reason(&manager, "InlineCredentials").await?;
    assert_eq!(
        status.namespaces.as_deref(),
        Some("1/1"),
        "namespaces opted out (label or annotation) are not targets"
    );
    s.until_event(
        &ns,
        backfilled.uid().as_deref(),
        "PullSecretsAdded",
        "ServiceAccount pre-existing",
    )
    .await?;

    // Another writer appends its own entry after cheiron's; a later change of the manager
    // (one more Secret) appends after it and keeps it.
    s.append_pull_secret(&ns, "pre-existing", "later").await?;
    s.apply(&s.cluster_manager(
        "backfill",
        &spec(
            "    - name: quay
      registry: quay.io
      username: carol
      password: carol-password
",
        ),
    ))
    .await?;
    let changed = s
        .until_service_account(
            &ns,
            "pre-existing",
            has_pull_secrets(&["own-a", "docker-hub", "ghcr", "later", "quay"]),
        )
        .await?;
    assert_eq!(
        changed.annotation(RECONCILE_WITH),
        Some("docker-hub,ghcr,quay")
    );
    s.until_ready_reason(&manager, "InlineCredentials").await?;

    for before in &untouched {
        let ns = before.namespace().unwrap_or_default();
        let name = before.name_any();
        let now = s.service_account(&ns, &name).await?;
        assert_eq!(
            (
                now.pull_secret_names(),
                now.annotation(RECONCILED),
                now.resource_version()
            ),
            (before.pull_secret_names(), None, before.resource_version()),
            "ServiceAccount {ns}/{name} must be left alone"
        );
    }
    for opted_out in [&annotated_ns, &labelled_ns] {
        assert_eq!(
            s.secret(opted_out, "docker-hub")
                .await?
                .map(|c| c.name_any()),
            None,
            "no Secret in opted-out namespace {opted_out}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn narrowing_the_names_or_switching_to_pod_mode_removes_exactly_what_cheiron_added() -> Result
{
    let s = ControllerScenario::new("narrowing").await?;
    let ns = s.create_target_namespace(&[], &[]).await?;
    for name in ["kept", "dropped"] {
        s.create_service_account(&ns, &service_account(name, &["theirs"], &[]))
            .await?;
    }
    let spec = |mode: &str, names: &str| {
        format!(
            "  mode: {mode}
{names}  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: alice-password
"
        )
    };
    s.apply(&s.cluster_manager(
        "narrowing",
        &spec("ServiceAccount", "  serviceAccountNames: [kept, dropped]\n"),
    ))
    .await?;
    for name in ["kept", "dropped"] {
        s.until_service_account(&ns, name, has_pull_secrets(&["theirs", "docker-hub"]))
            .await?;
    }
    // Another writer adds after cheiron: that entry must survive everything below.
    s.append_pull_secret(&ns, "dropped", "theirs-later").await?;

    s.apply(&s.cluster_manager(
        "narrowing",
        &spec("ServiceAccount", "  serviceAccountNames: [kept]\n"),
    ))
    .await?;
    let dropped = s
        .until_service_account(
            &ns,
            "dropped",
            has_pull_secrets(&["theirs", "theirs-later"]),
        )
        .await?;
    assert_eq!(
        (
            dropped.annotation(RECONCILE_WITH),
            dropped.annotation(RECONCILED)
        ),
        (None, None),
        "cheiron's record of what it added goes with the last entry it added"
    );
    s.until_service_account(&ns, "kept", has_pull_secrets(&["theirs", "docker-hub"]))
        .await?;

    s.apply(&s.cluster_manager("narrowing", &spec("Pod", "")))
        .await?;
    s.until_service_account(&ns, "kept", has_pull_secrets(&["theirs"]))
        .await?;
    let dropped = s.service_account(&ns, "dropped").await?;
    assert_eq!(
        dropped
            .image_pull_secrets
            .iter()
            .flatten()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        ["theirs", "theirs-later"],
        "a ServiceAccount already cleaned is left as it is"
    );
    Ok(())
}

#[tokio::test]
async fn a_thousand_service_accounts_backfilled_by_one_manager_make_a_bounded_number_of_events()
-> Result {
    use futures::{StreamExt, TryStreamExt, stream};
    use k8s_openapi::api::events::v1::Event;
    use kube::{Api, api::ListParams};

    const NAMESPACES: usize = 10;
    const PER_NAMESPACE: usize = 100;
    let s = ControllerScenario::new("many-sas").await?;
    let mut namespaces = Vec::new();
    for _ in 0..NAMESPACES {
        namespaces.push(s.create_target_namespace(&[], &[]).await?);
    }
    // All before the manager: the controller backfills every one of them.
    let wanted: Vec<(String, String)> = namespaces
        .iter()
        .flat_map(|ns| (0..PER_NAMESPACE).map(move |i| (ns.clone(), format!("sa-{i}"))))
        .collect();
    stream::iter(wanted.clone())
        .map(|(ns, name)| {
            let s = &s;
            async move {
                s.create_service_account(&ns, &service_account(&name, &[], &[]))
                    .await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;

    let manager = s
        .apply(&s.cluster_manager(
            "many-sas",
            "  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: alice-password
",
        ))
        .await?;
    for ns in &namespaces {
        s.until_service_account(
            ns,
            &format!("sa-{}", PER_NAMESPACE - 1),
            has_pull_secrets(&["docker-hub"]),
        )
        .await?;
    }
    let summary = s
        .until_event_about_manager(&manager, "PullSecretsAdded")
        .await?;
    let note = summary.note.unwrap_or_default();
    assert!(note.contains("ServiceAccount(s)"), "{note}");

    // Every ServiceAccount got its entry; the Events about single ones stay few.
    let mut per_object = 0;
    for ns in &namespaces {
        let events: Api<Event> = Api::namespaced(s.client().clone(), ns);
        per_object += events
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("PullSecretsAdded"))
            .count();
        for i in 0..PER_NAMESPACE {
            let sa = s.service_account(ns, &format!("sa-{i}")).await?;
            assert!(
                sa.image_pull_secrets
                    .iter()
                    .flatten()
                    .any(|r| r.name == "docker-hub"),
                "{ns}/sa-{i} was not backfilled"
            );
        }
    }
    let bound = 3 * cheiron::controller::SERVICE_ACCOUNT_EVENTS_PER_RECONCILE;
    assert!(
        per_object <= bound,
        "{per_object} Events about single ServiceAccounts for {} patched (at most {bound})",
        NAMESPACES * PER_NAMESPACE
    );
    println!(
        "1 000 ServiceAccounts backfilled: {per_object} Events about single ones, then: {note}"
    );
    Ok(())
}
