//! What every reconcile shares: the client, the caches, the Event recorder, metrics, the
//! trigger senders, and the controller's small memories (known name clashes, failure counts
//! for backoff). Reading the caches goes through here, so a reconcile never scans more than
//! it needs to.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    runtime::{
        events::{Event, EventType},
        reflector::Store,
    },
};

use super::{
    backoff::Backoff,
    events::EventPublisher,
    kinds::ManagerRef,
    namespaces::{LiveNamespaces, NamespaceCache},
    other_clusters::OtherClusters,
    scopes::Scopes,
    secrets::SecretCache,
    service_accounts::{ServiceAccountCache, ServiceAccountRecord},
    source_watches::SourceWatches,
    triggers::Triggers,
};
use crate::{
    api::{ClusterImagePullSecretManager, ImagePullSecretManager},
    credential::CredentialProviders,
    metrics::Metrics,
    policy::{Manager, ManagerId, NamespaceMeta, live_managers},
};

/// What every reconcile shares.
pub struct Context {
    pub(super) client: Client,
    pub(super) namespaced: Store<ImagePullSecretManager>,
    pub(super) cluster: Store<ClusterImagePullSecretManager>,
    pub(super) namespaces: NamespaceCache,
    pub(super) secrets: SecretCache,
    pub(super) service_accounts: ServiceAccountCache,
    pub(super) recorder: EventPublisher,
    pub(super) metrics: Arc<Metrics>,
    pub(super) sources: SourceWatches,
    pub(super) triggers: Triggers,
    pub(super) resync: Duration,
    pub(super) scopes: Scopes,
    pub(super) credentials: CredentialProviders,
    /// The other clusters a cluster manager's Secrets are written to: the workload clusters,
    /// when `--fleet` is on (only the management cluster's context).
    pub(super) others: Option<Arc<dyn OtherClusters>>,
    /// The node namespace: where mode Node managers' credentials are handed to the node
    /// agents (controller/node_credentials.rs), and where their reports are.
    pub(super) node_namespace: String,
    failures: Backoff<String>,
    clashes: Mutex<HashSet<(String, String)>>,
}

/// The caches a [`Context`] reads, filled by the watches of [`super::triggers::route`].
pub(super) struct Caches {
    pub namespaced: Store<ImagePullSecretManager>,
    pub cluster: Store<ClusterImagePullSecretManager>,
    pub namespaces: NamespaceCache,
    pub secrets: SecretCache,
    pub service_accounts: ServiceAccountCache,
}

impl Context {
    /// A context over `caches`, writing through `client`.
    pub(super) fn new(
        client: Client,
        caches: Caches,
        recorder: EventPublisher,
        metrics: Arc<Metrics>,
        triggers: Triggers,
        resync: Duration,
        max_source_watches: usize,
    ) -> Self {
        let Caches {
            namespaced,
            cluster,
            namespaces,
            secrets,
            service_accounts,
        } = caches;
        let node_namespace = client.default_namespace().to_owned();
        Self {
            sources: SourceWatches::new(client.clone(), triggers.clone(), max_source_watches),
            client,
            namespaced,
            cluster,
            namespaces,
            secrets,
            service_accounts,
            recorder,
            metrics,
            triggers,
            resync,
            scopes: Scopes::default(),
            credentials: CredentialProviders::new(Default::default(), None, None),
            others: None,
            node_namespace,
            failures: Backoff::default(),
            clashes: Mutex::default(),
        }
    }

    /// The context with these credential providers (none by default).
    pub(super) fn with_credentials(mut self, credentials: CredentialProviders) -> Self {
        self.credentials = credentials;
        self
    }

    /// The context with this node namespace (docs/node.md).
    pub(super) fn with_node_namespace(mut self, namespace: String) -> Self {
        self.node_namespace = namespace;
        self
    }

    /// The context acting in other clusters too.
    pub(super) fn with_other_clusters(mut self, others: Arc<dyn OtherClusters>) -> Self {
        self.others = Some(others);
        self
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

    /// Managers of both kinds that act (see [`live_managers`]), oldest first.
    pub(super) fn live_managers(&self) -> Vec<Manager> {
        let namespaced = self.namespaced.state();
        let cluster = self.cluster.state();
        live_managers(
            namespaced.iter().map(|m| &**m),
            cluster.iter().map(|m| &**m),
        )
        .0
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

    /// Asks for a reconcile of each of `managers`.
    pub(super) fn trigger(&self, managers: &[ManagerId]) {
        for id in managers {
            self.triggers.send(ManagerRef::from(id));
        }
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

    /// Counts a failed reconcile of `r` and returns how many came before it.
    pub(super) fn record_failure(&self, r: &ObjectReference) -> u32 {
        self.failures.record_failure(failure_key(r))
    }

    pub(super) fn reset_failures(&self, r: &ObjectReference) {
        self.failures.reset(&failure_key(r));
    }

    /// Publishes an Event; a failure to publish is logged, never fatal.
    pub(super) async fn publish(&self, event: &Event, reference: &ObjectReference) {
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

fn failure_key(r: &ObjectReference) -> String {
    format!("{:?}/{:?}/{:?}", r.kind, r.namespace, r.name)
}
