//! What cheiron does to one Pod or ServiceAccount ([`Mutation`]): the policy's decision for
//! the object, the pull secrets to append, and the missing-Secret warning.

use serde_json::Value;

use super::{
    patch::{PullSecretPatch, build_patch, mark_missing},
    subject::{Interpreted, Uninterpretable, interpret},
};
use crate::policy::{Decision, Manager, NamespaceMeta, Skip, SubjectKind, View, decide};

/// What cheiron does to one Pod or ServiceAccount.
#[derive(Clone, Debug, PartialEq)]
pub struct Mutation {
    /// Patched, unchanged, or skipped (and why).
    pub result: MutationResult,
    /// The RFC 6902 patch; empty unless `result` is [`MutationResult::Patched`].
    pub patch: json_patch::Patch,
    /// Secret names the patch appends, in order.
    pub added: Vec<String>,
    /// Messages for the client, e.g. a referenced Secret that does not exist yet.
    pub warnings: Vec<String>,
}

/// The result of [`mutate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MutationResult {
    /// A patch adds pull secret references.
    Patched,
    /// Managers apply, but the object already references everything they want.
    Unchanged,
    /// The object is left alone.
    Skipped(Skip),
}

/// Computes what cheiron does to `object` (a Pod or ServiceAccount as JSON) admitted into
/// `namespace`. Pure: the same inputs give the same patch.
pub fn mutate(
    object: &Value,
    kind: SubjectKind,
    namespace: &str,
    view: &dyn View,
) -> Result<Mutation, Uninterpretable> {
    Ok(mutate_interpreted(
        &interpret(object, kind)?,
        namespace,
        view,
    ))
}

/// [`mutate`] for an object already read.
pub fn mutate_interpreted(interpreted: &Interpreted, namespace: &str, view: &dyn View) -> Mutation {
    let namespace_meta = view
        .namespace(namespace)
        .unwrap_or_else(|| NamespaceMeta::named(namespace));
    let managers = view.managers_in(&namespace_meta);
    let unchanged = |result| Mutation {
        result,
        patch: json_patch::Patch(Vec::new()),
        added: Vec::new(),
        warnings: Vec::new(),
    };
    let secrets = match decide(
        &interpreted.subject(),
        &namespace_meta,
        managers.iter().map(|m| &**m),
    ) {
        Decision::Skip(skip) => return unchanged(MutationResult::Skipped(skip)),
        Decision::Inject { secrets, .. } => secrets,
    };
    let Some(PullSecretPatch { mut patch, added }) = build_patch(interpreted, &secrets) else {
        return unchanged(MutationResult::Unchanged);
    };
    // Known missing: cheiron's Secret cache does not hold it, and it is one cheiron writes
    // (not the user's own Secret, injected under its name in its namespace, which that cache
    // cannot tell about).
    let in_place = |name: &str| managers.iter().any(|m| m.sources_in_place(namespace, name));
    let missing: Vec<&str> = added
        .iter()
        .map(String::as_str)
        .filter(|name| view.secret_exists(namespace, name) == Some(false) && !in_place(name))
        .collect();
    let warnings = missing
        .iter()
        .map(|name| {
            format!("cheiron: pull secret {namespace}/{name} does not exist yet; it was referenced anyway and the controller will create it")
        })
        .collect();
    // A Pod keeps the names, so that the controller can warn on it when one is still missing
    // after a grace period (a ServiceAccount does not pull; the controller backfills it). When
    // the cache cannot tell (the split install's webhook, or the user's own Secret), a name is
    // checked if a manager that injects it is not Ready (e.g. `SourceMissing`): the controller
    // reads the Secret before it warns, so a name checked for nothing costs one GET. A manager
    // without a status (not reconciled yet, or read from a file) does not count as not Ready.
    // Usually every manager is Ready, and then no name is looked at twice.
    if interpreted.kind == SubjectKind::Pod {
        let not_ready: Vec<&Manager> = managers
            .iter()
            .map(|m| &**m)
            .filter(|m| m.is_not_ready())
            .collect();
        let unsure = |name: &str| {
            not_ready
                .iter()
                .any(|m| m.secret_names().iter().any(|n| n == name))
                && (in_place(name) || view.secret_exists(namespace, name).is_none())
        };
        let check: Vec<String> = added
            .iter()
            .filter(|name| missing.contains(&name.as_str()) || unsure(name))
            .cloned()
            .collect();
        mark_missing(&mut patch, interpreted, &check);
    }
    Mutation {
        result: MutationResult::Patched,
        patch,
        added,
        warnings,
    }
}
