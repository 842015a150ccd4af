//! Which ServiceAccounts each namespace holds, so that a reconcile reads the ServiceAccounts of
//! its target namespaces without scanning every ServiceAccount of the cluster (at 10 000
//! namespaces that scan was most of the controller's CPU). The objects stay in the reflector
//! store, trimmed by [`trim`] to what the controller reads; this index holds names only.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, RwLock},
};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{
    ResourceExt,
    runtime::{
        reflector::{ObjectRef, Store},
        watcher,
    },
};

/// The annotation kubectl apply keeps a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Keeps of a ServiceAccount what the controller reads and patches: name, namespace, labels,
/// annotations, `imagePullSecrets`, `resourceVersion` and uid. The value of kubectl's
/// last-applied annotation is emptied, not removed: a patch computed from the cache must see
/// the same annotation keys as the stored object.
pub fn trim(sa: &mut ServiceAccount) {
    sa.metadata.managed_fields = None;
    sa.metadata.owner_references = None;
    sa.secrets = None;
    if let Some(value) = sa
        .metadata
        .annotations
        .as_mut()
        .and_then(|a| a.get_mut(LAST_APPLIED))
    {
        value.clear();
    }
}

type Names = HashMap<String, BTreeSet<String>>;

#[derive(Default)]
struct Index {
    current: Names,
    relisting: Option<Names>,
}

/// ServiceAccount names by namespace; cheap to clone (shared).
#[derive(Clone, Default)]
pub struct ServiceAccountIndex {
    index: Arc<RwLock<Index>>,
}

fn key(sa: &ServiceAccount) -> (String, String) {
    (sa.namespace().unwrap_or_default(), sa.name_any())
}

impl ServiceAccountIndex {
    /// Applies one watch event (after the reflector store has).
    pub fn apply(&self, event: &watcher::Event<ServiceAccount>) {
        let Ok(mut index) = self.index.write() else {
            return;
        };
        match event {
            watcher::Event::Init => index.relisting = Some(Names::new()),
            watcher::Event::InitApply(sa) => {
                let (ns, name) = key(sa);
                index
                    .relisting
                    .get_or_insert_with(Names::new)
                    .entry(ns)
                    .or_default()
                    .insert(name);
            }
            watcher::Event::InitDone => {
                index.current = index.relisting.take().unwrap_or_default();
            }
            watcher::Event::Apply(sa) => {
                let (ns, name) = key(sa);
                index.current.entry(ns).or_default().insert(name);
            }
            watcher::Event::Delete(sa) => {
                let (ns, name) = key(sa);
                if let Some(names) = index.current.get_mut(&ns) {
                    names.remove(&name);
                    if names.is_empty() {
                        index.current.remove(&ns);
                    }
                }
            }
        }
    }

    /// The ServiceAccounts of `namespace`, read from `store`, by name.
    pub fn in_namespace(
        &self,
        namespace: &str,
        store: &Store<ServiceAccount>,
    ) -> Vec<Arc<ServiceAccount>> {
        let Ok(index) = self.index.read() else {
            return Vec::new();
        };
        index
            .current
            .get(namespace)
            .into_iter()
            .flatten()
            .filter_map(|name| store.get(&ObjectRef::new(name).within(namespace)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::store::Writer;

    use super::*;

    fn sa(ns: &str, name: &str) -> ServiceAccount {
        let mut sa = ServiceAccount::default();
        sa.metadata.namespace = Some(ns.to_owned());
        sa.metadata.name = Some(name.to_owned());
        sa
    }

    fn apply(
        index: &ServiceAccountIndex,
        writer: &mut Writer<ServiceAccount>,
        event: watcher::Event<ServiceAccount>,
    ) {
        writer.apply_watcher_event(&event);
        index.apply(&event);
    }

    fn names(list: Vec<Arc<ServiceAccount>>) -> Vec<String> {
        list.iter().map(|s| s.name_any()).collect()
    }

    #[test]
    fn a_namespace_lists_its_own_service_accounts_through_lists_and_changes() {
        let index = ServiceAccountIndex::default();
        let mut writer = Writer::default();
        let store = writer.as_reader();
        apply(&index, &mut writer, watcher::Event::Init);
        apply(
            &index,
            &mut writer,
            watcher::Event::InitApply(sa("a", "default")),
        );
        apply(
            &index,
            &mut writer,
            watcher::Event::InitApply(sa("b", "default")),
        );
        apply(&index, &mut writer, watcher::Event::InitDone);
        apply(&index, &mut writer, watcher::Event::Apply(sa("a", "app")));
        assert_eq!(names(index.in_namespace("a", &store)), ["app", "default"]);
        assert_eq!(names(index.in_namespace("b", &store)), ["default"]);
        apply(
            &index,
            &mut writer,
            watcher::Event::Delete(sa("a", "default")),
        );
        assert_eq!(names(index.in_namespace("a", &store)), ["app"]);
        // A relist replaces the whole index: what it does not list is gone.
        apply(&index, &mut writer, watcher::Event::Init);
        apply(
            &index,
            &mut writer,
            watcher::Event::InitApply(sa("b", "default")),
        );
        apply(&index, &mut writer, watcher::Event::InitDone);
        assert!(index.in_namespace("a", &store).is_empty());
        assert_eq!(names(index.in_namespace("b", &store)), ["default"]);
    }

    #[test]
    fn trimming_keeps_what_patches_are_computed_from() {
        let mut s = sa("a", "default");
        s.metadata.annotations = Some(
            [
                (LAST_APPLIED.to_owned(), "{\"a\":\"big\"}".to_owned()),
                (
                    "cheiron.anny.co/reconcile-with".to_owned(),
                    "pull".to_owned(),
                ),
            ]
            .into(),
        );
        s.secrets = Some(vec![Default::default()]);
        trim(&mut s);
        let annotations = s.metadata.annotations.unwrap_or_default();
        assert_eq!(annotations.get(LAST_APPLIED).map(String::as_str), Some(""));
        assert_eq!(
            annotations
                .get("cheiron.anny.co/reconcile-with")
                .map(String::as_str),
            Some("pull")
        );
        assert_eq!(s.secrets, None);
    }
}
