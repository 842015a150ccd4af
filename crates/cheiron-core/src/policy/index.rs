//! Managers by what narrows their scope, so that a decision reads the managers that can apply
//! in a namespace rather than every manager of the cluster (with 10 000 managers, a scan of all
//! of them was most of a review's time).
//!
//! Each manager sits in exactly one place:
//! - by namespace name: a namespaced manager (its own namespace), or a cluster manager whose
//!   `namespaces` globs are all literal;
//! - by one label pair: a cluster manager whose `namespaceSelector` requires `key=value`
//!   (`matchLabels`, or `In` with its values, one entry per value);
//! - otherwise with the managers read for every namespace.
//!
//! The index only narrows: [`ManagerIndex::candidates`] is a superset of the managers whose
//! scope holds the namespace, and the decision still checks each of them.

use std::{
    borrow::Borrow,
    collections::{BTreeSet, HashMap, HashSet},
    hash::{Hash, Hasher},
    sync::Arc,
};

use kube::core::Expression;

use super::{
    manager::{Manager, ManagerId},
    namespace::NamespaceMeta,
    registries::{Registries, RegistryList},
    scope::Scope,
};

/// Where a manager is filed.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Place {
    /// Under each of these namespace names.
    Names(BTreeSet<String>),
    /// Under `(key, value)` for each value.
    Label(String, BTreeSet<String>),
    /// Read for every namespace.
    Everywhere,
}

/// The narrowest place a scope allows.
fn place(scope: &Scope) -> Place {
    match scope {
        Scope::Namespace(own) => Place::Names(BTreeSet::from([own.clone()])),
        Scope::Cluster {
            selector, include, ..
        } => {
            if !include.is_empty() && include.iter().all(|g| g.is_literal()) {
                return Place::Names(include.iter().map(|g| g.as_str().to_owned()).collect());
            }
            let expressions = selector
                .iter()
                .flat_map(|s| s.expressions().iter().cloned());
            let mut set_based = None;
            for expression in expressions {
                match expression {
                    Expression::Equal(key, value) => {
                        return Place::Label(key, BTreeSet::from([value]));
                    }
                    Expression::In(key, values) if set_based.is_none() => {
                        set_based = Some(Place::Label(key, values));
                    }
                    _ => {}
                }
            }
            set_based.unwrap_or(Place::Everywhere)
        }
    }
}

/// A manager in a set, told apart by its id (which it holds: no second copy as a key).
#[derive(Clone, Debug)]
struct ById(Arc<Manager>);

impl PartialEq for ById {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for ById {}

impl Hash for ById {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.id.hash(state);
    }
}

impl Borrow<ManagerId> for ById {
    fn borrow(&self) -> &ManagerId {
        &self.0.id
    }
}

/// The live managers, compiled, filed by what narrows them. Plain values in and out: the
/// webhook's watches call [`ManagerIndex::apply`] and [`ManagerIndex::delete`].
#[derive(Clone, Debug, Default)]
pub struct ManagerIndex {
    all: HashSet<ById>,
    by_name: HashMap<String, Vec<Arc<Manager>>>,
    /// label key → label value → managers.
    by_label: HashMap<String, HashMap<String, Vec<Arc<Manager>>>>,
    everywhere: Vec<Arc<Manager>>,
    /// The registry lists of the managers (`injection: MatchingImages`), each held once
    /// however many managers name the same registries.
    registry_lists: HashSet<Arc<RegistryList>>,
}

impl ManagerIndex {
    /// An index of `managers`.
    pub fn new(managers: impl IntoIterator<Item = Manager>) -> Self {
        let mut index = Self::default();
        for m in managers {
            index.apply(m);
        }
        index
    }

    /// Adds `manager`, or replaces the manager with its id.
    pub fn apply(&mut self, mut manager: Manager) {
        self.delete(&manager.id);
        manager.intern_registries(|list| match self.registry_lists.get(&*list) {
            Some(held) => held.clone(),
            None => {
                self.registry_lists.insert(list.clone());
                list
            }
        });
        let manager = Arc::new(manager);
        let place = place(&manager.scope);
        match &place {
            Place::Names(names) => {
                for name in names {
                    self.by_name
                        .entry(name.clone())
                        .or_default()
                        .push(manager.clone());
                }
            }
            Place::Label(key, values) => {
                let by_value = self.by_label.entry(key.clone()).or_default();
                for value in values {
                    by_value
                        .entry(value.clone())
                        .or_default()
                        .push(manager.clone());
                }
            }
            Place::Everywhere => self.everywhere.push(manager.clone()),
        }
        self.all.insert(ById(manager));
    }

    /// Removes the manager with this id, if held.
    pub fn delete(&mut self, id: &ManagerId) {
        let Some(ById(manager)) = self.all.take(id) else {
            return;
        };
        let mut lists: Vec<Arc<RegistryList>> = Vec::new();
        for registries in manager.registries() {
            if let Registries::Known(list) = registries
                && !lists.iter().any(|l| Arc::ptr_eq(l, list))
            {
                lists.push(list.clone());
            }
        }
        let place = place(&manager.scope);
        let remove = |list: &mut Vec<Arc<Manager>>| list.retain(|m| m.id != *id);
        match place {
            Place::Names(names) => {
                for name in names {
                    if let Some(list) = self.by_name.get_mut(&name) {
                        remove(list);
                        if list.is_empty() {
                            self.by_name.remove(&name);
                        }
                    }
                }
            }
            Place::Label(key, values) => {
                if let Some(by_value) = self.by_label.get_mut(&key) {
                    for value in values {
                        if let Some(list) = by_value.get_mut(&value) {
                            remove(list);
                            if list.is_empty() {
                                by_value.remove(&value);
                            }
                        }
                    }
                    if by_value.is_empty() {
                        self.by_label.remove(&key);
                    }
                }
            }
            Place::Everywhere => remove(&mut self.everywhere),
        }
        drop(manager);
        for list in lists {
            // Held by the set and `lists` only: no other manager names these registries. A
            // review in flight that still holds the manager keeps the list in the set until
            // another manager naming the same registries goes: a few bytes, never more than
            // one list per distinct set of registries.
            if Arc::strong_count(&list) == 2 {
                self.registry_lists.remove(&*list);
            }
        }
    }

    /// Keeps only the managers for which `keep` is true (what a relist did not list goes).
    pub fn retain(&mut self, mut keep: impl FnMut(&ManagerId) -> bool) {
        let gone: Vec<ManagerId> = self
            .all
            .iter()
            .map(|m| &m.0.id)
            .filter(|id| !keep(id))
            .cloned()
            .collect();
        for id in &gone {
            self.delete(id);
        }
    }

    /// The managers that may act in `namespace`, oldest first: every manager whose scope
    /// holds it, and possibly a few more ([`Manager::applies_to`] decides).
    pub fn candidates(&self, namespace: &NamespaceMeta) -> Vec<Arc<Manager>> {
        let mut found: Vec<Arc<Manager>> = self.everywhere.clone();
        if let Some(list) = self.by_name.get(namespace.name.as_str()) {
            found.extend(list.iter().cloned());
        }
        for (key, value) in &namespace.labels {
            let list = self
                .by_label
                .get(key)
                .and_then(|by_value| by_value.get(value));
            if let Some(list) = list {
                found.extend(list.iter().cloned());
            }
        }
        // Each manager is filed under one name or one label key, and a namespace has one name
        // and one value per key: no manager is found twice.
        found.sort_by(|a, b| a.seniority().cmp(&b.seniority()));
        found
    }

    /// Every manager, oldest first.
    pub fn all(&self) -> Vec<Arc<Manager>> {
        let mut all: Vec<Arc<Manager>> = self.all.iter().map(|m| m.0.clone()).collect();
        all.sort_by(|a, b| a.seniority().cmp(&b.seniority()));
        all
    }

    /// Distinct registry lists held (shared by the managers that name the same registries).
    pub fn registry_lists(&self) -> usize {
        self.registry_lists.len()
    }

    /// Managers held.
    pub fn len(&self) -> usize {
        self.all.len()
    }

    /// True when no manager is held.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }
}

#[cfg(test)]
mod tests;
