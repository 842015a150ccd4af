//! `cheiron audit`: which Pods and ServiceAccounts lack the pull secrets policy says they
//! should have, why, and what fixes them. The judgement ([`lacking`]) is pure and is the
//! webhook's own decision ([`crate::policy::decide`]) applied to an object as it is now; the
//! controller's `cheiron_audit_findings` gauge counts with the same function.

use crate::{
    admission::Interpreted,
    policy::{Decision, Manager, NamespaceMeta, decide},
};

/// What policy wants of an object that the object does not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lacking {
    /// Every Secret policy says the object should reference, in the webhook's order.
    pub wanted: Vec<String>,
    /// Those of `wanted` the object does not reference.
    pub missing: Vec<String>,
    /// The managers that want them (`Kind ns/name`), oldest first.
    pub managers: Vec<String>,
}

/// What `object` in `namespace` lacks, judged by the webhook's decision over `managers`
/// (oldest first); `None` when it has all policy wants, or policy wants nothing of it.
pub fn lacking<'m>(
    object: &Interpreted,
    namespace: &NamespaceMeta,
    managers: impl IntoIterator<Item = &'m Manager>,
) -> Option<Lacking> {
    let Decision::Inject { secrets, managers } = decide(&object.subject(), namespace, managers)
    else {
        return None;
    };
    let missing: Vec<String> = secrets
        .iter()
        .filter(|name| !object.existing.contains(name))
        .cloned()
        .collect();
    (!missing.is_empty()).then(|| Lacking {
        wanted: secrets,
        missing,
        managers: managers.iter().map(ToString::to_string).collect(),
    })
}
