//! cheiron's own Secrets as the controller keeps them: the fields a plan reads
//! ([`SecretMetadata`]), each kept once, instead of a reflector store of their metadata. A
//! Secret's `ObjectMeta` with its label and annotation maps cost about 2.4 KiB in the store, and
//! a manager over 10 000 namespaces writes 10 000 of them; a [`SecretRecord`] costs a few
//! hundred bytes, its namespace, name, label keys and values shared with the others.
//!
//! Only Secrets a manager owns are kept ([`is_managed`]): the watch's label selector admits
//! anything labelled like cheiron's, and a look-alike costs nothing here.
//!
//! The cache holds no data, so it also remembers, in 8 bytes per Secret, the `resourceVersion`
//! at which cheiron last knew the data to be its own ([`SecretCache::checked`]): the version its
//! own write returned, or the one at which it read the data and found it as wanted. Any other
//! version (a `kubectl edit`, a `replace`, a patch or an apply, whoever's field manager it names)
//! means the data may have changed, and the plan has it read again (see `plan`).

use std::{
    collections::{HashMap, HashSet},
    hash::{Hash, Hasher},
    num::NonZeroU64,
    sync::{Arc, RwLock},
};

use cheiron_core::policy::{ManagerId, ManagerKind};
use cheiron_runtime::{
    api::{annotation, label},
    runtime::{Relist, Step},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ManagedFieldsEntry, ObjectMeta, OwnerReference,
};
use kube::runtime::watcher;

use super::{
    interned::Strings,
    plan::{
        SecretMeta, SecretMetadata, is_managed, keep_data_owners, labelled_owner, written_by_others,
    },
};

/// An owner reference, its strings shared.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owner {
    api_version: Arc<str>,
    kind: Arc<str>,
    name: Arc<str>,
    uid: Arc<str>,
    controller: Option<bool>,
    block_owner_deletion: Option<bool>,
    /// `api_version` is of cheiron's group: a manager (worked out once).
    cheiron: bool,
}

/// What the controller keeps of one of cheiron's Secrets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretRecord {
    namespace: Arc<str>,
    name: Arc<str>,
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    labels: Box<[(Arc<str>, Arc<str>)]>,
    annotations: Box<[(Arc<str>, Box<str>)]>,
    owners: Box<[Owner]>,
    /// The field managers that have written its data (`None`: an entry naming none).
    data_owners: Box<[Option<Arc<str>>]>,
    /// The manager its labels name, worked out once: kind, name, namespace (the name and
    /// namespace are the label values' shared strings).
    owner: Option<(ManagerKind, Arc<str>, Option<Arc<str>>)>,
    /// What a plan asks of every Secret it reads, worked out once and kept in the record
    /// itself: a plan over 10 000 namespaces spent most of its time waiting on memory while
    /// it followed each record's boxes of owners, annotations and field managers.
    verdicts: Verdicts,
    /// The [`stamp`] of the `resourceVersion` at which cheiron last knew its data to be its own
    /// (written by it, or read and found as wanted); carried from one record of the Secret to
    /// the next, so it stops matching as soon as anyone changes the Secret.
    checked: Option<NonZeroU64>,
}

/// A `resourceVersion` in 8 bytes. Versions are opaque strings the apiserver picks (no client
/// chooses one), so a 64-bit hash of two of one Secret's versions colliding is not a concern.
fn stamp(resource_version: &str) -> NonZeroU64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    resource_version.hash(&mut hasher);
    NonZeroU64::new(hasher.finish()).unwrap_or(NonZeroU64::MIN)
}

/// See [`SecretRecord::verdicts`].
#[derive(Clone, Debug, PartialEq, Eq)]
struct Verdicts {
    /// The uids of its owner references to cheiron managers (shared strings: the same for
    /// every Secret of a manager).
    cheiron_owner: CheironOwners,
    /// Its content-hash annotation (a shared string: the same for every copy of a content).
    content_hash: Option<Arc<str>>,
    /// Someone other than cheiron has written its data.
    data_written_by_others: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum CheironOwners {
    None,
    One(Arc<str>),
    Several,
}

impl SecretRecord {
    /// The record of `secret`'s metadata, strings shared through `strings`; `None` without a
    /// namespace or name.
    pub fn new(secret: &SecretMeta, strings: &mut Strings) -> Option<Self> {
        let mut meta = secret.metadata.clone();
        keep_data_owners(&mut meta);
        let ObjectMeta {
            namespace,
            name,
            uid,
            resource_version,
            labels,
            annotations,
            owner_references,
            managed_fields,
            ..
        } = meta;
        let mut record = Self {
            namespace: strings.share(&namespace?),
            name: strings.share(&name?),
            uid: uid.map(Into::into),
            resource_version: resource_version.map(Into::into),
            labels: labels
                .into_iter()
                .flatten()
                .map(|(k, v)| (strings.share(&k), strings.share(&v)))
                .collect(),
            annotations: annotations
                .into_iter()
                .flatten()
                .map(|(k, v)| (strings.share(&k), v.into()))
                .collect(),
            owners: owner_references
                .into_iter()
                .flatten()
                .map(|o| Owner {
                    cheiron: o
                        .api_version
                        .strip_prefix(cheiron_runtime::api::GROUP)
                        .is_some_and(|version| version.starts_with('/')),
                    api_version: strings.share(&o.api_version),
                    kind: strings.share(&o.kind),
                    name: strings.share(&o.name),
                    uid: strings.share(&o.uid),
                    controller: o.controller,
                    block_owner_deletion: o.block_owner_deletion,
                })
                .collect(),
            data_owners: managed_fields
                .into_iter()
                .flatten()
                .map(|entry| entry.manager.map(|m| strings.share(&m)))
                .collect(),
            owner: None,
            verdicts: Verdicts {
                cheiron_owner: CheironOwners::None,
                content_hash: None,
                data_written_by_others: false,
            },
            checked: None,
        };
        let mut cheiron_owners = record.owners.iter().filter(|o| o.cheiron);
        record.verdicts = Verdicts {
            cheiron_owner: match (cheiron_owners.next(), cheiron_owners.next()) {
                (None, _) => CheironOwners::None,
                (Some(one), None) => CheironOwners::One(one.uid.clone()),
                (Some(_), Some(_)) => CheironOwners::Several,
            },
            content_hash: SecretMetadata::annotation(&record, annotation::CONTENT_HASH)
                .map(|hash| strings.share(hash)),
            // From the field managers themselves: `SecretMetadata::data_written_by_others` of
            // a record answers from its verdicts, which are being worked out here.
            data_written_by_others: written_by_others(
                record.data_owners.iter().map(|m| m.as_deref()),
            ),
        };
        record.owner = labelled_owner(&record).map(|id| {
            let shared = |key: &str| {
                record
                    .labels
                    .iter()
                    .find(|(k, _)| **k == *key)
                    .map(|(_, v)| v.clone())
            };
            (
                id.kind,
                shared(label::MANAGER_NAME).unwrap_or_else(|| Arc::from(id.name.as_str())),
                shared(label::MANAGER_NAMESPACE),
            )
        });
        Some(record)
    }

    /// `(namespace, name)`.
    pub fn key(&self) -> (Arc<str>, Arc<str>) {
        (self.namespace.clone(), self.name.clone())
    }
}

impl SecretMetadata for SecretRecord {
    fn object_namespace(&self) -> Option<&str> {
        Some(&self.namespace)
    }
    fn object_name(&self) -> Option<&str> {
        Some(&self.name)
    }
    fn object_uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }
    fn object_resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| **k == *key)
            .map(|(_, v)| &**v)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations
            .iter()
            .find(|(k, _)| **k == *key)
            .map(|(_, v)| &**v)
    }
    fn cheiron_owners(&self) -> impl Iterator<Item = &str> {
        self.owners.iter().filter(|o| o.cheiron).map(|o| &*o.uid)
    }
    fn data_owners(&self) -> impl Iterator<Item = Option<&str>> {
        self.data_owners.iter().map(|m| m.as_deref())
    }
    fn names_a_manager(&self) -> bool {
        self.owner.is_some()
    }
    fn has_cheiron_owner(&self) -> bool {
        self.verdicts.cheiron_owner != CheironOwners::None
    }
    fn owned_by(&self, uid: &str) -> bool {
        match &self.verdicts.cheiron_owner {
            CheironOwners::None => false,
            CheironOwners::One(owner) => **owner == *uid,
            CheironOwners::Several => self.cheiron_owners().any(|owner| owner == uid),
        }
    }
    fn owned_only_by(&self, uid: &str) -> bool {
        matches!(&self.verdicts.cheiron_owner, CheironOwners::One(owner) if **owner == *uid)
    }
    fn content_hash_is(&self, hash: &str) -> bool {
        self.verdicts.content_hash.as_deref() == Some(hash)
    }
    fn data_written_by_others(&self) -> bool {
        self.verdicts.data_written_by_others
    }
    fn data_checked(&self) -> bool {
        self.checked.is_some() && self.checked == self.resource_version.as_deref().map(stamp)
    }
    fn labelled_for(&self, manager: &ManagerId) -> bool {
        self.owner.as_ref().is_some_and(|(kind, name, namespace)| {
            *kind == manager.kind
                && **name == *manager.name
                && namespace.as_deref() == manager.namespace.as_deref()
        })
    }
    fn to_meta(&self) -> ObjectMeta {
        let map = |pairs: &mut dyn Iterator<Item = (String, String)>| Some(pairs.collect());
        ObjectMeta {
            namespace: Some(self.namespace.to_string()),
            name: Some(self.name.to_string()),
            uid: self.uid.as_deref().map(str::to_owned),
            resource_version: self.resource_version.as_deref().map(str::to_owned),
            labels: map(&mut self
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))),
            annotations: map(&mut self
                .annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))),
            owner_references: Some(
                self.owners
                    .iter()
                    .map(|o| OwnerReference {
                        api_version: o.api_version.to_string(),
                        kind: o.kind.to_string(),
                        name: o.name.to_string(),
                        uid: o.uid.to_string(),
                        controller: o.controller,
                        block_owner_deletion: o.block_owner_deletion,
                    })
                    .collect(),
            ),
            managed_fields: Some(
                self.data_owners
                    .iter()
                    .map(|m| ManagedFieldsEntry {
                        manager: m.as_deref().map(str::to_owned),
                        ..ManagedFieldsEntry::default()
                    })
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }
}

/// A Secret's `(namespace, name)`.
type Key = (Arc<str>, Arc<str>);

/// The Secrets, by name then namespace, and which each manager's labels name: a plan reads
/// the Secrets of its own names and of its manager, not the whole cache.
#[derive(Debug, Default)]
struct Indexed {
    by_name: HashMap<Arc<str>, HashMap<Arc<str>, Arc<SecretRecord>>>,
    by_owner: HashMap<ManagerId, HashSet<Key>>,
}

impl Indexed {
    /// Adds or replaces a record; true when one was there.
    fn insert(&mut self, record: Arc<SecretRecord>) -> bool {
        let (namespace, name) = record.key();
        let owner = labelled_owner(&*record);
        let old = self
            .by_name
            .entry(name.clone())
            .or_default()
            .insert(namespace.clone(), record);
        if let Some(old) = &old {
            self.unindex_owner(old);
        }
        if let Some(owner) = owner {
            self.by_owner
                .entry(owner)
                .or_default()
                .insert((namespace, name));
        }
        old.is_some()
    }

    /// Removes the record at `key`; true when one was there.
    fn remove(&mut self, (namespace, name): &Key) -> bool {
        let Some(by_namespace) = self.by_name.get_mut(name) else {
            return false;
        };
        let old = by_namespace.remove(namespace);
        if by_namespace.is_empty() {
            self.by_name.remove(name);
        }
        if let Some(old) = &old {
            self.unindex_owner(old);
        }
        old.is_some()
    }

    fn unindex_owner(&mut self, record: &SecretRecord) {
        if let Some(owner) = labelled_owner(record)
            && let Some(keys) = self.by_owner.get_mut(&owner)
        {
            keys.remove(&record.key());
            if keys.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
    }

    fn get(&self, namespace: &str, name: &str) -> Option<&Arc<SecretRecord>> {
        self.by_name.get(name)?.get(namespace)
    }

    fn len(&self) -> usize {
        self.by_name.values().map(HashMap::len).sum()
    }
}

impl Indexed {
    /// The [`SecretRecord::checked`] stamp of the Secret at `key`, if one is held.
    fn checked(&self, (namespace, name): &Key) -> Option<NonZeroU64> {
        self.get(namespace, name).and_then(|r| r.checked)
    }

    /// Sets the checked stamp of the Secret at `namespace/name`; false when none is held.
    fn set_checked(&mut self, namespace: &str, name: &str, checked: NonZeroU64) -> bool {
        let Some(record) = self.get(namespace, name) else {
            return false;
        };
        if record.checked != Some(checked) {
            let mut next = SecretRecord::clone(record);
            next.checked = Some(checked);
            self.insert(Arc::new(next));
        }
        true
    }
}

#[derive(Debug, Default)]
struct Inner {
    current: Indexed,
    relist: Relist<Indexed>,
    /// Checked stamps of Secrets cheiron wrote before the watch brought them (a create's
    /// answer comes before its watch event), taken by their first record. One entry per
    /// create in flight; what a relist leaves unclaimed is dropped (costing one read later).
    pending: HashMap<Key, NonZeroU64>,
    strings: Strings,
}

/// cheiron's Secrets; cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct SecretCache {
    inner: Arc<RwLock<Inner>>,
}

impl SecretCache {
    /// Applies one watch event. A Secret no manager owns is not kept (and one that stops being
    /// owned is dropped). Returns the Secret of a change after the initial list that concerns
    /// the cache (one it keeps, or kept until now), for the triggers to route; a look-alike's
    /// changes route nothing.
    pub fn apply(&self, event: &watcher::Event<SecretMeta>) -> Option<SecretMeta> {
        let mut inner = self.inner.write().ok()?;
        let Inner {
            current,
            relist,
            pending,
            strings,
        } = &mut *inner;
        match relist.follow(event) {
            Step::Began { .. } => {}
            Step::Listed(s, set) => {
                if is_managed(s)
                    && let Some(mut record) = SecretRecord::new(s, strings)
                {
                    let key = record.key();
                    record.checked = pending.remove(&key).or_else(|| current.checked(&key));
                    set.insert(Arc::new(record));
                }
            }
            Step::Complete(set) => {
                *current = set;
                current.by_name.shrink_to_fit();
                current.by_owner.shrink_to_fit();
                pending.clear();
                pending.shrink_to_fit();
                strings.sweep();
            }
            Step::Applied(s) | Step::Deleted(s) => {
                let mut record = SecretRecord::new(s, strings)?;
                let key = record.key();
                let checked = pending.remove(&key).or_else(|| current.checked(&key));
                let kept = matches!(event, watcher::Event::Apply(_)) && is_managed(s);
                let was = if kept {
                    record.checked = checked;
                    current.insert(Arc::new(record))
                } else {
                    current.remove(&key)
                };
                strings.sweep_if_grown();
                return (kept || was || is_managed(s)).then(|| s.clone());
            }
        }
        None
    }

    /// Remembers that the data of `namespace/name` at `resource_version` is cheiron's: the
    /// version its own write returned, or the one at which it read the data and found it as
    /// wanted. Until the Secret changes again, a plan takes its content hash at its word.
    pub fn checked(&self, namespace: &str, name: &str, resource_version: &str) {
        let Ok(mut inner) = self.inner.write() else {
            return;
        };
        let checked = stamp(resource_version);
        let Inner {
            current,
            relist,
            pending,
            strings,
        } = &mut *inner;
        let held = current.set_checked(namespace, name, checked);
        let relisted = relist
            .gathering_mut()
            .is_some_and(|r| r.set_checked(namespace, name, checked));
        if !held && !relisted {
            pending.insert((strings.share(namespace), strings.share(name)), checked);
        }
    }

    /// The Secrets a plan of `manager` reads: those named one of `names` (its own, and
    /// another manager's holding a name it wants), and those whose labels name `manager`
    /// (its own under a name it no longer uses).
    pub fn relevant(&self, manager: &ManagerId, names: &[String]) -> Vec<Arc<SecretRecord>> {
        let Ok(inner) = self.inner.read() else {
            return Vec::new();
        };
        let current = &inner.current;
        let mut out: Vec<Arc<SecretRecord>> = names
            .iter()
            .filter_map(|n| current.by_name.get(n.as_str()))
            .flat_map(HashMap::values)
            .cloned()
            .collect();
        let owned = current.by_owner.get(manager).into_iter().flatten();
        out.extend(
            owned
                .filter(|(_, name)| !names.iter().any(|n| **n == **name))
                .filter_map(|(namespace, name)| current.get(namespace, name))
                .cloned(),
        );
        out
    }

    /// Every Secret held.
    pub fn all(&self) -> Vec<Arc<SecretRecord>> {
        self.inner
            .read()
            .map(|i| {
                i.current
                    .by_name
                    .values()
                    .flat_map(HashMap::values)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Secrets held.
    pub(super) fn len(&self) -> usize {
        self.inner.read().map(|i| i.current.len()).unwrap_or(0)
    }

    /// True once the first list has been applied.
    pub fn is_ready(&self) -> bool {
        self.inner.read().is_ok_and(|i| i.relist.is_listed())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;

    use super::*;
    use crate::plan::belongs_to;

    fn meta(name: &str, owned: bool) -> SecretMeta {
        let metadata = ObjectMeta {
            namespace: Some("team".to_owned()),
            name: Some(name.to_owned()),
            uid: Some("s-uid".to_owned()),
            resource_version: Some("7".to_owned()),
            labels: Some(BTreeMap::from([
                (
                    label::MANAGED_BY.to_owned(),
                    label::MANAGED_BY_VALUE.to_owned(),
                ),
                (
                    label::MANAGER_KIND.to_owned(),
                    "ClusterImagePullSecretManager".to_owned(),
                ),
                (label::MANAGER_NAME.to_owned(), "company".to_owned()),
                ("team".to_owned(), "theirs".to_owned()),
            ])),
            annotations: Some(BTreeMap::from([
                (annotation::CONTENT_HASH.to_owned(), "abc".to_owned()),
                ("note".to_owned(), "theirs".to_owned()),
            ])),
            owner_references: owned.then(|| {
                vec![OwnerReference {
                    api_version: "cheiron.anny.co/v1alpha1".to_owned(),
                    kind: "ClusterImagePullSecretManager".to_owned(),
                    name: "company".to_owned(),
                    uid: "m-uid".to_owned(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]
            }),
            managed_fields: Some(vec![
                ManagedFieldsEntry {
                    manager: Some("cheiron".to_owned()),
                    fields_v1: Some(FieldsV1(serde_json::json!({"f:data": {}}))),
                    ..ManagedFieldsEntry::default()
                },
                ManagedFieldsEntry {
                    manager: Some("kubectl".to_owned()),
                    fields_v1: Some(FieldsV1(serde_json::json!({"f:metadata": {}}))),
                    ..ManagedFieldsEntry::default()
                },
            ]),
            ..ObjectMeta::default()
        };
        SecretMeta {
            metadata,
            ..SecretMeta::default()
        }
    }

    #[test]
    fn a_record_answers_the_plan_as_the_metadata_does() -> Result<(), &'static str> {
        let whole = meta("pull", true);
        let record = SecretRecord::new(&whole, &mut Strings::default()).ok_or("no record")?;
        let mut trimmed = whole.metadata.clone();
        keep_data_owners(&mut trimmed);
        for key in [label::MANAGER_NAME, "team", "missing"] {
            assert_eq!(record.label(key), trimmed.label(key), "{key}");
        }
        for key in [annotation::CONTENT_HASH, "note", "missing"] {
            assert_eq!(record.annotation(key), trimmed.annotation(key), "{key}");
        }
        assert_eq!(record.cheiron_owners().collect::<Vec<_>>(), ["m-uid"]);
        assert_eq!(
            record.data_owners().collect::<Vec<_>>(),
            [Some("cheiron")],
            "only who wrote the data"
        );
        assert_eq!(
            record.to_meta(),
            trimmed,
            "a replacement keeps what others put there"
        );
        assert!(is_managed(&record));
        assert_eq!(labelled_owner(&record), labelled_owner(&trimmed));
        for id in [
            labelled_owner(&trimmed).ok_or("no owner")?,
            ManagerId {
                name: "other".to_owned(),
                ..labelled_owner(&trimmed).ok_or("no owner")?
            },
            ManagerId {
                namespace: Some("team".to_owned()),
                ..labelled_owner(&trimmed).ok_or("no owner")?
            },
        ] {
            assert_eq!(record.labelled_for(&id), trimmed.labelled_for(&id), "{id}");
        }
        assert_eq!(record.names_a_manager(), trimmed.names_a_manager());
        let company = labelled_owner(&record).ok_or("no owner")?;
        assert!(belongs_to(&record, &company, "m-uid") && !belongs_to(&record, &company, "x"));
        Ok(())
    }

    #[test]
    fn only_secrets_a_manager_owns_are_kept_and_every_change_is_routed() {
        let cache = SecretCache::default();
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitApply(meta("pull", true)));
        cache.apply(&watcher::Event::InitApply(meta("look-alike", false)));
        cache.apply(&watcher::Event::InitDone);
        assert!(cache.is_ready());
        let names = |c: &SecretCache| {
            let mut n: Vec<String> = c.all().iter().map(|r| r.name.to_string()).collect();
            n.sort();
            n
        };
        assert_eq!(names(&cache), ["pull"]);
        // A look-alike's changes route nothing; one that lost its owner reference goes, and
        // that is routed.
        assert!(
            cache
                .apply(&watcher::Event::Apply(meta("look-alike", false)))
                .is_none()
        );
        assert!(
            cache
                .apply(&watcher::Event::Apply(meta("pull", false)))
                .is_some()
        );
        assert!(names(&cache).is_empty());
        assert!(
            cache
                .apply(&watcher::Event::Apply(meta("other", true)))
                .is_some()
        );
        assert!(
            cache
                .apply(&watcher::Event::Delete(meta("other", true)))
                .is_some()
        );
        assert!(cache.all().is_empty());
    }

    /// `meta(name, true)` at `resource_version`, its data written by `data_managers`.
    fn at(name: &str, resource_version: &str, data_managers: &[&str]) -> SecretMeta {
        let mut s = meta(name, true);
        s.metadata.resource_version = Some(resource_version.to_owned());
        s.metadata.managed_fields = Some(
            data_managers
                .iter()
                .map(|m| ManagedFieldsEntry {
                    manager: Some((*m).to_owned()),
                    fields_v1: Some(FieldsV1(
                        serde_json::json!({"f:data": {"f:.dockerconfigjson": {}}}),
                    )),
                    ..ManagedFieldsEntry::default()
                })
                .collect(),
        );
        s
    }

    fn record(cache: &SecretCache, name: &str) -> Result<Arc<SecretRecord>, &'static str> {
        cache
            .all()
            .into_iter()
            .find(|r| &*r.name == name)
            .ok_or("not kept")
    }

    #[test]
    fn a_record_says_when_another_field_manager_wrote_the_data() -> Result<(), &'static str> {
        for (managers, others) in [
            (&["cheiron"][..], false),
            (&["cheiron", "kubectl-edit"][..], true),
            (&["kubectl-replace"][..], true),
            (&["gitops-tool", "cheiron"][..], true),
        ] {
            let whole = at("pull", "7", managers);
            let record = SecretRecord::new(&whole, &mut Strings::default()).ok_or("no record")?;
            let mut trimmed = whole.metadata.clone();
            keep_data_owners(&mut trimmed);
            assert_eq!(record.data_written_by_others(), others, "{managers:?}");
            assert_eq!(
                record.data_written_by_others(),
                trimmed.data_written_by_others(),
                "{managers:?}: as the metadata says"
            );
        }
        Ok(())
    }

    #[test]
    fn only_a_version_cheiron_wrote_or_read_counts_as_checked() -> Result<(), &'static str> {
        let cache = SecretCache::default();
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitApply(at("pull", "7", &["cheiron"])));
        cache.apply(&watcher::Event::InitDone);
        assert!(
            !record(&cache, "pull")?.data_checked(),
            "listed at start: not known"
        );
        cache.checked("team", "pull", "7");
        assert!(
            record(&cache, "pull")?.data_checked(),
            "read and found as wanted"
        );
        // Anyone's change, under any field manager's name, cheiron's included.
        cache.apply(&watcher::Event::Apply(at("pull", "8", &["cheiron"])));
        assert!(
            !record(&cache, "pull")?.data_checked(),
            "a version nobody checked"
        );
        // A write's answer before its watch event: the event's record is checked.
        cache.checked("team", "pull", "9");
        assert!(!record(&cache, "pull")?.data_checked(), "still at 8");
        cache.apply(&watcher::Event::Apply(at("pull", "9", &["cheiron"])));
        assert!(record(&cache, "pull")?.data_checked());
        // A create's answer before the watch brought the Secret at all.
        cache.checked("team", "new", "3");
        cache.apply(&watcher::Event::Apply(at("new", "3", &["cheiron"])));
        assert!(record(&cache, "new")?.data_checked());
        // A relist keeps what was checked, at the same version only.
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitApply(at("pull", "9", &["cheiron"])));
        cache.apply(&watcher::Event::InitApply(at("new", "4", &["cheiron"])));
        cache.apply(&watcher::Event::InitDone);
        assert!(record(&cache, "pull")?.data_checked());
        assert!(
            !record(&cache, "new")?.data_checked(),
            "changed while unwatched"
        );
        // A Secret deleted and made again is not the one checked.
        cache.apply(&watcher::Event::Delete(at("pull", "9", &["cheiron"])));
        cache.apply(&watcher::Event::Apply(at("pull", "11", &["cheiron"])));
        assert!(!record(&cache, "pull")?.data_checked());
        Ok(())
    }

    #[test]
    fn a_plan_reads_the_secrets_of_its_names_and_of_its_manager() {
        let cache = SecretCache::default();
        let named = |name: &str, manager: &str| {
            let mut s = meta(name, true);
            if let Some(labels) = s.metadata.labels.as_mut() {
                labels.insert(label::MANAGER_NAME.to_owned(), manager.to_owned());
            }
            s
        };
        for s in [
            named("pull", "company"),
            named("old-name", "company"),
            named("theirs", "other"),
            named("pull-too", "other"),
        ] {
            cache.apply(&watcher::Event::Apply(s));
        }
        assert_eq!(cache.len(), 4);
        let company = ManagerId {
            kind: ManagerKind::Cluster,
            namespace: None,
            name: "company".to_owned(),
        };
        let mut read: Vec<String> = cache
            .relevant(&company, &["pull".to_owned(), "pull-too".to_owned()])
            .iter()
            .map(|r| r.name.to_string())
            .collect();
        read.sort();
        assert_eq!(read, ["old-name", "pull", "pull-too"], "not `theirs`");
        cache.apply(&watcher::Event::Delete(named("old-name", "company")));
        assert_eq!(cache.relevant(&company, &[]).len(), 1, "its own `pull`");
    }
}
