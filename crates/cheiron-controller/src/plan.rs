//! The writes one reconcile of one manager needs, computed from plain values: which namespaces
//! are targets, which Secret names it wins (the oldest claimant wins), what to create, update
//! or delete. Only Secrets cheiron wrote (its labels and an ownerReference to a manager, see
//! [`is_managed`]) are ever updated, and only a manager's own (see [`belongs_to`]) deleted; a
//! name taken by anything else is discovered when the create fails.
//!
//! The plan reads cheiron's Secrets as metadata only (the cache holds no Secret data). A copy
//! whose content-hash annotation, labels and owner are as wanted is current when cheiron knows
//! its data at its present `resourceVersion` (it wrote that version, or read it and found it as
//! wanted: [`SecretMetadata::data_checked`]). Any other version means someone changed the
//! Secret, whatever verb and field manager they used, and may have changed the data while
//! keeping the annotation: when the `managedFields` show another field manager owning `data`,
//! the copy is written again at once; otherwise it is read ([`Plan::checks`]) and written again
//! only if its data is not what is wanted.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};

use cheiron_core::{
    content::{
        desired::DesiredSecret,
        dockerconfig::{DOCKER_CONFIG_JSON, DOCKER_CONFIG_JSON_KEY},
    },
    policy::{Manager, ManagerId, ManagerKind, NamespaceMeta, namespace_opted_out},
};
use cheiron_runtime::api::{GROUP, annotation, label};
use k8s_openapi::{
    ByteString,
    api::core::v1::Secret,
    apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, OwnerReference},
};
use kube::core::PartialObjectMeta;

/// The labels on every Secret cheiron writes for `manager`.
pub fn owner_labels(manager: &ManagerId) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (
            label::MANAGED_BY.to_owned(),
            label::MANAGED_BY_VALUE.to_owned(),
        ),
        (
            label::MANAGER_KIND.to_owned(),
            manager.kind.as_str().to_owned(),
        ),
        (label::MANAGER_NAME.to_owned(), manager.name.clone()),
    ]);
    if let Some(ns) = &manager.namespace {
        labels.insert(label::MANAGER_NAMESPACE.to_owned(), ns.clone());
    }
    labels
}

pub use cheiron_runtime::api::FIELD_MANAGER;

/// A Secret's metadata without its data, as a metadata watch or GET returns it.
pub type SecretMeta = PartialObjectMeta<Secret>;

/// What a plan reads of one of cheiron's Secrets. The controller's cache keeps
/// [`super::secrets::SecretRecord`]s; a fresh read, and the tests, have whole metadata.
pub trait SecretMetadata {
    /// `metadata.namespace`.
    fn object_namespace(&self) -> Option<&str>;
    /// `metadata.name`.
    fn object_name(&self) -> Option<&str>;
    /// `metadata.uid`.
    fn object_uid(&self) -> Option<&str>;
    /// `metadata.resourceVersion`.
    fn object_resource_version(&self) -> Option<&str>;
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;
    /// The value of annotation `key`.
    fn annotation(&self, key: &str) -> Option<&str>;
    /// The `uid`s of its owner references to a cheiron manager.
    fn cheiron_owners(&self) -> impl Iterator<Item = &str>;
    /// The field managers that have written its `data` (see [`keep_data_owners`]); `None` for
    /// an entry that names none.
    fn data_owners(&self) -> impl Iterator<Item = Option<&str>>;
    /// The whole metadata, for a replacement that keeps what others put there.
    fn to_meta(&self) -> ObjectMeta;

    /// `labelled_owner(self).is_some()`, without building the owner (a plan asks this of
    /// every Secret it reads).
    fn names_a_manager(&self) -> bool {
        self.label(label::MANAGED_BY) == Some(label::MANAGED_BY_VALUE)
            && self.label(label::MANAGER_KIND).is_some_and(|kind| {
                kind == ManagerKind::Namespaced.as_str() || kind == ManagerKind::Cluster.as_str()
            })
            && self.label(label::MANAGER_NAME).is_some()
    }

    /// `labelled_owner(self) == Some(manager)`, without building the owner.
    fn labelled_for(&self, manager: &ManagerId) -> bool {
        self.label(label::MANAGED_BY) == Some(label::MANAGED_BY_VALUE)
            && self.label(label::MANAGER_KIND) == Some(manager.kind.as_str())
            && self.label(label::MANAGER_NAME) == Some(manager.name.as_str())
            && self.label(label::MANAGER_NAMESPACE) == manager.namespace.as_deref()
    }

    /// True when one of its owner references names a cheiron manager.
    fn has_cheiron_owner(&self) -> bool {
        self.cheiron_owners().next().is_some()
    }

    /// True when one of its owner references to a cheiron manager has uid `uid`.
    fn owned_by(&self, uid: &str) -> bool {
        self.cheiron_owners().any(|owner| owner == uid)
    }

    /// True when its only owner reference to a cheiron manager has uid `uid`.
    fn owned_only_by(&self, uid: &str) -> bool {
        let mut owners = self.cheiron_owners();
        owners.next() == Some(uid) && owners.next().is_none()
    }

    /// True when its content-hash annotation is `hash`.
    fn content_hash_is(&self, hash: &str) -> bool {
        self.annotation(annotation::CONTENT_HASH) == Some(hash)
    }

    /// True when someone other than cheiron has written its data (after
    /// [`keep_data_owners`]). Without `managedFields` nothing can be told: false.
    fn data_written_by_others(&self) -> bool {
        written_by_others(self.data_owners())
    }

    /// True when cheiron knows the data at the present `resourceVersion` to be its own: it
    /// wrote that version, or read it and found the data as wanted. The controller's records
    /// remember this ([`super::secrets::SecretCache::checked`]); bare metadata has no such
    /// memory, and goes by its `managedFields` alone.
    fn data_checked(&self) -> bool {
        !self.data_written_by_others()
    }
}

/// True when one of `data_owners` (the field managers owning a Secret's `data`) is not
/// cheiron's.
pub fn written_by_others<'a>(mut data_owners: impl Iterator<Item = Option<&'a str>>) -> bool {
    data_owners.any(|manager| manager != Some(FIELD_MANAGER))
}

impl SecretMetadata for ObjectMeta {
    fn object_namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
    fn object_name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    fn object_uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }
    fn object_resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.as_ref()?.get(key).map(String::as_str)
    }
    fn cheiron_owners(&self) -> impl Iterator<Item = &str> {
        self.owner_references
            .iter()
            .flatten()
            .filter(|o| is_cheiron_owner(o))
            .map(|o| o.uid.as_str())
    }
    fn data_owners(&self) -> impl Iterator<Item = Option<&str>> {
        self.managed_fields
            .iter()
            .flatten()
            .map(|entry| entry.manager.as_deref())
    }
    fn to_meta(&self) -> ObjectMeta {
        self.clone()
    }
}

impl SecretMetadata for SecretMeta {
    fn object_namespace(&self) -> Option<&str> {
        self.metadata.object_namespace()
    }
    fn object_name(&self) -> Option<&str> {
        self.metadata.object_name()
    }
    fn object_uid(&self) -> Option<&str> {
        self.metadata.object_uid()
    }
    fn object_resource_version(&self) -> Option<&str> {
        self.metadata.object_resource_version()
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.metadata.label(key)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata.annotation(key)
    }
    fn cheiron_owners(&self) -> impl Iterator<Item = &str> {
        self.metadata.cheiron_owners()
    }
    fn data_owners(&self) -> impl Iterator<Item = Option<&str>> {
        self.metadata.data_owners()
    }
    fn to_meta(&self) -> ObjectMeta {
        self.metadata.clone()
    }
}

/// The hex SHA-256 of `content`, as the content-hash annotation holds it.
pub fn content_hash(content: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, content)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Reduces a Secret's `managedFields` to what the plan reads: which field managers own its
/// `data` (each kept entry names one, without its field set). Everything else is dropped, so
/// the cache stays small.
pub fn keep_data_owners(meta: &mut ObjectMeta) {
    let owners: Vec<ManagedFieldsEntry> = meta
        .managed_fields
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|entry| {
            entry
                .fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:data"))
                .is_some()
        })
        .map(|entry| ManagedFieldsEntry {
            manager: entry.manager,
            operation: entry.operation,
            ..ManagedFieldsEntry::default()
        })
        .collect();
    meta.managed_fields = Some(owners);
}

/// The manager a cheiron Secret's labels name, if they name one.
pub fn labelled_owner(meta: &impl SecretMetadata) -> Option<ManagerId> {
    if meta.label(label::MANAGED_BY) != Some(label::MANAGED_BY_VALUE) {
        return None;
    }
    let kind = match meta.label(label::MANAGER_KIND) {
        Some("ImagePullSecretManager") => ManagerKind::Namespaced,
        Some("ClusterImagePullSecretManager") => ManagerKind::Cluster,
        _ => return None,
    };
    Some(ManagerId {
        kind,
        namespace: meta.label(label::MANAGER_NAMESPACE).map(str::to_owned),
        name: meta.label(label::MANAGER_NAME)?.to_owned(),
    })
}

/// True when `secret` is one the controller wrote: cheiron's managed-by label, the labels
/// naming a manager, AND an ownerReference to a cheiron manager.
///
/// Labels prove nothing: anyone who may write a Secret can copy them, and a user who copies
/// one of cheiron's Secrets to make their own gets them for free. An ownerReference to a
/// manager is another matter: the garbage collector deletes a Secret carrying one once that
/// manager is gone (at once if no such manager exists), so such a Secret already belongs to
/// cheiron by Kubernetes' own rules. Everything else with the labels (cheiron-certs' TLS
/// Secrets, a user's look-alike) is as foreign to the controller as any Secret: never updated,
/// never deleted.
pub fn is_managed(meta: &impl SecretMetadata) -> bool {
    meta.names_a_manager() && meta.has_cheiron_owner()
}

/// True when the Secret belongs to `manager`, the manager object with uid `uid`: labelled for
/// it and owned by that very object. Only such a Secret is ever deleted for `manager`.
pub fn belongs_to(meta: &impl SecretMetadata, manager: &ManagerId, uid: &str) -> bool {
    meta.labelled_for(manager) && meta.owned_by(uid)
}

/// A Secret of this manager that must go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stale {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `metadata.uid`, a delete precondition.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`, a delete precondition.
    pub resource_version: Option<String>,
    /// True when the namespace left the manager's scope (its ServiceAccount entries go too).
    pub namespace_left: bool,
}

/// A Secret name this manager wants but an older manager claims in the same namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    /// The namespace.
    pub namespace: String,
    /// The Secret name.
    pub name: String,
    /// The older manager that wins it.
    pub winner: ManagerId,
}

/// The writes of one reconcile.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Namespaces in scope, sorted.
    pub targets: Vec<String>,
    /// Secrets to create, each built only when it is written (see [`Create`]).
    pub creates: Vec<Create>,
    /// Secrets to replace (their `resourceVersion` is the precondition).
    pub updates: Vec<Secret>,
    /// This manager's Secrets that are no longer wanted.
    pub deletes: Vec<Stale>,
    /// Names an older manager wins.
    pub lost: Vec<Lost>,
    /// `(namespace, name)` left as they are because a source has a problem.
    pub held: Vec<(String, String)>,
    /// Secrets already as wanted.
    pub unchanged: usize,
    /// Of `updates`, the copies whose data another field manager wrote (`managedFields`).
    pub repairs: usize,
    /// Copies whose metadata is as wanted but whose data cheiron does not know at their present
    /// `resourceVersion` (someone changed them, or the controller has just started): read,
    /// and written again only if the data is not what is wanted.
    pub checks: Vec<Check>,
}

/// A Secret to create: its namespace and what it holds, shared by every namespace that gets
/// the same entry. A reconcile over 100 000 namespaces used to build its 100 000 Secrets (each
/// with its labels, annotations, owner reference and data) before the first write: the
/// controller's peak fell from 469.5 to 267.5 MiB when they were built from the shared one as
/// they are written instead (BENCHMARKS.md, "The controller at 100 000 namespaces").
#[derive(Clone, Debug, PartialEq)]
pub struct Create {
    /// The namespace it is created in.
    pub namespace: String,
    /// The Secret as created, without a namespace.
    pub template: Arc<Secret>,
}

impl Create {
    /// The Secret to create.
    pub fn secret(&self) -> Secret {
        let mut secret = (*self.template).clone();
        secret.metadata.namespace = Some(self.namespace.clone());
        secret
    }
}

/// A copy to read before deciding whether to write it (see [`Plan::checks`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The index of what it should hold in the plan's `desired`.
    pub desired: usize,
}

/// True when `secret`'s data is exactly the `.dockerconfigjson` `content` and nothing else.
pub fn holds_exactly(secret: &Secret, content: &[u8]) -> bool {
    secret.type_.as_deref() == Some(DOCKER_CONFIG_JSON)
        && secret.string_data.is_none()
        && secret.data.as_ref().is_some_and(|data| {
            data.len() == 1
                && data
                    .get(DOCKER_CONFIG_JSON_KEY)
                    .is_some_and(|value| value.0 == content)
        })
}

/// True when `manager` acts on `namespace`: in scope, not opted out.
pub fn acts_on(manager: &Manager, namespace: &NamespaceMeta) -> bool {
    // A manager in mode Node acts on nodes, through `cheiron node-agent`: no namespace.
    manager.mode != cheiron_runtime::api::Mode::Node
        && manager.scope.contains(namespace)
        && !namespace_opted_out(namespace)
}

/// The namespaces `manager` acts on: in scope, not opted out.
pub fn targets<'a>(
    manager: &Manager,
    namespaces: impl IntoIterator<Item = &'a NamespaceMeta>,
) -> Vec<String> {
    let mut t: Vec<String> = namespaces
        .into_iter()
        .filter(|ns| acts_on(manager, ns))
        .map(|ns| ns.name.clone())
        .collect();
    t.sort();
    t
}

/// The Secret object `manager` wants at `namespace/name`.
pub fn secret(
    namespace: &str,
    name: &str,
    content: &[u8],
    manager: &ManagerId,
    owner: &OwnerReference,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(owner_labels(manager)),
            annotations: Some(BTreeMap::from([(
                annotation::CONTENT_HASH.to_owned(),
                content_hash(content),
            )])),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        type_: Some(DOCKER_CONFIG_JSON.to_owned()),
        data: Some(BTreeMap::from([(
            DOCKER_CONFIG_JSON_KEY.to_owned(),
            ByteString(content.to_vec()),
        )])),
        ..Secret::default()
    }
}

fn is_cheiron_owner(reference: &OwnerReference) -> bool {
    reference
        .api_version
        .strip_prefix(GROUP)
        .is_some_and(|version| version.starts_with('/'))
}

/// True when the metadata `current` is what `manager` wants: content-hash annotation `hash`,
/// labelled with its [`owner_labels`] (and no manager namespace on a cluster manager's: what
/// [`SecretMetadata::labelled_for`] checks), owned by `owner`. Whether the data matches the
/// annotation is another question ([`SecretMetadata::data_checked`]).
fn metadata_as_wanted(
    current: &impl SecretMetadata,
    hash: &str,
    manager: &ManagerId,
    owner: &OwnerReference,
) -> bool {
    current.content_hash_is(hash)
        && current.labelled_for(manager)
        && current.owned_only_by(&owner.uid)
}

/// The Secret whose metadata is `current` changed into what `manager` wants, keeping the
/// labels, annotations and owners others put on it. Replaced under `current`'s
/// `resourceVersion`, so a concurrent change makes the write fail instead of being lost.
pub fn updated(
    current: &impl SecretMetadata,
    content: &[u8],
    manager: &ManagerId,
    owner: &OwnerReference,
) -> Secret {
    let mut next = Secret {
        metadata: current.to_meta(),
        type_: Some(DOCKER_CONFIG_JSON.to_owned()),
        data: Some(BTreeMap::from([(
            DOCKER_CONFIG_JSON_KEY.to_owned(),
            ByteString(content.to_vec()),
        )])),
        ..Secret::default()
    };
    next.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(annotation::CONTENT_HASH.to_owned(), content_hash(content));
    let labels = next.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.remove(label::MANAGER_NAMESPACE);
    labels.extend(owner_labels(manager));
    let mut owners: Vec<OwnerReference> = next
        .metadata
        .owner_references
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|o| !is_cheiron_owner(o))
        .collect();
    owners.push(owner.clone());
    next.metadata.owner_references = Some(owners);
    next.metadata.managed_fields = None;
    next
}

/// The oldest manager of `claimants` (those that name the Secret, sorted oldest first) whose
/// scope holds `namespace`.
fn winner<'a>(claimants: &[&'a Manager], namespace: &NamespaceMeta) -> Option<&'a Manager> {
    if namespace_opted_out(namespace) {
        return None;
    }
    claimants
        .iter()
        .find(|m| m.scope.contains(namespace))
        .copied()
}

/// The managers of `claimants` other than `me` that name one of `names`: claims are per
/// Secret name, so when `me` changes (its spec, or it goes) only they can win or lose a name.
pub fn rivals<'a>(
    me: &ManagerId,
    names: impl IntoIterator<Item = &'a str>,
    claimants: &[Manager],
) -> Vec<ManagerId> {
    let names: HashSet<&str> = names.into_iter().collect();
    claimants
        .iter()
        .filter(|m| m.id != *me && m.secret_names().iter().any(|n| names.contains(n.as_str())))
        .map(|m| m.id.clone())
        .collect()
}

/// A hasher for the plan's maps of names: FNV-1a, much cheaper than SipHash on strings this
/// short, and the keys come from the cache, not from a client that could pick collisions.
#[derive(Clone, Copy, Default)]
struct ShortKeys;

impl std::hash::BuildHasher for ShortKeys {
    type Hasher = Fnv;
    fn build_hasher(&self) -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Plans one reconcile of `manager`, working out its targets: [`plan_targets`] with what the
/// controller remembers instead (`super::scopes`).
///
/// - `namespaces`: every live (not terminating) namespace;
/// - `claimants`: every live manager, this one included, oldest first;
/// - `existing`: the metadata of every Secret carrying cheiron's labels.
#[cfg(test)]
pub fn plan<N: std::borrow::Borrow<NamespaceMeta>, S: SecretMetadata>(
    manager: &Manager,
    owner: &OwnerReference,
    desired: &[DesiredSecret],
    namespaces: &[N],
    claimants: &[Manager],
    existing: &[Arc<S>],
) -> Plan {
    let in_scope: Vec<&NamespaceMeta> = namespaces
        .iter()
        .map(std::borrow::Borrow::borrow)
        .filter(|ns| acts_on(manager, ns))
        .collect();
    plan_targets(manager, owner, desired, &in_scope, claimants, existing)
}

/// Plans one reconcile of `manager`, given the namespaces it acts on (those [`acts_on`] holds
/// for, in order), as the controller remembers them between reconciles.
///
/// - `claimants`: every live manager, this one included, oldest first;
/// - `existing`: the metadata of every Secret carrying cheiron's labels.
pub fn plan_targets<S: SecretMetadata>(
    manager: &Manager,
    owner: &OwnerReference,
    desired: &[DesiredSecret],
    in_scope: &[&NamespaceMeta],
    claimants: &[Manager],
    existing: &[Arc<S>],
) -> Plan {
    let me = &manager.id;
    // The targets' names are sorted when the namespaces are, so the Plan's list is too.
    let mut targets: Vec<String> = in_scope.iter().map(|ns| ns.name.clone()).collect();
    if !targets.is_sorted() {
        targets.sort();
    }
    let target_set: HashSet<&str, ShortKeys> = targets.iter().map(String::as_str).collect();
    let wanted_names: HashSet<&str> = desired.iter().map(|d| d.name.as_str()).collect();
    let mut out = Plan::default();
    // One pass over the Secrets (at 10 000 namespaces, each pass was mostly waiting on
    // memory): index the managed ones, and find this manager's that must go.
    let mut by_key: HashMap<(&str, &str), &S, ShortKeys> =
        HashMap::with_capacity_and_hasher(existing.len(), ShortKeys);
    for s in existing.iter().map(|s| &**s) {
        let (Some(ns), Some(name)) = (s.object_namespace(), s.object_name()) else {
            continue;
        };
        if !is_managed(s) {
            continue;
        }
        by_key.insert((ns, name), s);
        if !belongs_to(s, me, &owner.uid) {
            continue;
        }
        let namespace_left = !target_set.contains(ns);
        if namespace_left || !wanted_names.contains(name) {
            out.deletes.push(Stale {
                namespace: ns.to_owned(),
                name: name.to_owned(),
                uid: s.object_uid().map(str::to_owned),
                resource_version: s.object_resource_version().map(str::to_owned),
                namespace_left,
            });
        }
    }
    // Worked out once, not once per namespace: who claims each name, the content's hash.
    let claiming: Vec<Vec<&Manager>> = desired
        .iter()
        .map(|d| {
            claimants
                .iter()
                .filter(|m| m.secret_names().contains(&d.name))
                .collect()
        })
        .collect();
    let hashes: Vec<Option<String>> = desired
        .iter()
        .map(|d| d.content.as_deref().map(content_hash))
        .collect();
    // What each entry's creates hold, built once for every namespace.
    let templates: Vec<Option<Arc<Secret>>> = desired
        .iter()
        .map(|d| {
            d.content.as_deref().map(|content| {
                let mut template = secret("", &d.name, content, me, owner);
                template.metadata.namespace = None;
                Arc::new(template)
            })
        })
        .collect();
    for namespace in in_scope.iter().copied() {
        let ns = namespace.name.as_str();
        for (i, wanted) in desired.iter().enumerate() {
            // A name only this manager claims is its own in every target namespace.
            let contested = !matches!(&claiming[i][..], [only] if only.id == *me);
            match winner(&claiming[i], namespace).filter(|_| contested) {
                Some(w) if w.id != *me => {
                    out.lost.push(Lost {
                        namespace: ns.to_owned(),
                        name: wanted.name.clone(),
                        winner: w.id.clone(),
                    });
                    continue;
                }
                _ => {}
            }
            if wanted
                .source
                .as_ref()
                .is_some_and(|(source_ns, source_name)| {
                    source_ns == ns && *source_name == wanted.name
                })
            {
                // The source serves its own namespace as it is: it is the user's, never
                // written, and it is in step by definition.
                out.unchanged += 1;
                continue;
            }
            let (Some(content), Some(template)) = (&wanted.content, &templates[i]) else {
                out.held.push((ns.to_owned(), wanted.name.clone()));
                continue;
            };
            match by_key.get(&(ns, wanted.name.as_str())).copied() {
                None => out.creates.push(Create {
                    namespace: ns.to_owned(),
                    template: template.clone(),
                }),
                Some(current)
                    if metadata_as_wanted(
                        current,
                        hashes[i].as_deref().unwrap_or(""),
                        me,
                        owner,
                    ) =>
                {
                    if current.data_checked() {
                        out.unchanged += 1;
                    } else if current.data_written_by_others() {
                        // Another field manager wrote the data: no need to read it first.
                        out.repairs += 1;
                        out.updates.push(updated(current, content, me, owner));
                    } else {
                        out.checks.push(Check {
                            namespace: ns.to_owned(),
                            name: wanted.name.clone(),
                            desired: i,
                        });
                    }
                }
                Some(current) => out.updates.push(updated(current, content, me, owner)),
            }
        }
    }
    out.targets = targets;
    out
}

#[cfg(test)]
mod tests;
