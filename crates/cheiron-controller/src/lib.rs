//! The controller: materialises each manager's pull secrets into its target namespaces, keeps
//! them in step with their sources, backfills ServiceAccounts, cleans up after itself, and
//! reports status. Built on kube-runtime: one `Controller` per manager kind, fed by shared
//! watches of Namespaces (metadata), ServiceAccounts, cheiron's own Secrets (label selector)
//! and each named source Secret (field selector), never a cluster-wide Secret cache.
//!
//! ```text
//!   Controller::new ─► caches, triggers, the two kind controllers (nothing started)
//!   Controller::run ─► triggers::route (watches → caches + reconcile requests)
//!     └──► Controller<ImagePullSecretManager> ─┐
//!          Controller<ClusterImagePullSecretManager> ─┴► reconcile::reconcile(manager, Context)
//!                 desired (pure) → plan (pure) → writes into a Cluster → pull_entries (pure)
//!                 → the status its findings make (core, pure); other clusters and node
//!                 agents through the seams
//! ```
//!
//! One reconcile writes into a [`Cluster`] (the controller's own, or a workload cluster the
//! fleet built); the other places a manager reaches are seams ([`OtherClusters`], [`Nodes`])
//! that the rooms around the controller implement, and so is credential health ([`Health`]):
//! the reconcile hands it what it writes and reads back what registries said. The controller
//! names none of them: the command line's composition root (`src/cli/controller.rs`) builds
//! the controller, starts the capabilities around it and hands it the seams. Dependencies inside run one way:
//! `mod` → `reconcile` → `write` → `cluster`/`context` → `triggers`/`source_watches`.

mod cluster;
mod context;
mod error;
mod health;
mod interned;
mod kinds;
mod namespaces;
mod nodes;
mod other_clusters;
mod plan;
mod pull_entries;
mod reconcile;
mod scopes;
mod secrets;
mod service_accounts;
pub mod source_watches;
mod sync;
mod triggers;
mod write;

pub use cluster::{Cluster, ClusterCaches};
pub use error::ControllerError;
pub use health::{Health, HealthReport, OnChange};
pub use kinds::{ManagerObject, ManagerRef, ManagerStores};
pub use namespaces::NamespaceCache;
pub use nodes::Nodes;
pub use other_clusters::{CleanedUp, OtherClusters, Synced};
pub use pull_entries::{SERVICE_ACCOUNT_EVENTS_PER_RECONCILE, ServiceAccountReport};
pub use secrets::SecretCache;
pub use service_accounts::ServiceAccountCache;
pub use sync::{ClusterSync, sync_in};
pub use triggers::{CompiledManagers, Routing, Triggers, route};

pub use cheiron_core::findings::{Issue, IssueKind};

use std::{sync::Arc, time::Duration};

use cheiron_credential::CredentialProviders;
use cheiron_runtime::{
    admin::ReadyFlag,
    api::{ClusterImagePullSecretManager, ImagePullSecretManager, ensure_crds},
    metrics::Metrics,
    runtime::events::{self, EventPublisher},
};
use futures::{StreamExt, future};
use kube::{
    Api, Client,
    runtime::{
        Controller as KindController, controller::Config as ControllerConfig, events::Reporter,
        reflector, watcher,
    },
};
use tokio_util::sync::CancellationToken;

use self::{context::Context, triggers::TriggerStreams};

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
}

impl Default for ControllerOptions {
    fn default() -> Self {
        Self {
            resync: Duration::from_secs(600),
            concurrency: 4,
            instance: "cheiron".to_owned(),
            max_source_watches: source_watches::DEFAULT_MAX_SOURCE_WATCHES,
        }
    }
}

/// The controller, built and not yet running. The command line's composition root
/// (`src/cli/controller.rs`) takes from it what the capabilities around it read (the
/// stores, the caches, the trigger sender, the Event reporter), gives it the other clusters
/// it reaches, and then [`Controller::run`]s it.
pub struct Controller {
    namespaced: KindController<ImagePullSecretManager>,
    cluster: KindController<ClusterImagePullSecretManager>,
    streams: TriggerStreams,
    routing: Routing,
    reporter: Reporter,
    ctx: Context,
}

impl Controller {
    /// The controller of the cluster `client` reaches: its watches and caches set up, nothing
    /// started. Fails when the CRDs are not installed.
    pub async fn new(
        client: Client,
        options: ControllerOptions,
        metrics: Arc<Metrics>,
    ) -> Result<Self, ControllerError> {
        let ControllerOptions {
            resync,
            concurrency,
            instance,
            max_source_watches,
        } = options;
        ensure_crds(&client).await?;
        let config = ControllerConfig::default().concurrency(concurrency);
        let namespaced = kind_controller::<ImagePullSecretManager>(&client, &config);
        let cluster = kind_controller::<ClusterImagePullSecretManager>(&client, &config);
        let managers = ManagerStores {
            namespaced: namespaced.store(),
            cluster: cluster.store(),
        };

        let (triggers, streams) = Triggers::new();
        let caches = ClusterCaches {
            namespaces: NamespaceCache::default(),
            secrets: SecretCache::default(),
            service_accounts: ServiceAccountCache::default(),
        };
        let routing = Routing {
            triggers: triggers.clone(),
            namespaced: managers.namespaced.clone(),
            cluster: managers.cluster.clone(),
            namespaces: caches.namespaces.clone(),
            secrets: caches.secrets.clone(),
            service_accounts: caches.service_accounts.clone(),
            compiled: Default::default(),
            describe_error: triggers::trusted_error,
        };
        let reporter = Reporter {
            controller: "cheiron".to_owned(),
            instance: Some(instance),
        };
        let recorder =
            EventPublisher::new(client.clone(), reporter.clone(), events::MAX_CACHED_EVENTS);
        let home = Cluster::new(client, caches, recorder, metrics);
        let ctx = Context::new(home, managers, triggers, resync, max_source_watches);
        Ok(Self {
            namespaced,
            cluster,
            streams,
            routing,
            reporter,
            ctx,
        })
    }

    /// The controller writing a cluster manager's Secrets into `others` too.
    pub fn with_other_clusters(mut self, others: Arc<dyn OtherClusters>) -> Self {
        self.ctx = self.ctx.with_other_clusters(others);
        self
    }

    /// The controller resolving credential-provider entries through `providers` (none by
    /// default): a credential that changes asks for the reconcile of the managers using it.
    pub fn with_credentials(mut self, providers: CredentialProviders) -> Self {
        let triggers = self.ctx.triggers.clone();
        providers.on_change(Arc::new(move |id| {
            triggers.send(kinds::ManagerRef::from(id))
        }));
        self.ctx = self.ctx.with_credentials(providers);
        self
    }

    /// The controller checking credentials through `health` (docs/credential-health.md): a
    /// result that changes asks for the reconcile of the managers it concerns.
    pub fn with_health(mut self, health: Arc<dyn Health>) -> Self {
        let triggers = self.ctx.triggers.clone();
        health.on_change(Arc::new(move |id| {
            triggers.send(kinds::ManagerRef::from(id))
        }));
        self.ctx = self.ctx.with_health(health);
        self
    }

    /// The controller handing mode Node managers' credentials to `nodes`.
    pub fn with_nodes(mut self, nodes: Arc<dyn Nodes>) -> Self {
        self.ctx = self.ctx.with_nodes(nodes);
        self
    }

    /// The managers of both kinds (filled once the controller runs).
    pub fn managers(&self) -> ManagerStores {
        self.ctx.managers.clone()
    }

    /// The sender of reconcile requests.
    pub fn triggers(&self) -> Triggers {
        self.ctx.triggers.clone()
    }

    /// Who the controller's Events say reported them.
    pub fn reporter(&self) -> Reporter {
        self.reporter.clone()
    }

    /// The caches of the controller's own cluster.
    pub fn caches(&self) -> ClusterCaches {
        self.ctx.home.caches()
    }

    /// The recorder of the controller's Events, for the capabilities around it that publish
    /// some too (one bounded cache for all of them).
    pub fn recorder(&self) -> Arc<EventPublisher> {
        self.ctx.home.recorder.clone()
    }

    /// Resolves once the controller's caches of its own cluster have listed everything.
    pub fn synced(&self) -> impl Future<Output = ()> + Send + 'static {
        Self::synced_of(&self.ctx)
    }

    /// Runs the routing of watch events and both kinds' controllers until `shutdown` is
    /// cancelled. `ready` turns true once every cache has synced.
    pub async fn run(
        self,
        ready: Arc<ReadyFlag>,
        shutdown: CancellationToken,
    ) -> Result<(), ControllerError> {
        let Self {
            namespaced,
            cluster,
            streams,
            routing,
            reporter: _,
            ctx,
        } = self;
        let synced = Self::synced_of(&ctx);
        let ctx = Arc::new(ctx);
        // Aborted when this returns, whichever way.
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(triggers::route(ctx.home.client.clone(), routing));

        // Never reconcile against half-filled caches: that would re-create what exists.
        // Not ready while the caches fill: set before waiting, not after, so that a standby
        // that has just taken over does not turn unready after its first writes.
        ready.set(false);
        tokio::select! {
            () = synced => {},
            () = shutdown.cancelled() => return Ok(()),
        }
        tasks.spawn(mark_ready(ctx.managers.clone(), ready.clone()));

        tracing::info!(
            service_accounts = ctx.home.service_accounts.len(),
            secrets = ctx.home.secrets.len(),
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

    fn synced_of(ctx: &Context) -> impl Future<Output = ()> + Send + 'static {
        let caches = ctx.home.caches();
        async move {
            while !caches.synced() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The kube-runtime controller of one manager kind.
fn kind_controller<K: ManagerObject>(
    client: &Client,
    config: &ControllerConfig,
) -> KindController<K> {
    KindController::new(Api::<K>::all(client.clone()), watcher::Config::default())
        .with_config(config.clone())
}

/// Runs one kind's controller on its trigger stream until `shutdown`.
async fn drive<K: ManagerObject>(
    controller: KindController<K>,
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
async fn mark_ready(managers: ManagerStores, ready: Arc<ReadyFlag>) {
    while !managers.ready() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ready.set(true);
    tracing::info!("controller caches synced");
}
