//! ServiceAccount patches for the controller: backfilling what the webhook would have added,
//! and removing exactly what cheiron added. Every patch starts with a `test` of
//! `metadata.resourceVersion`, so a concurrent writer makes it fail instead of being clobbered.

use json_patch::{Patch, PatchOperation, RemoveOperation, TestOperation, jsonptr::PointerBuf};
use k8s_openapi::api::core::v1::ServiceAccount;
use serde_json::Value;

use crate::{
    admission::{build_patch, interpret},
    api::annotation,
    policy::{Decision, Manager, NamespaceMeta, SubjectKind, decide},
};

fn precondition(sa: &ServiceAccount) -> Option<PatchOperation> {
    Some(PatchOperation::Test(TestOperation {
        path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
        value: Value::from(sa.metadata.resource_version.clone()?),
    }))
}

/// The names `managers` want on `sa` in `namespace` (opt-outs and selectors honoured).
pub fn wanted<'m>(
    sa: &ServiceAccount,
    namespace: &NamespaceMeta,
    managers: impl IntoIterator<Item = &'m Manager>,
) -> Vec<String> {
    let Ok(object) = serde_json::to_value(sa) else {
        return Vec::new();
    };
    let Ok(interpreted) = interpret(&object, SubjectKind::ServiceAccount) else {
        return Vec::new();
    };
    match decide(&interpreted.subject(), namespace, managers) {
        Decision::Inject { secrets, .. } => secrets,
        Decision::Skip(_) => Vec::new(),
    }
}

/// The patch appending what `manager` wants and `sa` lacks, as the webhook would have at
/// creation; `None` when nothing is missing.
pub fn backfill(
    sa: &ServiceAccount,
    namespace: &NamespaceMeta,
    manager: &Manager,
) -> Option<(Patch, Vec<String>)> {
    let names = wanted(sa, namespace, [manager]);
    if names.is_empty() {
        return None;
    }
    let object = serde_json::to_value(sa).ok()?;
    let interpreted = interpret(&object, SubjectKind::ServiceAccount).ok()?;
    let built = build_patch(&interpreted, &names)?;
    let mut ops = vec![precondition(sa)?];
    ops.extend(built.patch.0);
    Some((Patch(ops), built.added))
}

/// The patch removing `names` from `sa`, but only those cheiron added (listed in
/// `cheiron.anny.co/reconcile-with`), and updating that annotation; `None` when there is
/// nothing to remove or the object opts out.
pub fn removal(sa: &ServiceAccount, names: &[String]) -> Option<(Patch, Vec<String>)> {
    let annotations = sa.metadata.annotations.as_ref()?;
    if crate::policy::object_opted_out(annotations) {
        return None;
    }
    let added: Vec<&str> = annotations
        .get(annotation::RECONCILE_WITH)?
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    let removable: Vec<&str> = added
        .iter()
        .copied()
        .filter(|n| names.iter().any(|m| m == n))
        .collect();
    let list = sa.image_pull_secrets.as_deref().unwrap_or_default();
    let indexes: Vec<usize> = list
        .iter()
        .enumerate()
        .filter(|(_, r)| removable.contains(&r.name.as_str()))
        .map(|(i, _)| i)
        .collect();
    if removable.is_empty() {
        return None;
    }
    let mut ops = vec![precondition(sa)?];
    // Highest index first, so earlier indexes stay valid.
    for i in indexes.iter().rev() {
        ops.push(PatchOperation::Remove(RemoveOperation {
            path: PointerBuf::from_tokens(["imagePullSecrets".to_owned(), i.to_string()]),
        }));
    }
    let remaining: Vec<&str> = added
        .iter()
        .copied()
        .filter(|n| !removable.contains(n))
        .collect();
    let annotation_path = |key: &str| PointerBuf::from_tokens(["metadata", "annotations", key]);
    if remaining.is_empty() {
        for key in [annotation::RECONCILE_WITH, annotation::RECONCILED] {
            if annotations.contains_key(key) {
                ops.push(PatchOperation::Remove(RemoveOperation {
                    path: annotation_path(key),
                }));
            }
        }
    } else {
        ops.push(PatchOperation::Replace(json_patch::ReplaceOperation {
            path: annotation_path(annotation::RECONCILE_WITH),
            value: Value::from(remaining.join(",")),
        }));
    }
    Some((
        Patch(ops),
        removable.iter().map(|s| (*s).to_owned()).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::LocalObjectReference;

    use super::*;
    use crate::api::ImagePullSecretManager;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn sa(entries: &[&str], reconcile_with: Option<&str>) -> ServiceAccount {
        let mut sa = ServiceAccount::default();
        sa.metadata.name = Some("default".into());
        sa.metadata.resource_version = Some("7".into());
        sa.image_pull_secrets = Some(
            entries
                .iter()
                .map(|n| LocalObjectReference { name: (*n).into() })
                .collect(),
        );
        if let Some(v) = reconcile_with {
            sa.metadata.annotations = Some(BTreeMap::from([
                (annotation::RECONCILED.to_owned(), "true".to_owned()),
                (annotation::RECONCILE_WITH.to_owned(), v.to_owned()),
            ]));
        }
        sa
    }

    fn apply(
        sa: &ServiceAccount,
        patch: &Patch,
    ) -> Result<ServiceAccount, Box<dyn std::error::Error>> {
        let mut value = serde_json::to_value(sa)?;
        json_patch::patch(&mut value, patch)?;
        Ok(serde_json::from_value(value)?)
    }

    fn list(sa: &ServiceAccount) -> Vec<String> {
        sa.image_pull_secrets
            .iter()
            .flatten()
            .map(|r| r.name.clone())
            .collect()
    }

    #[test]
    fn backfill_appends_missing_names_after_other_writers_entries() -> TestResult {
        let m: ImagePullSecretManager = serde_saphyr::from_str(
            "apiVersion: cheiron.anny.co/v1alpha1\nkind: ImagePullSecretManager\nmetadata: {name: m, namespace: team}\nspec:\n  secrets: [{existingSecretRef: {name: a}}, {existingSecretRef: {name: b}}]\n",
        )?;
        let m = Manager::from_namespaced(&m)?;
        let before = sa(&["theirs", "b"], None);
        let (patch, added) =
            backfill(&before, &NamespaceMeta::named("team"), &m).ok_or("no patch")?;
        assert_eq!(added, ["a"]);
        assert!(matches!(&patch.0[0], PatchOperation::Test(t) if t.value == "7"));
        let after = apply(&before, &patch)?;
        assert_eq!(list(&after), ["theirs", "b", "a"]);
        assert!(
            backfill(&after, &NamespaceMeta::named("team"), &m).is_none(),
            "idempotent"
        );
        Ok(())
    }

    #[test]
    fn removal_takes_only_entries_cheiron_added_and_keeps_the_rest() -> TestResult {
        // "shared" was there before cheiron (not in reconcile-with): it must stay.
        let before = sa(&["shared", "a", "theirs", "b"], Some("a,b"));
        let (patch, removed) =
            removal(&before, &["a".into(), "shared".into()]).ok_or("no patch")?;
        assert_eq!(removed, ["a"]);
        let after = apply(&before, &patch)?;
        assert_eq!(list(&after), ["shared", "theirs", "b"]);
        assert_eq!(
            after
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(annotation::RECONCILE_WITH))
                .map(String::as_str),
            Some("b")
        );
        let (patch, _) = removal(&after, &["b".into()]).ok_or("no patch")?;
        let emptied = apply(&after, &patch)?;
        assert_eq!(list(&emptied), ["shared", "theirs"]);
        let annotations = emptied.metadata.annotations.unwrap_or_default();
        assert!(
            !annotations.contains_key(annotation::RECONCILE_WITH)
                && !annotations.contains_key(annotation::RECONCILED)
        );
        Ok(())
    }

    #[test]
    fn removal_leaves_objects_without_cheiron_entries_or_opted_out_alone() {
        assert!(removal(&sa(&["a"], None), &["a".into()]).is_none());
        let mut opted = sa(&["a"], Some("a"));
        opted
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(annotation::IGNORE.into(), "true".into());
        assert!(removal(&opted, &["a".into()]).is_none());
    }
}
