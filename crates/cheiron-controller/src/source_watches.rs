//! One metadata watch per source Secret a manager names (by field selector: never a
//! cluster-wide Secret watch), each triggering the managers that read it, so a rotation
//! reaches the copies within seconds.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use cheiron_core::{content::SourceKey, policy::ManagerId};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};
use tokio::task::AbortHandle;

use super::{kinds::ManagerRef, triggers::Triggers};

/// The default of `--max-source-watches`.
pub const DEFAULT_MAX_SOURCE_WATCHES: usize = 500;

/// One metadata watch per source Secret a manager names, each triggering the managers that
/// read it, so a rotation reaches the copies within seconds. Tenants choose how many distinct
/// sources there are (one namespaced manager each, at the least), so the number of watches
/// is bounded: a source beyond the bound is not watched, and its rotation reaches the copies
/// at the next resync instead (said in the log).
pub struct SourceWatches {
    client: Client,
    triggers: Triggers,
    state: Arc<Mutex<SourceState>>,
    limit: usize,
}

#[derive(Default)]
struct SourceState {
    readers: HashMap<SourceKey, HashSet<ManagerId>>,
    watches: HashMap<SourceKey, AbortHandle>,
    by_manager: HashMap<ManagerId, HashSet<SourceKey>>,
}

impl SourceWatches {
    /// No watches yet; at most `limit` at once.
    pub fn new(client: Client, triggers: Triggers, limit: usize) -> Self {
        Self {
            client,
            triggers,
            state: Arc::default(),
            limit,
        }
    }

    /// How many sources are watched, and how many are read but left to the resync.
    pub fn counts(&self) -> (usize, usize) {
        self.state
            .lock()
            .map(|s| (s.watches.len(), s.readers.len() - s.watches.len()))
            .unwrap_or_default()
    }

    /// Records that `manager` reads exactly `keys`, starting and stopping watches to match.
    pub fn set(&self, manager: &ManagerId, keys: impl IntoIterator<Item = SourceKey>) {
        let keys: HashSet<SourceKey> = keys.into_iter().collect();
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let previous = state.by_manager.remove(manager).unwrap_or_default();
        for gone in previous.difference(&keys) {
            let unread = state.readers.get_mut(gone).is_some_and(|r| {
                r.remove(manager);
                r.is_empty()
            });
            if unread {
                state.readers.remove(gone);
                if let Some(watch) = state.watches.remove(gone) {
                    watch.abort();
                }
            }
        }
        for key in &keys {
            state
                .readers
                .entry(key.clone())
                .or_default()
                .insert(manager.clone());
            if !state.watches.contains_key(key) {
                if state.watches.len() >= self.limit {
                    tracing::warn!(
                        source = %format!("{}/{}", key.0, key.1),
                        limit = self.limit,
                        "not watching this source: --max-source-watches reached; its rotation \
                         reaches the copies at the next resync"
                    );
                    continue;
                }
                let task = watch_source(
                    self.client.clone(),
                    key.clone(),
                    self.triggers.clone(),
                    self.state.clone(),
                );
                state
                    .watches
                    .insert(key.clone(), tokio::spawn(task).abort_handle());
            }
        }
        if !keys.is_empty() {
            state.by_manager.insert(manager.clone(), keys);
        }
    }
}

impl Drop for SourceWatches {
    fn drop(&mut self) {
        if let Ok(state) = self.state.lock() {
            for watch in state.watches.values() {
                watch.abort();
            }
        }
    }
}

/// Watches one Secret by name (metadata only) and triggers its readers on every change.
async fn watch_source(
    client: Client,
    key: SourceKey,
    triggers: Triggers,
    state: Arc<Mutex<SourceState>>,
) {
    let (namespace, name) = &key;
    let api: Api<PartialObjectMeta<Secret>> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(
                watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitApply(_),
            ) => {
                let readers: Vec<ManagerId> = state
                    .lock()
                    .map(|s| {
                        s.readers
                            .get(&key)
                            .map(|r| r.iter().cloned().collect())
                            .unwrap_or_default()
                    })
                    .unwrap_or_default();
                for reader in &readers {
                    triggers.send(ManagerRef::from(reader));
                }
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
            Err(e) => {
                tracing::warn!(source = %format!("{namespace}/{name}"), error = %cheiron_runtime::message::watch_error(&e), "source watch failed; retrying")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use cheiron_core::policy::ManagerKind;
    use cheiron_runtime::runtime::fake_api::FakeApi;

    use super::*;

    fn manager(name: &str) -> ManagerId {
        ManagerId {
            kind: ManagerKind::Namespaced,
            namespace: Some("team".to_owned()),
            name: name.to_owned(),
        }
    }

    fn key(name: &str) -> SourceKey {
        ("team".to_owned(), name.to_owned())
    }

    #[tokio::test]
    async fn tenants_cannot_make_the_controller_hold_more_watches_than_the_bound() {
        // The watches' requests go to a fake that refuses them: only the bookkeeping counts.
        let watches = SourceWatches::new(FakeApi::default().client(), Triggers::new().0, 2);
        for i in 0..5 {
            watches.set(&manager(&format!("m{i}")), [key(&format!("s{i}"))]);
        }
        assert_eq!(
            watches.counts(),
            (2, 3),
            "two watched, three left to the resync"
        );
        // A manager that stops reading frees its slot for the next one to reconcile.
        watches.set(&manager("m0"), []);
        assert_eq!(watches.counts(), (1, 3));
        watches.set(&manager("m4"), [key("s4")]);
        assert_eq!(watches.counts(), (2, 2));
        // Two managers reading one source share its watch.
        watches.set(&manager("m5"), [key("s4")]);
        assert_eq!(watches.counts(), (2, 2));
    }
}
