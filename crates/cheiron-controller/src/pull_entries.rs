//! The `imagePullSecrets` entries cheiron adds to and removes from ServiceAccounts (the cache
//! they are read from is `service_accounts.rs`): backfilling what the webhook would have
//! added, and removing exactly what cheiron added. Every patch starts with a `test` of
//! `metadata.resourceVersion`, so a concurrent writer makes it fail instead of being clobbered.
//! Computed from the cache's [`ServiceAccountRecord`]s; the common answer ("nothing to do") is
//! found without building anything.

use cheiron_core::{
    admission::build_patch,
    policy::{Decision, Manager, NamespaceMeta, decide, namespace_opted_out},
};
use cheiron_runtime::api::{Mode, annotation};
use json_patch::{Patch, PatchOperation, RemoveOperation, TestOperation, jsonptr::PointerBuf};
use kube::runtime::events::{Event, EventType};
use serde_json::Value;

use super::service_accounts::ServiceAccountRecord;

fn precondition(sa: &ServiceAccountRecord) -> PatchOperation {
    PatchOperation::Test(TestOperation {
        path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
        value: Value::from(sa.resource_version()),
    })
}

/// The names `managers` want on `sa` in `namespace` (opt-outs and selectors honoured).
pub fn wanted<'m>(
    sa: &ServiceAccountRecord,
    namespace: &NamespaceMeta,
    managers: impl IntoIterator<Item = &'m Manager>,
) -> Vec<String> {
    let interpreted = sa.interpreted();
    match decide(&interpreted.subject(), namespace, managers) {
        Decision::Inject { secrets, .. } => secrets,
        Decision::Skip(_) => Vec::new(),
    }
}

/// True when `manager` wants its names on every ServiceAccount of `namespace` that does not
/// opt out, whatever its name and labels: mode ServiceAccount, no ServiceAccount selection,
/// and `namespace` in scope and not opted out. Said once per namespace, without building any
/// object's maps.
pub fn wants_every_service_account_in(manager: &Manager, namespace: &NamespaceMeta) -> bool {
    manager.mode == Mode::ServiceAccount
        && manager.selects_every_service_account()
        && manager.scope.contains(namespace)
        && !namespace_opted_out(namespace)
}

/// The patch appending what `manager` wants and `sa` lacks, as the webhook would have at
/// creation; `None` when nothing is missing.
pub fn backfill(
    sa: &ServiceAccountRecord,
    namespace: &NamespaceMeta,
    manager: &Manager,
) -> Option<(Patch, Vec<String>)> {
    // Already referencing every name the manager could want: nothing to add.
    if manager.secret_names().iter().all(|n| sa.references(n)) {
        return None;
    }
    let interpreted = sa.interpreted();
    let names = match decide(&interpreted.subject(), namespace, [manager]) {
        Decision::Inject { secrets, .. } => secrets,
        Decision::Skip(_) => return None,
    };
    let built = build_patch(&interpreted, &names)?;
    let mut ops = vec![precondition(sa)];
    ops.extend(built.patch.0);
    Some((Patch(ops), built.added))
}

/// The patch removing `names` from `sa`, but only those cheiron added (listed in
/// `cheiron.anny.co/reconcile-with`), and updating that annotation; `None` when there is
/// nothing to remove or the object opts out.
pub fn removal(sa: &ServiceAccountRecord, names: &[String]) -> Option<(Patch, Vec<String>)> {
    if sa.opted_out() {
        return None;
    }
    let added: Vec<&str> = sa
        .annotation(annotation::RECONCILE_WITH)?
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    let removable: Vec<&str> = added
        .iter()
        .copied()
        .filter(|n| names.iter().any(|m| m == n))
        .collect();
    if removable.is_empty() {
        return None;
    }
    let indexes: Vec<usize> = sa
        .pull_secrets()
        .enumerate()
        .filter(|(_, name)| removable.contains(name))
        .map(|(i, _)| i)
        .collect();
    let mut ops = vec![precondition(sa)];
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
            if sa.annotation(key).is_some() {
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

/// Most Events about single ServiceAccounts one reconcile publishes; the rest are counted in
/// one Event about the manager ([`ServiceAccountReport::events`]).
pub const SERVICE_ACCOUNT_EVENTS_PER_RECONCILE: usize = 10;

/// What one reconcile did to ServiceAccounts, for a bounded number of Events: one per
/// ServiceAccount for the first few, then one about the manager that counts them all.
#[derive(Default)]
pub struct ServiceAccountReport {
    inner: std::sync::Mutex<Tally>,
}

#[derive(Default)]
struct Tally {
    events: usize,
    added: usize,
    removed: usize,
    namespaces: std::collections::BTreeSet<String>,
}

impl ServiceAccountReport {
    /// Counts a patched ServiceAccount; true while Events about single ones may still go out.
    pub(super) fn count(&self, namespace: &str, added: bool) -> bool {
        let Ok(mut t) = self.inner.lock() else {
            return false;
        };
        if added {
            t.added += 1;
        } else {
            t.removed += 1;
        }
        t.namespaces.insert(namespace.to_owned());
        t.events += 1;
        t.events <= SERVICE_ACCOUNT_EVENTS_PER_RECONCILE
    }

    /// The Events about the manager counting what was added and removed, if anything was.
    pub fn events(&self) -> Vec<Event> {
        let (added, removed, namespaces) = match self.inner.lock() {
            Ok(t) => (t.added, t.removed, t.namespaces.len()),
            Err(_) => return Vec::new(),
        };
        [
            (added, "PullSecretsAdded", "added its pull secrets to"),
            (
                removed,
                "PullSecretsRemoved",
                "removed its pull secrets from",
            ),
        ]
        .into_iter()
        .filter(|(count, _, _)| *count > 0)
        .map(|(count, reason, verb)| Event {
            type_: EventType::Normal,
            reason: reason.to_owned(),
            note: Some(format!(
                "cheiron {verb} {count} ServiceAccount(s) in {namespaces} namespace(s)"
            )),
            action: "PatchServiceAccounts".to_owned(),
            secondary: None,
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cheiron_runtime::api::ImagePullSecretManager;
    use k8s_openapi::api::core::v1::{LocalObjectReference, ServiceAccount};

    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn object(entries: &[&str], reconcile_with: Option<&str>) -> ServiceAccount {
        let mut sa = ServiceAccount::default();
        sa.metadata.name = Some("default".into());
        sa.metadata.namespace = Some("team".into());
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

    fn record(sa: &ServiceAccount) -> Result<ServiceAccountRecord, &'static str> {
        ServiceAccountRecord::of(sa).ok_or("no name or namespace")
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

    fn manager(spec: serde_json::Value) -> Result<Manager, Box<dyn std::error::Error>> {
        let m: ImagePullSecretManager = serde_json::from_value(serde_json::json!({
            "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ImagePullSecretManager",
            "metadata": {"name": "m", "namespace": "team"},
            "spec": spec,
        }))?;
        Ok(Manager::from_namespaced(&m)?)
    }

    #[test]
    fn backfill_appends_missing_names_after_other_writers_entries() -> TestResult {
        let m = manager(serde_json::json!({"secrets": [
            {"existingSecretRef": {"name": "a"}}, {"existingSecretRef": {"name": "b"}}]}))?;
        let team = NamespaceMeta::named("team");
        let before = object(&["theirs", "b"], None);
        let (patch, added) = backfill(&record(&before)?, &team, &m).ok_or("no patch")?;
        assert_eq!(added, ["a"]);
        assert!(matches!(&patch.0[0], PatchOperation::Test(t) if t.value == "7"));
        let after = apply(&before, &patch)?;
        assert_eq!(list(&after), ["theirs", "b", "a"]);
        assert_eq!(
            after
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(annotation::RECONCILE_WITH))
                .map(String::as_str),
            Some("a")
        );
        assert!(
            backfill(&record(&after)?, &team, &m).is_none(),
            "idempotent"
        );
        assert!(wants_every_service_account_in(&m, &team));
        Ok(())
    }

    #[test]
    fn backfill_honours_the_selectors_and_the_opt_out() -> TestResult {
        let team = NamespaceMeta::named("team");
        let named = manager(serde_json::json!({"serviceAccountNames": ["builder"],
            "secrets": [{"existingSecretRef": {"name": "a"}}]}))?;
        let mut sa = object(&[], None);
        assert!(
            backfill(&record(&sa)?, &team, &named).is_none(),
            "not named"
        );
        assert!(!wants_every_service_account_in(&named, &team));
        sa.metadata.name = Some("builder".into());
        assert!(backfill(&record(&sa)?, &team, &named).is_some());
        sa.metadata.annotations = Some(BTreeMap::from([(
            annotation::IGNORE.to_owned(),
            "true".to_owned(),
        )]));
        assert!(
            backfill(&record(&sa)?, &team, &named).is_none(),
            "opted out"
        );
        Ok(())
    }

    #[test]
    fn removal_takes_only_entries_cheiron_added_and_keeps_the_rest() -> TestResult {
        // "shared" was there before cheiron (not in reconcile-with): it must stay.
        let before = object(&["shared", "a", "theirs", "b"], Some("a,b"));
        let (patch, removed) =
            removal(&record(&before)?, &["a".into(), "shared".into()]).ok_or("no patch")?;
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
        let (patch, _) = removal(&record(&after)?, &["b".into()]).ok_or("no patch")?;
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
    fn removal_leaves_objects_without_cheiron_entries_or_opted_out_alone() -> TestResult {
        assert!(removal(&record(&object(&["a"], None))?, &["a".into()]).is_none());
        let mut opted = object(&["a"], Some("a"));
        opted
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(annotation::IGNORE.into(), "true".into());
        assert!(removal(&record(&opted)?, &["a".into()]).is_none());
        Ok(())
    }
}
