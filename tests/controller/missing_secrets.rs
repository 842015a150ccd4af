//! Warning Events on Pods whose pull secret is still missing after the grace period: the
//! shared webhook (registered through a real MutatingWebhookConfiguration) labels a Pod it
//! appended a missing Secret to, and the shared controller (`--missing-secret-grace`
//! [`GRACE`] seconds, see `harness::controller::SHARED_CONTROLLER_ARGS`) puts one
//! `PullSecretMissing` Event on it when the Secret has not appeared by then.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt, api::PostParams};
use serde_json::json;

use crate::{
    dockerconfig::dockerconfigjson_secret,
    harness::{Result, pod},
    scenario::ControllerScenario,
};

/// `--missing-secret-grace` of the shared controller, in seconds.
const GRACE: u64 = 3;
const LABEL: &str = "cheiron.anny.co/missing-secrets";
const REASON: &str = "PullSecretMissing";

/// A namespace whose only manager (mode Pod) has the entries `entries` (YAML lines under
/// `secrets:`, indented four spaces), with the webhook already injecting `injected` into a new
/// Pod.
async fn namespace_with(s: &ControllerScenario, entries: &str, injected: &str) -> Result<String> {
    let ns = s.create_namespace(&[], &[]).await?;
    s.apply(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: pods
  namespace: {ns}
spec:
  mode: Pod
  secrets:
{entries}"
    ))
    .await?;
    s.until_new_pod_gets(&ns, &[], &[injected]).await?;
    Ok(ns)
}

/// A copy named `name` of a source `source` that does not exist.
fn copy_of_absent(name: &str, source: &str) -> String {
    format!("    - name: {name}\n      existingSecretRef:\n        name: {source}\n")
}

#[tokio::test]
async fn a_pod_whose_pull_secret_is_still_missing_after_the_grace_gets_one_warning_event() -> Result
{
    let s = ControllerScenario::new("missing-secret").await?;
    // Copies of sources that do not exist: the controller cannot write either.
    let absent = namespace_with(
        &s,
        &copy_of_absent("absent-pull", "absent-src"),
        "absent-pull",
    )
    .await?;
    let late = namespace_with(&s, &copy_of_absent("late-pull", "late-src"), "late-pull").await?;

    let own_labels = [("app", "web"), ("tier", "front")];
    let stuck = s
        .create_pod(&absent, &pod("stuck-", &own_labels, &[], &[]))
        .await?;
    let saved = s
        .create_pod(&late, &pod("saved-", &own_labels, &[], &[]))
        .await?;
    // The Secret appears within the grace period (created here by hand: the controller leaves
    // a foreign Secret alone, and the check counts any Secret of that name).
    s.create_secret(
        &late,
        &dockerconfigjson_secret(
            "late-pull",
            &json!({"registry.example.com": {"auth": "bGF0ZTpzZWNyZXQtdmFsdWU="}}),
        ),
    )
    .await?;

    // The webhook labelled both Pods, keeping their own labels, and named the Secret.
    for (admitted, name) in [(&stuck, "absent-pull"), (&saved, "late-pull")] {
        let labels = admitted.labels();
        assert_eq!(labels.get(LABEL).map(String::as_str), Some("true"));
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(labels.get("tier").map(String::as_str), Some("front"));
        assert_eq!(
            admitted.annotations().get(LABEL).map(String::as_str),
            Some(name)
        );
    }

    let event = s
        .until_event(&absent, stuck.uid().as_deref(), REASON, "the stuck Pod")
        .await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let regarding = event.regarding.clone().unwrap_or_default();
    assert_eq!(regarding.kind.as_deref(), Some("Pod"));
    assert_eq!(regarding.name, stuck.metadata.name);
    let note = event.note.clone().unwrap_or_default();
    assert!(
        note.contains("absent-pull") && note.contains(&format!("{GRACE}s")),
        "{note}"
    );

    // Another grace period later: still one Event on the stuck Pod (by uid, once), none on the
    // Pod whose Secret appeared in time (it was due at the same time as the stuck one).
    tokio::time::sleep(Duration::from_secs(2 * GRACE + 2)).await;
    let on_stuck = s.events_regarding(&absent, stuck.uid().as_deref()).await?;
    let warnings: Vec<_> = on_stuck
        .iter()
        .filter(|e| e.reason.as_deref() == Some(REASON))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].series.is_none(),
        "published once, not repeated: {:?}",
        warnings[0].series
    );
    let on_saved = s.events_regarding(&late, saved.uid().as_deref()).await?;
    assert!(
        on_saved.iter().all(|e| e.reason.as_deref() != Some(REASON)),
        "{on_saved:?}"
    );

    // A Pod admitted while cheiron's own Secret exists is not labelled, so not watched.
    let inline = namespace_with(
        &s,
        "    - name: inline-pull\n      registry: registry.example.com\n      username: u\n      password: p\n",
        "inline-pull",
    )
    .await?;
    s.until_secret(&inline, "inline-pull", |_| Ok(())).await?;
    let pods: Api<Pod> = Api::namespaced(s.client().clone(), &inline);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    s.eventually("the webhook to see cheiron's inline-pull", || async {
        let admitted = pods.create(&dry_run, &pod("fine-", &[], &[], &[])).await?;
        match admitted.labels().get(LABEL) {
            None if !admitted.annotations().contains_key(LABEL) => Ok(()),
            _ => Err(format!("still marked: {:?}", admitted.metadata).into()),
        }
    })
    .await?;

    // Deleting the stuck Pod is fine (the controller forgets it); its Event stays with it.
    Api::<Pod>::namespaced(s.client().clone(), &absent)
        .delete(&stuck.name_any(), &Default::default())
        .await?;
    Ok(())
}
