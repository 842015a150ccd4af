//! The CRDs as the apiserver serves them: invalid specs are rejected at admission with a
//! readable message, the original Cheiron example is accepted unchanged, and `kubectl get`
//! shows the printer columns.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, ListParams},
    core::Request,
};
use reqwest::header::{ACCEPT, HeaderValue};
use serde_json::Value;

use crate::{
    CHEIRON,
    harness::{Result, Scenario},
};

const PRINTER_COLUMNS: [&str; 4] = ["Mode", "Ready", "Namespaces", "Age"];
/// The cluster kind's: also mode Node's `synced/selected` nodes.
const CLUSTER_PRINTER_COLUMNS: [&str; 5] = ["Mode", "Ready", "Namespaces", "Nodes", "Age"];

fn repository_file(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[tokio::test]
async fn crd_schema_rejects_every_invalid_manager_with_a_readable_message() -> Result {
    let s = Scenario::new(CHEIRON, "invalid").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    let mut files: Vec<_> = std::fs::read_dir(repository_file("tests/data/invalid-managers"))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.sort();
    assert!(!files.is_empty(), "no invalid managers found");

    let mut problems = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)?;
        let expected = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .ok_or_else(|| {
                format!(
                    "{}: first line must be `# expect: <message>`",
                    file.display()
                )
            })?
            .trim();
        let mut manager: DynamicObject = serde_saphyr::from_str(&text)?;
        match manager.types.as_ref().map(|t| t.kind.as_str()) {
            Some("ImagePullSecretManager") => manager.metadata.namespace = Some(ns.clone()),
            // Cluster-scoped: unique, and deleted at once should it be accepted.
            _ => manager.metadata.name = Some(s.unique_name(&manager.name_any())),
        }
        match s.create_manager(&manager).await? {
            Err(kube::Error::Api(status))
                if status.code == 422 && status.message.contains(expected) => {}
            Err(e) => problems.push(format!(
                "{}: expected a 422 containing {expected:?}, got: {e}",
                file.display()
            )),
            Ok(_) => {
                s.delete_manager(&manager).await?;
                problems.push(format!("{}: accepted", file.display()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

#[tokio::test]
async fn original_cheiron_example_is_accepted_unchanged_and_listed_with_printer_columns() -> Result
{
    let s = Scenario::new(CHEIRON, "example").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    let text =
        std::fs::read_to_string(repository_file("examples/cluster/namespaced-manager.yaml"))?;
    let mut example: DynamicObject = serde_saphyr::from_str(&text)?;
    example.metadata.namespace = Some(ns.clone());

    let stored = s.create_manager(&example).await??;

    assert!(
        is_subset(&example.data["spec"], &stored.data["spec"]),
        "stored spec differs from the example:\nexample: {}\nstored:  {}",
        example.data["spec"],
        stored.data["spec"]
    );
    // What `kubectl get ipsm` prints: the server-side Table.
    let mut request = Request::new(format!(
        "/apis/cheiron.anny.co/v1alpha1/namespaces/{ns}/imagepullsecretmanagers"
    ))
    .list(&ListParams::default())?;
    request.headers_mut().insert(
        ACCEPT,
        HeaderValue::from_static("application/json;as=Table;v=v1;g=meta.k8s.io"),
    );
    let table: Value = s.client().request(request).await?;
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        columns,
        ["Name", "Mode", "Ready", "Namespaces", "Age"],
        "table: {table}"
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[0], "my-registry", "table: {table}");
    assert_eq!(cells[1], "ServiceAccount", "table: {table}");
    Ok(())
}

#[tokio::test]
async fn both_crds_declare_the_mode_ready_namespaces_and_age_printer_columns() -> Result {
    let s = Scenario::new(CHEIRON, "columns").await?;
    let crds: Api<CustomResourceDefinition> = Api::all(s.client().clone());
    for (name, expected) in [
        (
            "imagepullsecretmanagers.cheiron.anny.co",
            &PRINTER_COLUMNS[..],
        ),
        (
            "clusterimagepullsecretmanagers.cheiron.anny.co",
            &CLUSTER_PRINTER_COLUMNS[..],
        ),
    ] {
        let crd = crds.get(name).await?;
        assert!(!crd.spec.versions.is_empty(), "{name} has no versions");
        for version in &crd.spec.versions {
            let columns: Vec<&str> = version
                .additional_printer_columns
                .iter()
                .flatten()
                .map(|c| c.name.as_str())
                .collect();
            assert_eq!(columns, expected, "{name} {}", version.name);
        }
    }
    Ok(())
}

/// Whether every field of `expected` is in `actual` with the same value (the apiserver may add
/// defaults, never change or drop what was sent).
fn is_subset(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => e
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|av| is_subset(v, av))),
        (Value::Array(e), Value::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(e, a)| is_subset(e, a))
        }
        _ => expected == actual,
    }
}
