//! Pull failures attributed to the manager whose credential the registry refused
//! (docs/credential-health.md, "Pull failures"), on the real apiserver with the shared
//! controller: the test writes what a kubelet writes when a registry answers 401 (the Pod's
//! container waiting on `ErrImagePull`, and a `Failed` Event with the runtime's message), and
//! the controller puts it in the manager's `status.pullFailures` with one `PullRejected` Event.
//! `cheiron audit` reads the same refusals from the Pods (`pullRejected`, `noCredential`).
//! The real kubelet's 401 is in tests/node (credential_health).

use k8s_openapi::{
    api::core::v1::{Event as CoreEvent, Pod},
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{
    CHEIRON,
    harness::{Result, pod},
    scenario::{ControllerScenario, ready},
};

/// The image of `harness::pod`.
const IMAGE: &str = "registry.example.com/team/app:1.0";
const PASSWORD: &str = "s3cret-never-shown";

/// containerd's error for a registry that refuses the credential, as the kubelet's Event
/// carries it.
fn refused_message() -> String {
    format!(
        "Failed to pull image \"{IMAGE}\": failed to pull and unpack image \"{IMAGE}\": failed to \
         resolve reference \"{IMAGE}\": unexpected status from HEAD request to \
         https://registry.example.com/v2/team/app/manifests/1.0: 401 Unauthorized"
    )
}

/// Writes what the kubelet writes when the pull of `IMAGE` by `pod` fails: the container
/// waiting on `ErrImagePull` (only if `waiting`), and the `Failed` Event.
async fn kubelet_reports_a_refused_pull(
    s: &ControllerScenario,
    ns: &str,
    pod: &Pod,
    waiting: bool,
) -> Result<()> {
    let client = s.client().clone();
    if waiting {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        pods.patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"containerStatuses": [{
                "name": "app",
                "image": IMAGE,
                "imageID": "",
                "ready": false,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ErrImagePull", "message": "401 Unauthorized"}},
            }]}})),
        )
        .await?;
    }
    let now = Time(Timestamp::now());
    let event: CoreEvent = serde_json::from_value(json!({
        "metadata": {"generateName": format!("{}.", pod.name_any())},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": ns,
            "name": pod.name_any(),
            "uid": pod.uid(),
            "fieldPath": "spec.containers{app}",
        },
        "reason": "Failed",
        "message": refused_message(),
        "type": "Warning",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }))?;
    Api::<CoreEvent>::namespaced(client, ns)
        .create(&PostParams::default(), &event)
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_pull_the_registry_refused_is_attributed_to_the_manager_whose_secret_the_pod_used()
-> Result {
    let s = ControllerScenario::new("pull-failures").await?;
    let ns = s.create_target_namespace(&[], &[]).await?;
    let manager = s
        .apply(&s.cluster_manager(
            "refused",
            &format!(
                "  mode: Pod\n  secrets:\n    - name: team-pull\n      registry: registry.example.com\n      username: bot\n      password: {PASSWORD}\n"
            ),
        ))
        .await?;
    s.until_status(&manager, "team-pull written, its registry known", |st| {
        ready(st).is_some_and(|c| c.reason == "InlineCredentials")
            && st.pull_secrets.iter().any(|p| p.name == "team-pull")
    })
    .await?;

    // A forged Event first: its Pod is not waiting on a pull (nothing but its kubelet writes
    // that), so it must not be believed.
    let forged = s
        .create_pod(&ns, &pod("forged-", &[], &["team-pull"], &[]))
        .await?;
    kubelet_reports_a_refused_pull(&s, &ns, &forged, false).await?;
    // Then the real thing.
    let refused = s
        .create_pod(&ns, &pod("refused-", &[], &["team-pull"], &[]))
        .await?;
    kubelet_reports_a_refused_pull(&s, &ns, &refused, true).await?;

    let status = s
        .until_status(&manager, "the refused pull in status.pullFailures", |st| {
            st.pull_failures.as_ref().is_some_and(|f| f.count >= 1)
        })
        .await?;
    let failures = status.pull_failures.clone().unwrap_or_default();
    assert_eq!(
        failures.count, 1,
        "the forged Event was believed: {failures:?}"
    );
    let latest = &failures.recent[0];
    assert_eq!(
        (
            latest.namespace.as_str(),
            latest.pod.as_str(),
            latest.image.as_str(),
            latest.secret.as_str(),
            latest.registry.as_str()
        ),
        (
            ns.as_str(),
            refused.name_any().as_str(),
            IMAGE,
            "team-pull",
            "registry.example.com"
        )
    );

    let event = s
        .until_event_about_manager(&manager, "PullRejected")
        .await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.clone().unwrap_or_default();
    assert!(
        note.contains("team-pull") && note.contains(&refused.name_any()),
        "{note}"
    );
    assert!(!note.contains(PASSWORD), "{note}");
    let stored = serde_json::to_string(&status)?;
    assert!(!stored.contains(PASSWORD), "{stored}");

    // The same Pod failing again within minutes is one refusal, and one Event per window.
    kubelet_reports_a_refused_pull(&s, &ns, &refused, true).await?;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let (_, status) = s.manager_status(&manager).await?;
    assert_eq!(status.pull_failures.map(|f| f.count), Some(1));
    let rejected = s
        .events_about_manager(&manager)
        .await?
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("PullRejected"))
        .count();
    assert_eq!(rejected, 1);
    Ok(())
}

#[tokio::test]
async fn audit_names_a_rejected_credential_and_a_pod_that_pulled_without_one() -> Result {
    let s = ControllerScenario::new("pull-audit").await?;
    let ns = s.create_target_namespace(&[], &[]).await?;
    // Mode ServiceAccount: a Pod gets the Secret only through a ServiceAccount, so a Pod
    // naming another ServiceAccount's Secrets (none here) pulls without it.
    let manager = s
        .apply(&s.cluster_manager(
            "audited",
            &format!(
                "  secrets:\n    - name: audit-pull\n      registry: registry.example.com\n      username: bot\n      password: {PASSWORD}\n"
            ),
        ))
        .await?;
    s.until_status(&manager, "audit-pull written, its registry known", |st| {
        st.pull_secrets.iter().any(|p| p.name == "audit-pull")
    })
    .await?;
    let with = s
        .create_pod(&ns, &pod("with-", &[], &["audit-pull"], &[]))
        .await?;
    let without = s
        .create_pod(&ns, &pod("without-", &[], &["someone-elses"], &[]))
        .await?;
    let running = s
        .create_pod(&ns, &pod("running-", &[], &["audit-pull"], &[]))
        .await?;
    for p in [&with, &without] {
        kubelet_reports_a_refused_pull(&s, &ns, p, true).await?;
    }
    let _ = running;

    let (code, all) = CHEIRON
        .audit_json(s.cluster()?.admin_kubeconfig(), &ns)
        .await?;
    let json = serde_json::Value::Array(all.clone());
    assert_eq!(code, Some(1), "{json}");
    let findings: Vec<&serde_json::Value> = all.iter().filter(|f| f["pull"].is_object()).collect();
    let by_pod = |name: String| {
        findings
            .iter()
            .find(|f| f["name"] == name.as_str())
            .copied()
    };
    let rejected = by_pod(with.name_any())
        .ok_or(format!("no pull finding for {}: {json}", with.name_any()))?;
    assert_eq!(rejected["why"], "pullRejected");
    assert_eq!(rejected["pull"]["secret"], "audit-pull");
    assert_eq!(rejected["pull"]["registry"], "registry.example.com");
    assert_eq!(rejected["pull"]["image"], IMAGE);
    assert!(
        rejected["fix"]
            .as_str()
            .is_some_and(|f| f.contains("rotate")),
        "{rejected}"
    );
    let no_credential = by_pod(without.name_any()).ok_or(format!(
        "no pull finding for {}: {json}",
        without.name_any()
    ))?;
    assert_eq!(no_credential["why"], "noCredential");
    assert_eq!(no_credential["missing"], serde_json::json!(["audit-pull"]));
    assert_eq!(
        findings.len(),
        2,
        "the running Pod is no pull finding: {json}"
    );
    assert!(!json.to_string().contains(PASSWORD));
    Ok(())
}
