//! The parts of a Namespace the policy reads.

use super::pairs::Pairs;

/// The parts of a Namespace the policy reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceMeta {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: Pairs,
    /// `metadata.annotations`.
    pub annotations: Pairs,
}

impl NamespaceMeta {
    /// A namespace with no labels or annotations.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// The policy's view of a Namespace's metadata.
    pub fn from_metadata(
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Self {
        Self {
            name: meta.name.clone().unwrap_or_default(),
            labels: meta.labels.iter().flatten().collect(),
            annotations: meta.annotations.iter().flatten().collect(),
        }
    }
}
