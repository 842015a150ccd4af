//! One cluster a reconcile writes into: its client, the caches of what is there, its Event
//! recorder, the remembered target namespaces of each manager, and the names held there by
//! Secrets cheiron does not manage. The controller's own cluster is one
//! ([`super::context::Context::home`]); with `--fleet`, each workload cluster is another, built
//! by the fleet (docs/fleet.md). The writes in `write.rs` and [`super::sync::sync_in`]
//! take only this, so they act the same in either.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
};

use cheiron_core::policy::NamespaceMeta;
use cheiron_runtime::{metrics::Metrics, runtime::events::EventPublisher};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    runtime::events::{Event, EventType},
};

use super::{
    namespaces::{LiveNamespaces, NamespaceCache},
    scopes::Scopes,
    secrets::SecretCache,
    service_accounts::{ServiceAccountCache, ServiceAccountRecord},
};

/// One cluster a reconcile writes into.
pub struct Cluster {
    pub(super) client: Client,
    pub(super) namespaces: NamespaceCache,
    pub(super) secrets: SecretCache,
    pub(super) service_accounts: ServiceAccountCache,
    pub(super) recorder: Arc<EventPublisher>,
    /// The counters the writes bump (shared by every cluster).
    pub(super) metrics: Arc<Metrics>,
    pub(super) scopes: Scopes,
    clashes: Mutex<HashSet<(String, String)>>,
}

/// The caches of one cluster, filled by the watches of [`super::triggers::route`]; cheap to
/// clone (shared).
#[derive(Clone)]
pub struct ClusterCaches {
    pub namespaces: NamespaceCache,
    pub secrets: SecretCache,
    pub service_accounts: ServiceAccountCache,
}

impl ClusterCaches {
    /// True once their watches have listed everything.
    pub fn synced(&self) -> bool {
        self.namespaces.is_ready() && self.secrets.is_ready() && self.service_accounts.is_ready()
    }
}

impl Cluster {
    /// The cluster `client` reaches, seen through `caches`.
    pub fn new(
        client: Client,
        caches: ClusterCaches,
        recorder: EventPublisher,
        metrics: Arc<Metrics>,
    ) -> Self {
        let ClusterCaches {
            namespaces,
            secrets,
            service_accounts,
        } = caches;
        Self {
            client,
            namespaces,
            secrets,
            service_accounts,
            recorder: Arc::new(recorder),
            metrics,
            scopes: Scopes::default(),
            clashes: Mutex::default(),
        }
    }

    /// Its client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Its caches (shared, not copied).
    pub fn caches(&self) -> ClusterCaches {
        ClusterCaches {
            namespaces: self.namespaces.clone(),
            secrets: self.secrets.clone(),
            service_accounts: self.service_accounts.clone(),
        }
    }

    /// True once its watches have listed everything.
    pub fn synced(&self) -> bool {
        self.caches().synced()
    }

    /// Namespaces that are not being deleted, by name.
    pub(super) fn live_namespaces(&self) -> LiveNamespaces {
        self.namespaces.live()
    }

    /// One namespace from the cache.
    pub(super) fn namespace(&self, name: &str) -> Option<NamespaceMeta> {
        self.namespaces
            .get(name)
            .map(|ns| NamespaceMeta::clone(&ns))
    }

    /// One namespace from the cache, or a namespace with no labels if the cache lacks it.
    pub(super) fn namespace_or_bare(&self, name: &str) -> NamespaceMeta {
        self.namespace(name)
            .unwrap_or_else(|| NamespaceMeta::named(name))
    }

    /// The ServiceAccounts of `namespace` for which `keep` is true (an index lookup, not a
    /// scan of the cluster's).
    pub(super) fn service_accounts_in(
        &self,
        namespace: &str,
        keep: impl FnMut(&ServiceAccountRecord) -> bool,
    ) -> Vec<Arc<ServiceAccountRecord>> {
        self.service_accounts.matching(namespace, keep)
    }

    /// True when `namespace/name` is known to be held by a Secret cheiron does not manage.
    pub(super) fn is_known_clash(&self, namespace: &str, name: &str) -> bool {
        self.clashes
            .lock()
            .is_ok_and(|c| c.contains(&(namespace.to_owned(), name.to_owned())))
    }

    /// Remembers a clash; true when it is new (worth a warning).
    pub(super) fn remember_clash(&self, namespace: &str, name: &str) -> bool {
        self.clashes
            .lock()
            .is_ok_and(|mut c| c.insert((namespace.to_owned(), name.to_owned())))
    }

    pub(super) fn forget_clash(&self, namespace: &str, name: &str) {
        if let Ok(mut c) = self.clashes.lock() {
            c.remove(&(namespace.to_owned(), name.to_owned()));
        }
    }

    /// Publishes an Event in this cluster; a failure to publish is logged, never fatal.
    pub async fn publish(&self, event: &Event, reference: &ObjectReference) {
        if let Err(e) = self.recorder.publish(event, reference).await {
            tracing::debug!(error = %e, "could not publish an Event");
        }
    }

    pub(super) async fn publish_on_service_account(
        &self,
        sa: &ServiceAccountRecord,
        reason: &str,
        note: &str,
    ) {
        let event = Event {
            type_: EventType::Normal,
            reason: reason.to_owned(),
            note: Some(note.to_owned()),
            action: "PatchServiceAccount".to_owned(),
            secondary: None,
        };
        self.publish(&event, &sa.object_ref()).await;
    }
}
