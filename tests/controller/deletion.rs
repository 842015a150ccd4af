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
