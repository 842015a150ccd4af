//! What a diff tool sees: the paths where a live object differs from the manifest that was
//! applied, ignoring what the apiserver itself fills in, and the Argo CD `jqPathExpressions`
//! of docs/gitops.md, evaluated with a real `jq` the way Argo CD evaluates them (each as
//! `del(EXPRESSION)`, one after the other, on the live object and on the manifest alike).

use std::{
    collections::BTreeSet,
    io::Write,
    path::Path,
    process::{Command, Stdio},
};

use serde_json::Value;

use crate::harness::Result;

/// Metadata the apiserver writes on every object, and kubectl's own bookkeeping: a diff tool
/// normalises them away before comparing (Argo CD and `kubectl diff` alike).
const SERVER_METADATA: [&str; 6] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "namespace",
];
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `live` without what the apiserver and kubectl add on their own (and without `status`).
pub fn normalised(live: &Value) -> Value {
    let mut live = live.clone();
    if let Some(object) = live.as_object_mut() {
        object.remove("status");
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in SERVER_METADATA {
                meta.remove(key);
            }
            if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                annotations.remove(LAST_APPLIED);
                if annotations.is_empty() {
                    meta.remove("annotations");
                }
            }
        }
    }
    live
}

/// The JSON pointers where `live` has something `manifest` does not say (or says otherwise):
/// an object key only live has, a value that differs, an array element past the manifest's.
pub fn drift(manifest: &Value, live: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(manifest, live, String::new(), &mut out);
    out
}

fn walk(manifest: &Value, live: &Value, at: String, out: &mut BTreeSet<String>) {
    match (manifest, live) {
        (Value::Object(m), Value::Object(l)) => {
            for (key, value) in l {
                let path = format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
                // A key only live has: each of its elements or keys is a difference.
                let empty = match value {
                    Value::Object(_) => Value::Object(serde_json::Map::new()),
                    Value::Array(_) => Value::Array(Vec::new()),
                    _ => Value::Null,
                };
                match m.get(key) {
                    Some(wanted) => walk(wanted, value, path, out),
                    None if !empty.is_null() => walk(&empty, value, path, out),
                    None => {
                        out.insert(path);
                    }
                }
            }
            for key in m.keys().filter(|k| !l.contains_key(*k)) {
                out.insert(format!("{at}/{key} (missing live)"));
            }
        }
        (Value::Array(m), Value::Array(l)) => {
            for (i, value) in l.iter().enumerate() {
                match m.get(i) {
                    Some(wanted) => walk(wanted, value, format!("{at}/{i}"), out),
                    None => {
                        out.insert(format!("{at}/{i}"));
                    }
                }
            }
            if m.len() > l.len() {
                out.insert(format!("{at}/{} (missing live)", l.len()));
            }
        }
        (m, l) if m == l => {}
        _ => {
            out.insert(at);
        }
    }
}

/// The `jqPathExpressions` of the `ignoreDifferences` entry for `kind` in the first YAML block
/// of `docs` (docs/gitops.md) that holds an Argo CD `Application`.
pub fn documented_jq_expressions(docs: &Path, kind: &str) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(docs)
        .map_err(|e| format!("cannot read {}: {e}", docs.display()))?;
    for block in text.split("```yaml").skip(1) {
        let block = block.split("```").next().unwrap_or_default();
        if !block.contains("kind: Application") {
            continue;
        }
        let app: Value = serde_saphyr::from_str(block)
            .map_err(|e| format!("{}: the Application block is not YAML: {e}", docs.display()))?;
        let entries = app["spec"]["ignoreDifferences"]
            .as_array()
            .ok_or("the Application has no spec.ignoreDifferences")?;
        let entry = entries
            .iter()
            .find(|e| e["kind"] == kind)
            .ok_or_else(|| format!("no ignoreDifferences entry for kind {kind}"))?;
        return entry["jqPathExpressions"]
            .as_array()
            .ok_or_else(|| format!("ignoreDifferences for {kind} has no jqPathExpressions"))?
            .iter()
            .map(|e| {
                e.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| "a jqPathExpression is not a string".into())
            })
            .collect();
    }
    Err(format!(
        "{} has no ```yaml block with an Argo CD Application",
        docs.display()
    )
    .into())
}

/// `object` after `del(EXPRESSION)` for each expression in turn, by the `jq` on `PATH`.
pub async fn jq_delete(object: &Value, expressions: &[String]) -> Result<Value> {
    let object = object.clone();
    let expressions = expressions.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut current = object;
        for expression in &expressions {
            current = jq(&current, &format!("del({expression})"))?;
        }
        Ok(current)
    })
    .await
    .map_err(|e| format!("jq did not finish: {e}"))?
}

fn jq(input: &Value, program: &str) -> Result<Value> {
    let mut child = Command::new("jq")
        .args(["-c", program])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot run jq ({e}): the GitOps tests evaluate docs/gitops.md's jqPathExpressions \
                 with it; install it (Debian: apt-get install jq; .ci/run does)"
            )
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.to_string().as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(format!(
            "jq '{program}' failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

#[test]
fn drift_names_extra_keys_extra_elements_and_changed_values() {
    let manifest = serde_json::json!({"a": {"b": 1}, "l": [{"n": "x"}], "k": "v"});
    let live = serde_json::json!({
        "a": {"b": 2, "c/d": 3}, "l": [{"n": "x"}, {"n": "y"}], "k": "v", "m": [{"n": "z"}]
    });
    let expected: BTreeSet<String> = ["/a/b", "/a/c~1d", "/l/1", "/m/0"]
        .map(str::to_owned)
        .into();
    assert_eq!(drift(&manifest, &live), expected);
}
