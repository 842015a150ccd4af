//! A manager's status follows its spec and its namespaces, and is written only when it changes:
//! at steady state a resync writes nothing at all.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{Api, ResourceExt, api::ListParams};
use serde_json::json;

use crate::{
    dockerconfig::{dockerconfigjson_secret, registry_entry},
    harness::Result,
    scenario::{ControllerScenario, ManagerRef, has_pull_secrets, ready},
};

/// Longer than the shared controller's `--resync 15`.
const PAST_ONE_RESYNC: Duration = Duration::from_secs(20);

/// `kind namespace/name` → resourceVersion of the manager, its copies and the ServiceAccounts
/// of `namespaces`.
async fn resource_versions(
    s: &ControllerScenario,
    manager: &ManagerRef,
    namespaces: &[String],
) -> Result<BTreeMap<String, String>> {
    let mut versions = BTreeMap::new();
    let (object, _) = s.manager_status(manager).await?;
    versions.insert(
        format!("{manager}"),
        object.resource_version().unwrap_or_default(),
    );
    for copy in s.copies_of(manager).await? {
        versions.insert(
            format!(
                "Secret {}/{}",
                copy.namespace().unwrap_or_default(),
                copy.name_any()
            ),
            copy.resource_version().unwrap_or_default(),
        );
    }
    for ns in namespaces {
        let api: Api<ServiceAccount> = Api::namespaced(s.client().clone(), ns);
        for sa in api.list(&ListParams::default()).await?.items {
            versions.insert(
                format!("ServiceAccount {ns}/{}", sa.name_any()),
                sa.resource_version().unwrap_or_default(),
            );
        }
    }
    Ok(versions)
}

#[tokio::test]
async fn status_follows_the_spec_generation_and_nothing_is_written_at_steady_state() -> Result {
    let s = ControllerScenario::new("steady").await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let mut targets = Vec::new();
    for _ in 0..3 {
        targets.push(s.create_target_namespace(&[], &[]).await?);
    }
    for (name, registry) in [
        ("first-pull", "one.example.com"),
        ("second-pull", "two.example.com"),
    ] {
        s.create_secret(
            &sources,
            &dockerconfigjson_secret(name, &json!({registry: registry_entry("ci", "pw", None)})),
        )
        .await?;
    }
    let spec = |names: &[&str]| {
        let entries: String = names
            .iter()
            .map(|n| {
                format!(
                    "    - existingSecretRef:\n        name: {n}\n        namespace: {sources}\n"
                )
            })
            .collect();
        format!("  secrets:\n{entries}")
    };
    let manager = s
        .apply(&s.cluster_manager("steady", &spec(&["first-pull"])))
        .await?;

    let status = s.until_ready_reason(&manager, "Synced").await?;
    let (object, _) = s.manager_status(&manager).await?;
    let generation = object.metadata.generation;
    assert_eq!(status.observed_generation, generation);
    assert_eq!(
        ready(&status).and_then(|c| c.observed_generation),
        generation
    );
    assert_eq!(
        (
            status.target_namespaces,
            status.synced_namespaces,
            status.namespaces.as_deref()
        ),
        (Some(3), Some(3), Some("3/3"))
    );
    assert!(status.failures.is_empty(), "{:?}", status.failures);

    s.apply(&s.cluster_manager("steady", &spec(&["first-pull", "second-pull"])))
        .await?;
    let status = s
        .until_status(&manager, "Synced with both Secrets", |st| {
            ready(st).is_some_and(|c| c.reason == "Synced")
                && st.namespaces.as_deref() == Some("3/3")
        })
        .await?;
    let (object, _) = s.manager_status(&manager).await?;
    assert_eq!(object.metadata.generation, generation.map(|g| g + 1));
    assert_eq!(status.observed_generation, object.metadata.generation);
    for ns in &targets {
        s.until_secret(ns, "second-pull", |_| Ok(())).await?;
        s.until_service_account(
            ns,
            "default",
            has_pull_secrets(&["first-pull", "second-pull"]),
        )
        .await?;
    }

    let controller = s.controller()?;
    let runs_before = controller.metric("cheiron_reconcile_runs_total").await?;
    let before = resource_versions(&s, &manager, &targets).await?;
    tokio::time::sleep(PAST_ONE_RESYNC).await;
    let after = resource_versions(&s, &manager, &targets).await?;
    let runs_after = controller.metric("cheiron_reconcile_runs_total").await?;
    assert!(
        runs_after > runs_before,
        "the controller reconciled meanwhile ({runs_before} -> {runs_after} runs)"
    );
    let changed: Vec<String> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: {v} -> {:?}", after.get(k)))
        .collect();
    assert!(
        changed.is_empty() && before.len() == after.len(),
        "steady state must write nothing, but {} changed:\n{}",
        changed.len(),
        changed.join("\n")
    );
    println!(
        "steady state: {} objects unchanged over {PAST_ONE_RESYNC:?} ({} reconciles of all managers meanwhile)",
        before.len(),
        runs_after - runs_before
    );
    Ok(())
}
