//! What makes a manager reconcile besides its own changes: Namespaces, ServiceAccounts and
//! cheiron's own Secrets changing (one watch each, shared by both kinds, each filling the
//! cache the reconciles read), routed to the managers each change can concern. Source
//! Secrets have their own watches (see [`super::source_watches`]).

use futures::{channel::mpsc, future};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::{
    Api, Client, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        reflector::{ObjectRef, Store, store::Writer},
        watcher,
    },
};

use super::{
    kinds::ManagerRef,
    plan::{SecretMeta, keep_data_owners, labelled_owner},
};
use crate::{
    api::{ClusterImagePullSecretManager, ImagePullSecretManager, Mode, label},
    policy::{Manager, NamespaceMeta},
    watch,
};

/// Senders into the two controllers' `reconcile_on` streams.
#[derive(Clone)]
pub struct Triggers {
    namespaced: mpsc::UnboundedSender<ObjectRef<ImagePullSecretManager>>,
    cluster: mpsc::UnboundedSender<ObjectRef<ClusterImagePullSecretManager>>,
}

/// The receiving ends, handed to the controllers.
pub struct TriggerStreams {
    /// For the `ImagePullSecretManager` controller.
    pub namespaced: mpsc::UnboundedReceiver<ObjectRef<ImagePullSecretManager>>,
    /// For the `ClusterImagePullSecretManager` controller.
    pub cluster: mpsc::UnboundedReceiver<ObjectRef<ClusterImagePullSecretManager>>,
}

impl Triggers {
    /// A connected pair.
    pub fn new() -> (Self, TriggerStreams) {
        let (namespaced, namespaced_rx) = mpsc::unbounded();
        let (cluster, cluster_rx) = mpsc::unbounded();
        (
            Self {
                namespaced,
                cluster,
            },
            TriggerStreams {
                namespaced: namespaced_rx,
                cluster: cluster_rx,
            },
        )
    }

    /// Asks for a reconcile of `manager`. A closed channel means the controllers stopped.
    pub fn send(&self, manager: ManagerRef) {
        // Sending fails only once the controllers have stopped; then there is nothing to do.
        match manager {
            ManagerRef::Namespaced(r) => {
                let _ = self.namespaced.unbounded_send(r);
            }
            ManagerRef::Cluster(r) => {
                let _ = self.cluster.unbounded_send(r);
            }
        }
    }

    /// Asks for a reconcile of every manager that may act on `namespace`: every cluster manager
    /// and the namespaced managers in it.
    pub fn namespace_changed(
        &self,
        namespace: &str,
        namespaced: &Store<ImagePullSecretManager>,
        cluster: &Store<ClusterImagePullSecretManager>,
    ) {
        for m in cluster.state() {
            self.send(ManagerRef::Cluster(ObjectRef::from_obj(&*m)));
        }
        for m in namespaced.state() {
            if m.metadata.namespace.as_deref() == Some(namespace) {
                self.send(ManagerRef::Namespaced(ObjectRef::from_obj(&*m)));
            }
        }
    }

    /// Asks for a reconcile of the ServiceAccount-mode managers whose scope holds `namespace`:
    /// only they backfill its ServiceAccounts.
    pub fn service_account_changed(
        &self,
        namespace: &NamespaceMeta,
        namespaced: &Store<ImagePullSecretManager>,
        cluster: &Store<ClusterImagePullSecretManager>,
    ) {
        for m in cluster.state() {
            let acts = m.spec.mode == Mode::ServiceAccount
                && Manager::from_cluster(&m).is_ok_and(|c| c.scope.contains(namespace));
            if acts {
                self.send(ManagerRef::Cluster(ObjectRef::from_obj(&*m)));
            }
        }
        for m in namespaced.state() {
            if m.spec.mode == Mode::ServiceAccount
                && m.metadata.namespace.as_deref() == Some(namespace.name.as_str())
            {
                self.send(ManagerRef::Namespaced(ObjectRef::from_obj(&*m)));
            }
        }
    }
}

/// The writers of the caches that the routed watches fill.
pub(super) struct Writers {
    pub namespaces: Writer<PartialObjectMeta<Namespace>>,
    pub secrets: Writer<SecretMeta>,
    pub service_accounts: Writer<ServiceAccount>,
}

/// Where watch events are routed: the trigger senders, and the caches that say which
/// managers a change can concern.
#[derive(Clone)]
pub(super) struct Routing {
    pub triggers: Triggers,
    pub namespaced: Store<ImagePullSecretManager>,
    pub cluster: Store<ClusterImagePullSecretManager>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
}

/// Watches Namespaces (metadata only), cheiron's own Secrets (label selector) and
/// ServiceAccounts, keeps their caches through `writers`, and asks for a reconcile of the
/// managers each change can concern. The initial lists route nothing: the controllers
/// reconcile every manager once anyway. Runs until dropped.
pub(super) async fn route(client: Client, writers: Writers, routing: Routing) {
    let Writers {
        namespaces,
        secrets,
        service_accounts,
    } = writers;
    let (r1, r2, r3) = (routing.clone(), routing.clone(), routing);
    future::join3(
        watch::reflect(
            Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
            watcher::Config::default(),
            namespaces,
            watch::keep_all,
            move |event| {
                if let Some(ns) = changed(event) {
                    r1.triggers
                        .namespace_changed(&ns.name_any(), &r1.namespaced, &r1.cluster);
                }
            },
        ),
        watch::reflect(
            Api::<SecretMeta>::all(client.clone()),
            // Metadata only, and only Secrets whose labels name a manager: what tenants label
            // costs a few hundred bytes each, never a copy of their data.
            watcher::Config::default().labels(&format!(
                "{},{}",
                label::managed_by_selector(),
                label::MANAGER_KIND
            )),
            secrets,
            |s: &mut SecretMeta| keep_data_owners(&mut s.metadata),
            move |event| {
                if let Some(owner) = changed(event).and_then(|s| labelled_owner(&s.metadata)) {
                    r2.triggers.send(ManagerRef::from(&owner));
                }
            },
        ),
        watch::reflect(
            Api::<ServiceAccount>::all(client),
            watcher::Config::default(),
            service_accounts,
            watch::keep_all,
            move |event| {
                if let Some(sa) = changed(event) {
                    let ns = sa.namespace().unwrap_or_default();
                    let meta = r3
                        .namespaces
                        .get(&ObjectRef::new(&ns))
                        .map(|n| NamespaceMeta::from_metadata(&n.metadata))
                        .unwrap_or_else(|| NamespaceMeta::named(ns.as_str()));
                    r3.triggers
                        .service_account_changed(&meta, &r3.namespaced, &r3.cluster);
                }
            },
        ),
    )
    .await;
}

/// The object of an event that changes one object after the initial list.
fn changed<K>(event: &watcher::Event<K>) -> Option<&K> {
    match event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) => Some(o),
        watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => None,
    }
}
