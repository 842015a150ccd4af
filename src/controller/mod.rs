//! The controller: materialises each manager's pull secrets into its target namespaces, keeps
//! them in step with their sources, backfills ServiceAccounts, cleans up after itself, and
//! reports status. Built on kube-runtime: one `Controller` per manager kind, fed by shared
//! watches of Namespaces (metadata), ServiceAccounts, cheiron's own Secrets (label selector)
//! and each named source Secret (field selector), never a cluster-wide Secret cache.

mod desired;
mod dockerconfig;
mod kinds;
mod leader;
mod plan;
mod reconcile;
mod serviceaccount;
mod status;
mod triggers;

pub use dockerconfig::{DockerConfig, InvalidSource};
pub use leader::{LeaderElection, LeaderError};
pub use status::reason;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::{StreamExt, future};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use kube::{
    Api, Client, Resource, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        Controller, WatchStreamExt,
        controller::Config as ControllerConfig,
        events::{Event, Recorder, Reporter},
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use self::{
    kinds::{ManagerObject, ManagerRef},
    plan::labelled_owner,
    triggers::{SourceWatches, Triggers},
};
use crate::{
    api::{ClusterImagePullSecretManager, ImagePullSecretManager},
    metrics::Metrics,
    policy::{InvalidManager, Manager, NamespaceMeta},
    source::{ClusterSourceError, Readiness, ensure_crds, managed_secrets_selector},
};

/// Why a reconcile or the controller failed.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// An API call failed.
    #[error("{0}")]
    Kube(#[source] kube::Error),
    /// The manager cannot be compiled (the CRD schema should have rejected it).
    #[error("{0}")]
    Invalid(#[source] InvalidManager),
    /// Adding or removing the finalizer, or the wrapped reconcile, failed.
    #[error("{0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<ControllerError>>),
    /// Cleaning up after a deleted manager is incomplete; retried.
    #[error("cleanup incomplete: {0}")]
    Cleanup(String),
    /// The CRDs are not installed, or the cluster cannot be reached.
    #[error(transparent)]
    Start(#[from] ClusterSourceError),
}

/// Settings of the controller.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Full reconcile of every manager this often, to repair drift nobody announced.
    pub resync: Duration,
    /// Managers reconciled at once, per kind.
    pub concurrency: u16,
    /// `reportingInstance` of Events (the Pod name in a cluster).
    pub instance: String,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        Self {
            resync: Duration::from_secs(600),
            concurrency: 4,
            instance: std::env::var("POD_NAME")
                .or_else(|_| std::env::var("HOSTNAME"))
                .unwrap_or_else(|_| "cheiron".to_owned()),
        }
    }
}

/// Whether the controller can do its job: standing by for the lease, or leading with every
/// cache synced.
#[derive(Debug, Default)]
pub struct ControllerReady(AtomicBool);

impl ControllerReady {
    /// Sets readiness.
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }
}

impl Readiness for ControllerReady {
    fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// What every reconcile shares.
pub struct Context {
    client: Client,
    namespaced: Store<ImagePullSecretManager>,
    cluster: Store<ClusterImagePullSecretManager>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    secrets: Store<Secret>,
    service_accounts: Store<ServiceAccount>,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    sources: SourceWatches,
    triggers: Triggers,
    failures: Mutex<HashMap<String, u32>>,
    clashes: Mutex<std::collections::HashSet<(String, String)>>,
    resync: Duration,
}

fn namespace_meta(ns: &PartialObjectMeta<Namespace>) -> NamespaceMeta {
    NamespaceMeta {
        name: ns.name_any(),
        labels: ns.metadata.labels.clone().unwrap_or_default(),
        annotations: ns.metadata.annotations.clone().unwrap_or_default(),
    }
}

impl Context {
    /// Namespaces that are not being deleted.
    fn live_namespaces(&self) -> Vec<NamespaceMeta> {
        let mut all: Vec<NamespaceMeta> = self
            .namespaces
            .state()
            .iter()
            .filter(|ns| ns.metadata.deletion_timestamp.is_none())
            .map(|ns| namespace_meta(ns))
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    fn namespace(&self, name: &str) -> Option<NamespaceMeta> {
        self.namespaces
            .get(&ObjectRef::new(name))
            .map(|ns| namespace_meta(&ns))
    }

    /// Managers of both kinds that are not being deleted, compiled, oldest first.
    fn live_managers(&self) -> Vec<Manager> {
        let namespaced = self
            .namespaced
            .state()
            .into_iter()
            .filter(|m| m.meta().deletion_timestamp.is_none())
            .map(|m| m.compile());
        let cluster = self
            .cluster
            .state()
            .into_iter()
            .filter(|m| m.meta().deletion_timestamp.is_none())
            .map(|m| m.compile());
        let mut all: Vec<Manager> = namespaced.chain(cluster).filter_map(Result::ok).collect();
        all.sort_by(|a, b| a.seniority().cmp(&b.seniority()));
        all
    }

    fn service_accounts_in(&self, namespace: &str) -> Vec<Arc<ServiceAccount>> {
        self.service_accounts
            .state()
            .into_iter()
            .filter(|sa| sa.metadata.namespace.as_deref() == Some(namespace))
            .collect()
    }

    fn trigger_all_but(&self, except: &ManagerRef) {
        for m in self.namespaced.state() {
            let r = ManagerRef::Namespaced(ObjectRef::from_obj(&*m));
            if r != *except {
                self.triggers.send(r);
            }
        }
        for m in self.cluster.state() {
            let r = ManagerRef::Cluster(ObjectRef::from_obj(&*m));
            if r != *except {
                self.triggers.send(r);
            }
        }
    }

    /// True when `namespace/name` is known to be held by a Secret cheiron does not manage.
    fn is_known_clash(&self, namespace: &str, name: &str) -> bool {
        self.clashes
            .lock()
            .is_ok_and(|c| c.contains(&(namespace.to_owned(), name.to_owned())))
    }

    /// Remembers a clash; true when it is new (worth a warning).
    fn remember_clash(&self, namespace: &str, name: &str) -> bool {
        self.clashes
            .lock()
            .is_ok_and(|mut c| c.insert((namespace.to_owned(), name.to_owned())))
    }

    fn forget_clash(&self, namespace: &str, name: &str) {
        if let Ok(mut c) = self.clashes.lock() {
            c.remove(&(namespace.to_owned(), name.to_owned()));
        }
    }

    /// Counts a failed reconcile of `r` and returns how many came before it.
    fn record_failure(&self, r: &k8s_openapi::api::core::v1::ObjectReference) -> u32 {
        let key = format!("{:?}/{:?}/{:?}", r.kind, r.namespace, r.name);
        let Ok(mut failures) = self.failures.lock() else {
            return 0;
        };
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        *n - 1
    }

    fn reset_failures(&self, r: &k8s_openapi::api::core::v1::ObjectReference) {
        let key = format!("{:?}/{:?}/{:?}", r.kind, r.namespace, r.name);
        if let Ok(mut failures) = self.failures.lock() {
            failures.remove(&key);
        }
    }

    async fn publish(
        &self,
        event: &Event,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
    ) {
        if let Err(e) = self.recorder.publish(event, reference).await {
            tracing::debug!(error = %e, "could not publish an Event");
        }
    }

    async fn publish_on_service_account(&self, sa: &ServiceAccount, reason: &str, note: &str) {
        let event = Event {
            type_: kube::runtime::events::EventType::Normal,
            reason: reason.to_owned(),
            note: Some(note.to_owned()),
            action: "PatchServiceAccount".to_owned(),
            secondary: None,
        };
        self.publish(&event, &sa.object_ref(&())).await;
    }
}

/// Keeps a reflector's store current and turns its events into reconcile requests.
async fn reflect_and_route<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    route: impl Fn(&K),
) where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    watcher(api, config)
        .default_backoff()
        .reflect(writer)
        .for_each(|event| {
            match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => route(&o),
                // The initial list: the controllers reconcile every manager once anyway.
                Ok(
                    watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone,
                ) => {}
                Err(e) => {
                    tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying")
                }
            }
            future::ready(())
        })
        .await;
}

/// Runs the controller until `shutdown` is cancelled. `ready` turns true once every cache has
/// synced.
pub async fn run(
    client: Client,
    options: ControllerOptions,
    metrics: Arc<Metrics>,
    ready: Arc<ControllerReady>,
    shutdown: CancellationToken,
) -> Result<(), ControllerError> {
    ensure_crds(&client).await?;
    let (triggers, streams) = Triggers::new();
    let config = ControllerConfig::default().concurrency(options.concurrency);
    let namespaced_controller = Controller::new(
        Api::<ImagePullSecretManager>::all(client.clone()),
        watcher::Config::default(),
    )
    .with_config(config.clone());
    let cluster_controller = Controller::new(
        Api::<ClusterImagePullSecretManager>::all(client.clone()),
        watcher::Config::default(),
    )
    .with_config(config);

    let (namespaces, namespaces_writer) = reflector::store();
    let (secrets, secrets_writer) = reflector::store();
    let (service_accounts, service_accounts_writer) = reflector::store();
    let reporter = Reporter {
        controller: "cheiron".to_owned(),
        instance: Some(options.instance.clone()),
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        namespaced: namespaced_controller.store(),
        cluster: cluster_controller.store(),
        namespaces,
        secrets,
        service_accounts,
        recorder: Recorder::new(client.clone(), reporter),
        metrics,
        sources: SourceWatches::new(client.clone(), triggers.clone()),
        triggers,
        failures: Mutex::default(),
        clashes: Mutex::default(),
        resync: options.resync,
    });

    let routing = {
        let (c1, c2, c3) = (ctx.clone(), ctx.clone(), ctx.clone());
        future::join3(
            reflect_and_route(
                Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
                watcher::Config::default(),
                namespaces_writer,
                move |ns| {
                    c1.triggers
                        .namespace_changed(&ns.name_any(), &c1.namespaced, &c1.cluster)
                },
            ),
            reflect_and_route(
                Api::<Secret>::all(client.clone()),
                watcher::Config::default().labels(&managed_secrets_selector()),
                secrets_writer,
                move |secret| {
                    if let Some(owner) = labelled_owner(secret) {
                        c2.triggers.send(ManagerRef::from(&owner));
                    }
                },
            ),
            reflect_and_route(
                Api::<ServiceAccount>::all(client.clone()),
                watcher::Config::default(),
                service_accounts_writer,
                move |sa| {
                    let ns = sa.namespace().unwrap_or_default();
                    let meta = c3
                        .namespace(&ns)
                        .unwrap_or_else(|| NamespaceMeta::named(ns.as_str()));
                    c3.triggers
                        .service_account_changed(&meta, &c3.namespaced, &c3.cluster);
                },
            ),
        )
    };
    let routing = tokio::spawn(routing);
    // Never reconcile against half-filled caches: that would re-create what exists.
    let synced = future::try_join3(
        ctx.namespaces.wait_until_ready(),
        ctx.secrets.wait_until_ready(),
        ctx.service_accounts.wait_until_ready(),
    );
    tokio::select! {
        result = synced => if result.is_err() {
            routing.abort();
            return Ok(());
        },
        () = shutdown.cancelled() => {
            routing.abort();
            return Ok(());
        }
    }

    ready.set(false);
    let namespaced_store = ctx.namespaced.clone();
    let cluster_store = ctx.cluster.clone();
    let ready_flag = ready.clone();
    let readiness = tokio::spawn(async move {
        // Polled rather than awaited: a store's readiness wakes only one waiter, and the
        // controllers' own runners already wait on these two.
        use futures::FutureExt;
        loop {
            let namespaced = namespaced_store.wait_until_ready().now_or_never();
            let cluster = cluster_store.wait_until_ready().now_or_never();
            if matches!((namespaced, cluster), (Some(Ok(())), Some(Ok(())))) {
                ready_flag.set(true);
                tracing::info!("controller caches synced");
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    let namespaced = namespaced_controller
        .reconcile_on(streams.namespaced)
        .graceful_shutdown_on(shutdown.clone().cancelled_owned())
        .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
        .for_each(|result| {
            if let Err(e) = result {
                tracing::debug!(kind = "ImagePullSecretManager", error = %e, "controller event");
            }
            future::ready(())
        });
    let cluster = cluster_controller
        .reconcile_on(streams.cluster)
        .graceful_shutdown_on(shutdown.clone().cancelled_owned())
        .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
        .for_each(|result| {
            if let Err(e) = result {
                tracing::debug!(kind = "ClusterImagePullSecretManager", error = %e, "controller event");
            }
            future::ready(())
        });
    tracing::info!("controller started");
    future::join(namespaced, cluster).await;
    routing.abort();
    readiness.abort();
    ready.set(false);
    tracing::info!("controller stopped");
    Ok(())
}
