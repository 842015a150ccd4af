//! The seam between the reconcile of a cluster manager and the other clusters its Secrets are
//! written to (the fleet's workload clusters, docs/fleet.md). The reconcile knows them only
//! through [`OtherClusters`]: it hands over what it wants written there and gets back what to
//! report; how clusters are found, connected to, timed out and backed off is the fleet's.

use std::time::Duration;

use cheiron_core::{content::desired::DesiredSecret, findings::Issue};
use cheiron_runtime::api::{ClusterImagePullSecretManager, ClusterStatus};
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::events::Event;

use super::pull_entries::ServiceAccountReport;

/// What a sync of one manager into the other clusters found.
#[derive(Default)]
pub struct Synced {
    /// The status of each cluster it selects, and of each where its cleanup failed.
    pub statuses: Vec<ClusterStatus>,
    /// When to retry, if a cluster is out of step (each backing off on its own).
    pub retry: Option<Duration>,
    /// Events about the manager: a cluster it acts in changed between in step, unreachable
    /// and refusing writes.
    pub events: Vec<Event>,
}

/// What the cleanup of a deleted manager in the other clusters left.
#[derive(Default)]
pub struct CleanedUp {
    /// What could not be cleaned (the finalizer stays until it can).
    pub issues: Vec<Issue>,
    /// Events about the manager (the cleanup gave up past its bound).
    pub events: Vec<Event>,
}

/// Other clusters a cluster manager's Secrets are written to.
pub trait OtherClusters: Send + Sync {
    /// Brings `manager` in step everywhere else: `desired` (owned by `owner`) where it is
    /// selected, nothing of it where it is no longer.
    fn sync<'a>(
        &'a self,
        manager: &'a ClusterImagePullSecretManager,
        owner: &'a OwnerReference,
        desired: &'a [DesiredSecret],
        report: &'a ServiceAccountReport,
    ) -> BoxFuture<'a, Synced>;

    /// Takes away what the deleted `manager` left everywhere else.
    fn cleanup<'a>(
        &'a self,
        manager: &'a ClusterImagePullSecretManager,
        report: &'a ServiceAccountReport,
    ) -> BoxFuture<'a, CleanedUp>;
}
