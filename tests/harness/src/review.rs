//! AdmissionReview fixtures shaped like kube-apiserver's (`tests/data/`), ways to move them
//! into another namespace or give them another uid, label or annotation, and readers of what
//! the webhook answered: the object with the patch applied, its pull secrets, its annotations.
//!
//! These are assertions of the calling test: a fixture that does not parse or an answer that
//! is not what the test expects panics, reported at the test's line (`#[track_caller]`).

#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::Path;

use base64::Engine;
use serde_json::{Value, json};

/// The review in `tests/data/<name>`.
#[track_caller]
pub fn fixture(name: &str) -> Value {
    // This crate is `tests/harness/`.
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../data")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// CREATE of a Pod with only `generateName` and no namespace, as a ReplicaSet's, in `team-a`.
#[track_caller]
pub fn pod_review() -> Value {
    fixture("pod-create-replicaset.json")
}

/// CREATE of a ServiceAccount in `team-b`.
#[track_caller]
pub fn service_account_review() -> Value {
    fixture("serviceaccount-create.json")
}

/// Moves the review (and the object, if it names one) into `namespace`.
pub fn in_namespace(mut review: Value, namespace: &str) -> Value {
    review["request"]["namespace"] = json!(namespace);
    let metadata = &mut review["request"]["object"]["metadata"];
    if metadata.get("namespace").is_some() {
        metadata["namespace"] = json!(namespace);
    }
    review
}

/// The review with `request.uid` set to `uid`.
pub fn with_uid(mut review: Value, uid: &str) -> Value {
    review["request"]["uid"] = json!(uid);
    review
}

/// The review with the annotation `key=value` on its object.
pub fn annotated(mut review: Value, key: &str, value: &str) -> Value {
    let metadata = &mut review["request"]["object"]["metadata"];
    if metadata.get("annotations").is_none() {
        metadata["annotations"] = json!({});
    }
    metadata["annotations"][key] = json!(value);
    review
}

/// The review with the label `key=value` on its object.
pub fn labelled(mut review: Value, key: &str, value: &str) -> Value {
    review["request"]["object"]["metadata"]["labels"][key] = json!(value);
    review
}

/// `request.object` with the response's JSON Patch applied.
#[track_caller]
pub fn patched(review: &Value, response: &Value) -> Value {
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch", "no patch in {response}");
    let encoded = response["patch"].as_str().unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut object = review["request"]["object"].clone();
    json_patch::patch(&mut object, &patch).unwrap();
    object
}

/// Asserts that `response` answers `review` and admits it as it is.
#[track_caller]
pub fn assert_allowed_without_patch(review: &Value, response: &Value) {
    assert_eq!(response["uid"], review["request"]["uid"]);
    assert_eq!(response["allowed"], true);
    assert!(
        response.get("patch").is_none_or(Value::is_null),
        "{response}"
    );
    assert!(
        response.get("patchType").is_none_or(Value::is_null),
        "{response}"
    );
}

/// The names of the pull secrets at `pointer` (`/spec/imagePullSecrets` of a Pod,
/// `/imagePullSecrets` of a ServiceAccount), in order.
#[track_caller]
pub fn pull_secrets(object: &Value, pointer: &str) -> Vec<String> {
    object
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|r| r["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// One annotation of an object.
pub fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["annotations"][key].as_str()
}
