//! Deleting a manager: its finalizer removes its Secrets and exactly the ServiceAccount entries
//! cheiron added for it, and nothing another writer or another manager still wants.

use std::time::Duration;

use cheiron::api::annotation::{RECONCILE_WITH, RECONCILED};
use kube::ResourceExt;
use serde_json::json;

use crate::{
    dockerconfig::{holds, registry_entry},
    harness::{Admitted, Result, service_account},
    scenario::{ControllerScenario, ManagerRef, has_pull_secrets},
};

/// Two namespaces: in `shared_ns` the cluster manager `leaving` and the younger namespaced
/// `staying` both want the Secret `shared` (`leaving` wins it while it lives), in `only_ns`
/// only `leaving` acts. ServiceAccounts carry other writers' entries before and after
/// cheiron's. Then `leaving` is deleted, and this returns once it is gone.
struct Deleted {
    s: ControllerScenario,
    shared_ns: String,
    only_ns: String,
    leaving: ManagerRef,
    staying: ManagerRef,
}

async fn delete_one_of_two_managers(slug: &str) -> Result<Deleted> {
    let s = ControllerScenario::new(slug).await?;
    let shared_ns = s.create_target_namespace(&[], &[]).await?;
    let only_ns = s.create_target_namespace(&[], &[]).await?;
    s.create_service_account(&shared_ns, &service_account("app", &["theirs-first"], &[]))
        .await?;
    s.default_service_account(&only_ns).await?;

    let leaving = s
        .apply(&s.cluster_manager(
            "leaving",
            "  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: alice-password
    - name: shared
      registry: registry.example.com
      username: leaving
      password: leaving-password
",
        ))
        .await?;
    for ns in [&shared_ns, &only_ns] {
        s.until_secret(ns, "shared", |_| Ok(())).await?;
    }
    s.until_service_account(
        &shared_ns,
        "app",
        has_pull_secrets(&["theirs-first", "docker-hub", "shared"]),
    )
    .await?;
    s.until_service_account(
        &only_ns,
        "default",
        has_pull_secrets(&["docker-hub", "shared"]),
    )
    .await?;
    s.append_pull_secret(&shared_ns, "app", "theirs-later")
        .await?;
    s.append_pull_secret(&only_ns, "default", "theirs").await?;

    // creationTimestamp has one-second resolution: `staying` is younger.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let staying = s
        .apply(&format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: staying
  namespace: {shared_ns}
spec:
  secrets:
    - name: shared
      registry: registry.example.com
      username: staying
      password: staying-password
"
        ))
        .await?;
    s.until_ready_reason(&staying, "Conflict").await?;

    let (object, _) = s.manager_status(&leaving).await?;
    assert_eq!(
        object.finalizers(),
        ["cheiron.anny.co/cleanup"],
        "the finalizer is in place before deletion"
    );
    s.delete_manager(&object).await?;
    s.eventually(format!("{leaving} to be gone"), || async {
        match s.manager(&leaving).await? {
            None => Ok(()),
            Some(m) => Err(format!("still there, finalizers {:?}", m.finalizers()).into()),
        }
    })
    .await?;
    Ok(Deleted {
        s,
        shared_ns,
        only_ns,
        leaving,
        staying,
    })
}

#[tokio::test]
async fn deleted_manager_removes_its_secrets_and_a_younger_manager_takes_over_a_shared_name()
-> Result {
    let Deleted {
        s,
        shared_ns,
        only_ns,
        leaving,
        staying,
    } = delete_one_of_two_managers("deletion").await?;

    s.until_no_secret(&shared_ns, "docker-hub").await?;
    s.until_no_secret(&only_ns, "docker-hub").await?;
    s.until_no_secret(&only_ns, "shared").await?;
    let staying_content =
        json!({"registry.example.com": registry_entry("staying", "staying-password", None)});
    s.until_secret(&shared_ns, "shared", |c| holds(c, &staying_content))
        .await?;
    assert!(
        s.copies_of(&leaving).await?.is_empty(),
        "no Secret of the deleted manager is left"
    );
    s.until_ready_reason(&staying, "InlineCredentials").await?;
    Ok(())
}

#[tokio::test]
async fn deleted_manager_removes_exactly_the_service_account_entries_cheiron_added() -> Result {
    let Deleted {
        s,
        shared_ns,
        only_ns,
        ..
    } = delete_one_of_two_managers("deletion-entries").await?;

    let app = s
        .until_service_account(
            &shared_ns,
            "app",
            has_pull_secrets(&["theirs-first", "shared", "theirs-later"]),
        )
        .await?;
    assert_eq!(
        app.annotation(RECONCILE_WITH),
        Some("shared"),
        "the name the staying manager still wants stays recorded"
    );
    assert_eq!(app.annotation(RECONCILED), Some("true"));
    let default = s
        .until_service_account(&only_ns, "default", has_pull_secrets(&["theirs"]))
        .await?;
    assert_eq!(
        default.annotation(RECONCILE_WITH),
        None,
        "bookkeeping removed"
    );
    assert_eq!(default.annotation(RECONCILED), None, "bookkeeping removed");
    Ok(())
}

/// Denies every UPDATE of a ServiceAccount in `ns`, as another policy engine might: a real
/// ValidatingAdmissionPolicy and its binding, deleted again by [`Frozen::thaw`].
struct Frozen {
    policies: kube::Api<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>,
    bindings:
        kube::Api<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>,
    name: String,
}

impl Frozen {
    async fn service_accounts_in(s: &ControllerScenario, ns: &str) -> Result<Self> {
        let client = s.client().clone();
        let frozen = Self {
            policies: kube::Api::all(client.clone()),
            bindings: kube::Api::all(client),
            name: s.unique_name("freeze-sa"),
        };
        let name = &frozen.name;
        frozen
            .policies
            .create(
                &Default::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingAdmissionPolicy",
                    "metadata": {"name": name},
                    "spec": {
                        "failurePolicy": "Fail",
                        "matchConstraints": {"resourceRules": [{
                            "apiGroups": [""], "apiVersions": ["v1"],
                            "operations": ["UPDATE"], "resources": ["serviceaccounts"],
                        }]},
                        "validations": [{"expression": "false", "message": "frozen by the test"}],
                    },
                }))?,
            )
            .await?;
        frozen
            .bindings
            .create(
                &Default::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingAdmissionPolicyBinding",
                    "metadata": {"name": name},
                    "spec": {
                        "policyName": name,
                        "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": ns},
                        }},
                    },
                }))?,
            )
            .await?;
        // The policy takes effect once the apiserver has compiled it: probe until denied.
        let sas: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
            kube::Api::namespaced(s.client().clone(), ns);
        s.eventually("ServiceAccount updates to be denied", || async {
            let probe = json!({"metadata": {"labels": {"probe": "x"}}});
            match sas
                .patch(
                    "default",
                    &Default::default(),
                    &kube::api::Patch::Merge(&probe),
                )
                .await
            {
                Err(kube::Error::Api(e)) if e.message.contains("frozen by the test") => Ok(()),
                other => Err(format!("not denied yet: {:?}", other.map(|_| ())).into()),
            }
        })
        .await?;
        Ok(frozen)
    }

    async fn thaw(self) -> Result<()> {
        self.bindings
            .delete(&self.name, &Default::default())
            .await?;
        self.policies
            .delete(&self.name, &Default::default())
            .await?;
        Ok(())
    }
}

#[tokio::test]
async fn cleanup_that_keeps_failing_waits_with_an_event_until_annotated_to_abandon() -> Result {
    use cheiron::api::annotation::ABANDON_CLEANUP;

    let s = ControllerScenario::new("abandon").await?;
    let ns = s.create_target_namespace(&[], &[]).await?;
    s.default_service_account(&ns).await?;
    let manager = s
        .apply(&s.cluster_manager(
            "abandon",
            "  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: alice-password
",
        ))
        .await?;
    s.until_service_account(&ns, "default", has_pull_secrets(&["docker-hub"]))
        .await?;
    let frozen = Frozen::service_accounts_in(&s, &ns).await?;

    let (object, _) = s.manager_status(&manager).await?;
    let uid = object.uid();
    s.delete_manager(&object).await?;
    let failed = s
        .until_event("default", uid.as_deref(), "CleanupFailed", &manager)
        .await?;
    let note = failed.note.unwrap_or_default();
    assert!(note.contains("frozen by the test"), "{note}");
    assert!(
        note.contains(ABANDON_CLEANUP),
        "the Event says how to stop: {note}"
    );
    assert!(
        s.manager(&manager).await?.is_some(),
        "the manager waits on its finalizer while cleanup fails"
    );

    let annotate = json!({"metadata": {"annotations": {ABANDON_CLEANUP: "true"}}});
    kube::Api::<kube::api::DynamicObject>::all_with(
        s.client().clone(),
        &kube::api::ApiResource::erase::<cheiron::api::ClusterImagePullSecretManager>(&()),
    )
    .patch(
        &manager.name,
        &Default::default(),
        &kube::api::Patch::Merge(&annotate),
    )
    .await?;
    s.eventually(format!("{manager} to be gone"), || async {
        match s.manager(&manager).await? {
            None => Ok(()),
            Some(m) => Err(format!("still there, finalizers {:?}", m.finalizers()).into()),
        }
    })
    .await?;
    s.until_event("default", uid.as_deref(), "CleanupAbandoned", &manager)
        .await?;
    // The entry cheiron could not remove stays; its Secret goes all the same.
    let sa = s.service_account(&ns, "default").await?;
    assert!(
        sa.image_pull_secrets
            .iter()
            .flatten()
            .any(|r| r.name == "docker-hub"),
        "the entry cheiron could not remove is left"
    );
    s.until_no_secret(&ns, "docker-hub").await?;
    frozen.thaw().await?;
    Ok(())
}
