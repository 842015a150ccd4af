//! Mode Pod, and Pods in mode-ServiceAccount namespaces: what a Pod that a controller creates
//! (only `generateName`, no namespace in the body) ends up with.

use cheiron::api::annotation::{RECONCILE_WITH, RECONCILED};
use serde_json::json;

use crate::{
    CHEIRON,
    harness::{Admitted, Result, Scenario, pod, service_account},
};

#[tokio::test]
async fn pod_mode_manager_injects_into_pods_created_with_only_generate_name_after_their_own_entries()
-> Result {
    let s = Scenario::new(CHEIRON, "pod-mode").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: pods
  namespace: {ns}
spec:
  mode: Pod
  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: example-password
    - existingSecretRef:
        name: gitlab-registry
"
    ))
    .await?;
    s.until_new_pod_gets(&ns, &[], &["docker-hub", "gitlab-registry"])
        .await?;

    let web = s
        .create_pod(
            &ns,
            &pod(
                "web-7d4b9c-",
                &[("app", "web")],
                &["team-own", "gitlab-registry"],
                &[],
            ),
        )
        .await?;

    assert!(
        web.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("web-7d4b9c-")),
        "named by the apiserver from generateName: {:?}",
        web.metadata.name
    );
    assert_eq!(
        web.pull_secret_names(),
        ["team-own", "gitlab-registry", "docker-hub"]
    );
    assert_eq!(web.annotation(RECONCILED), Some("true"));
    assert_eq!(web.annotation(RECONCILE_WITH), Some("docker-hub"));

    let sa = s
        .create_service_account(&ns, &service_account("builder", &[], &[]))
        .await?;
    assert_eq!(
        sa.pull_secret_names(),
        Vec::<String>::new(),
        "a mode-Pod manager leaves ServiceAccounts alone"
    );
    Ok(())
}

#[tokio::test]
async fn pod_selector_limits_injection_to_matching_pods() -> Result {
    let s = Scenario::new(CHEIRON, "pod-selector").await?;
    let ns = s
        .create_namespace(&[("e2e.cheiron.anny.co/private-pods", s.id())], &[])
        .await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {name}
spec:
  mode: Pod
  namespaceSelector:
    matchLabels:
      e2e.cheiron.anny.co/private-pods: {id}
  podSelector:
    matchLabels:
      pull: private
  secrets:
    - existingSecretRef:
        name: private-pull
        namespace: cheiron
",
        name = s.unique_name("private-pods"),
        id = s.id(),
    ))
    .await?;
    s.until_new_pod_gets(&ns, &[("pull", "private")], &["private-pull"])
        .await?;

    let private = s
        .create_pod(&ns, &pod("private-", &[("pull", "private")], &[], &[]))
        .await?;
    let public = s
        .create_pod(&ns, &pod("public-", &[("pull", "public")], &[], &[]))
        .await?;
    let unlabelled = s
        .create_pod(&ns, &pod("unlabelled-", &[], &[], &[]))
        .await?;

    assert_eq!(private.pull_secret_names(), ["private-pull"]);
    assert_eq!(private.annotation(RECONCILE_WITH), Some("private-pull"));
    for other in [&public, &unlabelled] {
        assert_eq!(
            other.pull_secret_names(),
            Vec::<String>::new(),
            "{:?}",
            other.metadata.name
        );
        assert_eq!(
            other.annotation(RECONCILED),
            None,
            "{:?}",
            other.metadata.name
        );
    }
    Ok(())
}

#[tokio::test]
async fn merge_into_injects_only_the_merged_secret() -> Result {
    let s = Scenario::new(CHEIRON, "pod-merge").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: merged
  namespace: {ns}
spec:
  mode: Pod
  mergeInto: cluster-pull-secret
  secrets:
    - name: quay
      registry: quay.io
      username: robot
      password: example-password
    - existingSecretRef:
        name: mirror-pull
"
    ))
    .await?;
    s.until_new_pod_gets(&ns, &[], &["cluster-pull-secret"])
        .await?;

    let web = s
        .create_pod(&ns, &pod("web-", &[], &["team-own"], &[]))
        .await?;

    assert_eq!(web.pull_secret_names(), ["team-own", "cluster-pull-secret"]);
    assert_eq!(web.annotation(RECONCILE_WITH), Some("cluster-pull-secret"));
    Ok(())
}

#[tokio::test]
async fn pod_without_own_secrets_inherits_them_from_the_patched_default_service_account() -> Result
{
    let s = Scenario::new(CHEIRON, "pod-inherits").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: service-accounts
  namespace: {ns}
spec:
  mode: ServiceAccount
  secrets:
    - existingSecretRef:
        name: team-pull
    - existingSecretRef:
        name: mirror-pull
"
    ))
    .await?;
    s.until_new_service_account_gets(&ns, "probe", &["team-pull", "mirror-pull"])
        .await?;
    // kcm created `default` as soon as the namespace existed, before the manager: there is no
    // controller yet to backfill it, so an update lets the webhook patch it.
    s.default_service_account(&ns).await?;
    let default = s
        .update_service_account(
            &ns,
            "default",
            json!({"metadata": {"labels": {"touched": "true"}}}),
        )
        .await?;
    assert_eq!(default.pull_secret_names(), ["team-pull", "mirror-pull"]);
    // The ServiceAccount admission plugin reads ServiceAccounts from its informer cache.
    s.until_new_pod_gets(&ns, &[], &["team-pull", "mirror-pull"])
        .await?;

    let web = s.create_pod(&ns, &pod("web-", &[], &[], &[])).await?;

    assert_eq!(web.pull_secret_names(), ["team-pull", "mirror-pull"]);
    assert_eq!(
        web.annotation(RECONCILED),
        None,
        "copied by the ServiceAccount admission plugin, not patched by cheiron"
    );
    Ok(())
}
