//! What the policy knows of the object being admitted.

use std::collections::BTreeMap;

use crate::api::Mode;

/// The kind of object being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubjectKind {
    /// A Pod (managers in mode `Pod`).
    Pod,
    /// A ServiceAccount (managers in mode `ServiceAccount`).
    ServiceAccount,
}

impl SubjectKind {
    /// The mode of manager that acts on this kind.
    pub fn mode(self) -> Mode {
        match self {
            SubjectKind::Pod => Mode::Pod,
            SubjectKind::ServiceAccount => Mode::ServiceAccount,
        }
    }

    /// The Kubernetes kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            SubjectKind::Pod => "Pod",
            SubjectKind::ServiceAccount => "ServiceAccount",
        }
    }
}

/// What the policy needs to know of the object being admitted.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    /// Pod or ServiceAccount.
    pub kind: SubjectKind,
    /// `metadata.name`; empty for a Pod created with only `generateName`.
    pub name: &'a str,
    /// The object's labels.
    pub labels: &'a BTreeMap<String, String>,
    /// The object's annotations.
    pub annotations: &'a BTreeMap<String, String>,
    /// The image references a Pod pulls (all its containers), as written; empty for a
    /// ServiceAccount. Read only by managers with `injection: MatchingImages`.
    pub images: &'a [String],
}
