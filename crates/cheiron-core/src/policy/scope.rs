//! Which namespaces a manager acts on.

use std::fmt;

use kube::core::{Expression, Selector};

use super::{namespace::NamespaceMeta, pairs::Pairs};
use crate::api::{NamespaceGlob, SYSTEM_NAMESPACES};

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
        selector: Option<NamespaceSelector>,
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

/// A compiled `namespaceSelector`, matched against a namespace's [`Pairs`] of labels (kube's
/// [`Selector`] reads only a `BTreeMap`, and keeps its expressions to itself).
#[derive(Clone, Debug)]
pub struct NamespaceSelector {
    selector: Selector,
    expressions: Box<[Expression]>,
}

impl NamespaceSelector {
    /// True when `labels` satisfy every expression, as [`kube::core::SelectorExt::matches`]
    /// decides for a map.
    pub fn matches(&self, labels: &Pairs) -> bool {
        self.expressions.iter().all(|e| match e {
            Expression::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Expression::NotIn(key, values) => labels.get(key).is_none_or(|v| !values.contains(v)),
            Expression::Exists(key) => labels.contains_key(key),
            Expression::DoesNotExist(key) => !labels.contains_key(key),
            Expression::Equal(key, value) => labels.get(key) == Some(value.as_str()),
            Expression::NotEqual(key, value) => labels.get(key) != Some(value.as_str()),
        })
    }

    /// The expressions, in the selector's order.
    pub fn expressions(&self) -> &[Expression] {
        &self.expressions
    }
}

impl From<Selector> for NamespaceSelector {
    fn from(selector: Selector) -> Self {
        Self {
            expressions: selector.clone().into_iter().collect(),
            selector,
        }
    }
}

impl fmt::Display for NamespaceSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.selector.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use kube::core::SelectorExt;
    use proptest::prelude::*;

    use super::*;

    const KEYS: [&str; 3] = ["tier", "team", "kubernetes.io/metadata.name"];
    const VALUES: [&str; 3] = ["apps", "b", ""];

    fn expression() -> impl Strategy<Value = Expression> {
        let key = (0..KEYS.len()).prop_map(|k| KEYS[k].to_owned());
        let value = (0..VALUES.len()).prop_map(|v| VALUES[v].to_owned());
        let values = proptest::collection::btree_set(value.clone(), 0..3);
        (0..6usize, key, value, values).prop_map(|(op, key, value, values)| match op {
            0 => Expression::In(key, values),
            1 => Expression::NotIn(key, values),
            2 => Expression::Equal(key, value),
            3 => Expression::NotEqual(key, value),
            4 => Expression::Exists(key),
            _ => Expression::DoesNotExist(key),
        })
    }

    proptest! {
        #[test]
        fn a_namespace_selector_matches_pairs_as_kubes_selector_matches_the_map(
            expressions in proptest::collection::vec(expression(), 0..4),
            labels in proptest::collection::btree_map(0..KEYS.len(), 0..VALUES.len(), 0..3),
        ) {
            let map: BTreeMap<String, String> = labels
                .into_iter()
                .map(|(k, v)| (KEYS[k].to_owned(), VALUES[v].to_owned()))
                .collect();
            let selector: Selector = expressions.into_iter().collect();
            let ours = NamespaceSelector::from(selector.clone());
            prop_assert_eq!(ours.matches(&Pairs::from(map.clone())), selector.matches(&map));
            prop_assert_eq!(ours.to_string(), selector.to_string());
        }
    }

    #[test]
    fn an_in_expression_needs_the_key_and_a_not_in_expression_is_met_without_it() {
        let selector = |e: Expression| NamespaceSelector::from(Selector::from(e));
        let values = BTreeSet::from(["apps".to_owned()]);
        let labels: Pairs = [("tier", "apps")].into();
        assert!(selector(Expression::In("tier".into(), values.clone())).matches(&labels));
        assert!(!selector(Expression::In("team".into(), values.clone())).matches(&labels));
        assert!(!selector(Expression::NotIn("tier".into(), values.clone())).matches(&labels));
        assert!(selector(Expression::NotIn("team".into(), values)).matches(&labels));
    }
}
