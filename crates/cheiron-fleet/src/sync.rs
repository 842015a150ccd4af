//! One cluster manager in the workload clusters: the fleet's side of the reconcile's seam
//! ([`OtherClusters`]). Every cluster is synced at once, each bounded in time; a cluster out of
//! step backs off on its own, reports in `status.clusters` and, on a change, in an Event; the
//! connections follow what the managers select and hold.

use std::collections::BTreeSet;

use cheiron_controller::{
    CleanedUp, Issue, IssueKind, ManagerObject, OtherClusters, ServiceAccountReport, Synced,
    sync_in,
};
use cheiron_core::{content::desired::DesiredSecret, policy::Manager};
use cheiron_runtime::{
    api::{ClusterImagePullSecretManager, ClusterStatus},
    runtime::retry_delay,
};
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    ResourceExt,
    runtime::events::{Event, EventType},
};

use crate::{
    Fleet, Role,
    members::{Health, NotSynced},
    workload::Workload,
};

impl OtherClusters for Fleet {
    fn sync<'a>(
        &'a self,
        manager: &'a ClusterImagePullSecretManager,
        owner: &'a OwnerReference,
        desired: &'a [DesiredSecret],
        report: &'a ServiceAccountReport,
    ) -> BoxFuture<'a, Synced> {
        Box::pin(sync_fleet(self, manager, owner, desired, report))
    }

    fn cleanup<'a>(
        &'a self,
        manager: &'a ClusterImagePullSecretManager,
        report: &'a ServiceAccountReport,
    ) -> BoxFuture<'a, CleanedUp> {
        Box::pin(cleanup_bounded(self, manager, report))
    }
}

/// The owner reference of the Secrets a manager writes in workload clusters: its uid (what
/// cheiron's ownership checks read), under an API version no cluster serves, so that no
/// workload cluster's garbage collector resolves it to a missing object and deletes the
/// copies (the manager lives in the management cluster, not there).
fn workload_owner(owner: &OwnerReference) -> OwnerReference {
    let mut owner = owner.clone();
    owner.api_version = format!("{}/{}", cheiron_runtime::api::GROUP, WORKLOAD_OWNER_VERSION);
    owner
}

/// The API version of [`workload_owner`]: a version of cheiron's group that is never served.
const WORKLOAD_OWNER_VERSION: &str = "fleet-management";

/// Syncs `manager` into every workload cluster at once, each bounded by
/// [`super::SYNC_TIMEOUT`]: the selected ones get `desired`, the others lose what the
/// manager left there. The connections are brought in line before (a newly selected cluster
/// is connected to) and after (a cluster cleaned up that no manager needs is let go).
async fn sync_fleet(
    fleet: &Fleet,
    manager: &ClusterImagePullSecretManager,
    owner: &OwnerReference,
    desired: &[DesiredSecret],
    report: &ServiceAccountReport,
) -> Synced {
    fleet.refresh().await;
    let owner = workload_owner(owner);
    let name = manager.name_any();
    let uid = manager.uid().unwrap_or_default();
    let roles = fleet.roles(manager);
    let results = futures::future::join_all(roles.into_iter().map(|(cluster, role)| {
        let owner = &owner;
        async move {
            let (workload, selected) = match role {
                Role::Selected(w) => (w, true),
                Role::Unselected(w) => (w, false),
                Role::Unusable { why, selected } => return (cluster, selected, Err(why)),
            };
            let outcome = tokio::time::timeout(
                super::SYNC_TIMEOUT,
                sync_workload(fleet, &workload, manager, selected, owner, desired, report),
            )
            .await
            .unwrap_or_else(|_| {
                Err(NotSynced::Unreachable(format!(
                    "no answer within {}s; retrying",
                    super::SYNC_TIMEOUT.as_secs()
                )))
            });
            (cluster, selected, outcome)
        }
    }))
    .await;
    let mut out = Synced::default();
    let mut holds = BTreeSet::new();
    for (cluster, selected, outcome) in results {
        let health = match &outcome {
            Ok(s) if s.message.is_none() => Health::Synced,
            Ok(_) => Health::WriteFailed,
            Err(why) => why.health(),
        };
        let ready = health == Health::Synced;
        fleet.metrics().fleet.record_sync(&cluster, ready);
        if ready {
            fleet.reset_failures(&name, &cluster);
        } else {
            let delay = retry_delay(
                &format!("{name}/{cluster}"),
                fleet.record_failure(&name, &cluster),
            );
            out.retry = Some(out.retry.map_or(delay, |r| r.min(delay)));
        }
        let mut status = cluster_status(&name, &cluster, outcome);
        if fleet.record_health(&uid, &cluster, health)
            && let Some(event) = health_event(&cluster, health, &status)
        {
            out.events.push(event);
        }
        if selected {
            holds.insert(cluster);
            out.statuses.push(status);
        } else if let Some(message) = status.message.take() {
            tracing::warn!(
                manager = name,
                cluster,
                error = message,
                "cleaning up in a workload cluster the manager no longer selects failed"
            );
            // Reported, and the connection kept, until the cleanup there is done.
            status.message = Some(format!("cleaning up: {message}"));
            holds.insert(cluster);
            out.statuses.push(status);
        }
    }
    fleet.record_holds(&uid, holds);
    fleet.refresh().await;
    out
}

/// The `status.clusters` entry of `cluster` after a sync of the manager `manager` there.
fn cluster_status(
    manager: &str,
    cluster: &str,
    outcome: Result<ClusterStatus, NotSynced>,
) -> ClusterStatus {
    match outcome {
        Ok(mut status) => {
            status.name = cluster.to_owned();
            status
        }
        Err(why) => {
            let message = why.into_message();
            tracing::warn!(
                manager,
                cluster,
                error = message,
                "workload cluster not synced"
            );
            ClusterStatus {
                name: cluster.to_owned(),
                ready: false,
                message: Some(message),
                ..ClusterStatus::default()
            }
        }
    }
}

/// The Event of a manager entering `health` in `cluster`, if that state has one.
fn health_event(cluster: &str, health: Health, status: &ClusterStatus) -> Option<Event> {
    let (warning, reason) = health.reason()?;
    Some(Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_owned(),
        note: Some(format!(
            "cluster {cluster}: {}",
            status.message.as_deref().unwrap_or("in step again")
        )),
        action: "Sync".to_owned(),
        secondary: None,
    })
}

/// Takes away what a deleted `manager` left in every workload cluster (those being deleted
/// are released, not cleaned): the clusters where that failed or could not be tried, each
/// with why.
async fn cleanup_fleet(
    fleet: &Fleet,
    manager: &ClusterImagePullSecretManager,
    report: &ServiceAccountReport,
) -> Vec<(String, String)> {
    fleet.refresh().await;
    let owner = workload_owner(&manager.owner_reference());
    let results =
        futures::future::join_all(fleet.roles(manager).into_iter().map(|(cluster, role)| {
            let owner = &owner;
            async move {
                let workload = match role {
                    Role::Selected(w) | Role::Unselected(w) => w,
                    Role::Unusable { why, .. } => return (cluster, Err(why)),
                };
                let outcome = tokio::time::timeout(
                    super::SYNC_TIMEOUT,
                    sync_workload(fleet, &workload, manager, false, owner, &[], report),
                )
                .await
                .unwrap_or_else(|_| Err(NotSynced::Unreachable("no answer in time".to_owned())));
                (cluster, outcome)
            }
        }))
        .await;
    let left: Vec<(String, String)> = results
        .into_iter()
        .filter_map(|(cluster, outcome)| {
            let message = match outcome {
                Ok(status) => status.message?,
                Err(why) => why.into_message(),
            };
            Some((cluster, message))
        })
        .collect();
    fleet.record_holds(
        &manager.uid().unwrap_or_default(),
        left.iter().map(|(c, _)| c.clone()).collect(),
    );
    left
}

/// One manager in one workload cluster: the cluster must answer and its watches must have
/// listed before anything is planned there.
async fn sync_workload(
    fleet: &Fleet,
    workload: &Workload,
    manager: &ClusterImagePullSecretManager,
    selected: bool,
    owner: &OwnerReference,
    desired: &[DesiredSecret],
    report: &ServiceAccountReport,
) -> Result<ClusterStatus, NotSynced> {
    let target = &workload.cluster;
    let probe =
        tokio::time::timeout(super::CONNECT_TIMEOUT, target.client().apiserver_version()).await;
    let answered = matches!(probe, Ok(Ok(_)));
    fleet
        .metrics()
        .fleet
        .set_connected(&workload.name, answered && workload.synced());
    match probe {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            return Err(NotSynced::Unreachable(format!(
                "unreachable: {}",
                super::guard::error_line(&e)
            )));
        }
        Err(_) => {
            return Err(NotSynced::Unreachable(format!(
                "unreachable: no answer within {}s",
                super::CONNECT_TIMEOUT.as_secs()
            )));
        }
    }
    if !workload.synced() {
        return Err(NotSynced::Connecting(
            "connecting: its Namespaces, Secrets and ServiceAccounts are not listed yet".to_owned(),
        ));
    }
    let compiled = Manager::from_cluster_in(manager, selected)
        .map_err(|e| NotSynced::Unreachable(e.to_string()))?;
    let claimants = fleet.claimants_in(&workload.name);
    // Never remembered: whether the cluster is selected changes without the manager changing.
    let uid = manager.uid().unwrap_or_default();
    let sync = sync_in(
        target, &compiled, &uid, None, owner, desired, &claimants, report,
    )
    .await;
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let synced = sync.synced();
    let message = sync.issues.first().map(|i| {
        let more = sync.issues.len() - 1;
        if more > 0 {
            format!("{i} (and {more} more)")
        } else {
            i.to_string()
        }
    });
    Ok(ClusterStatus {
        name: workload.name.clone(),
        ready: message.is_none(),
        target_namespaces: count(sync.targets()),
        synced_namespaces: count(synced),
        message,
    })
}

/// [`cleanup_fleet`], bounded by `--fleet-cleanup-timeout` from the manager's deletion: past
/// it, the clusters left are given up (an Event names them) and nothing holds the finalizer.
async fn cleanup_bounded(
    fleet: &Fleet,
    manager: &ClusterImagePullSecretManager,
    report: &ServiceAccountReport,
) -> CleanedUp {
    let left = cleanup_fleet(fleet, manager, report).await;
    let mut out = CleanedUp::default();
    let waited = manager.metadata.deletion_timestamp.as_ref().map_or(0, |t| {
        k8s_openapi::jiff::Timestamp::now()
            .duration_since(t.0)
            .as_secs()
    });
    let timeout = fleet.cleanup_timeout();
    if !left.is_empty() && u64::try_from(waited).unwrap_or(0) >= timeout.as_secs() {
        // Past the bound: the finalizer goes, and the Event says where copies were left.
        let clusters: Vec<&str> = left.iter().map(|(c, _)| c.as_str()).collect();
        out.events.push(Event {
            type_: EventType::Warning,
            reason: "WorkloadCleanupTimedOut".to_owned(),
            note: Some(format!(
                "cleanup in workload cluster(s) {} did not succeed within {}s of the \
                 deletion (--fleet-cleanup-timeout; first: cluster {}: {}): the finalizer is \
                 released, and the Secrets cheiron wrote there and the entries it added to \
                 ServiceAccounts are left",
                clusters.join(", "),
                timeout.as_secs(),
                left[0].0,
                left[0].1
            )),
            action: "Cleanup".to_owned(),
            secondary: None,
        });
        tracing::warn!(manager = %manager.name_any(), clusters = ?clusters, "cleanup in workload clusters timed out; released");
        fleet.record_holds(&manager.uid().unwrap_or_default(), BTreeSet::new());
    } else {
        out.issues
            .extend(left.into_iter().map(|(cluster, message)| {
                Issue::new(
                    IssueKind::SecretDelete,
                    format!("cluster {cluster}"),
                    message,
                )
            }));
    }
    fleet.refresh().await;
    out
}
