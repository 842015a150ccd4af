//! Metadata watches of Secrets held open by a benchmark, standing in for the watchers a
//! writer's objects have (cheiron's controller and webhook watch its copies), so that a bare
//! client's writes carry the same fan-out.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};
use tokio::{sync::oneshot, task::JoinHandle};

use crate::Result;

/// Metadata-only watches of the Secrets a label selector picks, open until dropped.
pub struct MetadataWatches(Vec<JoinHandle<()>>);

impl MetadataWatches {
    /// Opens `count` watches of the Secrets `selector` picks and returns once each has its
    /// initial list (at most 60 s each).
    pub async fn open(client: &Client, selector: &str, count: usize) -> Result<Self> {
        let mut handles = Vec::new();
        for _ in 0..count {
            let (synced_tx, synced) = oneshot::channel::<()>();
            let api: Api<PartialObjectMeta<Secret>> = Api::all(client.clone());
            let config = watcher::Config::default().labels(selector);
            handles.push(tokio::spawn(async move {
                let mut synced_tx = Some(synced_tx);
                let mut events = watcher(api, config).default_backoff().boxed();
                while let Some(event) = events.next().await {
                    if matches!(event, Ok(watcher::Event::InitDone))
                        && let Some(tx) = synced_tx.take()
                    {
                        let _ = tx.send(());
                    }
                }
            }));
            tokio::time::timeout(Duration::from_secs(60), synced)
                .await
                .map_err(|_| "a metadata watch did not list within 60 s")??;
        }
        Ok(Self(handles))
    }
}

impl Drop for MetadataWatches {
    fn drop(&mut self) {
        for handle in &self.0 {
            handle.abort();
        }
    }
}
