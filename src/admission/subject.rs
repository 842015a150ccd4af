//! Reading the parts of a Pod or ServiceAccount that admission needs, tolerating everything
//! else (unknown fields, a Pod with only `generateName`).

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::LocalObjectReference, apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use serde_json::Value;

use crate::policy::{Subject, SubjectKind};

/// An object whose metadata or pull secret list has the wrong shape.
#[derive(Debug, thiserror::Error)]
#[error("cannot interpret the {kind} object: {reason}")]
pub struct Uninterpretable {
    /// Pod or ServiceAccount.
    pub kind: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// The fields of an admitted object the policy and patch builder read.
#[derive(Clone, Debug)]
pub struct Interpreted {
    /// Pod or ServiceAccount.
    pub kind: SubjectKind,
    /// `metadata.name`, empty when only `generateName` is set.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// The names already in the pull secret list, in order.
    pub existing: Vec<String>,
}

impl Interpreted {
    /// The policy's view of this object.
    pub fn subject(&self) -> Subject<'_> {
        Subject {
            kind: self.kind,
            name: &self.name,
            labels: &self.labels,
            annotations: &self.annotations,
        }
    }
}

/// JSON Pointer of the pull secret list for `kind`.
pub(super) fn list_pointer(kind: SubjectKind) -> &'static str {
    match kind {
        SubjectKind::Pod => "/spec/imagePullSecrets",
        SubjectKind::ServiceAccount => "/imagePullSecrets",
    }
}

/// The tokens of [`list_pointer`], for building escaped patch paths.
pub(super) fn list_tokens(kind: SubjectKind) -> &'static [&'static str] {
    match kind {
        SubjectKind::Pod => &["spec", "imagePullSecrets"],
        SubjectKind::ServiceAccount => &["imagePullSecrets"],
    }
}

/// Reads `object` as a `kind`.
pub fn interpret(object: &Value, kind: SubjectKind) -> Result<Interpreted, Uninterpretable> {
    let fail = |reason: String| Uninterpretable {
        kind: kind.as_str(),
        reason,
    };
    if !object.is_object() {
        return Err(fail("not a JSON object".into()));
    }
    let metadata: ObjectMeta = match object.get("metadata") {
        None | Some(Value::Null) => ObjectMeta::default(),
        Some(m) => ObjectMeta::deserialize_from(m).map_err(|e| fail(format!("metadata: {e}")))?,
    };
    let existing = match object.pointer(list_pointer(kind)) {
        None | Some(Value::Null) => Vec::new(),
        Some(list) => Vec::<Option<LocalObjectReference>>::deserialize_from(list)
            .map_err(|e| fail(format!("imagePullSecrets: {e}")))?
            .into_iter()
            .flatten()
            .map(|r| r.name)
            .collect(),
    };
    if kind == SubjectKind::Pod
        && object
            .get("spec")
            .is_some_and(|s| !s.is_object() && !s.is_null())
    {
        return Err(fail("spec is not an object".into()));
    }
    Ok(Interpreted {
        kind,
        name: metadata.name.unwrap_or_default(),
        labels: metadata.labels.unwrap_or_default(),
        annotations: metadata.annotations.unwrap_or_default(),
        existing,
    })
}

/// Deserialising from a borrowed JSON value without cloning the whole object.
trait DeserializeFrom: Sized {
    fn deserialize_from(value: &Value) -> Result<Self, serde_json::Error>;
}

impl<T: serde::de::DeserializeOwned> DeserializeFrom for T {
    fn deserialize_from(value: &Value) -> Result<Self, serde_json::Error> {
        serde::Deserialize::deserialize(value)
    }
}
