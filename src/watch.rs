//! Keeping a kube-runtime reflector store current from a watch: the one loop behind every
//! cache cheiron keeps, in the webhook and in the controller alike. Watch errors are logged
//! and retried with kube-runtime's default backoff; the loop runs until it is dropped.

use futures::{StreamExt, future};
use kube::{
    Api, Resource,
    runtime::{
        WatchStreamExt,
        reflector::{ObjectRef, store::Writer},
        watcher,
    },
};
use serde::de::DeserializeOwned;

/// Watches `api` with `config`, trims each object with `keep` before it is stored (drop
/// what the cache's readers never look at), applies it to `writer`, then hands the event to
/// `on_event`.
pub async fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    keep: impl FnMut(&mut K) + Send,
    mut on_event: impl FnMut(&watcher::Event<K>),
) where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    watcher(api, config)
        .default_backoff()
        .modify(keep)
        .reflect(writer)
        .for_each(|event| {
            match event {
                Ok(event) => on_event(&event),
                Err(e) => tracing::warn!(
                    kind = %K::kind(&K::DynamicType::default()),
                    error = %e,
                    "watch failed; retrying"
                ),
            }
            future::ready(())
        })
        .await;
}

/// [`reflect`] for a cache that holds only the objects `admit` accepts (after `keep`): one it
/// refuses is never stored, and is removed if an earlier version was; `on_event` sees only what
/// concerns the cache. What others create then costs the cache nothing, whatever labels they
/// copy onto it (the controller's cache of cheiron's Secrets).
pub async fn reflect_admitted<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    keep: impl FnMut(&mut K) + Send,
    admit: impl Fn(&K) -> bool + Send,
    mut on_event: impl FnMut(&watcher::Event<K>),
) where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    let stored = writer.as_reader();
    watcher(api, config)
        .default_backoff()
        .modify(keep)
        .filter_map(move |event| {
            let was_stored = |o: &K| stored.get(&ObjectRef::from_obj(o)).is_some();
            future::ready(match event {
                Ok(watcher::Event::InitApply(o)) if !admit(&o) => None,
                Ok(watcher::Event::Apply(o)) if !admit(&o) => {
                    was_stored(&o).then_some(Ok(watcher::Event::Delete(o)))
                }
                Ok(watcher::Event::Delete(o)) if !admit(&o) && !was_stored(&o) => None,
                other => Some(other),
            })
        })
        .reflect(writer)
        .for_each(|event| {
            match event {
                Ok(event) => on_event(&event),
                Err(e) => tracing::warn!(
                    kind = %K::kind(&K::DynamicType::default()),
                    error = %e,
                    "watch failed; retrying"
                ),
            }
            future::ready(())
        })
        .await;
}

/// Keeps every field.
pub fn keep_all<K>(_: &mut K) {}

/// True for the events that end a (re)list or change one object: a cache reader reacts to
/// these, once per list rather than once per listed object.
pub fn is_change<K>(event: &watcher::Event<K>) -> bool {
    !matches!(event, watcher::Event::Init | watcher::Event::InitApply(_))
}
