//! Which live namespaces each manager acts on, remembered from one reconcile to the next while
//! neither the list of live namespaces (a new build after any change, see [`LiveNamespaces`])
//! nor the manager (its uid and `metadata.generation`) has changed. Working it out reads every
//! namespace's labels and annotations: at 10 000 namespaces, a fifth of a reconcile with
//! nothing to do.
//!
//! What is remembered costs at most one bit per live namespace and manager: the positions in
//! the list, or a bitmap when that is smaller. A manager's entry goes with its cleanup.

use std::{collections::HashMap, sync::Mutex};

use cheiron_core::policy::{Manager, ManagerId, NamespaceMeta};

use super::{namespaces::LiveNamespaces, plan};

/// The namespaces of one build of the live list that a manager acts on.
#[derive(Debug, PartialEq, Eq)]
enum Members {
    /// Their positions in the list.
    Positions(Box<[u32]>),
    /// One bit per namespace of the list.
    Bits(Box<[u64]>),
}

impl Members {
    /// The smaller form of `positions` (sorted) in a list of `len` namespaces.
    fn new(positions: Vec<u32>, len: usize) -> Self {
        let words = len.div_ceil(64);
        if positions.len() * 4 <= words * 8 {
            return Members::Positions(positions.into());
        }
        let mut bits = vec![0u64; words];
        for p in positions {
            let p = p as usize;
            bits[p / 64] |= 1 << (p % 64);
        }
        Members::Bits(bits.into())
    }

    fn positions(&self) -> Vec<usize> {
        match self {
            Members::Positions(p) => p.iter().map(|p| *p as usize).collect(),
            Members::Bits(words) => {
                let mut out = Vec::new();
                for (w, word) in words.iter().enumerate() {
                    let mut word = *word;
                    while word != 0 {
                        out.push(w * 64 + word.trailing_zeros() as usize);
                        word &= word - 1;
                    }
                }
                out
            }
        }
    }
}

#[derive(Debug)]
struct Remembered {
    build: u64,
    uid: String,
    generation: i64,
    members: Members,
}

/// What each manager acts on, remembered; see the module's documentation.
#[derive(Debug, Default)]
pub(super) struct Scopes {
    inner: Mutex<HashMap<ManagerId, Remembered>>,
}

impl Scopes {
    /// The namespaces of `live` that `manager` (the object with `uid` and `generation`) acts
    /// on, in the list's order: what [`plan::targets`] says, remembered while it holds. A
    /// manager without a generation is worked out each time.
    pub fn targets<'a>(
        &self,
        manager: &Manager,
        uid: &str,
        generation: Option<i64>,
        live: &'a LiveNamespaces,
    ) -> Vec<&'a NamespaceMeta> {
        let at = |positions: Vec<usize>| -> Vec<&'a NamespaceMeta> {
            positions
                .into_iter()
                .filter_map(|p| live.get(p))
                .map(|n| &**n)
                .collect()
        };
        if let Some(generation) = generation
            && let Ok(inner) = self.inner.lock()
            && let Some(r) = inner.get(&manager.id)
            && r.build == live.build()
            && r.uid == uid
            && r.generation == generation
        {
            return at(r.members.positions());
        }
        let positions: Vec<u32> = live
            .iter()
            .enumerate()
            .filter(|(_, n)| plan::acts_on(manager, n))
            .filter_map(|(p, _)| u32::try_from(p).ok())
            .collect();
        let targets = at(positions.iter().map(|p| *p as usize).collect());
        if let Some(generation) = generation
            && let Ok(mut inner) = self.inner.lock()
        {
            inner.insert(
                manager.id.clone(),
                Remembered {
                    build: live.build(),
                    uid: uid.to_owned(),
                    generation,
                    members: Members::new(positions, live.len()),
                },
            );
        }
        targets
    }

    /// Forgets `manager` (it is gone).
    pub fn forget(&self, manager: &ManagerId) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.remove(manager);
        }
    }
}

#[cfg(test)]
mod tests {
    use cheiron_runtime::api::ClusterImagePullSecretManager;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::{core::PartialObjectMeta, runtime::watcher};

    use super::*;
    use crate::namespaces::NamespaceCache;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn namespace(name: &str, labels: &[(&str, &str)]) -> PartialObjectMeta<Namespace> {
        let mut meta: PartialObjectMeta<Namespace> = PartialObjectMeta::default();
        meta.metadata.name = Some(name.to_owned());
        meta.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        meta
    }

    fn selecting(tier: &str) -> Result<Manager, Box<dyn std::error::Error>> {
        let m: ClusterImagePullSecretManager = serde_json::from_value(serde_json::json!({
            "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
            "metadata": {"name": "m"},
            "spec": {"namespaceSelector": {"matchLabels": {"tier": tier}},
                     "secrets": [{"name": "p", "registry": "r.example.com", "username": "u", "password": "p"}]},
        }))?;
        Ok(Manager::from_cluster(&m)?)
    }

    fn names(targets: &[&NamespaceMeta]) -> Vec<String> {
        targets.iter().map(|n| n.name.clone()).collect()
    }

    #[test]
    fn targets_are_remembered_until_the_namespaces_or_the_manager_change() -> TestResult {
        let cache = NamespaceCache::default();
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitApply(namespace(
            "a",
            &[("tier", "apps")],
        )));
        cache.apply(&watcher::Event::InitApply(namespace(
            "b",
            &[("tier", "web")],
        )));
        cache.apply(&watcher::Event::InitApply(namespace(
            "c",
            &[("tier", "apps"), ("cheiron.anny.co/ignore", "true")],
        )));
        cache.apply(&watcher::Event::InitDone);
        let scopes = Scopes::default();
        let (apps, web) = (selecting("apps")?, selecting("web")?);
        let live = cache.live();
        assert_eq!(names(&scopes.targets(&apps, "u1", Some(1), &live)), ["a"]);
        // Same list, same object and generation: remembered, not worked out again (a spec
        // that changed would have a new generation).
        assert_eq!(names(&scopes.targets(&web, "u1", Some(1), &live)), ["a"]);
        assert_eq!(names(&scopes.targets(&web, "u1", Some(2), &live)), ["b"]);
        assert_eq!(names(&scopes.targets(&web, "u2", Some(2), &live)), ["b"]);
        assert_eq!(names(&scopes.targets(&apps, "u2", None, &live)), ["a"]);
        // A namespace changes: a new build of the list, worked out again.
        cache.apply(&watcher::Event::Apply(namespace("d", &[("tier", "web")])));
        let live = cache.live();
        assert_eq!(
            names(&scopes.targets(&web, "u2", Some(2), &live)),
            ["b", "d"]
        );
        scopes.forget(&web.id);
        assert!(scopes.inner.lock().map(|i| i.is_empty()).unwrap_or(false));
        Ok(())
    }

    #[test]
    fn members_are_kept_in_the_smaller_form_and_give_back_the_same_positions() {
        let few = Members::new(vec![3, 700], 1_000);
        assert!(matches!(few, Members::Positions(_)));
        assert_eq!(few.positions(), [3, 700]);
        let all: Vec<u32> = (0..1_000).filter(|p| p % 3 != 0).collect();
        let many = Members::new(all.clone(), 1_000);
        assert!(matches!(&many, Members::Bits(words) if words.len() == 16));
        assert_eq!(
            many.positions(),
            all.iter().map(|p| *p as usize).collect::<Vec<_>>()
        );
        assert_eq!(Members::new(Vec::new(), 0).positions(), Vec::<usize>::new());
    }
}
