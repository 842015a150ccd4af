//! Keeping a kube-runtime reflector store current from a watch: the one loop behind every
//! cache cheiron keeps, in the webhook and in the controller alike. Watch errors are logged
//! and retried with kube-runtime's default backoff; the loop runs until it is dropped.

use futures::{StreamExt, future};
use kube::{
    Api, Resource,
    runtime::{WatchStreamExt, reflector::store::Writer, watcher},
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

/// Keeps every field.
pub fn keep_all<K>(_: &mut K) {}

/// True for the events that end a (re)list or change one object: a cache reader reacts to
/// these, once per list rather than once per listed object.
pub fn is_change<K>(event: &watcher::Event<K>) -> bool {
    !matches!(event, watcher::Event::Init | watcher::Event::InitApply(_))
}
