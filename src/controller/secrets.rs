//! cheiron's own Secrets as the controller keeps them: the fields a plan reads
//! ([`SecretMetadata`]), each kept once, instead of a reflector store of their metadata. A
//! Secret's `ObjectMeta` with its label and annotation maps cost about 2.4 KiB in the store, and
//! a manager over 10 000 namespaces writes 10 000 of them; a [`SecretRecord`] costs a few
//! hundred bytes, its namespace, name, label keys and values shared with the others.
//!
//! Only Secrets a manager owns are kept ([`is_managed`]): the watch's label selector admits
//! anything labelled like cheiron's, and a look-alike costs nothing here.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, RwLock},
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ManagedFieldsEntry, ObjectMeta, OwnerReference,
};
use kube::runtime::watcher;

use super::{
    interned::Strings,
    plan::{SecretMeta, SecretMetadata, is_managed, keep_data_owners, labelled_owner},
};
use crate::{
    api::{annotation, label},
    policy::{ManagerId, ManagerKind},
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
                        .strip_prefix(crate::api::GROUP)
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
            data_written_by_others: SecretMetadata::data_written_by_others(&record),
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

#[derive(Debug, Default)]
struct Inner {
    current: Indexed,
    /// The Secrets of a (re)list in progress, swapped in at its end.
    relisting: Option<Indexed>,
    strings: Strings,
    ready: bool,
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
            relisting,
            strings,
            ready,
        } = &mut *inner;
        match event {
            watcher::Event::Init => *relisting = Some(Indexed::default()),
            watcher::Event::InitApply(s) => {
                if is_managed(s)
                    && let Some(record) = SecretRecord::new(s, strings)
                {
                    relisting
                        .get_or_insert_with(Indexed::default)
                        .insert(Arc::new(record));
                }
            }
            watcher::Event::InitDone => {
                *current = relisting.take().unwrap_or_default();
                current.by_name.shrink_to_fit();
                current.by_owner.shrink_to_fit();
                strings.sweep();
                *ready = true;
            }
            watcher::Event::Apply(s) | watcher::Event::Delete(s) => {
                let record = SecretRecord::new(s, strings)?;
                let kept = matches!(event, watcher::Event::Apply(_)) && is_managed(s);
                let was = if kept {
                    current.insert(Arc::new(record))
                } else {
                    current.remove(&record.key())
                };
                strings.sweep_if_grown();
                return (kept || was || is_managed(s)).then(|| s.clone());
            }
        }
        None
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
    pub fn len(&self) -> usize {
        self.inner.read().map(|i| i.current.len()).unwrap_or(0)
    }

    /// True once the first list has been applied.
    pub fn is_ready(&self) -> bool {
        self.inner.read().is_ok_and(|i| i.ready)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;

    use super::*;
    use crate::controller::plan::belongs_to;

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
