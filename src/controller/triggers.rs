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
    service_account_index::{self, ServiceAccountIndex},
    serviceaccount,
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

    /// Asks for a reconcile of the managers that `sa` (in `namespace`) needs something from:
    /// an entry to add, or an entry cheiron added that the manager no longer wants there. A
    /// ServiceAccount as cheiron left it (the watch event of cheiron's own patch) needs
    /// nothing, and re-queues nothing.
    pub fn service_account_changed(
        &self,
        sa: &ServiceAccount,
        namespace: &NamespaceMeta,
        namespaced: &Store<ImagePullSecretManager>,
        cluster: &Store<ClusterImagePullSecretManager>,
    ) {
        for m in cluster.state() {
            if Manager::from_cluster(&m).is_ok_and(|c| concerns(sa, namespace, &c)) {
                self.send(ManagerRef::Cluster(ObjectRef::from_obj(&*m)));
            }
        }
        for m in namespaced.state() {
            if m.metadata.namespace.as_deref() == Some(namespace.name.as_str())
                && Manager::from_namespaced(&m).is_ok_and(|c| concerns(sa, namespace, &c))
            {
                self.send(ManagerRef::Namespaced(ObjectRef::from_obj(&*m)));
            }
        }
    }
}

/// Whether `sa` needs something from `manager`: an entry it should have and lacks, or an
/// entry cheiron added for one of the manager's names that the manager does not want there.
fn concerns(sa: &ServiceAccount, namespace: &NamespaceMeta, manager: &Manager) -> bool {
    if manager.mode == Mode::ServiceAccount
        && manager.scope.contains(namespace)
        && serviceaccount::backfill(sa, namespace, manager).is_some()
    {
        return true;
    }
    let wanted = serviceaccount::wanted(sa, namespace, [manager]);
    let stale: Vec<String> = manager
        .secret_names()
        .iter()
        .filter(|n| !wanted.contains(n))
        .cloned()
        .collect();
    !stale.is_empty() && serviceaccount::removal(sa, &stale).is_some()
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
    pub service_account_index: ServiceAccountIndex,
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
            service_account_index::trim,
            move |event| {
                r3.service_account_index.apply(event);
                // A deleted ServiceAccount needs nothing from anyone.
                if let watcher::Event::Apply(sa) = event {
                    let ns = sa.namespace().unwrap_or_default();
                    let meta = r3
                        .namespaces
                        .get(&ObjectRef::new(&ns))
                        .map(|n| NamespaceMeta::from_metadata(&n.metadata))
                        .unwrap_or_else(|| NamespaceMeta::named(ns.as_str()));
                    r3.triggers
                        .service_account_changed(sa, &meta, &r3.namespaced, &r3.cluster);
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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::LocalObjectReference;

    use super::*;
    use crate::api::annotation;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn manager(extra: &str) -> Result<Manager, Box<dyn std::error::Error>> {
        let m: ClusterImagePullSecretManager = serde_saphyr::from_str(&format!(
            "apiVersion: cheiron.anny.co/v1alpha1\nkind: ClusterImagePullSecretManager\n\
             metadata: {{name: m}}\nspec:\n{extra}  secrets: [{{existingSecretRef: {{name: pull, namespace: src}}}}]\n"
        ))?;
        Ok(Manager::from_cluster(&m)?)
    }

    fn sa(name: &str, entries: &[&str], added: Option<&str>) -> ServiceAccount {
        let mut sa = ServiceAccount::default();
        sa.metadata.namespace = Some("team".into());
        sa.metadata.name = Some(name.into());
        sa.metadata.resource_version = Some("1".into());
        sa.metadata.annotations = added.map(|a| {
            [
                (annotation::RECONCILE_WITH.to_owned(), a.to_owned()),
                (annotation::RECONCILED.to_owned(), "true".to_owned()),
            ]
            .into()
        });
        sa.image_pull_secrets = Some(
            entries
                .iter()
                .map(|n| LocalObjectReference { name: (*n).into() })
                .collect(),
        );
        sa
    }

    #[test]
    fn the_event_of_cheirons_own_patch_concerns_no_manager() -> TestResult {
        let team = NamespaceMeta::named("team");
        let m = manager("")?;
        assert!(
            !concerns(&sa("default", &["theirs", "pull"], Some("pull")), &team, &m),
            "as cheiron left it: nothing to do"
        );
        assert!(
            concerns(&sa("default", &["theirs"], None), &team, &m),
            "lacks pull"
        );
        Ok(())
    }

    #[test]
    fn an_entry_the_manager_no_longer_wants_concerns_it() -> TestResult {
        let team = NamespaceMeta::named("team");
        let narrowed = manager("  serviceAccountNames: [other]\n")?;
        let left_behind = sa("default", &["pull"], Some("pull"));
        assert!(concerns(&left_behind, &team, &narrowed));
        let pod_mode = manager("  mode: Pod\n")?;
        assert!(concerns(&left_behind, &team, &pod_mode));
        // Not cheiron's entry (no record of adding it): never taken away.
        assert!(!concerns(&sa("default", &["pull"], None), &team, &pod_mode));
        Ok(())
    }
}
