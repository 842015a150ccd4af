//! Policy decisions on plain values: scopes, selectors, modes and every opt-out.

use std::collections::BTreeMap;

use super::*;
use crate::api::{ClusterImagePullSecretManager, ImagePullSecretManager};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn namespaced(yaml: &str) -> Result<Manager, Box<dyn std::error::Error>> {
    let m: ImagePullSecretManager = serde_saphyr::from_str(yaml)?;
    Ok(Manager::from_namespaced(&m)?)
}

fn cluster(yaml: &str) -> Result<Manager, Box<dyn std::error::Error>> {
    let m: ClusterImagePullSecretManager = serde_saphyr::from_str(yaml)?;
    Ok(Manager::from_cluster(&m)?)
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn ns(name: &str, labels: &[(&str, &str)]) -> NamespaceMeta {
    NamespaceMeta {
        name: name.to_owned(),
        labels: map(labels).into(),
        annotations: Default::default(),
    }
}

struct Object {
    kind: SubjectKind,
    name: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    images: Vec<String>,
}

impl Object {
    fn pod(labels: &[(&str, &str)]) -> Self {
        Self {
            kind: SubjectKind::Pod,
            name: String::new(),
            labels: map(labels),
            annotations: Default::default(),
            images: Vec::new(),
        }
    }
    fn service_account(name: &str) -> Self {
        Self {
            kind: SubjectKind::ServiceAccount,
            name: name.to_owned(),
            labels: Default::default(),
            annotations: Default::default(),
            images: Vec::new(),
        }
    }
    fn annotated(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.to_owned(), value.to_owned());
        self
    }
    fn subject(&self) -> Subject<'_> {
        Subject {
            kind: self.kind,
            name: &self.name,
            labels: &self.labels,
            annotations: &self.annotations,
            images: &self.images,
        }
    }
}

fn injected(decision: Decision) -> Vec<String> {
    match decision {
        Decision::Inject { secrets, .. } => secrets,
        Decision::Skip(_) => Vec::new(),
    }
}

const TEAM_A_SA: &str = r#"
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata: {name: regs, namespace: team-a}
spec:
  secrets:
    - {name: docker-hub, registry: docker.io, username: u, password: p}
    - existingSecretRef: {name: gitlab-registry}
"#;

#[test]
fn namespaced_manager_injects_its_entries_into_service_accounts_of_its_own_namespace() -> TestResult
{
    let m = namespaced(TEAM_A_SA)?;
    let sa = Object::service_account("default");
    assert_eq!(
        injected(decide(&sa.subject(), &ns("team-a", &[]), [&m])),
        ["docker-hub", "gitlab-registry"]
    );
    assert_eq!(
        decide(&sa.subject(), &ns("team-b", &[]), [&m]),
        Decision::Skip(Skip::NoManager)
    );
    Ok(())
}

#[test]
fn service_account_mode_leaves_pods_alone_and_pod_mode_leaves_service_accounts_alone() -> TestResult
{
    let sa_mode = namespaced(TEAM_A_SA)?;
    let pod_mode = namespaced(&TEAM_A_SA.replace("spec:\n", "spec:\n  mode: Pod\n"))?;
    let team_a = ns("team-a", &[]);
    assert_eq!(
        decide(&Object::pod(&[]).subject(), &team_a, [&sa_mode]),
        Decision::Skip(Skip::NoManager)
    );
    assert_eq!(
        decide(
            &Object::service_account("default").subject(),
            &team_a,
            [&pod_mode]
        ),
        Decision::Skip(Skip::NoManager)
    );
    assert_eq!(
        injected(decide(&Object::pod(&[]).subject(), &team_a, [&pod_mode])),
        ["docker-hub", "gitlab-registry"]
    );
    Ok(())
}

const CLUSTER: &str = r#"
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata: {name: company}
spec:
  secrets:
    - existingSecretRef: {name: company-pull, namespace: cheiron}
"#;

#[test]
fn cluster_manager_without_filters_reaches_every_namespace_but_the_system_ones() -> TestResult {
    let m = cluster(CLUSTER)?;
    let sa = Object::service_account("default");
    for name in ["default", "team-a", "anything"] {
        assert_eq!(
            injected(decide(&sa.subject(), &ns(name, &[]), [&m])),
            ["company-pull"],
            "{name}"
        );
    }
    for name in ["kube-system", "kube-public", "kube-node-lease"] {
        assert_eq!(
            decide(&sa.subject(), &ns(name, &[]), [&m]),
            Decision::Skip(Skip::NoManager),
            "{name}"
        );
    }
    Ok(())
}

#[test]
fn system_namespaces_are_reached_only_when_named_literally() -> TestResult {
    let globbed = cluster(&format!("{CLUSTER}  namespaces: [\"kube-*\", \"*\"]\n"))?;
    let literal = cluster(&format!("{CLUSTER}  namespaces: [\"kube-system\"]\n"))?;
    let sa = Object::service_account("default");
    let kube_system = ns("kube-system", &[]);
    assert_eq!(
        decide(&sa.subject(), &kube_system, [&globbed]),
        Decision::Skip(Skip::NoManager)
    );
    assert_eq!(
        injected(decide(&sa.subject(), &kube_system, [&literal])),
        ["company-pull"]
    );
    assert_eq!(
        decide(&sa.subject(), &ns("kube-public", &[]), [&literal]),
        Decision::Skip(Skip::NoManager)
    );
    Ok(())
}

#[test]
fn include_and_exclude_globs_select_namespaces_and_exclusion_wins() -> TestResult {
    let m = cluster(&format!(
        "{CLUSTER}  namespaces: [\"team-*\", \"ci-??\"]\n  excludeNamespaces: [\"team-scratch\"]\n"
    ))?;
    let sa = Object::service_account("default");
    let inside = |name: &str| {
        matches!(
            decide(&sa.subject(), &ns(name, &[]), [&m]),
            Decision::Inject { .. }
        )
    };
    assert!(inside("team-a"));
    assert!(inside("ci-01"));
    assert!(!inside("team-scratch"));
    assert!(!inside("ci-1"));
    assert!(!inside("default"));
    Ok(())
}

#[test]
fn namespace_selector_matches_namespace_labels() -> TestResult {
    let m = cluster(&format!(
        "{CLUSTER}  namespaceSelector:\n    matchLabels: {{tier: apps}}\n    matchExpressions:\n      - {{key: env, operator: NotIn, values: [prod]}}\n"
    ))?;
    let sa = Object::service_account("default");
    let inside = |labels: &[(&str, &str)]| {
        matches!(
            decide(&sa.subject(), &ns("x", labels), [&m]),
            Decision::Inject { .. }
        )
    };
    assert!(inside(&[("tier", "apps")]));
    assert!(inside(&[("tier", "apps"), ("env", "dev")]));
    assert!(!inside(&[("tier", "apps"), ("env", "prod")]));
    assert!(!inside(&[("tier", "db")]));
    assert!(!inside(&[]));
    Ok(())
}

#[test]
fn service_account_names_and_selector_filter_service_accounts() -> TestResult {
    let m = cluster(&format!(
        "{CLUSTER}  serviceAccountNames: [default, builder]\n  serviceAccountSelector: {{matchLabels: {{pull: \"yes\"}}}}\n"
    ))?;
    let team = ns("team", &[]);
    let mut builder = Object::service_account("builder");
    assert_eq!(
        decide(&builder.subject(), &team, [&m]),
        Decision::Skip(Skip::NoManager)
    );
    builder.labels = map(&[("pull", "yes")]);
    assert_eq!(
        injected(decide(&builder.subject(), &team, [&m])),
        ["company-pull"]
    );
    let mut other = Object::service_account("other");
    other.labels = map(&[("pull", "yes")]);
    assert_eq!(
        decide(&other.subject(), &team, [&m]),
        Decision::Skip(Skip::NoManager)
    );
    Ok(())
}

#[test]
fn pod_selector_filters_pods() -> TestResult {
    let m = cluster(&format!(
        "{}  podSelector: {{matchLabels: {{pull: private}}}}\n",
        CLUSTER.replace("spec:\n", "spec:\n  mode: Pod\n")
    ))?;
    let team = ns("team", &[]);
    assert_eq!(
        injected(decide(
            &Object::pod(&[("pull", "private")]).subject(),
            &team,
            [&m]
        )),
        ["company-pull"]
    );
    assert_eq!(
        decide(&Object::pod(&[("pull", "public")]).subject(), &team, [&m]),
        Decision::Skip(Skip::NoManager)
    );
    Ok(())
}

#[test]
fn merge_into_injects_only_the_merged_secret() -> TestResult {
    let m = namespaced(&format!("{TEAM_A_SA}  mergeInto: merged-pull\n"))?;
    assert_eq!(
        injected(decide(
            &Object::service_account("default").subject(),
            &ns("team-a", &[]),
            [&m]
        )),
        ["merged-pull"]
    );
    Ok(())
}

#[test]
fn object_annotations_opt_out() -> TestResult {
    let m = namespaced(TEAM_A_SA)?;
    let team_a = ns("team-a", &[]);
    for (key, value) in [
        (annotation::IGNORE, "true"),
        (annotation::RECONCILABLE, "false"),
    ] {
        let sa = Object::service_account("default").annotated(key, value);
        assert_eq!(
            decide(&sa.subject(), &team_a, [&m]),
            Decision::Skip(Skip::ObjectOptedOut),
            "{key}"
        );
    }
    // Other values do not opt out.
    for (key, value) in [
        (annotation::IGNORE, "false"),
        (annotation::RECONCILABLE, "true"),
    ] {
        let sa = Object::service_account("default").annotated(key, value);
        assert!(
            matches!(
                decide(&sa.subject(), &team_a, [&m]),
                Decision::Inject { .. }
            ),
            "{key}={value}"
        );
    }
    Ok(())
}

#[test]
fn namespace_label_or_annotation_opts_out() -> TestResult {
    let m = cluster(CLUSTER)?;
    let sa = Object::service_account("default");
    let labelled = ns("team", &[(annotation::IGNORE, "true")]);
    let mut annotated = ns("team", &[]);
    annotated.annotations = map(&[(annotation::IGNORE, "true")]).into();
    for namespace in [labelled, annotated] {
        assert_eq!(
            decide(&sa.subject(), &namespace, [&m]),
            Decision::Skip(Skip::NamespaceOptedOut)
        );
    }
    Ok(())
}

#[test]
fn several_managers_union_their_secrets_in_order_without_duplicates() -> TestResult {
    let a = namespaced(TEAM_A_SA)?;
    let b = cluster(
        r#"
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata: {name: b}
spec:
  secrets:
    - existingSecretRef: {name: gitlab-registry, namespace: cheiron}
    - existingSecretRef: {name: extra, namespace: cheiron}
"#,
    )?;
    let decision = decide(
        &Object::service_account("default").subject(),
        &ns("team-a", &[]),
        [&a, &b],
    );
    let Decision::Inject { secrets, managers } = decision else {
        return Err("expected an injection".into());
    };
    assert_eq!(secrets, ["docker-hub", "gitlab-registry", "extra"]);
    assert_eq!(managers, [a.id.clone(), b.id.clone()]);
    Ok(())
}

#[test]
fn invalid_selector_operator_is_reported_not_ignored() -> TestResult {
    let result = cluster(&format!(
        "{CLUSTER}  namespaceSelector:\n    matchExpressions: [{{key: a, operator: Near, values: [b]}}]\n"
    ));
    let message = result.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("namespaceSelector"), "{message}");
    Ok(())
}

#[test]
fn live_managers_leaves_out_those_being_deleted_and_orders_oldest_first() -> TestResult {
    let parse_n = |v: serde_json::Value| serde_json::from_value::<ImagePullSecretManager>(v);
    let parse_c = |v: serde_json::Value| serde_json::from_value::<ClusterImagePullSecretManager>(v);
    let young = parse_n(serde_json::json!({
        "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ImagePullSecretManager",
        "metadata": {"name": "young", "namespace": "team", "creationTimestamp": "2026-03-01T00:00:00Z"},
        "spec": {"secrets": [{"existingSecretRef": {"name": "a"}}]},
    }))?;
    let leaving = parse_n(serde_json::json!({
        "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ImagePullSecretManager",
        "metadata": {"name": "leaving", "namespace": "team", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "deletionTimestamp": "2026-04-01T00:00:00Z", "finalizers": ["cheiron.anny.co/cleanup"]},
        "spec": {"secrets": [{"existingSecretRef": {"name": "b"}}]},
    }))?;
    let old = parse_c(serde_json::json!({
        "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
        "metadata": {"name": "old", "creationTimestamp": "2026-02-01T00:00:00Z"},
        "spec": {"secrets": [{"existingSecretRef": {"name": "c", "namespace": "cheiron"}}]},
    }))?;
    let broken = parse_c(serde_json::json!({
        "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
        "metadata": {"name": "broken", "creationTimestamp": "2026-02-02T00:00:00Z"},
        "spec": {"namespaces": ["BAD_GLOB!"], "secrets": [{"existingSecretRef": {"name": "d", "namespace": "cheiron"}}]},
    }))?;
    let (live, invalid) = live_managers([&young, &leaving], [&old, &broken]);
    let names: Vec<&str> = live.iter().map(|m| m.id.name.as_str()).collect();
    assert_eq!(names, ["old", "young"]);
    assert_eq!(
        invalid.len(),
        1,
        "the manager that does not compile is returned apart"
    );
    Ok(())
}

#[test]
fn include_local_false_acts_in_no_namespace_here_and_keeps_its_scope_for_workload_clusters()
-> TestResult {
    let yaml = format!("{CLUSTER}  clusters:\n    selector: {{}}\n    includeLocal: false\n");
    let m: ClusterImagePullSecretManager = serde_saphyr::from_str(&yaml)?;
    let here = Manager::from_cluster(&m)?;
    let there = Manager::from_cluster_for_workloads(&m)?;
    let sa = Object::service_account("default");
    for name in ["default", "team-a"] {
        assert_eq!(
            decide(&sa.subject(), &ns(name, &[]), [&here]),
            Decision::Skip(Skip::NoManager),
            "here, {name}"
        );
        assert_eq!(
            injected(decide(&sa.subject(), &ns(name, &[]), [&there])),
            ["company-pull"],
            "there, {name}"
        );
    }
    // includeLocal defaults to true: as without spec.clusters.
    let yaml = format!("{CLUSTER}  clusters:\n    selector: {{}}\n");
    let m: ClusterImagePullSecretManager = serde_saphyr::from_str(&yaml)?;
    assert_eq!(
        injected(decide(
            &sa.subject(),
            &ns("team-a", &[]),
            [&Manager::from_cluster(&m)?]
        )),
        ["company-pull"]
    );
    Ok(())
}

#[test]
fn invalid_cluster_selector_is_reported_not_ignored() -> TestResult {
    let result = cluster(&format!(
        "{CLUSTER}  clusters:\n    selector:\n      matchExpressions: [{{key: env, operator: Near, values: [b]}}]\n"
    ));
    let message = result.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("clusters.selector"), "{message}");
    Ok(())
}
