//! One connected workload cluster: a client (bounded by `guard.rs` and `pages.rs`) from its
//! kubeconfig, the controller's caches and watches over it, and the [`Cluster`] a reconcile
//! writes through.

use std::sync::Arc;

use cheiron_controller::{
    Cluster, ClusterCaches, CompiledManagers, NamespaceCache, Routing, SecretCache,
    ServiceAccountCache, Triggers,
};
use cheiron_runtime::{
    api::{ClusterImagePullSecretManager, fleet::KUBECONFIG_KEY},
    metrics::Metrics,
    runtime::{
        API_REQUEST_DEADLINE, DeadlineLayer, client_builder,
        events::{self, EventPublisher},
    },
};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Client,
    runtime::{
        events::Reporter,
        reflector::{self, Store},
    },
};
use tokio::task::AbortHandle;

use crate::{guard, kubeconfig::client_config, pages};

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

/// What connecting to a workload cluster takes of the fleet: the limits its client keeps to,
/// and what the controller's watches over it feed.
pub(crate) struct Connector<'a> {
    /// `--fleet-allow-insecure`.
    pub(crate) allow_insecure: bool,
    /// `--fleet-max-list-pages`.
    pub(crate) max_list_pages: usize,
    /// `--fleet-max-response-bytes`.
    pub(crate) max_response_bytes: usize,
    /// Where a change there asks for a manager's reconcile.
    pub(crate) triggers: &'a Triggers,
    /// The cluster managers, the only kind that acts in a workload cluster.
    pub(crate) managers: &'a Store<ClusterImagePullSecretManager>,
    /// Who the Events written there come from.
    pub(crate) reporter: &'a Reporter,
    pub(crate) metrics: &'a Arc<Metrics>,
}

impl Connector<'_> {
    /// A connection to the cluster `name` from its kubeconfig Secret.
    pub(crate) async fn connect(&self, name: &str, secret: &Secret) -> Result<Workload, String> {
        let value = secret
            .data
            .as_ref()
            .and_then(|d| d.get(KUBECONFIG_KEY))
            .ok_or_else(|| format!("its kubeconfig Secret has no key {KUBECONFIG_KEY}"))?;
        let text = std::str::from_utf8(&value.0)
            .map_err(|_| format!("key {KUBECONFIG_KEY} of its kubeconfig Secret is not text"))?;
        let config = client_config(text, self.allow_insecure).await?;
        let pages = pages::ListPages::new(self.max_list_pages);
        let client = client_builder(config)
            .map_err(|_| "no client can be built from its kubeconfig".to_owned())?
            .with_layer(&guard::layer(self.max_response_bytes))
            // Outside the guard: the answer it reads whole is already bounded in bytes.
            .with_layer(&DeadlineLayer(API_REQUEST_DEADLINE))
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
