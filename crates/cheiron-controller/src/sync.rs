//! One manager's sync into one cluster: the controller's own, or a workload cluster the fleet
//! reaches through the same code. Plans against that cluster's caches, then writes: the
//! Secrets to create, replace (and read again where someone else changed them) and delete,
//! then the ServiceAccount entries to add and remove.

use std::collections::{BTreeMap, BTreeSet};

use cheiron_core::{
    content::desired::DesiredSecret,
    findings::{Issue, IssueKind},
    policy::Manager,
};
use cheiron_runtime::api::Mode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::{
    cluster::Cluster,
    plan,
    pull_entries::ServiceAccountReport,
    write::{backfill, check_copies, prune, remove, write_secrets},
};

/// What one cluster's sync did: its plan (what was written is gone from it) and what could
/// not be done.
pub struct ClusterSync {
    pub(super) plan: plan::Plan,
    /// What could not be done.
    pub issues: Vec<Issue>,
}

impl ClusterSync {
    /// How many namespaces the manager targets there.
    pub fn targets(&self) -> usize {
        self.plan.targets.len()
    }

    /// How many of them are in step (none of its issues, no name held by another manager).
    pub fn synced(&self) -> usize {
        synced_namespaces(&self.plan, &self.issues)
    }
}

/// How many of `plan`'s target namespaces are in step: none of `issues` and no Secret held by
/// another manager there.
pub(super) fn synced_namespaces(plan: &plan::Plan, issues: &[Issue]) -> usize {
    let troubled: BTreeSet<&str> = issues
        .iter()
        .map(|i| i.namespace.as_str())
        .chain(plan.held.iter().map(|(ns, _)| ns.as_str()))
        .collect();
    plan.targets
        .iter()
        .filter(|t| !troubled.contains(t.as_str()))
        .count()
}

/// Materialises `desired` for `compiled` in the cluster `target` reaches (this one or a
/// workload cluster), with `claimants` as the managers that may claim a name there: the
/// Secrets to create, replace and delete, then the ServiceAccount entries to add and remove.
#[allow(clippy::too_many_arguments)]
pub async fn sync_in(
    target: &Cluster,
    compiled: &Manager,
    uid: &str,
    generation: Option<i64>,
    owner: &OwnerReference,
    desired: &[DesiredSecret],
    claimants: &[Manager],
    report: &ServiceAccountReport,
) -> ClusterSync {
    let id = &compiled.id;
    let namespaces = target.live_namespaces();
    let targets = target
        .scopes
        .targets(compiled, uid, generation, &namespaces);
    let mut plan = plan::plan_targets(
        compiled,
        owner,
        desired,
        &targets,
        claimants,
        &target.secrets.relevant(id, compiled.secret_names()),
    );
    let (creates, mut updates) = (
        std::mem::take(&mut plan.creates),
        std::mem::take(&mut plan.updates),
    );
    let checks = std::mem::take(&mut plan.checks);
    let (repairs, mut issues) = check_copies(target, id, owner, desired, checks).await;
    updates.extend(repairs);
    let repaired = u64::try_from(plan.repairs).unwrap_or(u64::MAX);
    target.metrics.reconcile.secrets_repaired.inc_by(repaired);
    let creates = creates.into_iter().map(|create| create.secret());
    issues.extend(write_secrets(target, id, creates, updates).await);
    for lost in &plan.lost {
        issues.push(Issue::new(
            IssueKind::ClaimedByOlder,
            lost.namespace.clone(),
            format!(
                "Secret {} is claimed by the older {}",
                lost.name, lost.winner
            ),
        ));
    }
    if compiled.mode == Mode::ServiceAccount {
        issues.extend(backfill(target, compiled, &targets, report).await);
    }
    issues.extend(prune(target, compiled, &targets, claimants, report).await);
    let others: Vec<Manager> = claimants.iter().filter(|m| m.id != *id).cloned().collect();
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in &plan.deletes {
        names
            .entry(s.namespace.clone())
            .or_default()
            .push(s.name.clone());
    }
    issues.extend(remove(target, id, &names, &plan.deletes, &others, report).await);
    ClusterSync { plan, issues }
}
