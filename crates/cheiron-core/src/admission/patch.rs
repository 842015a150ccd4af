//! The RFC 6902 patch that appends pull secret references: after the existing entries, never
//! duplicating or removing one, creating missing parents, and recording what cheiron added in
//! the `reconciled` / `reconcile-with` annotations.

use json_patch::{AddOperation, Patch, PatchOperation, jsonptr::PointerBuf};
use serde_json::{Map, Value, json};

use super::subject::{Interpreted, list_tokens};
use crate::api::{annotation, label};

/// A patch and the names it appends.
#[derive(Clone, Debug, PartialEq)]
pub struct PullSecretPatch {
    /// The operations, in order.
    pub patch: Patch,
    /// The appended names, in order.
    pub added: Vec<String>,
}

/// The `reconcile-with` value: `added` unioned with the names of a `previous` value, sorted,
/// comma-separated, without duplicates or empty names.
pub fn reconcile_with(previous: Option<&str>, added: &[String]) -> String {
    let mut names: Vec<&str> = previous
        .into_iter()
        .flat_map(|p| p.split(','))
        .map(str::trim)
        .chain(added.iter().map(String::as_str))
        .filter(|n| !n.is_empty())
        .collect();
    names.sort_unstable();
    names.dedup();
    names.join(",")
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// Builds the patch that makes the object reference every name in `wanted`, or `None` when
/// it already does (so the webhook applied to its own output returns no patch).
pub fn build_patch(interpreted: &Interpreted, wanted: &[String]) -> Option<PullSecretPatch> {
    let mut added: Vec<String> = Vec::new();
    for name in wanted {
        if !interpreted.existing.contains(name) && !added.contains(name) {
            added.push(name.clone());
        }
    }
    if added.is_empty() {
        return None;
    }
    let references = || added.iter().map(|n| json!({ "name": n }));
    let mut ops = Vec::with_capacity(added.len() + 2);

    let list = || PointerBuf::from_tokens(list_tokens(interpreted.kind).iter().copied());
    if interpreted.has_list {
        for reference in references() {
            let mut path = list();
            path.push_back("-");
            ops.push(add(path, reference));
        }
    } else if !interpreted.has_list_parent {
        // A Pod without a spec.
        ops.push(add(
            PointerBuf::from_tokens(["spec"]),
            json!({ "imagePullSecrets": references().collect::<Vec<_>>() }),
        ));
    } else {
        ops.push(add(list(), Value::Array(references().collect())));
    }

    let previous = interpreted
        .annotations
        .get(annotation::RECONCILE_WITH)
        .map(String::as_str);
    let mut annotations = Map::new();
    annotations.insert(annotation::RECONCILED.to_owned(), Value::from("true"));
    annotations.insert(
        annotation::RECONCILE_WITH.to_owned(),
        Value::from(reconcile_with(previous, &added)),
    );
    if !interpreted.has_metadata {
        ops.push(add(
            PointerBuf::from_tokens(["metadata"]),
            json!({ "annotations": annotations }),
        ));
    } else if !interpreted.has_annotations {
        ops.push(add(
            PointerBuf::from_tokens(["metadata", "annotations"]),
            Value::Object(annotations),
        ));
    } else {
        for (key, value) in annotations {
            ops.push(add(
                PointerBuf::from_tokens(["metadata", "annotations", key.as_str()]),
                value,
            ));
        }
    }
    Some(PullSecretPatch {
        patch: Patch(ops),
        added,
    })
}

/// Appends to `patch` (built by [`build_patch`] for a Pod, so `metadata.annotations` exists
/// once it applies) the operations that mark the Pod as referencing `missing` Secrets: the
/// [`label::MISSING_SECRETS`] label, which the controller's Pod watch selects on, and the
/// [`annotation::MISSING_SECRETS`] annotation with the names. One key at a time: an existing
/// `labels` map is never replaced, only created when absent. Does nothing when `missing` is
/// empty.
pub fn mark_missing(patch: &mut Patch, interpreted: &Interpreted, missing: &[String]) {
    if missing.is_empty() {
        return;
    }
    let mut names: Vec<&str> = missing.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    if interpreted.has_metadata && interpreted.has_labels {
        patch.0.push(add(
            PointerBuf::from_tokens(["metadata", "labels", label::MISSING_SECRETS]),
            Value::from(label::MISSING_SECRETS_VALUE),
        ));
    } else {
        patch.0.push(add(
            PointerBuf::from_tokens(["metadata", "labels"]),
            json!({ label::MISSING_SECRETS: label::MISSING_SECRETS_VALUE }),
        ));
    }
    patch.0.push(add(
        PointerBuf::from_tokens(["metadata", "annotations", annotation::MISSING_SECRETS]),
        Value::from(names.join(",")),
    ));
}
