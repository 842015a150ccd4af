//! Which of cheiron's Secrets exist: all the webhook asks of them is "does Secret N exist in
//! namespace X" (to warn about a reference to one that does not yet). So a Secret is kept as one
//! 8-byte key, its namespace's and its name's [`Sym`]s side by side, instead of its metadata
//! (about 1.5 KiB each in a reflector store; 200 000 of them at 100 000 namespaces).

use std::collections::HashSet;

use cheiron_runtime::runtime::{Relist, Step};
use k8s_openapi::api::core::v1::Secret;
use kube::{ResourceExt, core::PartialObjectMeta, runtime::watcher};

use super::symbols::{Sym, Symbols};

fn key(namespace: Sym, name: Sym) -> u64 {
    (u64::from(namespace.index()) << 32) | u64::from(name.index())
}

/// The `(namespace, name)` of Secrets, over a [`Symbols`] table the caller owns.
#[derive(Debug, Default)]
pub struct SecretSet {
    current: HashSet<u64>,
    relist: Relist<HashSet<u64>>,
}

impl SecretSet {
    /// Applies one watch event.
    pub fn apply(
        &mut self,
        symbols: &mut Symbols,
        event: &watcher::Event<PartialObjectMeta<Secret>>,
    ) {
        match self.relist.follow(event) {
            Step::Began { abandoned } => {
                if let Some(abandoned) = abandoned {
                    release_all(symbols, &abandoned);
                }
            }
            Step::Listed(s, set) => insert(set, symbols, s),
            Step::Complete(mut listed) => {
                listed.shrink_to_fit();
                let old = std::mem::replace(&mut self.current, listed);
                release_all(symbols, &old);
            }
            Step::Applied(s) => insert(&mut self.current, symbols, s),
            Step::Deleted(s) => {
                let found = s
                    .namespace()
                    .and_then(|ns| Some((symbols.get(&ns)?, symbols.get(&s.name_any())?)));
                if let Some((ns, name)) = found
                    && self.current.remove(&key(ns, name))
                {
                    symbols.release(ns);
                    symbols.release(name);
                }
            }
        }
    }

    /// Whether Secret `name` exists in `namespace`.
    pub fn contains(&self, symbols: &Symbols, namespace: &str, name: &str) -> bool {
        match (symbols.get(namespace), symbols.get(name)) {
            (Some(ns), Some(name)) => self.current.contains(&key(ns, name)),
            _ => false,
        }
    }

    /// True once the first list has been applied.
    pub fn is_ready(&self) -> bool {
        self.relist.is_listed()
    }

    /// Secrets known.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.current.len()
    }
}

fn insert(set: &mut HashSet<u64>, symbols: &mut Symbols, s: &PartialObjectMeta<Secret>) {
    let Some(namespace) = s.namespace() else {
        return;
    };
    let (ns, name) = (symbols.intern(&namespace), symbols.intern(&s.name_any()));
    if !set.insert(key(ns, name)) {
        // Known already (a change of a Secret it holds): keep one reference each.
        symbols.release(ns);
        symbols.release(name);
    }
}

fn release_all(symbols: &mut Symbols, set: &HashSet<u64>) {
    for k in set {
        // The halves of a key made by `key`.
        let (ns, name) = ((k >> 32) as u32, (k & u64::from(u32::MAX)) as u32);
        symbols.release(Sym::from_index(ns));
        symbols.release(Sym::from_index(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(namespace: &str, name: &str) -> PartialObjectMeta<Secret> {
        let mut meta: PartialObjectMeta<Secret> = PartialObjectMeta::default();
        meta.metadata.name = Some(name.to_owned());
        meta.metadata.namespace = Some(namespace.to_owned());
        meta
    }

    #[test]
    fn answers_by_namespace_and_name_through_lists_changes_and_deletions() {
        let (mut set, mut symbols) = (SecretSet::default(), Symbols::default());
        set.apply(&mut symbols, &watcher::Event::Init);
        set.apply(
            &mut symbols,
            &watcher::Event::InitApply(secret("team", "a")),
        );
        assert!(!set.is_ready() && !set.contains(&symbols, "team", "a"));
        set.apply(&mut symbols, &watcher::Event::InitDone);
        set.apply(&mut symbols, &watcher::Event::Apply(secret("team", "b")));
        set.apply(&mut symbols, &watcher::Event::Apply(secret("team", "b")));
        assert!(set.is_ready());
        assert!(set.contains(&symbols, "team", "a") && set.contains(&symbols, "team", "b"));
        assert!(!set.contains(&symbols, "other", "a") && !set.contains(&symbols, "team", "c"));
        set.apply(&mut symbols, &watcher::Event::Delete(secret("team", "b")));
        assert!(!set.contains(&symbols, "team", "b"));
        assert_eq!(set.len(), 1);
        // "b" is gone with its only Secret; "team" and "a" stay.
        assert_eq!(symbols.len(), 2);
    }

    #[test]
    fn a_relist_replaces_the_set_and_gives_back_what_it_dropped() {
        let (mut set, mut symbols) = (SecretSet::default(), Symbols::default());
        set.apply(&mut symbols, &watcher::Event::Init);
        for i in 0..10 {
            set.apply(
                &mut symbols,
                &watcher::Event::InitApply(secret(&format!("ns-{i}"), "pull")),
            );
        }
        set.apply(&mut symbols, &watcher::Event::InitDone);
        set.apply(&mut symbols, &watcher::Event::Init);
        set.apply(
            &mut symbols,
            &watcher::Event::InitApply(secret("ns-0", "pull")),
        );
        assert_eq!(set.len(), 10, "the old set answers until the relist ends");
        set.apply(&mut symbols, &watcher::Event::InitDone);
        assert_eq!(set.len(), 1);
        assert!(set.contains(&symbols, "ns-0", "pull"));
        assert_eq!(symbols.len(), 2, "ns-1 … ns-9 freed");
        // A relist cut short by another one frees what it had gathered.
        set.apply(&mut symbols, &watcher::Event::Init);
        set.apply(&mut symbols, &watcher::Event::InitApply(secret("x", "y")));
        set.apply(&mut symbols, &watcher::Event::Init);
        set.apply(&mut symbols, &watcher::Event::InitDone);
        assert!(set.len() == 0 && symbols.len() == 0);
    }
}
