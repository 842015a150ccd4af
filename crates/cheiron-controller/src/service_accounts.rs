//! The controller's ServiceAccounts, by namespace, each kept as the few fields a patch is
//! computed from ([`ServiceAccountRecord`]). A reflector store held every ServiceAccount as a
//! whole `ServiceAccount` (well over 1 KiB each with its `ObjectMeta` and the store's key):
//! 50 000 of them were most of the controller's memory. Strings that repeat across
//! ServiceAccounts (names such as `default`, label and annotation keys, the pull secret names
//! cheiron adds) are shared, so a record costs a few hundred bytes.
//!
//! A reconcile reads the ServiceAccounts of its target namespaces with
//! [`ServiceAccountCache::matching`], never a scan of the cluster's.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, RwLock},
};

use cheiron_core::{
    admission::Interpreted,
    policy::{SubjectKind, opts_out},
};
use cheiron_runtime::{
    api::annotation,
    runtime::{Relist, Step},
};
use k8s_openapi::api::core::v1::{ObjectReference, ServiceAccount};
use kube::{ResourceExt, runtime::watcher};

use super::interned::Strings;

/// The annotation keys a record keeps: the only ServiceAccount annotations cheiron reads or
/// writes are its own.
const KEPT_ANNOTATION_PREFIX: &str = "cheiron.anny.co/";

/// What the controller keeps of a ServiceAccount: name, namespace, uid, resourceVersion,
/// labels, cheiron's annotations (and whether it has annotations at all: a patch adds to the
/// map or creates it) and the names of `imagePullSecrets`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccountRecord {
    name: Arc<str>,
    namespace: Arc<str>,
    uid: Option<u128>,
    resource_version: Box<str>,
    labels: Box<[(Arc<str>, Arc<str>)]>,
    annotations: Box<[(Arc<str>, Arc<str>)]>,
    annotated: bool,
    pull_secrets: Option<Box<[Arc<str>]>>,
}

/// A canonical UUID as a number (16 bytes instead of a 36-character string).
fn parse_uid(uid: &str) -> Option<u128> {
    let hex: String = uid.chars().filter(|c| *c != '-').collect();
    (uid.len() == 36 && hex.len() == 32)
        .then(|| u128::from_str_radix(&hex, 16).ok())
        .flatten()
}

fn format_uid(uid: u128) -> String {
    let hex = format!("{uid:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

impl ServiceAccountRecord {
    /// The record of `sa`, its strings shared through `strings`; `None` without a name or
    /// namespace.
    pub fn new(sa: &ServiceAccount, strings: &mut Strings) -> Option<Self> {
        let meta = &sa.metadata;
        let pairs = |map: Option<&BTreeMap<String, String>>,
                     keep: &dyn Fn(&str) -> bool,
                     strings: &mut Strings| {
            map.into_iter()
                .flatten()
                .filter(|(k, _)| keep(k))
                .map(|(k, v)| (strings.share(k), strings.share(v)))
                .collect::<Box<[_]>>()
        };
        Some(Self {
            name: strings.share(meta.name.as_deref()?),
            namespace: strings.share(meta.namespace.as_deref()?),
            uid: meta.uid.as_deref().and_then(parse_uid),
            resource_version: meta.resource_version.clone().unwrap_or_default().into(),
            labels: pairs(meta.labels.as_ref(), &|_| true, strings),
            annotations: pairs(
                meta.annotations.as_ref(),
                &|k| k.starts_with(KEPT_ANNOTATION_PREFIX),
                strings,
            ),
            annotated: meta.annotations.is_some(),
            pull_secrets: sa.image_pull_secrets.as_ref().map(|list| {
                list.iter()
                    .map(|r| strings.share(&r.name))
                    .collect::<Box<[_]>>()
            }),
        })
    }

    /// The record of `sa` with strings of its own (a fresh read, used once).
    pub fn of(sa: &ServiceAccount) -> Option<Self> {
        Self::new(sa, &mut Strings::default())
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> &str {
        &self.resource_version
    }

    /// One of cheiron's annotations.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations
            .iter()
            .find(|(k, _)| **k == *key)
            .map(|(_, v)| &**v)
    }

    /// True when `metadata.annotations` exists.
    pub fn has_annotations(&self) -> bool {
        self.annotated
    }

    /// The names in `imagePullSecrets`, in order.
    pub fn pull_secrets(&self) -> impl Iterator<Item = &str> {
        self.pull_secrets.iter().flatten().map(|n| &**n)
    }

    /// True when `imagePullSecrets` names `name`.
    pub fn references(&self, name: &str) -> bool {
        self.pull_secrets().any(|n| n == name)
    }

    /// True when the object's annotations opt it out of cheiron.
    pub fn opted_out(&self) -> bool {
        opts_out(|key| self.annotation(key))
    }

    /// What admission reads of this ServiceAccount, as if it were admitted now.
    pub fn interpreted(&self) -> Interpreted {
        let map = |pairs: &[(Arc<str>, Arc<str>)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        Interpreted {
            kind: SubjectKind::ServiceAccount,
            name: self.name.to_string(),
            labels: map(&self.labels),
            annotations: map(&self.annotations),
            existing: self.pull_secrets().map(str::to_owned).collect(),
            images: Vec::new(),
            has_metadata: true,
            // ServiceAccounts are never labelled by a patch.
            has_labels: false,
            has_annotations: self.annotated,
            has_list_parent: true,
            has_list: self.pull_secrets.is_some(),
        }
    }

    /// The reference Events about this ServiceAccount carry.
    pub fn object_ref(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("ServiceAccount".to_owned()),
            name: Some(self.name.to_string()),
            namespace: Some(self.namespace.to_string()),
            uid: self.uid.map(format_uid),
            resource_version: Some(self.resource_version.to_string()),
            ..ObjectReference::default()
        }
    }

    /// True when cheiron's own annotations say it added `name` here.
    pub fn added_by_cheiron(&self, name: &str) -> bool {
        self.annotation(annotation::RECONCILE_WITH)
            .is_some_and(|added| added.split(',').map(str::trim).any(|n| n == name))
    }
}

/// The ServiceAccounts of one namespace.
#[derive(Debug, Default)]
struct InNamespace {
    /// Sorted by name.
    records: Vec<Arc<ServiceAccountRecord>>,
    /// For each pull secret name a record references, how many records reference it: a
    /// reconcile with nothing to add in a namespace finds that here, without reading each
    /// record (at 50 000 ServiceAccounts, reading them all was a quarter of a no-op reconcile).
    referenced: Vec<(Arc<str>, usize)>,
}

impl InNamespace {
    fn insert(&mut self, record: Arc<ServiceAccountRecord>) {
        self.count(&record, true);
        match self.records.binary_search_by(|r| r.name.cmp(&record.name)) {
            Ok(i) => {
                let old = std::mem::replace(&mut self.records[i], record);
                self.count(&old, false);
            }
            Err(i) => self.records.insert(i, record),
        }
    }

    fn remove(&mut self, name: &str) {
        if let Ok(i) = self.records.binary_search_by(|r| (*r.name).cmp(name)) {
            let old = self.records.remove(i);
            self.count(&old, false);
        }
    }

    /// Counts the names `record` references (each once) in or out of `referenced`.
    fn count(&mut self, record: &ServiceAccountRecord, add: bool) {
        let names: Vec<&Arc<str>> = record.pull_secrets.iter().flatten().collect();
        for (i, name) in names.iter().enumerate() {
            if names[..i].iter().any(|n| **n == **name) {
                continue;
            }
            match self.referenced.iter().position(|(n, _)| **n == ***name) {
                Some(at) if add => self.referenced[at].1 += 1,
                Some(at) => {
                    self.referenced[at].1 -= 1;
                    if self.referenced[at].1 == 0 {
                        self.referenced.swap_remove(at);
                    }
                }
                None if add => self.referenced.push(((*name).clone(), 1)),
                None => {}
            }
        }
    }

    /// True when every record references `name`.
    fn all_reference(&self, name: &str) -> bool {
        self.records.is_empty()
            || self
                .referenced
                .iter()
                .any(|(n, count)| **n == *name && *count == self.records.len())
    }
}

type ByNamespace = HashMap<Arc<str>, InNamespace>;

#[derive(Debug, Default)]
struct Inner {
    /// Each namespace's records, sorted by name.
    current: ByNamespace,
    relist: Relist<ByNamespace>,
    strings: Strings,
}

fn insert(map: &mut ByNamespace, record: Arc<ServiceAccountRecord>) {
    map.entry(record.namespace.clone())
        .or_default()
        .insert(record);
}

/// ServiceAccounts by namespace; cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct ServiceAccountCache {
    inner: Arc<RwLock<Inner>>,
}

impl ServiceAccountCache {
    /// Applies one watch event, and returns the record of an object that changed after the
    /// initial list (what triggers route).
    pub fn apply(
        &self,
        event: &watcher::Event<ServiceAccount>,
    ) -> Option<Arc<ServiceAccountRecord>> {
        let mut inner = self.inner.write().ok()?;
        let Inner {
            current,
            relist,
            strings,
        } = &mut *inner;
        match relist.follow(event) {
            Step::Began { .. } => {}
            Step::Listed(sa, set) => {
                insert(set, Arc::new(ServiceAccountRecord::new(sa, strings)?));
            }
            Step::Complete(set) => {
                *current = set;
                current.shrink_to_fit();
                strings.sweep();
            }
            Step::Applied(sa) => {
                let record = Arc::new(ServiceAccountRecord::new(sa, strings)?);
                insert(current, record.clone());
                return Some(record);
            }
            Step::Deleted(sa) => {
                let (ns, name) = (sa.namespace().unwrap_or_default(), sa.name_any());
                if let Some(list) = current.get_mut(ns.as_str()) {
                    list.remove(&name);
                    if list.records.is_empty() {
                        current.remove(ns.as_str());
                    }
                }
                strings.sweep_if_grown();
            }
        }
        None
    }

    /// The ServiceAccounts of `namespace` for which `keep` is true, looked at in place: the
    /// usual answer of a resync, none, allocates nothing.
    pub fn matching(
        &self,
        namespace: &str,
        mut keep: impl FnMut(&ServiceAccountRecord) -> bool,
    ) -> Vec<Arc<ServiceAccountRecord>> {
        let Ok(inner) = self.inner.read() else {
            return Vec::new();
        };
        inner
            .current
            .get(namespace)
            .into_iter()
            .flat_map(|n| &n.records)
            .filter(|sa| keep(sa))
            .cloned()
            .collect()
    }

    /// True when every ServiceAccount of `namespace` references every one of `names` (also
    /// when it has none): then there is nothing to add there.
    pub fn all_reference(&self, namespace: &str, names: &[String]) -> bool {
        let Ok(inner) = self.inner.read() else {
            return false;
        };
        inner
            .current
            .get(namespace)
            .is_none_or(|n| names.iter().all(|name| n.all_reference(name)))
    }

    /// True once the first list has been applied.
    pub fn is_ready(&self) -> bool {
        self.inner.read().is_ok_and(|i| i.relist.is_listed())
    }

    /// ServiceAccounts held.
    pub(super) fn len(&self) -> usize {
        self.inner
            .read()
            .map(|i| i.current.values().map(|n| n.records.len()).sum())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::LocalObjectReference;

    use super::*;

    fn sa(ns: &str, name: &str) -> ServiceAccount {
        let mut sa = ServiceAccount::default();
        sa.metadata.namespace = Some(ns.to_owned());
        sa.metadata.name = Some(name.to_owned());
        sa.metadata.resource_version = Some("12".to_owned());
        sa
    }

    fn names(list: Vec<Arc<ServiceAccountRecord>>) -> Vec<String> {
        list.iter().map(|s| s.name().to_owned()).collect()
    }

    #[test]
    fn a_namespace_lists_its_own_service_accounts_through_lists_and_changes() {
        let cache = ServiceAccountCache::default();
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitApply(sa("a", "default")));
        cache.apply(&watcher::Event::InitApply(sa("b", "default")));
        assert!(!cache.is_ready() && cache.matching("a", |_| true).is_empty());
        cache.apply(&watcher::Event::InitDone);
        let changed = cache.apply(&watcher::Event::Apply(sa("a", "app")));
        assert_eq!(changed.map(|r| r.name().to_owned()).as_deref(), Some("app"));
        assert_eq!(names(cache.matching("a", |_| true)), ["app", "default"]);
        assert_eq!(names(cache.matching("b", |_| true)), ["default"]);
        cache.apply(&watcher::Event::Delete(sa("a", "default")));
        assert_eq!(names(cache.matching("a", |_| true)), ["app"]);
        assert_eq!(cache.len(), 2);
        // A relist replaces everything at its end: what it does not list is gone.
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitApply(sa("b", "default")));
        cache.apply(&watcher::Event::InitDone);
        assert!(cache.matching("a", |_| true).is_empty());
        assert_eq!(names(cache.matching("b", |_| true)), ["default"]);
    }

    fn referencing(ns: &str, name: &str, pull: &[&str]) -> ServiceAccount {
        let mut s = sa(ns, name);
        s.image_pull_secrets = Some(
            pull.iter()
                .map(|n| LocalObjectReference {
                    name: (*n).to_owned(),
                })
                .collect(),
        );
        s
    }

    #[test]
    fn a_namespace_knows_which_names_all_its_service_accounts_reference() {
        let cache = ServiceAccountCache::default();
        let names = |list: &[&str]| list.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitApply(referencing(
            "a",
            "default",
            &["p", "p"],
        )));
        cache.apply(&watcher::Event::InitApply(referencing(
            "a",
            "app",
            &["q", "p"],
        )));
        cache.apply(&watcher::Event::InitDone);
        assert!(cache.all_reference("a", &names(&["p"])));
        assert!(!cache.all_reference("a", &names(&["p", "q"])));
        assert!(
            cache.all_reference("empty", &names(&["p"])),
            "none to patch"
        );
        // A change that drops a name, then one that adds it back.
        cache.apply(&watcher::Event::Apply(referencing("a", "app", &["q"])));
        assert!(!cache.all_reference("a", &names(&["p"])));
        cache.apply(&watcher::Event::Apply(referencing(
            "a",
            "default",
            &["p", "q"],
        )));
        assert!(cache.all_reference("a", &names(&["q"])));
        cache.apply(&watcher::Event::Apply(referencing("a", "app", &["p", "q"])));
        assert!(cache.all_reference("a", &names(&["p", "q"])));
        // A new ServiceAccount without them, and its deletion.
        cache.apply(&watcher::Event::Apply(sa("a", "new")));
        assert!(!cache.all_reference("a", &names(&["p"])));
        cache.apply(&watcher::Event::Delete(sa("a", "new")));
        assert!(cache.all_reference("a", &names(&["p", "q"])));
        if let Ok(inner) = cache.inner.read()
            && let Some(a) = inner.current.get("a")
        {
            let counts: BTreeMap<&str, usize> =
                a.referenced.iter().map(|(n, c)| (&**n, *c)).collect();
            assert_eq!(counts, BTreeMap::from([("p", 2), ("q", 2)]));
        }
    }

    #[test]
    fn a_record_keeps_what_patches_are_computed_from_and_nothing_else()
    -> Result<(), Box<dyn std::error::Error>> {
        let mut s = sa("a", "default");
        s.metadata.uid = Some("0a1b2c3d-4e5f-6789-abcd-ef0123456789".to_owned());
        s.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
        s.metadata.annotations = Some(
            [
                (
                    "kubectl.kubernetes.io/last-applied-configuration".to_owned(),
                    "{\"a\":\"big\"}".to_owned(),
                ),
                (annotation::RECONCILE_WITH.to_owned(), "pull".to_owned()),
            ]
            .into(),
        );
        s.image_pull_secrets = Some(vec![LocalObjectReference {
            name: "pull".to_owned(),
        }]);
        s.secrets = Some(vec![Default::default()]);
        let record = ServiceAccountRecord::of(&s).ok_or("no record")?;
        let seen = record.interpreted();
        assert_eq!(seen.name, "default");
        assert_eq!(seen.labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(
            seen.annotations.keys().collect::<Vec<_>>(),
            [annotation::RECONCILE_WITH],
            "other annotations are not kept"
        );
        assert!(seen.has_annotations && seen.has_list && seen.has_metadata);
        assert_eq!(seen.existing, ["pull"]);
        assert!(record.added_by_cheiron("pull") && !record.added_by_cheiron("other"));
        let reference = record.object_ref();
        assert_eq!(
            reference.uid.as_deref(),
            Some("0a1b2c3d-4e5f-6789-abcd-ef0123456789")
        );
        assert_eq!(reference.resource_version.as_deref(), Some("12"));
        // Without annotations or a list, a patch must create them.
        let bare = ServiceAccountRecord::of(&sa("a", "b")).ok_or("no record")?;
        let seen = bare.interpreted();
        assert!(!seen.has_annotations && !seen.has_list);
        Ok(())
    }

    #[test]
    fn strings_are_shared_and_swept_when_nobody_holds_them() {
        let cache = ServiceAccountCache::default();
        cache.apply(&watcher::Event::Init);
        for i in 0..100 {
            let mut s = sa(&format!("ns-{i}"), "default");
            s.image_pull_secrets = Some(vec![LocalObjectReference {
                name: "pull".to_owned(),
            }]);
            cache.apply(&watcher::Event::InitApply(s));
        }
        cache.apply(&watcher::Event::InitDone);
        let a = cache.matching("ns-1", |_| true);
        let b = cache.matching("ns-2", |_| true);
        assert!(Arc::ptr_eq(&a[0].name, &b[0].name), "one `default`");
        if let Ok(inner) = cache.inner.read() {
            assert_eq!(inner.strings.len(), 100 + 2);
        }
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitDone);
        drop((a, b));
        if let Ok(mut inner) = cache.inner.write() {
            inner.strings.sweep();
            assert_eq!(inner.strings.len(), 0);
        }
    }
}
