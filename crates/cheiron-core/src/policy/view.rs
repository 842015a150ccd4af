//! What admission sees of the cluster: managers, namespaces, and which of cheiron's Secrets
//! exist. Implemented over reflector stores in cluster mode and over plain values in static
//! mode and tests.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use super::{index::ManagerIndex, manager::Manager, namespace::NamespaceMeta};

/// A consistent read-only view for admission decisions.
pub trait View: Send + Sync {
    /// The valid managers that may act in `namespace`, oldest first: at least every manager
    /// whose scope holds it (the decision checks each one it is given).
    fn managers_in(&self, namespace: &NamespaceMeta) -> Vec<Arc<Manager>>;
    /// The namespace, if known.
    fn namespace(&self, name: &str) -> Option<NamespaceMeta>;
    /// Whether Secret `name` exists in `namespace`; `None` when this view does not track Secrets.
    fn secret_exists(&self, namespace: &str, name: &str) -> Option<bool>;
}

/// `inner` with one namespace known that it lacked (looked up live on a cache miss).
pub struct WithNamespace<'a> {
    inner: &'a dyn View,
    namespace: NamespaceMeta,
}

impl<'a> WithNamespace<'a> {
    /// `inner`, plus `namespace`.
    pub fn new(inner: &'a dyn View, namespace: NamespaceMeta) -> Self {
        Self { inner, namespace }
    }
}

impl View for WithNamespace<'_> {
    fn managers_in(&self, namespace: &NamespaceMeta) -> Vec<Arc<Manager>> {
        self.inner.managers_in(namespace)
    }

    fn namespace(&self, name: &str) -> Option<NamespaceMeta> {
        if name == self.namespace.name {
            Some(self.namespace.clone())
        } else {
            self.inner.namespace(name)
        }
    }

    fn secret_exists(&self, namespace: &str, name: &str) -> Option<bool> {
        self.inner.secret_exists(namespace, name)
    }
}

/// A [`View`] over plain values: static mode (`--from`), `cheiron mutate`, and tests.
#[derive(Clone, Debug, Default)]
pub struct StaticView {
    managers: Arc<[Manager]>,
    index: ManagerIndex,
    namespaces: HashMap<String, NamespaceMeta>,
    secrets: Option<HashSet<(String, String)>>,
}

impl StaticView {
    /// A view of these managers and namespaces that does not track Secrets.
    pub fn new(
        mut managers: Vec<Manager>,
        namespaces: impl IntoIterator<Item = NamespaceMeta>,
    ) -> Self {
        managers.sort_by(|a, b| a.seniority().cmp(&b.seniority()));
        Self {
            index: ManagerIndex::new(managers.iter().cloned()),
            managers: managers.into(),
            namespaces: namespaces
                .into_iter()
                .map(|ns| (ns.name.clone(), ns))
                .collect(),
            secrets: None,
        }
    }

    /// Tracks these `(namespace, name)` Secrets, so that references to others draw a warning.
    pub fn with_secrets(mut self, secrets: impl IntoIterator<Item = (String, String)>) -> Self {
        self.secrets = Some(secrets.into_iter().collect());
        self
    }
}

impl StaticView {
    /// Every manager, oldest first.
    pub fn managers(&self) -> Arc<[Manager]> {
        self.managers.clone()
    }
}

impl View for StaticView {
    fn managers_in(&self, namespace: &NamespaceMeta) -> Vec<Arc<Manager>> {
        self.index.candidates(namespace)
    }

    fn namespace(&self, name: &str) -> Option<NamespaceMeta> {
        self.namespaces.get(name).cloned()
    }

    fn secret_exists(&self, namespace: &str, name: &str) -> Option<bool> {
        self.secrets
            .as_ref()
            .map(|s| s.contains(&(namespace.to_owned(), name.to_owned())))
    }
}
