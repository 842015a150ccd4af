//! The webhook's namespaces: name → labels and cheiron's own annotations, as interned
//! [`Sym`]s, kept current from a metadata watch. A reflector store would hold every
//! namespace's whole `ObjectMeta` (about 1 KiB each); the policy reads only labels and
//! `cheiron.anny.co/*` annotations, and at 100 000 namespaces the difference is most of the
//! webhook's memory.

use std::collections::HashMap;

use cheiron_core::policy::NamespaceMeta;
use k8s_openapi::api::core::v1::Namespace;
use kube::{ResourceExt, core::PartialObjectMeta, runtime::watcher};

use super::symbols::{Sym, Symbols};

/// Annotation keys kept: the only namespace annotations the policy reads are cheiron's.
const KEPT_ANNOTATION_PREFIX: &str = "cheiron.anny.co/";

/// The label the apiserver puts on every namespace, whose value is the namespace's name: not
/// stored again, only flagged.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// One namespace, compactly.
#[derive(Debug)]
struct Entry {
    /// Labels, then annotations, as (key, value).
    pairs: Box<[(Sym, Sym)]>,
    /// How many of `pairs` are labels.
    labels: u16,
    /// Labelled [`NAME_LABEL`] with its own name.
    named: bool,
    /// Listed by the relist in progress (or by the last one).
    seen: bool,
}

/// Namespaces by name, over a [`Symbols`] table the caller owns (shared with the Secrets).
#[derive(Debug, Default)]
pub struct NamespaceTable {
    entries: HashMap<Sym, Entry>,
    ready: bool,
}

impl NamespaceTable {
    /// Applies one watch event. A relist updates in place and, at its end, drops the
    /// namespaces it did not list: unlike the other caches (`runtime::relist`), it does not
    /// gather the list apart, as a second table of 100 000 namespaces during a relist would
    /// double the webhook's memory.
    pub fn apply(
        &mut self,
        symbols: &mut Symbols,
        event: &watcher::Event<PartialObjectMeta<Namespace>>,
    ) {
        match event {
            watcher::Event::Init => {
                for entry in self.entries.values_mut() {
                    entry.seen = false;
                }
            }
            watcher::Event::InitApply(ns) | watcher::Event::Apply(ns) => self.upsert(symbols, ns),
            watcher::Event::InitDone => {
                let gone: Vec<Sym> = self
                    .entries
                    .iter()
                    .filter(|(_, e)| !e.seen)
                    .map(|(name, _)| *name)
                    .collect();
                for name in gone {
                    self.remove(symbols, name);
                }
                self.entries.shrink_to_fit();
                symbols.shrink_to_fit();
                self.ready = true;
            }
            watcher::Event::Delete(ns) => {
                if let Some(name) = symbols.get(&ns.name_any()) {
                    self.remove(symbols, name);
                }
            }
        }
    }

    fn upsert(&mut self, symbols: &mut Symbols, ns: &PartialObjectMeta<Namespace>) {
        let name = ns.name_any();
        let labels = ns.metadata.labels.iter().flatten();
        let named = labels.clone().any(|(k, v)| k == NAME_LABEL && *v == name);
        let labels: Vec<(&String, &String)> = labels
            .filter(|(k, v)| !(named && *k == NAME_LABEL && **v == name))
            .collect();
        let annotations = ns
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| k.starts_with(KEPT_ANNOTATION_PREFIX));
        // Label keys are at most 316 bytes and a namespace has few; a count that does not
        // fit is clamped, and the labels past it are read as annotations (never by the policy).
        let label_count = u16::try_from(labels.len()).unwrap_or(u16::MAX);
        let pairs: Box<[(Sym, Sym)]> = labels
            .into_iter()
            .chain(annotations)
            .map(|(k, v)| (symbols.intern(k), symbols.intern(v)))
            .collect();
        let entry = Entry {
            pairs,
            labels: label_count,
            named,
            seen: true,
        };
        let sym = symbols.intern(&name);
        if let Some(old) = self.entries.insert(sym, entry) {
            // The name was held already: give back its second reference and the old pairs.
            symbols.release(sym);
            release_pairs(symbols, &old);
        }
    }

    fn remove(&mut self, symbols: &mut Symbols, name: Sym) {
        if let Some(old) = self.entries.remove(&name) {
            release_pairs(symbols, &old);
            symbols.release(name);
        }
    }

    /// The namespace, if known, as the policy reads it.
    pub fn get(&self, symbols: &Symbols, name: &str) -> Option<NamespaceMeta> {
        let entry = self.entries.get(&symbols.get(name)?)?;
        let (labels, annotations) = entry
            .pairs
            .split_at(usize::from(entry.labels).min(entry.pairs.len()));
        let text = |pairs: &'_ [(Sym, Sym)]| {
            pairs
                .iter()
                .map(|(k, v)| (symbols.text(*k), symbols.text(*v)))
                .collect::<Vec<_>>()
        };
        let mut labels = text(labels);
        if entry.named {
            labels.push((NAME_LABEL, name));
        }
        Some(NamespaceMeta {
            name: name.to_owned(),
            labels: labels.into_iter().collect(),
            annotations: text(annotations).into_iter().collect(),
        })
    }

    /// True once the first list has been applied.
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Namespaces known.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

fn release_pairs(symbols: &mut Symbols, entry: &Entry) {
    for (k, v) in &entry.pairs {
        symbols.release(*k);
        symbols.release(*v);
    }
}

#[cfg(test)]
mod tests {
    use cheiron_core::policy::Pairs;

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
        let (mut table, mut symbols) = (NamespaceTable::default(), Symbols::default());
        table.apply(&mut symbols, &watcher::Event::Init);
        table.apply(
            &mut symbols,
            &watcher::Event::InitApply(ns(
                "team",
                &[("tier", "apps"), (NAME_LABEL, "team")],
                &[
                    ("cheiron.anny.co/ignore", "true"),
                    ("kubectl.kubernetes.io/last-applied-configuration", "{...}"),
                ],
            )),
        );
        assert!(!table.is_ready(), "not ready before the list is complete");
        table.apply(&mut symbols, &watcher::Event::InitDone);
        assert!(table.is_ready());
        let team = table.get(&symbols, "team").unwrap_or_default();
        assert_eq!(
            team.labels,
            Pairs::from([("tier", "apps"), (NAME_LABEL, "team")])
        );
        assert_eq!(
            team.annotations,
            Pairs::from([("cheiron.anny.co/ignore", "true")])
        );
        assert!(
            symbols.get("{...}").is_none(),
            "other annotations are not kept"
        );
    }

    #[test]
    fn a_name_label_that_is_not_the_name_is_kept_as_it_is() {
        let (mut table, mut symbols) = (NamespaceTable::default(), Symbols::default());
        table.apply(
            &mut symbols,
            &watcher::Event::Apply(ns("a", &[(NAME_LABEL, "b")], &[])),
        );
        let a = table.get(&symbols, "a").unwrap_or_default();
        assert_eq!(a.labels.get(NAME_LABEL), Some("b"));
    }

    #[test]
    fn follows_applies_deletes_and_relists() {
        let (mut table, mut symbols) = (NamespaceTable::default(), Symbols::default());
        table.apply(&mut symbols, &watcher::Event::Init);
        table.apply(&mut symbols, &watcher::Event::InitApply(ns("a", &[], &[])));
        table.apply(&mut symbols, &watcher::Event::InitApply(ns("b", &[], &[])));
        table.apply(&mut symbols, &watcher::Event::InitDone);
        table.apply(
            &mut symbols,
            &watcher::Event::Apply(ns("c", &[("x", "1")], &[])),
        );
        table.apply(&mut symbols, &watcher::Event::Delete(ns("a", &[], &[])));
        assert_eq!((table.get(&symbols, "a"), table.len()), (None, 2));
        assert_eq!(table.get(&symbols, "c").map(|c| c.labels.len()), Some(1));
        // A relist updates in place; what it did not list goes at its end.
        table.apply(&mut symbols, &watcher::Event::Init);
        table.apply(&mut symbols, &watcher::Event::InitApply(ns("d", &[], &[])));
        assert_eq!(table.len(), 3, "b and c stay until the relist ends");
        table.apply(&mut symbols, &watcher::Event::InitDone);
        assert_eq!(
            (
                table.len(),
                table.get(&symbols, "d").is_some(),
                table.get(&symbols, "b").is_some()
            ),
            (1, true, false)
        );
    }

    #[test]
    fn changes_and_deletions_give_every_string_back() {
        let (mut table, mut symbols) = (NamespaceTable::default(), Symbols::default());
        for round in 0..3 {
            for i in 0..20 {
                let group = format!("g{}", (i + round) % 4);
                table.apply(
                    &mut symbols,
                    &watcher::Event::Apply(ns(
                        &format!("ns-{i}"),
                        &[("group", &group), (NAME_LABEL, &format!("ns-{i}"))],
                        &[("cheiron.anny.co/ignore", "false")],
                    )),
                );
            }
        }
        // Names, "group", 4 values, the annotation's key and value.
        assert_eq!(symbols.len(), 20 + 1 + 4 + 2);
        for i in 0..20 {
            table.apply(
                &mut symbols,
                &watcher::Event::Delete(ns(&format!("ns-{i}"), &[], &[])),
            );
        }
        assert!(table.len() == 0);
        assert!(symbols.len() == 0, "{} strings left", symbols.len());
    }
}
