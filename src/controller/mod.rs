//! The controller: materialises each manager's pull secrets into its target namespaces, keeps
//! them in step with their sources, backfills ServiceAccounts, cleans up after itself, and
//! reports status. Built on kube-runtime: one `Controller` per manager kind, fed by shared
//! watches of Namespaces (metadata), ServiceAccounts, cheiron's own Secrets (label selector)
//! and each named source Secret (field selector), never a cluster-wide Secret cache; and a
//! metadata watch of the Pods the webhook labelled as referencing a missing Secret
//! ([`missing_secrets`]), never of all Pods.
//!
//! ```text
//!   run ─► triggers::route (watches → caches + reconcile requests)
//!     └──► Controller<ImagePullSecretManager> ─┐
//!          Controller<ClusterImagePullSecretManager> ─┴► reconcile::reconcile(manager, Context)
//!                 desired (pure) → plan (pure) → writes → serviceaccount (pure) → status (pure)
//! ```
//!
//! Dependencies run one way: `mod` → `reconcile` → `write` → `context` →
//! `triggers`/`source_watches`.

mod audit_gauge;
mod backoff;
mod context;
mod error;
mod events;
#[cfg(test)]
pub(crate) mod fake_api;
pub mod fleet;
mod interned;
mod kinds;
mod leader;
pub mod missing_secrets;
mod namespaces;
mod node_credentials;
mod other_clusters;
pub mod pace;
mod plan;
mod provided;
mod reconcile;
mod scopes;
mod secrets;
mod service_accounts;
mod serviceaccount;
pub mod source_watches;
mod status;
mod triggers;
mod write;

pub use error::{ControllerError, Issue, IssueKind};
pub use leader::LeaderElection;
pub use serviceaccount::SERVICE_ACCOUNT_EVENTS_PER_RECONCILE;

use std::{sync::Arc, time::Duration};

use futures::{FutureExt, StreamExt, future};
use kube::{
    Api, Client,
    runtime::{
        Controller,
        controller::Config as ControllerConfig,
        events::Reporter,
        reflector::{self, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use self::{
    context::{Caches, Context},
    kinds::ManagerObject,
    service_accounts::ServiceAccountCache,
    triggers::{Routing, Triggers},
};
use crate::{
    admin::ReadyFlag,
    api::ensure_crds,
    credential::{CredentialProviders, ProviderSettings},
    metrics::Metrics,
};

/// Settings of the controller.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Full reconcile of every manager this often, to repair drift nobody announced.
    pub resync: Duration,
    /// Managers reconciled at once, per kind.
    pub concurrency: u16,
    /// `reportingInstance` of Events (the Pod name in a cluster).
    pub instance: String,
    /// Most source Secrets watched at once (see [`source_watches::SourceWatches`]).
    pub max_source_watches: usize,
    /// The credential-provider exec plugins (none by default).
    pub credentials: ProviderSettings,
    /// Workload clusters (off by default; docs/fleet.md).
    pub fleet: fleet::FleetOptions,
    /// How long after a Pod's creation a pull secret the webhook found missing may still be
    /// missing before a Warning Event goes on the Pod ([`missing_secrets`]).
    pub missing_secret_grace: Duration,
    /// Where the node agents' report Leases are (cheiron's namespace; `None`: the client's
    /// default namespace).
    pub node_report_namespace: Option<String>,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        Self {
            resync: Duration::from_secs(600),
            concurrency: 4,
            instance: "cheiron".to_owned(),
            max_source_watches: source_watches::DEFAULT_MAX_SOURCE_WATCHES,
            credentials: ProviderSettings::default(),
            fleet: fleet::FleetOptions::default(),
            missing_secret_grace: missing_secrets::DEFAULT_GRACE,
            node_report_namespace: None,
        }
    }
}

/// Runs the controller until `shutdown` is cancelled. `ready` turns true once every cache has
/// synced.
pub async fn run(
    client: Client,
    options: ControllerOptions,
    metrics: Arc<Metrics>,
    ready: Arc<ReadyFlag>,
    shutdown: CancellationToken,
) -> Result<(), ControllerError> {
    let ControllerOptions {
        resync,
        concurrency,
        instance,
        max_source_watches,
        credentials,
        fleet,
        missing_secret_grace,
        node_report_namespace,
    } = options;
    ensure_crds(&client).await?;
    let config = ControllerConfig::default().concurrency(concurrency);
    let namespaced = controller::<crate::api::ImagePullSecretManager>(&client, &config);
    let cluster = controller::<crate::api::ClusterImagePullSecretManager>(&client, &config);

    let (triggers, streams) = Triggers::new();
    let namespaces = namespaces::NamespaceCache::default();
    let secrets = secrets::SecretCache::default();
    let service_accounts = ServiceAccountCache::default();
    let caches = Caches {
        namespaced: namespaced.store(),
        cluster: cluster.store(),
        namespaces,
        secrets: secrets.clone(),
        service_accounts: service_accounts.clone(),
    };
    let routing = Routing {
        triggers: triggers.clone(),
        namespaced: caches.namespaced.clone(),
        cluster: caches.cluster.clone(),
        namespaces: caches.namespaces.clone(),
        secrets: secrets.clone(),
        service_accounts: service_accounts.clone(),
        compiled: Default::default(),
        untrusted: false,
    };
    let reporter = Reporter {
        controller: "cheiron".to_owned(),
        instance: Some(instance),
    };
    let recorder =
        events::EventPublisher::new(client.clone(), reporter.clone(), events::MAX_CACHED_EVENTS);
    let node_reporter = reporter.clone();
    let credentials =
        CredentialProviders::new(credentials, Some(client.clone()), Some(metrics.clone()));
    {
        let triggers = triggers.clone();
        credentials.on_change(Arc::new(move |id| {
            triggers.send(kinds::ManagerRef::from(id))
        }));
    }
    let cluster_managers = caches.cluster.clone();
    let ctx = Context::new(
        client.clone(),
        caches,
        recorder,
        metrics.clone(),
        triggers.clone(),
        resync,
        max_source_watches,
    )
    .with_credentials(credentials)
    .with_node_namespace(
        node_report_namespace.unwrap_or_else(|| client.default_namespace().to_owned()),
    );
    let (ctx, _stop_fleet) = if fleet.enabled {
        let fleet = Arc::new(fleet::Fleet::new(
            client.clone(),
            fleet,
            metrics,
            triggers,
            cluster_managers,
            reporter,
        ));
        let task = tokio::spawn(fleet.clone().run());
        (
            Arc::new(ctx.with_other_clusters(fleet)),
            Some(AbortOnDrop(task.abort_handle())),
        )
    } else {
        (Arc::new(ctx), None)
    };
    let node_status = tokio::spawn(crate::node::status::keep(
        client.clone(),
        ctx.cluster.clone(),
        ctx.node_namespace.clone(),
        node_reporter,
    ));
    let _stop_node_status = AbortOnDrop(node_status.abort_handle());
    let routing = tokio::spawn(triggers::route(client, routing));
    let _stop_routing = AbortOnDrop(routing.abort_handle());

    // Never reconcile against half-filled caches: that would re-create what exists.
    let (service_accounts, namespaces, secrets) = (
        ctx.service_accounts.clone(),
        ctx.namespaces.clone(),
        ctx.secrets.clone(),
    );
    let synced = async move {
        while !service_accounts.is_ready() || !namespaces.is_ready() || !secrets.is_ready() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    // Not ready while the caches fill: set before waiting, not after, so that a standby that
    // has just taken over does not turn unready after its first writes.
    ready.set(false);
    tokio::select! {
        () = synced => {},
        () = shutdown.cancelled() => return Ok(()),
    }
    let readiness = tokio::spawn(mark_ready(
        ctx.namespaced.clone(),
        ctx.cluster.clone(),
        ready.clone(),
    ));
    let _stop_readiness = AbortOnDrop(readiness.abort_handle());
    let audit = tokio::spawn(audit_gauge::keep(
        ctx.clone(),
        audit_gauge::FIRST_COUNT_AFTER,
        ctx.resync,
    ));
    let _stop_audit = AbortOnDrop(audit.abort_handle());
    let missing = tokio::spawn(missing_secrets::watch(ctx.clone(), missing_secret_grace));
    let _stop_missing = AbortOnDrop(missing.abort_handle());

    tracing::info!(
        service_accounts = ctx.service_accounts.len(),
        secrets = ctx.secrets.len(),
        "controller started"
    );
    future::join(
        drive(namespaced, streams.namespaced, ctx.clone(), &shutdown),
        drive(cluster, streams.cluster, ctx, &shutdown),
    )
    .await;
    ready.set(false);
    tracing::info!("controller stopped");
    Ok(())
}

/// The kube-runtime controller of one manager kind.
fn controller<K: ManagerObject>(client: &Client, config: &ControllerConfig) -> Controller<K> {
    Controller::new(Api::<K>::all(client.clone()), watcher::Config::default())
        .with_config(config.clone())
}

/// Runs one kind's controller on its trigger stream until `shutdown`.
async fn drive<K: ManagerObject>(
    controller: Controller<K>,
    triggers: impl futures::Stream<Item = reflector::ObjectRef<K>> + Send + 'static,
    ctx: Arc<Context>,
    shutdown: &CancellationToken,
) {
    controller
        .reconcile_on(triggers)
        .graceful_shutdown_on(shutdown.clone().cancelled_owned())
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| {
            if let Err(e) = result {
                tracing::debug!(kind = K::KIND.as_str(), error = %e, "controller event");
            }
            future::ready(())
        })
        .await;
}

/// Sets `ready` once both manager stores have their first list. Polled rather than awaited:
/// a store's readiness wakes only one waiter, and the controllers' own runners already wait
/// on these two.
async fn mark_ready(
    namespaced: Store<crate::api::ImagePullSecretManager>,
    cluster: Store<crate::api::ClusterImagePullSecretManager>,
    ready: Arc<ReadyFlag>,
) {
    loop {
        let namespaced = namespaced.wait_until_ready().now_or_never();
        let cluster = cluster.wait_until_ready().now_or_never();
        if matches!((namespaced, cluster), (Some(Ok(())), Some(Ok(())))) {
            ready.set(true);
            tracing::info!("controller caches synced");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Aborts a spawned task when the controller returns, whichever way.
pub(super) struct AbortOnDrop(pub(super) tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
