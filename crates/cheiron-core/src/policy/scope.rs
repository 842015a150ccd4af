//! Which namespaces a manager acts on.

use kube::core::{Selector, SelectorExt};

use super::{NamespaceGlob, NamespaceMeta};
use crate::api::SYSTEM_NAMESPACES;

/// The namespaces a manager acts on.
#[derive(Clone, Debug)]
pub enum Scope {
    /// A namespaced manager: its own namespace only.
    Namespace(String),
    /// A cluster manager: namespaces whose labels match `selector` (if any), whose names
    /// match one of `include` (if any) and none of `exclude`. The system namespaces are in
    /// scope only when `include` names them literally.
    Cluster {
        /// `namespaceSelector`.
        selector: Option<Selector>,
        /// `namespaces`; empty means all.
        include: Vec<NamespaceGlob>,
        /// `excludeNamespaces`.
        exclude: Vec<NamespaceGlob>,
    },
}

impl Scope {
    /// True when `namespace` is in scope.
    pub fn contains(&self, namespace: &NamespaceMeta) -> bool {
        match self {
            Scope::Namespace(own) => *own == namespace.name,
            Scope::Cluster {
                selector,
                include,
                exclude,
            } => {
                let name = namespace.name.as_str();
                if exclude.iter().any(|g| g.matches(name)) {
                    return false;
                }
                let included = if SYSTEM_NAMESPACES.contains(&name) {
                    include.iter().any(|g| g.is_literal() && g.as_str() == name)
                } else {
                    include.is_empty() || include.iter().any(|g| g.matches(name))
                };
                included
                    && selector
                        .as_ref()
                        .is_none_or(|s| s.matches(&namespace.labels))
            }
        }
    }
}
