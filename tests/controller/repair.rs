//! A copy cheiron materialised is cheiron's: whoever changes its data, with whatever verb and
//! field manager, finds it written back within seconds, by the reconcile the watch event
//! triggers (not the next resync: the shared controller resyncs every 15 s). The verbs are
//! those of `kubectl replace` (PUT), `kubectl edit` (merge patch), `kubectl patch` (strategic
//! merge and JSON patch) and a GitOps tool's server-side apply; and a change made under
//! cheiron's own field manager name, keeping the content-hash annotation, which leaves nothing
//! in `managedFields` to tell it from cheiron's own writes.

use std::time::Duration;

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use crate::{
    dockerconfig::{holds, registry_entry},
    harness::Result,
    scenario::ControllerScenario,
};

/// The copy every test tampers with.
const COPY: &str = "repaired-pull";
/// Well under a resync of the shared controller (`--resync 15`).
const REPAIRED_WITHIN: Duration = Duration::from_secs(5);
/// Longer than one resync of the shared controller: a controller that wanted to write would
/// have done so by then.
const PAST_A_RESYNC: Duration = Duration::from_secs(17);

/// What cheiron writes into the copy.
fn wanted() -> Value {
    json!({"registry.repair.example": registry_entry("deploy", "deploy-password", None)})
}

/// What a tenant puts there instead.
fn foreign() -> Vec<u8> {
    json!({"auths": {"registry.repair.example": registry_entry("mallory", "stolen", None)}})
        .to_string()
        .into_bytes()
}

/// `{"data": {".dockerconfigjson": <foreign, base64>}}`.
fn foreign_data() -> Result<Value> {
    Ok(json!({"data": {".dockerconfigjson": serde_json::to_value(ByteString(foreign()))?}}))
}

/// A target namespace holding the copy of a cluster manager's inline entry, as cheiron wrote
/// it, and the Secrets API of that namespace.
async fn materialised(s: &ControllerScenario) -> Result<(String, Api<Secret>)> {
    let ns = s.create_target_namespace(&[], &[]).await?;
    s.apply(&s.cluster_manager(
        "repair",
        &format!(
            "  secrets:
    - name: {COPY}
      registry: registry.repair.example
      username: deploy
      password: deploy-password
"
        ),
    ))
    .await?;
    s.until_secret(&ns, COPY, |copy| holds(copy, &wanted()))
        .await?;
    Ok((ns.clone(), Api::namespaced(s.client().clone(), &ns)))
}

/// Checks that the tampering took (the data is the foreign one, the hash annotation unchanged),
/// then waits for cheiron to write its content back.
async fn until_repaired(s: &ControllerScenario, ns: &str, tampered: &Secret) -> Result<Secret> {
    let data = tampered.data.clone().unwrap_or_default();
    assert_eq!(
        data.get(".dockerconfigjson").map(|v| v.0.clone()),
        Some(foreign()),
        "the tampering did not take"
    );
    s.eventually_within(
        format!("Secret {ns}/{COPY} repaired"),
        REPAIRED_WITHIN,
        || async {
            let copy = s.secret(ns, COPY).await?.ok_or("it is gone")?;
            holds(&copy, &wanted())?;
            Ok(copy)
        },
    )
    .await
}

fn by(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.to_owned()),
        ..PatchParams::default()
    }
}

#[tokio::test]
async fn a_copy_replaced_with_other_data_is_repaired_within_seconds() -> Result {
    let s = ControllerScenario::new("repair-put").await?;
    let (ns, api) = materialised(&s).await?;
    let mut copy = api.get(COPY).await?;
    copy.data = Some([(".dockerconfigjson".to_owned(), ByteString(foreign()))].into());
    let params = PostParams {
        field_manager: Some("kubectl-replace".to_owned()),
        ..PostParams::default()
    };
    let tampered = api.replace(COPY, &params, &copy).await?;
    until_repaired(&s, &ns, &tampered).await?;
    Ok(())
}

#[tokio::test]
async fn a_copy_edited_with_a_merge_patch_is_repaired_within_seconds() -> Result {
    let s = ControllerScenario::new("repair-merge").await?;
    let (ns, api) = materialised(&s).await?;
    let tampered = api
        .patch(COPY, &by("kubectl-edit"), &Patch::Merge(foreign_data()?))
        .await?;
    until_repaired(&s, &ns, &tampered).await?;
    Ok(())
}

#[tokio::test]
async fn a_copy_edited_with_a_strategic_merge_patch_is_repaired_within_seconds() -> Result {
    let s = ControllerScenario::new("repair-strategic").await?;
    let (ns, api) = materialised(&s).await?;
    let tampered = api
        .patch(
            COPY,
            &by("kubectl-patch"),
            &Patch::Strategic(foreign_data()?),
        )
        .await?;
    until_repaired(&s, &ns, &tampered).await?;
    Ok(())
}

#[tokio::test]
async fn a_copy_edited_with_a_json_patch_is_repaired_within_seconds() -> Result {
    let s = ControllerScenario::new("repair-json").await?;
    let (ns, api) = materialised(&s).await?;
    let patch: json_patch::Patch = serde_json::from_value(json!([{
        "op": "replace",
        "path": "/data/.dockerconfigjson",
        "value": serde_json::to_value(ByteString(foreign()))?,
    }]))?;
    let tampered = api
        .patch(COPY, &by("kubectl-patch"), &Patch::<()>::Json(patch))
        .await?;
    until_repaired(&s, &ns, &tampered).await?;
    Ok(())
}

#[tokio::test]
async fn a_copy_applied_over_by_another_field_manager_is_repaired_within_seconds() -> Result {
    let s = ControllerScenario::new("repair-apply").await?;
    let (ns, api) = materialised(&s).await?;
    let mut object = foreign_data()?;
    object["apiVersion"] = json!("v1");
    object["kind"] = json!("Secret");
    object["metadata"] = json!({"name": COPY, "namespace": ns});
    let tampered = api
        .patch(
            COPY,
            &PatchParams::apply("gitops-tool").force(),
            &Patch::Apply(object),
        )
        .await?;
    until_repaired(&s, &ns, &tampered).await?;
    Ok(())
}

#[tokio::test]
async fn a_copy_edited_under_cheirons_own_field_manager_keeping_the_hash_is_repaired() -> Result {
    let s = ControllerScenario::new("repair-forged").await?;
    let (ns, api) = materialised(&s).await?;
    let before = api.get(COPY).await?;
    let hash = "cheiron.anny.co/content-sha256";
    // Under cheiron's name, `managedFields` say cheiron wrote the data; the annotation still
    // names cheiron's content.
    let tampered = api
        .patch(COPY, &by("cheiron"), &Patch::Merge(foreign_data()?))
        .await?;
    assert_eq!(
        tampered.annotations().get(hash),
        before.annotations().get(hash),
        "the content-hash annotation is kept"
    );
    let repaired = until_repaired(&s, &ns, &tampered).await?;
    // Repaired once, then left alone: a resync reads nothing it has not read, writes nothing.
    tokio::time::sleep(PAST_A_RESYNC).await;
    let after = api.get(COPY).await?;
    assert_eq!(
        after.resource_version(),
        repaired.resource_version(),
        "the copy was written again after its repair"
    );
    Ok(())
}
