//! The controller's Namespaces, kept from a metadata watch as the policy reads them (name,
//! labels, cheiron's own annotations) and whether they are being deleted; and the sorted list
//! of live ones that every reconcile plans against, built again only after a change. At
//! 10 000 namespaces, building that list from a reflector store on each reconcile was a fifth
//! of a reconcile that had nothing to do.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
};

use cheiron_core::policy::{NamespaceMeta, Pairs};
use cheiron_runtime::{
    api::GROUP,
    runtime::{Relist, Step},
};
use k8s_openapi::api::core::v1::Namespace;
use kube::{ResourceExt, core::PartialObjectMeta, runtime::watcher};

use crate::interned::Strings;

/// The live namespaces, sorted by name, and which build of that list this is (a new build
/// after every change): what was worked out from one build holds as long as it is current.
#[derive(Clone, Debug)]
pub struct LiveNamespaces {
    build: u64,
    list: Arc<[Arc<NamespaceMeta>]>,
}

impl LiveNamespaces {
    /// Which build of the list this is.
    pub fn build(&self) -> u64 {
        self.build
    }
}

impl std::ops::Deref for LiveNamespaces {
    type Target = [Arc<NamespaceMeta>];
    fn deref(&self) -> &Self::Target {
        &self.list
    }
}

#[derive(Debug)]
struct Entry {
    meta: Arc<NamespaceMeta>,
    terminating: bool,
}

#[derive(Debug, Default)]
struct Inner {
    current: HashMap<String, Entry>,
    relist: Relist<HashMap<String, Entry>>,
    /// The live list as last built; `None` after a change.
    live: Option<LiveNamespaces>,
    /// Lists built so far.
    builds: u64,
    /// The label and annotation strings the entries share.
    strings: Strings,
}

/// What the controller keeps of a Namespace: the policy's view, with only cheiron's
/// annotations (the opt-out), and whether it is being deleted. Label keys and values are
/// shared through `strings`: every namespace's `kubernetes.io/metadata.name` key is one string.
fn entry(ns: &PartialObjectMeta<Namespace>, strings: &mut Strings) -> (String, Entry) {
    let ours = |key: &str| {
        key.strip_prefix(GROUP)
            .is_some_and(|rest| rest.starts_with('/'))
    };
    let mut shared = |map: &Option<std::collections::BTreeMap<String, String>>,
                      keep: &dyn Fn(&str) -> bool| {
        Pairs::from_shared(
            map.iter()
                .flatten()
                .filter(|(k, _)| keep(k))
                .map(|(k, v)| (strings.share(k), strings.share(v)))
                .collect::<Vec<_>>(),
        )
    };
    let meta = NamespaceMeta {
        name: ns.name_any(),
        labels: shared(&ns.metadata.labels, &|_| true),
        annotations: shared(&ns.metadata.annotations, &ours),
    };
    (
        ns.name_any(),
        Entry {
            meta: Arc::new(meta),
            terminating: ns.metadata.deletion_timestamp.is_some(),
        },
    )
}

/// Namespaces by name; cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct NamespaceCache {
    inner: Arc<RwLock<Inner>>,
}

impl NamespaceCache {
    /// Applies one watch event.
    pub fn apply(&self, event: &watcher::Event<PartialObjectMeta<Namespace>>) {
        let Ok(mut inner) = self.inner.write() else {
            return;
        };
        let Inner {
            current,
            relist,
            live,
            strings,
            ..
        } = &mut *inner;
        let mut relisted = false;
        match relist.follow(event) {
            Step::Began { .. } => return,
            Step::Listed(ns, set) => {
                set.extend([entry(ns, strings)]);
                return;
            }
            Step::Complete(mut set) => {
                set.shrink_to_fit();
                *current = set;
                relisted = true;
            }
            Step::Applied(ns) => current.extend([entry(ns, strings)]),
            Step::Deleted(ns) => _ = current.remove(&ns.name_any()),
        }
        *live = None;
        if relisted {
            // A relist replaced every entry: what only the old ones held goes with them.
            strings.sweep();
        } else {
            strings.sweep_if_grown();
        }
    }

    /// The namespace, if known (also while it is being deleted).
    pub fn get(&self, name: &str) -> Option<Arc<NamespaceMeta>> {
        let inner = self.inner.read().ok()?;
        inner.current.get(name).map(|e| e.meta.clone())
    }

    /// The namespaces that are not being deleted, sorted by name.
    pub fn live(&self) -> LiveNamespaces {
        if let Ok(inner) = self.inner.read()
            && let Some(live) = &inner.live
        {
            return live.clone();
        }
        let Ok(mut inner) = self.inner.write() else {
            return LiveNamespaces {
                build: u64::MAX,
                list: Arc::from(Vec::new()),
            };
        };
        if let Some(live) = &inner.live {
            // Built by another reader meanwhile.
            return live.clone();
        }
        let mut all: Vec<Arc<NamespaceMeta>> = inner
            .current
            .values()
            .filter(|e| !e.terminating)
            .map(|e| e.meta.clone())
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        inner.builds += 1;
        let live = LiveNamespaces {
            build: inner.builds,
            list: all.into(),
        };
        inner.live = Some(live.clone());
        live
    }

    /// True once the first list has been applied.
    pub fn is_ready(&self) -> bool {
        self.inner.read().is_ok_and(|i| i.relist.is_listed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str, labels: &[(&str, &str)], terminating: bool) -> PartialObjectMeta<Namespace> {
        let mut meta: PartialObjectMeta<Namespace> = PartialObjectMeta::default();
        meta.metadata.name = Some(name.to_owned());
        meta.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        meta.metadata.annotations = Some(
            [
                ("cheiron.anny.co/ignore".to_owned(), "false".to_owned()),
                (
                    "kubectl.kubernetes.io/last-applied-configuration".to_owned(),
                    "{…}".to_owned(),
                ),
            ]
            .into(),
        );
        if terminating {
            meta.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        meta
    }

    fn names(live: &LiveNamespaces) -> Vec<&str> {
        live.iter().map(|n| n.name.as_str()).collect()
    }

    #[test]
    fn the_live_list_is_sorted_leaves_out_terminating_namespaces_and_follows_changes() {
        let cache = NamespaceCache::default();
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitApply(ns("b", &[], false)));
        cache.apply(&watcher::Event::InitApply(ns(
            "a",
            &[("tier", "apps")],
            false,
        )));
        cache.apply(&watcher::Event::InitApply(ns("gone", &[], true)));
        assert!(!cache.is_ready() && cache.live().is_empty());
        cache.apply(&watcher::Event::InitDone);
        let first = cache.live();
        assert_eq!(names(&first), ["a", "b"]);
        assert_eq!(
            first.build(),
            cache.live().build(),
            "built once until a change"
        );
        assert!(cache.get("gone").is_some(), "known while being deleted");
        let a = cache.get("a").unwrap_or_default();
        assert_eq!(a.labels.get("tier"), Some("apps"));
        assert_eq!(
            a.annotations.keys().collect::<Vec<_>>(),
            ["cheiron.anny.co/ignore"],
            "only cheiron's annotations"
        );
        cache.apply(&watcher::Event::Apply(ns("c", &[], false)));
        cache.apply(&watcher::Event::Delete(ns("a", &[], false)));
        assert_eq!(names(&cache.live()), ["b", "c"]);
        assert!(cache.live().build() > first.build());
        // A relist replaces the whole set at its end.
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitApply(ns("d", &[], false)));
        assert_eq!(names(&cache.live()), ["b", "c"]);
        cache.apply(&watcher::Event::InitDone);
        assert_eq!(names(&cache.live()), ["d"]);
    }

    #[test]
    fn namespaces_share_their_label_strings_and_a_relist_lets_go_of_the_old_ones() {
        let cache = NamespaceCache::default();
        cache.apply(&watcher::Event::Init);
        for name in ["a", "b"] {
            cache.apply(&watcher::Event::InitApply(ns(
                name,
                &[("tier", "apps")],
                false,
            )));
        }
        cache.apply(&watcher::Event::InitDone);
        let (a, b) = (cache.get("a"), cache.get("b"));
        let pair =
            |n: &Option<Arc<NamespaceMeta>>| n.as_ref().map(|n| n.labels.shared()[0].clone());
        let (Some((ka, va)), Some((kb, vb))) = (pair(&a), pair(&b)) else {
            panic!("both namespaces are cached with their label");
        };
        assert!(
            Arc::ptr_eq(&ka, &kb) && Arc::ptr_eq(&va, &vb),
            "one `tier` and one `apps`"
        );
        drop((a, b, ka, va, kb, vb));
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitApply(ns("c", &[("team", "x")], false)));
        cache.apply(&watcher::Event::InitDone);
        let held = cache
            .inner
            .read()
            .map(|i| i.strings.len())
            .unwrap_or_default();
        assert_eq!(
            held, 4,
            "after the relist only `team`, `x` and the opt-out annotation's key and value are held"
        );
    }
}
