//! Every way to keep cheiron away from an object. Each test first proves the manager is live
//! (a control object in scope gets its secrets), so that "left alone" cannot just mean "the
//! webhook had not seen the manager yet".

use cheiron::api::annotation::{IGNORE, RECONCILABLE, RECONCILED};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;

use crate::{
    CHEIRON,
    harness::{Admitted, Result, SCENARIO_LABEL, Scenario, pod, service_account},
};

/// A namespace with one manager per mode; a ServiceAccount and a Pod annotated
/// `annotation: value` keep exactly their own entries.
async fn annotated_objects_are_left_alone(slug: &str, annotation: (&str, &str)) -> Result {
    let s = Scenario::new(CHEIRON, slug).await?;
    let ns = s.create_namespace(&[], &[]).await?;
    // Created (by kcm) before the managers, `default` stays unpatched, so Pods without entries
    // of their own inherit nothing from it and the Pod probe below sees only the Pod manager.
    s.default_service_account(&ns).await?;
    for (name, mode, secret) in [
        ("accounts", "ServiceAccount", "sa-pull"),
        ("pods", "Pod", "pod-pull"),
    ] {
        s.apply_copying_manager(&ns, name, mode, secret).await?;
    }
    s.until_new_service_account_gets(&ns, "control", &["sa-pull"])
        .await?;
    s.until_new_pod_gets(&ns, &[], &["pod-pull"]).await?;

    let sa = s
        .create_service_account(&ns, &service_account("opted-out", &["own"], &[annotation]))
        .await?;
    let web = s
        .create_pod(&ns, &pod("opted-out-", &[], &["own"], &[annotation]))
        .await?;

    assert_eq!(sa.pull_secret_names(), ["own"]);
    assert_eq!(sa.annotation(RECONCILED), None);
    assert_eq!(web.pull_secret_names(), ["own"]);
    assert_eq!(web.annotation(RECONCILED), None);
    Ok(())
}

#[tokio::test]
async fn objects_annotated_ignore_true_are_left_alone() -> Result {
    annotated_objects_are_left_alone("ignore-object", (IGNORE, "true")).await
}

#[tokio::test]
async fn objects_annotated_reconcilable_false_are_left_alone() -> Result {
    annotated_objects_are_left_alone("unreconcilable", (RECONCILABLE, "false")).await
}

/// A cluster manager over all of the scenario's namespaces; `opted_out` (created first, so the
/// webhook has seen it once it has seen the control namespace) keeps its ServiceAccounts as is.
async fn opted_out_namespace_is_left_alone(
    slug: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> Result {
    let s = Scenario::new(CHEIRON, slug).await?;
    let opted_out = s.create_namespace(labels, annotations).await?;
    let control = s.create_namespace(&[], &[]).await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {name}
spec:
  namespaceSelector:
    matchLabels:
      {SCENARIO_LABEL}: {id}
  secrets:
    - existingSecretRef:
        name: mirror-pull
        namespace: cheiron
",
        name = s.unique_name("all"),
        id = s.id(),
    ))
    .await?;
    s.until_new_service_account_gets(&control, "control", &["mirror-pull"])
        .await?;

    let sa = s
        .create_service_account(&opted_out, &service_account("app", &["own"], &[]))
        .await?;

    assert_eq!(sa.pull_secret_names(), ["own"]);
    assert_eq!(sa.annotation(RECONCILED), None);
    Ok(())
}

#[tokio::test]
async fn namespace_labelled_ignore_true_is_left_alone() -> Result {
    opted_out_namespace_is_left_alone("ignore-ns-label", &[(IGNORE, "true")], &[]).await
}

#[tokio::test]
async fn namespace_annotated_ignore_true_is_left_alone() -> Result {
    opted_out_namespace_is_left_alone("ignore-ns-annotation", &[], &[(IGNORE, "true")]).await
}

#[tokio::test]
async fn namespaces_out_of_a_managers_scope_are_left_alone() -> Result {
    let s = Scenario::new(CHEIRON, "out-of-scope").await?;
    let tier = [("e2e.cheiron.anny.co/tier", "apps")];
    let excluded = s.create_namespace(&tier, &[]).await?;
    let unlabelled = s.create_namespace(&[], &[]).await?;
    let neighbour = s.create_namespace(&[], &[]).await?;
    let control = s.create_namespace(&tier, &[]).await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {name}
spec:
  namespaceSelector:
    matchLabels:
      {SCENARIO_LABEL}: {id}
      e2e.cheiron.anny.co/tier: apps
  excludeNamespaces: [{excluded}]
  secrets:
    - existingSecretRef:
        name: mirror-pull
        namespace: cheiron
",
        name = s.unique_name("apps"),
        id = s.id(),
    ))
    .await?;
    // A namespaced manager acts on its own namespace only.
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: team
  namespace: {neighbour}
spec:
  secrets:
    - existingSecretRef:
        name: team-pull
"
    ))
    .await?;
    s.until_new_service_account_gets(&control, "control", &["mirror-pull"])
        .await?;
    s.until_new_service_account_gets(&neighbour, "control", &["team-pull"])
        .await?;

    for ns in [&excluded, &unlabelled] {
        let sa = s
            .create_service_account(ns, &service_account("app", &[], &[]))
            .await?;
        assert_eq!(sa.pull_secret_names(), Vec::<String>::new(), "in {ns}");
        assert_eq!(sa.annotation(RECONCILED), None, "in {ns}");
    }
    Ok(())
}

#[tokio::test]
async fn cluster_manager_without_namespaces_never_touches_system_namespaces() -> Result {
    let s = Scenario::new(CHEIRON, "system-ns").await?;
    let control = s.create_namespace(&[], &[]).await?;
    // The selector reaches the system namespaces: only the default exclusion keeps them out.
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {name}
spec:
  namespaceSelector:
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: In
        values: [kube-system, kube-public, kube-node-lease, {control}]
  secrets:
    - existingSecretRef:
        name: mirror-pull
        namespace: cheiron
",
        name = s.unique_name("everywhere"),
    ))
    .await?;
    s.until_new_service_account_gets(&control, "control", &["mirror-pull"])
        .await?;

    let name = s.unique_name("sa");
    let mut stored = Vec::new();
    for ns in ["kube-system", "kube-public", "kube-node-lease"] {
        let created = s
            .create_service_account(ns, &service_account(&name, &[], &[]))
            .await;
        // Deleted before asserting: these namespaces outlive the test.
        if created.is_ok() {
            Api::<ServiceAccount>::namespaced(s.client().clone(), ns)
                .delete(&name, &Default::default())
                .await?;
        }
        stored.push((ns, created?));
    }

    for (ns, sa) in stored {
        assert_eq!(sa.pull_secret_names(), Vec::<String>::new(), "in {ns}");
        assert_eq!(sa.annotation(RECONCILED), None, "in {ns}");
    }
    Ok(())
}

/// kube-controller-manager creates `default` milliseconds after the namespace: the webhook
/// must honour the namespace's opt-out even if its namespace cache has not caught up yet.
#[tokio::test]
async fn default_service_account_of_a_new_namespace_annotated_ignore_true_is_left_alone() -> Result
{
    let s = Scenario::new(CHEIRON, "new-ns-opt-out").await?;
    let control = s.create_namespace(&[], &[]).await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {name}
spec:
  namespaces: ['{id}-*']
  secrets:
    - existingSecretRef:
        name: mirror-pull
        namespace: cheiron
",
        name = s.unique_name("glob"),
        id = s.id(),
    ))
    .await?;
    s.until_new_service_account_gets(&control, "control", &["mirror-pull"])
        .await?;

    let mut patched = Vec::new();
    for _ in 0..40 {
        let ns = s.create_namespace(&[], &[(IGNORE, "true")]).await?;
        let default = s.default_service_account(&ns).await?;
        if default.annotation(RECONCILED).is_some() {
            patched.push(ns);
        }
    }

    assert!(
        patched.is_empty(),
        "default ServiceAccount patched in {patched:?}"
    );
    Ok(())
}
