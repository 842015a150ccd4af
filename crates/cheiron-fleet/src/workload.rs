//! One connected workload cluster: a client (bounded by `guard.rs` and `pages.rs`) from its
//! kubeconfig, the controller's caches and watches over it, and the [`Cluster`] a reconcile
//! writes through.

use cheiron_controller::{
    Cluster, ClusterCaches, CompiledManagers, NamespaceCache, Routing, SecretCache,
    ServiceAccountCache,
};
use cheiron_runtime::{
    api::fleet::KUBECONFIG_KEY,
    runtime::events::{self, EventPublisher},
};
use k8s_openapi::api::core::v1::Secret;
use kube::{Client, runtime::reflector};
use tokio::task::AbortHandle;

use crate::{Fleet, guard, kubeconfig::client_config, pages};

/// One connected workload cluster: its client, caches and watches, as a [`Cluster`].
pub(crate) struct Workload {
    /// `<namespace>/<cluster>`.
    pub(crate) name: String,
    /// What a reconcile writes through there.
    pub(crate) cluster: Cluster,
    routing: AbortHandle,
    /// The pages of its lists: one cut off at the bound makes the cluster unusable until it
    /// completes.
    pub(crate) pages: pages::ListPages,
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.routing.abort();
    }
}

impl Workload {
    /// True once its watches have listed everything.
    pub fn synced(&self) -> bool {
        self.cluster.synced()
    }
}

impl Fleet {
    /// A connection to the cluster `name` from its kubeconfig Secret.
    pub(crate) async fn connect(&self, name: &str, secret: &Secret) -> Result<Workload, String> {
        let value = secret
            .data
            .as_ref()
            .and_then(|d| d.get(KUBECONFIG_KEY))
            .ok_or_else(|| format!("its kubeconfig Secret has no key {KUBECONFIG_KEY}"))?;
        let text = std::str::from_utf8(&value.0)
            .map_err(|_| format!("key {KUBECONFIG_KEY} of its kubeconfig Secret is not text"))?;
        let config = client_config(text, self.options.allow_insecure).await?;
        let pages = pages::ListPages::new(self.options.max_list_pages);
        let client = kube::client::ClientBuilder::try_from(config)
            .map_err(|_| "no client can be built from its kubeconfig".to_owned())?
            .with_layer(&guard::layer(self.options.max_response_bytes))
            .with_layer(&pages)
            .build();
        Ok(self.workload(name, client, pages))
    }

    /// The caches, watches and context of one workload cluster reached through `client`.
    fn workload(&self, name: &str, client: Client, pages: pages::ListPages) -> Workload {
        let (namespaces, secrets, service_accounts) = (
            NamespaceCache::default(),
            SecretCache::default(),
            ServiceAccountCache::default(),
        );
        let routing = Routing {
            triggers: self.triggers.clone(),
            // No namespaced manager acts in a workload cluster.
            namespaced: reflector::store().0,
            cluster: self.managers.clone(),
            namespaces: namespaces.clone(),
            secrets: secrets.clone(),
            service_accounts: service_accounts.clone(),
            compiled: CompiledManagers::for_workloads(),
            describe_error: guard::watch_error_line,
        };
        let caches = ClusterCaches {
            namespaces,
            secrets,
            service_accounts,
        };
        let recorder = EventPublisher::new(
            client.clone(),
            self.reporter.clone(),
            events::MAX_CACHED_EVENTS,
        );
        let cluster = Cluster::new(client.clone(), caches, recorder, self.metrics.clone());
        let routing = tokio::spawn(cheiron_controller::route(client, routing)).abort_handle();
        Workload {
            name: name.to_owned(),
            cluster,
            routing,
            pages,
        }
    }
}
