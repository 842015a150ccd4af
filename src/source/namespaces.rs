//! The webhook's namespaces: name → labels and cheiron's own annotations, kept current from a
//! metadata watch. A reflector store would hold every namespace's whole `ObjectMeta`; the
//! policy reads only labels and `cheiron.anny.co/*` annotations, and with 10 000 namespaces
//! the difference is most of the webhook's memory.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, RwLock},
};

use k8s_openapi::api::core::v1::Namespace;
use kube::{ResourceExt, core::PartialObjectMeta, runtime::watcher};

use crate::policy::NamespaceMeta;

/// Annotation keys kept: the only namespace annotations the policy reads are cheiron's.
const KEPT_ANNOTATION_PREFIX: &str = "cheiron.anny.co/";

#[derive(Default)]
struct Index {
    current: HashMap<String, Arc<NamespaceMeta>>,
    /// The namespaces of a (re)list in progress, swapped in at its end.
    relisting: Option<HashMap<String, Arc<NamespaceMeta>>>,
    ready: bool,
}

/// Namespaces by name; cheap to clone (shared).
#[derive(Clone, Default)]
pub struct NamespaceIndex {
    index: Arc<RwLock<Index>>,
}

fn compact(ns: &PartialObjectMeta<Namespace>) -> (String, Arc<NamespaceMeta>) {
    let name = ns.name_any();
    let annotations: BTreeMap<String, String> = ns
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(KEPT_ANNOTATION_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let meta = NamespaceMeta {
        name: name.clone(),
        labels: ns.metadata.labels.clone().unwrap_or_default(),
        annotations,
    };
    (name, Arc::new(meta))
}

impl NamespaceIndex {
    /// Applies one watch event.
    pub fn apply(&self, event: &watcher::Event<PartialObjectMeta<Namespace>>) {
        let Ok(mut index) = self.index.write() else {
            return;
        };
        match event {
            watcher::Event::Init => index.relisting = Some(HashMap::new()),
            watcher::Event::InitApply(ns) => {
                let (name, meta) = compact(ns);
                index
                    .relisting
                    .get_or_insert_with(HashMap::new)
                    .insert(name, meta);
            }
            watcher::Event::InitDone => {
                index.current = index.relisting.take().unwrap_or_default();
                index.current.shrink_to_fit();
                index.ready = true;
            }
            watcher::Event::Apply(ns) => {
                let (name, meta) = compact(ns);
                index.current.insert(name, meta);
            }
            watcher::Event::Delete(ns) => {
                index.current.remove(&ns.name_any());
            }
        }
    }

    /// The namespace, if known.
    pub fn get(&self, name: &str) -> Option<NamespaceMeta> {
        let index = self.index.read().ok()?;
        index.current.get(name).map(|m| NamespaceMeta::clone(m))
    }

    /// True once the first list has been applied.
    pub fn is_ready(&self) -> bool {
        self.index.read().is_ok_and(|i| i.ready)
    }

    /// Namespaces known.
    pub fn len(&self) -> usize {
        self.index.read().map(|i| i.current.len()).unwrap_or(0)
    }

    /// True when no namespace is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(
        name: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> PartialObjectMeta<Namespace> {
        let mut meta: PartialObjectMeta<Namespace> = PartialObjectMeta::default();
        meta.metadata.name = Some(name.to_owned());
        let map = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        };
        meta.metadata.labels = map(labels);
        meta.metadata.annotations = map(annotations);
        meta.metadata.uid = Some("0a1b2c3d-uid".to_owned());
        meta
    }

    #[test]
    fn keeps_labels_and_only_cheirons_annotations() {
        let index = NamespaceIndex::default();
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(ns(
            "team",
            &[("tier", "apps")],
            &[
                ("cheiron.anny.co/ignore", "true"),
                ("kubectl.kubernetes.io/last-applied-configuration", "{...}"),
            ],
        )));
        assert!(!index.is_ready(), "not ready before the list is complete");
        assert_eq!(index.get("team"), None, "a list in progress is not visible");
        index.apply(&watcher::Event::InitDone);
        assert!(index.is_ready());
        let team = index.get("team").unwrap_or_default();
        assert_eq!(team.labels.get("tier").map(String::as_str), Some("apps"));
        assert_eq!(team.annotations.len(), 1);
        assert_eq!(
            team.annotations
                .get("cheiron.anny.co/ignore")
                .map(String::as_str),
            Some("true")
        );
    }

    #[test]
    fn follows_applies_deletes_and_relists() {
        let index = NamespaceIndex::default();
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(ns("a", &[], &[])));
        index.apply(&watcher::Event::InitApply(ns("b", &[], &[])));
        index.apply(&watcher::Event::InitDone);
        index.apply(&watcher::Event::Apply(ns("c", &[("x", "1")], &[])));
        index.apply(&watcher::Event::Delete(ns("a", &[], &[])));
        assert_eq!((index.get("a"), index.len()), (None, 2));
        assert_eq!(index.get("c").map(|c| c.labels.len()), Some(1));
        // A relist replaces everything at its end; until then the old view stays.
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(ns("d", &[], &[])));
        assert_eq!(index.len(), 2);
        index.apply(&watcher::Event::InitDone);
        assert_eq!(
            (
                index.len(),
                index.get("d").is_some(),
                index.get("b").is_some()
            ),
            (1, true, false)
        );
    }
}
