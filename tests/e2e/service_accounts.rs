//! Mode ServiceAccount: ServiceAccounts created or updated in namespaces in scope get the
//! managers' pull secrets after their own entries, each name once, with the bookkeeping
//! annotations.

use std::time::Duration;

use cheiron::api::annotation::{RECONCILE_WITH, RECONCILED};
use serde_json::json;

use crate::{
    CHEIRON,
    harness::{Admitted, Result, Scenario, service_account},
};

#[tokio::test]
async fn namespaced_manager_appends_its_secrets_to_new_service_accounts_after_their_own_entries()
-> Result {
    let s = Scenario::new(CHEIRON, "sa-namespaced").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: registries
  namespace: {ns}
spec:
  mode: ServiceAccount
  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: example-password
    - name: ghcr
      registry: ghcr.io
      username: bob
      passwordSecretRef:
        name: ghcr-token
        key: token
    - existingSecretRef:
        name: gitlab-registry
"
    ))
    .await?;
    s.until_new_service_account_gets(&ns, "probe", &["docker-hub", "ghcr", "gitlab-registry"])
        .await?;

    let sa = s
        .create_service_account(
            &ns,
            &service_account("builder", &["own-registry", "ghcr"], &[]),
        )
        .await?;

    assert_eq!(
        sa.pull_secret_names(),
        ["own-registry", "ghcr", "docker-hub", "gitlab-registry"],
        "own entries first, the missing ones appended once"
    );
    assert_eq!(sa.annotation(RECONCILED), Some("true"));
    assert_eq!(
        sa.annotation(RECONCILE_WITH),
        Some("docker-hub,gitlab-registry"),
        "only the names cheiron added, sorted"
    );
    Ok(())
}

#[tokio::test]
async fn cluster_manager_injects_only_into_named_service_accounts_of_selected_namespaces() -> Result
{
    let s = Scenario::new(CHEIRON, "sa-cluster").await?;
    let selected = [("e2e.cheiron.anny.co/mirror", s.id())];
    let first = s.create_namespace(&selected, &[]).await?;
    let second = s.create_namespace(&selected, &[]).await?;
    let unselected = s.create_namespace(&[], &[]).await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {name}
spec:
  namespaceSelector:
    matchLabels:
      e2e.cheiron.anny.co/mirror: {id}
  serviceAccountNames: [builder]
  secrets:
    - existingSecretRef:
        name: mirror-pull
        namespace: cheiron
    - name: quay
      registry: quay.io
      username: robot
      passwordSecretRef:
        name: quay-token
        key: token
        namespace: cheiron
",
        name = s.unique_name("mirror"),
        id = s.id(),
    ))
    .await?;
    for ns in [&first, &second] {
        s.until_new_service_account_gets(ns, "builder", &["mirror-pull", "quay"])
            .await?;
    }

    for ns in [&first, &second] {
        let builder = s
            .create_service_account(ns, &service_account("builder", &[], &[]))
            .await?;
        assert_eq!(
            builder.pull_secret_names(),
            ["mirror-pull", "quay"],
            "in {ns}"
        );
        assert_eq!(builder.annotation(RECONCILED), Some("true"));
        assert_eq!(builder.annotation(RECONCILE_WITH), Some("mirror-pull,quay"));

        let other = s
            .create_service_account(ns, &service_account("other", &[], &[]))
            .await?;
        assert_eq!(
            other.pull_secret_names(),
            Vec::<String>::new(),
            "not named by the manager"
        );
        assert_eq!(other.annotation(RECONCILED), None);
    }
    let builder = s
        .create_service_account(&unselected, &service_account("builder", &[], &[]))
        .await?;
    assert_eq!(
        builder.pull_secret_names(),
        Vec::<String>::new(),
        "namespace not selected"
    );
    assert_eq!(builder.annotation(RECONCILED), None);
    Ok(())
}

#[tokio::test]
async fn older_managers_entries_come_first_and_a_name_two_managers_claim_appears_once() -> Result {
    let s = Scenario::new(CHEIRON, "sa-both-kinds").await?;
    let ns = s
        .create_namespace(&[("e2e.cheiron.anny.co/both", s.id())], &[])
        .await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {name}
spec:
  namespaceSelector:
    matchLabels:
      e2e.cheiron.anny.co/both: {id}
  secrets:
    - name: shared
      registry: registry.example.com
      username: robot
      passwordSecretRef:
        name: shared-token
        key: token
        namespace: cheiron
    - existingSecretRef:
        name: mirror-pull
        namespace: cheiron
",
        name = s.unique_name("older"),
        id = s.id(),
    ))
    .await?;
    s.until_new_service_account_gets(&ns, "probe", &["shared", "mirror-pull"])
        .await?;
    // creationTimestamp has a resolution of one second: make the namespaced manager younger.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: younger
  namespace: {ns}
spec:
  secrets:
    - existingSecretRef:
        name: team-pull
    - existingSecretRef:
        name: shared
"
    ))
    .await?;
    s.until_new_service_account_gets(&ns, "probe", &["shared", "mirror-pull", "team-pull"])
        .await?;

    let sa = s
        .create_service_account(&ns, &service_account("app", &["mirror-pull"], &[]))
        .await?;

    assert_eq!(
        sa.pull_secret_names(),
        ["mirror-pull", "shared", "team-pull"]
    );
    assert_eq!(sa.annotation(RECONCILED), Some("true"));
    assert_eq!(sa.annotation(RECONCILE_WITH), Some("shared,team-pull"));
    Ok(())
}

#[tokio::test]
async fn service_account_update_gets_missing_secrets_once_and_keeps_its_own() -> Result {
    let s = Scenario::new(CHEIRON, "sa-update").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    let before = s
        .create_service_account(&ns, &service_account("legacy", &["own-registry"], &[]))
        .await?;
    assert_eq!(
        before.pull_secret_names(),
        ["own-registry"],
        "no manager yet"
    );
    assert_eq!(before.annotation(RECONCILED), None);
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: registries
  namespace: {ns}
spec:
  secrets:
    - existingSecretRef:
        name: docker-hub
    - existingSecretRef:
        name: ghcr
"
    ))
    .await?;
    s.until_new_service_account_gets(&ns, "probe", &["docker-hub", "ghcr"])
        .await?;

    let updated = s
        .update_service_account(
            &ns,
            "legacy",
            json!({"metadata": {"labels": {"touched": "1"}}}),
        )
        .await?;
    assert_eq!(
        updated.pull_secret_names(),
        ["own-registry", "docker-hub", "ghcr"]
    );
    assert_eq!(updated.annotation(RECONCILED), Some("true"));
    assert_eq!(updated.annotation(RECONCILE_WITH), Some("docker-hub,ghcr"));

    let again = s
        .update_service_account(
            &ns,
            "legacy",
            json!({"metadata": {"labels": {"touched": "2"}}}),
        )
        .await?;
    assert_eq!(
        again.pull_secret_names(),
        ["own-registry", "docker-hub", "ghcr"],
        "a second update adds nothing"
    );
    assert_eq!(again.annotation(RECONCILE_WITH), Some("docker-hub,ghcr"));

    // A client that replaces the list loses cheiron's entries only until admission re-adds them.
    let replaced = s
        .update_service_account(
            &ns,
            "legacy",
            json!({"imagePullSecrets": [{"name": "other-registry"}]}),
        )
        .await?;
    assert_eq!(
        replaced.pull_secret_names(),
        ["other-registry", "docker-hub", "ghcr"]
    );
    assert_eq!(replaced.annotation(RECONCILE_WITH), Some("docker-hub,ghcr"));
    Ok(())
}
