//! How workload clusters join and leave the fleet: the kubeconfig Secrets (watched as
//! metadata) and Cluster API's `Cluster`s in the fleet namespaces, and Cluster API's CRD,
//! whose `Cluster` watches run while it is served. Each change brings the connections in line
//! ([`Fleet::refresh`]) and asks every cluster manager to reconcile.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use cheiron_runtime::{
    api::fleet::{CAPI_GROUP, CLUSTER_NAME_LABEL},
    message,
};
use futures::StreamExt;
use k8s_openapi::{
    api::core::v1::Secret,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject},
    core::PartialObjectMeta,
    discovery,
    runtime::{WatchStreamExt, watcher},
};

use crate::{
    CAPI_CLUSTERS_CRD, Fleet,
    members::{CapiCluster, member_name},
};

impl Fleet {
    /// Watches Cluster API's CRD `clusters.cluster.x-k8s.io`: while it is there and its
    /// `Cluster` is served, the `Cluster` watches run (started when it appears, also after
    /// the controller started; restarted on another served version; stopped when it goes).
    pub(crate) async fn watch_capi_crd(self: Arc<Self>, namespaces: Vec<Option<String>>) {
        let api: Api<PartialObjectMeta<CustomResourceDefinition>> =
            Api::all(self.management.clone());
        let stream = watcher(
            api,
            watcher::Config::default().fields(&format!("metadata.name={CAPI_CLUSTERS_CRD}")),
        )
        .default_backoff();
        futures::pin_mut!(stream);
        // The Cluster watches, aborted when dropped.
        let mut running: Option<(ApiResource, tokio::task::JoinSet<()>)> = None;
        let mut present = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init) => present = false,
                Ok(watcher::Event::InitApply(_) | watcher::Event::Apply(_)) => {
                    present = true;
                    let Some(resource) = served_capi_cluster(&self.management).await else {
                        tracing::warn!(
                            crd = CAPI_CLUSTERS_CRD,
                            "Cluster API's CRD is there but its Cluster is not served; workload clusters are selected by the labels of their kubeconfig Secrets"
                        );
                        continue;
                    };
                    if running.as_ref().is_some_and(|(r, _)| *r == resource) {
                        continue;
                    }
                    tracing::info!(
                        version = resource.version,
                        "Cluster API's Cluster is served: watching Clusters"
                    );
                    let mut tasks = tokio::task::JoinSet::new();
                    for ns in namespaces.iter().cloned() {
                        tasks.spawn(self.clone().watch_capi(resource.clone(), ns));
                    }
                    running = Some((resource, tasks));
                }
                Ok(watcher::Event::InitDone) => {
                    if !present {
                        if running.take().is_some() {
                            self.capi_gone();
                        } else {
                            tracing::info!(
                                "Cluster API's Cluster is not served: workload clusters are selected by the labels of their kubeconfig Secrets, until its CRD appears"
                            );
                        }
                    }
                }
                Ok(watcher::Event::Delete(_)) => {
                    present = false;
                    if running.take().is_some() {
                        self.capi_gone();
                    }
                }
                Err(e) => {
                    tracing::warn!(kind = "CustomResourceDefinition", error = %message::watch_error(&e), "Cluster API CRD watch failed; retrying")
                }
            }
        }
    }

    /// Cluster API's CRD went: its `Cluster`s with it.
    fn capi_gone(&self) {
        tracing::info!("Cluster API's CRD is gone: Clusters are no longer watched");
        if let Ok(mut state) = self.state.lock() {
            state.capi.clear();
        }
        self.trigger_all();
    }

    pub(crate) async fn watch_kubeconfigs(self: Arc<Self>, namespace: Option<String>) {
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let metadata: Api<PartialObjectMeta<Secret>> = match &namespace {
            Some(ns) => Api::namespaced(self.management.clone(), ns),
            None => Api::all(self.management.clone()),
        };
        let stream = watcher(
            metadata,
            watcher::Config::default().labels(CLUSTER_NAME_LABEL),
        )
        .default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init) => seen.clear(),
                Ok(watcher::Event::InitApply(meta)) => {
                    if let Some(name) = self.kubeconfig_applied(&meta) {
                        seen.insert(name);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    self.forget_unseen(namespace.as_deref(), &seen);
                    self.refresh().await;
                    self.trigger_all();
                }
                Ok(watcher::Event::Apply(meta)) => {
                    if self.kubeconfig_applied(&meta).is_some() {
                        self.refresh().await;
                        self.trigger_all();
                    }
                }
                Ok(watcher::Event::Delete(meta)) => {
                    if let Some(name) = member_name(&meta) {
                        self.forget(&name);
                        self.refresh().await;
                        self.trigger_all();
                    }
                }
                Err(e) => {
                    tracing::warn!(kind = "Secret", error = %message::watch_error(&e), "kubeconfig watch failed; retrying")
                }
            }
        }
    }

    /// Takes in a kubeconfig Secret's metadata; a changed `resourceVersion` drops the
    /// connection, which [`Self::refresh`] makes again from the new kubeconfig if the cluster
    /// is wanted. The cluster's name, if it is a kubeconfig Secret.
    fn kubeconfig_applied(&self, meta: &PartialObjectMeta<Secret>) -> Option<String> {
        let name = member_name(meta)?;
        let version = meta.resource_version().unwrap_or_default();
        let labels = meta.labels().clone();
        if let Ok(mut state) = self.state.lock() {
            let member = state.members.entry(name.clone()).or_default();
            member.secret_labels = labels;
            if member.secret_version != version {
                member.secret_version = version;
                member.workload = None;
            }
        }
        Some(name)
    }

    fn forget(&self, name: &str) {
        if let Ok(mut state) = self.state.lock() {
            state.members.remove(name);
        }
        self.metrics.fleet.forget(name);
        tracing::info!(
            cluster = name,
            "a workload cluster left: its kubeconfig Secret is gone"
        );
    }

    fn forget_unseen(&self, namespace: Option<&str>, seen: &BTreeSet<String>) {
        let gone: Vec<String> = self
            .state
            .lock()
            .map(|state| {
                state
                    .members
                    .keys()
                    .filter(|k| namespace.is_none_or(|ns| k.split('/').next() == Some(ns)))
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for name in gone {
            self.forget(&name);
        }
    }

    /// Watches Cluster API `Cluster`s (metadata only) in `namespace` (or every namespace).
    async fn watch_capi(self: Arc<Self>, resource: ApiResource, namespace: Option<String>) {
        let api: Api<PartialObjectMeta<DynamicObject>> = match &namespace {
            Some(ns) => Api::namespaced_with(self.management.clone(), ns, &resource),
            None => Api::all_with(self.management.clone(), &resource),
        };
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        let mut seen: BTreeSet<String> = BTreeSet::new();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init) => seen.clear(),
                Ok(watcher::Event::InitApply(meta)) => {
                    seen.insert(self.capi_applied(&meta));
                }
                Ok(watcher::Event::InitDone) => {
                    if let Ok(mut state) = self.state.lock() {
                        state.capi.retain(|k, _| {
                            seen.contains(k)
                                || namespace
                                    .as_deref()
                                    .is_some_and(|ns| k.split('/').next() != Some(ns))
                        });
                    }
                    self.trigger_all();
                }
                Ok(watcher::Event::Apply(meta)) => {
                    self.capi_applied(&meta);
                    self.trigger_all();
                }
                Ok(watcher::Event::Delete(meta)) => {
                    let key = format!(
                        "{}/{}",
                        meta.namespace().unwrap_or_default(),
                        meta.name_any()
                    );
                    if let Ok(mut state) = self.state.lock() {
                        state.capi.remove(&key);
                    }
                    self.trigger_all();
                }
                Err(e) => {
                    tracing::warn!(kind = "Cluster", error = %message::watch_error(&e), "Cluster watch failed; retrying")
                }
            }
        }
    }

    fn capi_applied(&self, meta: &PartialObjectMeta<DynamicObject>) -> String {
        let key = format!(
            "{}/{}",
            meta.namespace().unwrap_or_default(),
            meta.name_any()
        );
        let cluster = CapiCluster {
            labels: meta.labels().clone(),
            deleting: meta.metadata.deletion_timestamp.is_some(),
        };
        if let Ok(mut state) = self.state.lock() {
            state.capi.insert(key.clone(), cluster);
        }
        key
    }
}

/// The served version of Cluster API's `Cluster`, if any. Discovery may lag a CRD that just
/// appeared by a moment: asked a few times.
async fn served_capi_cluster(client: &Client) -> Option<ApiResource> {
    for _ in 0..10 {
        let found = discovery::group(client, CAPI_GROUP)
            .await
            .ok()
            .and_then(|group| {
                group
                    .recommended_resources()
                    .into_iter()
                    .find(|(r, _)| r.kind == "Cluster")
                    .map(|(r, _)| r)
            });
        if found.is_some() {
            return found;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    None
}
