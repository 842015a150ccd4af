//! The two manager kinds seen through one interface, so the reconciler is written once.

use std::fmt::Debug;

use cheiron_core::policy::{InvalidManager, Manager, ManagerKind, live_managers};
use cheiron_runtime::api::{
    ClusterImagePullSecretManager, ImagePullSecretManager, ManagerStatus, PullSecretEntry,
};
use futures::FutureExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};
use serde::{Serialize, de::DeserializeOwned};

/// A manager object of either kind.
pub trait ManagerObject:
    Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// Which kind this is.
    const KIND: ManagerKind;
    /// Compiles the policy view of this manager.
    fn compile(&self) -> Result<Manager, InvalidManager>;
    /// `spec.secrets`.
    fn entries(&self) -> &[PullSecretEntry];
    /// `spec.mergeInto`.
    fn merge_into(&self) -> Option<&str>;
    /// `spec.verify` asks for registry checks.
    fn verify(&self) -> bool;
    /// `status`.
    fn current_status(&self) -> Option<&ManagerStatus>;
    /// The API to write this object (its status, its finalizer) through.
    fn api(&self, client: Client) -> Api<Self>;
    /// The cluster manager this is, which alone may act in workload clusters.
    fn as_cluster(&self) -> Option<&ClusterImagePullSecretManager> {
        None
    }
    /// The reference cheiron puts on the Secrets it writes for this manager. Not blocking
    /// owner deletion: cleanup goes through the finalizer; the reference is a GC backstop.
    fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: Self::api_version(&()).into_owned(),
            kind: Self::kind(&()).into_owned(),
            name: self.name_any(),
            uid: self.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }
}

impl ManagerObject for ImagePullSecretManager {
    const KIND: ManagerKind = ManagerKind::Namespaced;

    fn compile(&self) -> Result<Manager, InvalidManager> {
        Manager::from_namespaced(self)
    }

    fn entries(&self) -> &[PullSecretEntry] {
        &self.spec.secrets
    }

    fn merge_into(&self) -> Option<&str> {
        self.spec.merge_into.as_deref()
    }

    fn verify(&self) -> bool {
        self.spec.verify == cheiron_runtime::api::Verify::Registry
    }

    fn current_status(&self) -> Option<&ManagerStatus> {
        self.status.as_ref()
    }

    fn api(&self, client: Client) -> Api<Self> {
        Api::namespaced(client, &self.namespace().unwrap_or_default())
    }
}

impl ManagerObject for ClusterImagePullSecretManager {
    const KIND: ManagerKind = ManagerKind::Cluster;

    fn compile(&self) -> Result<Manager, InvalidManager> {
        Manager::from_cluster(self)
    }

    fn entries(&self) -> &[PullSecretEntry] {
        &self.spec.secrets
    }

    fn merge_into(&self) -> Option<&str> {
        self.spec.merge_into.as_deref()
    }

    fn verify(&self) -> bool {
        self.spec.verify == cheiron_runtime::api::Verify::Registry
    }

    fn current_status(&self) -> Option<&ManagerStatus> {
        self.status.as_ref()
    }

    fn api(&self, client: Client) -> Api<Self> {
        Api::all(client)
    }

    fn as_cluster(&self) -> Option<&ClusterImagePullSecretManager> {
        Some(self)
    }
}

/// The reconcile request for a manager of either kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ManagerRef {
    /// An `ImagePullSecretManager`.
    Namespaced(ObjectRef<ImagePullSecretManager>),
    /// A `ClusterImagePullSecretManager`.
    Cluster(ObjectRef<ClusterImagePullSecretManager>),
}

impl From<&cheiron_core::policy::ManagerId> for ManagerRef {
    fn from(id: &cheiron_core::policy::ManagerId) -> Self {
        match (&id.kind, &id.namespace) {
            (ManagerKind::Namespaced, Some(ns)) => {
                ManagerRef::Namespaced(ObjectRef::new(&id.name).within(ns))
            }
            (ManagerKind::Namespaced, None) => ManagerRef::Namespaced(ObjectRef::new(&id.name)),
            (ManagerKind::Cluster, _) => ManagerRef::Cluster(ObjectRef::new(&id.name)),
        }
    }
}

/// A manager's `namespace/name` (or `name`), the key of its readiness gauge.
pub(crate) fn manager_key<K: ManagerObject>(manager: &K) -> String {
    match manager.namespace() {
        Some(namespace) => format!("{namespace}/{}", manager.name_any()),
        None => manager.name_any(),
    }
}

/// The managers of both kinds, as the controllers' stores hold them.
#[derive(Clone)]
pub struct ManagerStores {
    pub namespaced: Store<ImagePullSecretManager>,
    pub cluster: Store<ClusterImagePullSecretManager>,
}

impl ManagerStores {
    /// Managers of both kinds that act (see [`live_managers`]), oldest first.
    pub fn live(&self) -> Vec<Manager> {
        let namespaced = self.namespaced.state();
        let cluster = self.cluster.state();
        live_managers(
            namespaced.iter().map(|m| &**m),
            cluster.iter().map(|m| &**m),
        )
        .0
    }

    /// True once both stores have their first list.
    pub(crate) fn ready(&self) -> bool {
        let namespaced = self.namespaced.wait_until_ready().now_or_never();
        let cluster = self.cluster.wait_until_ready().now_or_never();
        matches!((namespaced, cluster), (Some(Ok(())), Some(Ok(()))))
    }
}
