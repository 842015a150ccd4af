//! The manager index on plain values: where each scope is filed, changes, relists, and that
//! it never hides a manager the full scan would find.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::{
    api::{ClusterImagePullSecretManager, ImagePullSecretManager},
    policy::{Decision, Subject, SubjectKind, decide},
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn cluster(name: &str, created: &str, spec: Value) -> Result<Manager, Box<dyn std::error::Error>> {
    let mut spec = spec;
    spec["secrets"] =
        json!([{"existingSecretRef": {"name": format!("{name}-pull"), "namespace": "src"}}]);
    let m: ClusterImagePullSecretManager = serde_json::from_value(json!({
        "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": spec,
    }))?;
    Ok(Manager::from_cluster(&m)?)
}

fn namespaced(namespace: &str, name: &str) -> Result<Manager, Box<dyn std::error::Error>> {
    let m: ImagePullSecretManager = serde_json::from_value(json!({
        "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ImagePullSecretManager",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"secrets": [{"existingSecretRef": {"name": format!("{name}-pull")}}]},
    }))?;
    Ok(Manager::from_namespaced(&m)?)
}

fn ns(name: &str, labels: &[(&str, &str)]) -> NamespaceMeta {
    NamespaceMeta {
        name: name.to_owned(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        annotations: Default::default(),
    }
}

fn names(found: Vec<Arc<Manager>>) -> Vec<String> {
    found.iter().map(|m| m.id.name.clone()).collect()
}

const T0: &str = "2026-01-01T00:00:00Z";

#[test]
fn a_namespaced_manager_is_read_only_in_its_namespace() -> TestResult {
    let index = ManagerIndex::new([namespaced("team-a", "a")?, namespaced("team-b", "b")?]);
    assert_eq!(names(index.candidates(&ns("team-a", &[]))), ["a"]);
    assert_eq!(names(index.candidates(&ns("team-b", &[]))), ["b"]);
    assert!(index.candidates(&ns("team-c", &[])).is_empty());
    Ok(())
}

#[test]
fn a_label_selected_cluster_manager_is_read_only_where_the_label_is() -> TestResult {
    let index = ManagerIndex::new([
        cluster(
            "apps",
            T0,
            json!({"namespaceSelector": {"matchLabels": {"tier": "apps", "env": "prod"}}}),
        )?,
        cluster(
            "web-or-api",
            T0,
            json!({"namespaceSelector": {"matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["web", "api"]}]}}),
        )?,
    ]);
    assert_eq!(
        names(index.candidates(&ns("x", &[("tier", "apps"), ("env", "prod")]))),
        ["apps"]
    );
    // Filed under one of its pairs: a candidate, which the decision then rejects.
    assert_eq!(
        index.candidates(&ns("x", &[("env", "prod")])).len()
            + index.candidates(&ns("x", &[("tier", "apps")])).len(),
        1
    );
    assert_eq!(
        names(index.candidates(&ns("x", &[("tier", "api")]))),
        ["web-or-api"]
    );
    assert_eq!(
        names(index.candidates(&ns("x", &[("tier", "web")]))),
        ["web-or-api"]
    );
    assert!(index.candidates(&ns("x", &[("tier", "db")])).is_empty());
    Ok(())
}

#[test]
fn literal_namespace_lists_are_filed_by_name_and_globs_are_read_everywhere() -> TestResult {
    let index = ManagerIndex::new([
        cluster("listed", T0, json!({"namespaces": ["a", "kube-system"]}))?,
        cluster("glob", T0, json!({"namespaces": ["team-*", "b"]}))?,
        cluster("all", T0, json!({}))?,
        cluster(
            "not-in",
            T0,
            json!({"namespaceSelector": {"matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["db"]}]}}),
        )?,
    ]);
    let mut a = names(index.candidates(&ns("a", &[])));
    a.sort();
    assert_eq!(a, ["all", "glob", "listed", "not-in"]);
    let mut system = names(index.candidates(&ns("kube-system", &[])));
    system.sort();
    assert_eq!(system, ["all", "glob", "listed", "not-in"]);
    let mut other = names(index.candidates(&ns("z", &[])));
    other.sort();
    assert_eq!(other, ["all", "glob", "not-in"]);
    Ok(())
}

#[test]
fn candidates_come_oldest_first() -> TestResult {
    let index = ManagerIndex::new([
        cluster("newer", "2026-03-01T00:00:00Z", json!({}))?,
        cluster(
            "older",
            "2026-01-01T00:00:00Z",
            json!({"namespaceSelector": {"matchLabels": {"tier": "apps"}}}),
        )?,
        cluster(
            "middle",
            "2026-02-01T00:00:00Z",
            json!({"namespaces": ["x"]}),
        )?,
    ]);
    assert_eq!(
        names(index.candidates(&ns("x", &[("tier", "apps")]))),
        ["older", "middle", "newer"]
    );
    assert_eq!(names(index.all()), ["older", "middle", "newer"]);
    Ok(())
}

#[test]
fn a_changed_scope_moves_the_manager_and_a_deleted_one_is_gone() -> TestResult {
    let mut index = ManagerIndex::new([cluster(
        "m",
        T0,
        json!({"namespaceSelector": {"matchLabels": {"tier": "apps"}}}),
    )?]);
    let apps = ns("x", &[("tier", "apps")]);
    let web = ns("y", &[("tier", "web")]);
    assert_eq!(index.candidates(&apps).len(), 1);
    index.apply(cluster(
        "m",
        T0,
        json!({"namespaceSelector": {"matchLabels": {"tier": "web"}}}),
    )?);
    assert_eq!(index.len(), 1);
    assert!(index.candidates(&apps).is_empty(), "left its old place");
    assert_eq!(index.candidates(&web).len(), 1);
    let id = index.all()[0].id.clone();
    index.delete(&id);
    assert!(index.is_empty());
    assert!(index.candidates(&web).is_empty());
    assert!(
        index.by_label.is_empty() && index.by_name.is_empty(),
        "no empty buckets left"
    );
    Ok(())
}

#[test]
fn retain_drops_what_a_relist_did_not_list() -> TestResult {
    let mut index = ManagerIndex::new([
        namespaced("team-a", "a")?,
        cluster("c", T0, json!({}))?,
        cluster("d", T0, json!({"namespaces": ["team-a"]}))?,
    ]);
    index.retain(|id| id.kind == crate::policy::ManagerKind::Namespaced || id.name == "d");
    assert_eq!(names(index.candidates(&ns("team-a", &[]))), ["a", "d"]);
    assert!(index.everywhere.is_empty());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Against the full scan: whatever the scopes and labels, the index hides no manager.

const KEYS: [&str; 3] = ["tier", "env", "team"];
const VALUES: [&str; 3] = ["a", "b", "c"];
const NAMES: [&str; 4] = ["n0", "n1", "n2", "kube-system"];

fn selector_expression() -> impl Strategy<Value = Value> {
    (
        0..KEYS.len(),
        0..4usize,
        proptest::collection::btree_set(0..VALUES.len(), 1..3),
    )
        .prop_map(|(k, op, values)| {
            let operator = ["In", "NotIn", "Exists", "DoesNotExist"][op];
            let values: Vec<&str> = values.into_iter().map(|v| VALUES[v]).collect();
            match operator {
                "In" | "NotIn" => json!({"key": KEYS[k], "operator": operator, "values": values}),
                _ => json!({"key": KEYS[k], "operator": operator}),
            }
        })
}

fn scope_spec() -> impl Strategy<Value = Value> {
    (
        proptest::collection::btree_map(0..KEYS.len(), 0..VALUES.len(), 0..3),
        proptest::collection::vec(selector_expression(), 0..3),
        proptest::collection::vec(0..NAMES.len() + 2, 0..3),
        proptest::collection::vec(0..NAMES.len(), 0..2),
    )
        .prop_map(|(labels, expressions, include, exclude)| {
            let glob = |i: usize| match i {
                i if i < NAMES.len() => NAMES[i].to_owned(),
                i if i == NAMES.len() => "n*".to_owned(),
                _ => "kube-?ystem".to_owned(),
            };
            let match_labels: serde_json::Map<String, Value> = labels
                .into_iter()
                .map(|(k, v)| (KEYS[k].to_owned(), Value::from(VALUES[v])))
                .collect();
            json!({
                "namespaceSelector": {"matchLabels": match_labels, "matchExpressions": expressions},
                "namespaces": include.into_iter().map(glob).collect::<Vec<_>>(),
                "excludeNamespaces": exclude.into_iter().map(|i| NAMES[i]).collect::<Vec<_>>(),
            })
        })
}

fn namespace() -> impl Strategy<Value = NamespaceMeta> {
    (
        0..NAMES.len(),
        proptest::collection::btree_map(0..KEYS.len(), 0..VALUES.len(), 0..3),
    )
        .prop_map(|(name, labels)| NamespaceMeta {
            name: NAMES[name].to_owned(),
            labels: labels
                .into_iter()
                .map(|(k, v)| (KEYS[k].to_owned(), VALUES[v].to_owned()))
                .collect(),
            annotations: Default::default(),
        })
}

proptest! {
    #[test]
    fn the_index_finds_every_manager_whose_scope_holds_the_namespace(
        specs in proptest::collection::vec(scope_spec(), 1..8),
        home in proptest::collection::vec(0..NAMES.len(), 0..3),
        namespaces in proptest::collection::vec(namespace(), 1..6),
    ) {
        let mut managers = Vec::new();
        for (i, spec) in specs.into_iter().enumerate() {
            let created = format!("2026-01-01T00:00:{:02}Z", 59 - i);
            managers.push(cluster(&format!("c{i}"), &created, spec).map_err(|e| TestCaseError::fail(e.to_string()))?);
        }
        for (i, n) in home.into_iter().enumerate() {
            managers.push(namespaced(NAMES[n], &format!("n{i}")).map_err(|e| TestCaseError::fail(e.to_string()))?);
        }
        let index = ManagerIndex::new(managers.clone());
        let mut oldest_first = managers.clone();
        oldest_first.sort_by(|a, b| a.seniority().cmp(&b.seniority()));
        let empty = BTreeMap::new();
        for namespace in &namespaces {
            let candidates = index.candidates(namespace);
            let in_scope: Vec<&ManagerId> = oldest_first
                .iter()
                .filter(|m| m.scope.contains(namespace))
                .map(|m| &m.id)
                .collect();
            let found: Vec<&ManagerId> = candidates
                .iter()
                .filter(|m| m.scope.contains(namespace))
                .map(|m| &m.id)
                .collect();
            prop_assert_eq!(&found, &in_scope, "in {:?}", namespace);
            let subject = Subject { kind: SubjectKind::Pod, name: "p", labels: &empty, annotations: &empty, images: &[] };
            let by_index: Decision = decide(&subject, namespace, candidates.iter().map(|m| &**m));
            let by_scan: Decision = decide(&subject, namespace, oldest_first.iter());
            prop_assert_eq!(by_index, by_scan);
        }
    }
}
