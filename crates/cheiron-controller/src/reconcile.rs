//! One reconcile of one manager: fetch its sources, plan against the caches, write what
//! differs, backfill or clean ServiceAccounts, and record status and Events. The decisions
//! are made by the pure modules; this file only reads and writes.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use cheiron_core::{
    content::{
        desired::{self, SourceKey, source_key},
        registries::pull_secret_registries,
    },
    findings::{self as status, Findings},
    health as core_health,
};
use cheiron_credential as credential;
use cheiron_runtime::{
    api::{FINALIZER, reason},
    runtime::retry_delay,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    ResourceExt,
    api::{Patch, PatchParams},
    runtime::{
        controller::Action,
        events::{Event, EventType},
        finalizer::{self, finalizer},
    },
};
use serde_json::json;

use crate::{
    context::Context,
    error::ControllerError,
    kinds::{ManagerObject, manager_key},
    plan,
    plan::FIELD_MANAGER,
    pull_entries::ServiceAccountReport,
    sync::{sync_in, synced_namespaces},
    write::fetch_sources,
};

/// Requeue while a name is held by a Secret cheiron does not manage: its deletion is not
/// watched (only cheiron's own Secrets are), so it is looked at again this often.
const RECHECK_CLASHES: Duration = Duration::from_secs(30);

/// Entry point for the kube-runtime controller of kind `K`.
pub async fn reconcile<K: ManagerObject>(
    manager: Arc<K>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let started = Instant::now();
    let (namespace, name) = (manager.namespace(), manager.name_any());
    let api = manager.api(ctx.home.client.clone());
    let result = with_finalizer(&api, manager, |event| async {
        match event {
            finalizer::Event::Apply(m) => apply(&*m, &ctx).await,
            finalizer::Event::Cleanup(m) => cleanup::cleanup(&*m, &ctx).await,
        }
    })
    .await;
    let elapsed = started.elapsed();
    ctx.metrics().reconcile.record(
        K::KIND,
        elapsed,
        result.as_ref().err().map(ControllerError::kind),
    );
    tracing::debug!(
        kind = K::KIND.as_str(),
        namespace = namespace.unwrap_or_default(),
        name,
        elapsed_ms = elapsed.as_secs_f64() * 1000.0,
        ok = result.is_ok(),
        "reconciled"
    );
    result
}

/// kube-runtime's finalizer helper around `body`, with the two outcomes that are not failures
/// settled:
///
/// - A second queued cleanup of a manager whose finalizer is already gone (404): done.
/// - A reconcile whose view of its manager is older than the manager (422 on adding the
///   finalizer): a trigger from another watch (a Namespace, a ServiceAccount, a copy) ran it
///   before the manager's own watch brought the finalizer an earlier reconcile had just added,
///   and the helper's patch, which tests that the finalizers are as seen, was refused. The
///   manager's watch brings the newer manager and with it the next reconcile. Told apart from
///   a refusal of the patch itself (an admission policy also answers 422) by reading the
///   manager's resourceVersion: moved on since the view, or the manager gone.
async fn with_finalizer<K, F, Fut>(
    api: &kube::Api<K>,
    manager: Arc<K>,
    body: F,
) -> Result<Action, ControllerError>
where
    K: ManagerObject,
    F: FnOnce(finalizer::Event<K>) -> Fut,
    Fut: std::future::Future<Output = Result<Action, ControllerError>>,
{
    let (name, seen) = (manager.name_any(), manager.resource_version());
    match finalizer(api, FINALIZER, manager, body).await {
        Err(finalizer::Error::RemoveFinalizer(kube::Error::Api(s))) if s.code == 404 => {
            Ok(Action::await_change())
        }
        Err(finalizer::Error::AddFinalizer(kube::Error::Api(s)))
            if s.code == 422 && moved_on(api, &name, seen.as_deref()).await =>
        {
            tracing::debug!(
                name,
                "the manager changed since this reconcile's view of it; its watch brings the next"
            );
            Ok(Action::await_change())
        }
        other => other.map_err(|e| ControllerError::Finalizer(Box::new(e))),
    }
}

/// True when the manager `name` is no longer at resourceVersion `seen`, or is gone. A failed
/// read says nothing, and is false.
async fn moved_on<K: ManagerObject>(api: &kube::Api<K>, name: &str, seen: Option<&str>) -> bool {
    match api.get_metadata_opt(name).await {
        Ok(Some(current)) => current.metadata.resource_version.as_deref() != seen,
        Ok(None) => true,
        Err(_) => false,
    }
}

/// Requeues a failed reconcile with exponential backoff per manager ([`retry_delay`]: 5 s
/// doubling to 5 min, spread by ±20 % per manager).
pub fn error_policy<K: ManagerObject>(
    manager: Arc<K>,
    error: &ControllerError,
    ctx: Arc<Context>,
) -> Action {
    let failures = ctx.record_failure(&manager.object_ref(&()));
    let delay = retry_delay(&manager.name_any(), failures);
    tracing::warn!(
        kind = K::KIND.as_str(),
        namespace = manager.namespace().unwrap_or_default(),
        name = manager.name_any(),
        error = %error,
        retry_in = ?delay,
        "reconcile failed"
    );
    Action::requeue(delay)
}

async fn apply<K: ManagerObject>(manager: &K, ctx: &Context) -> Result<Action, ControllerError> {
    let compiled = manager.compile().map_err(ControllerError::Invalid)?;
    let id = compiled.id.clone();
    let own_namespace = manager.namespace();

    let keys = source_keys(manager, own_namespace.as_deref());
    ctx.sources.set(&id, keys.iter().cloned());
    let fetched = fetch_sources(&ctx.home, &keys).await?;
    let (provided, credentials) =
        credential::entries::resolve(&ctx.credentials, &id, manager.entries());
    let desired = desired::desired_with(
        manager.entries(),
        manager.merge_into(),
        own_namespace.as_deref(),
        &fetched,
        &provided,
    );

    let uid = manager.uid().unwrap_or_default();
    let claimants = ctx.live_managers();
    let report = ServiceAccountReport::default();
    let owner = manager.owner_reference();
    let here = sync_in(
        &ctx.home,
        &compiled,
        &uid,
        manager.meta().generation,
        &owner,
        &desired.secrets,
        &claimants,
        &report,
    )
    .await;
    let (plan, mut issues) = (here.plan, here.issues);
    // Mode Node: the node agents get the credentials handed to them, never the manager or
    // its sources (docs/node.md).
    if let (Some(nodes), Some(cluster_manager)) = (ctx.nodes.as_ref(), manager.as_cluster()) {
        issues.extend(nodes.publish(cluster_manager, &owner, &fetched).await);
    }
    let (clusters, cluster_retry) = match (ctx.others.as_ref(), manager.as_cluster()) {
        (Some(others), Some(cluster_manager)) => {
            let synced = others
                .sync(cluster_manager, &owner, &desired.secrets, &report)
                .await;
            for event in &synced.events {
                ctx.publish(event, &manager.object_ref(&())).await;
            }
            (synced.statuses, synced.retry)
        }
        _ => (Vec::new(), None),
    };
    for event in report.events() {
        ctx.publish(&event, &manager.object_ref(&())).await;
    }
    for issue in &issues {
        ctx.metrics().reconcile.record_issue(issue.kind.as_str());
    }

    // Registry checks answer later; a change of their result asks for another reconcile.
    let health = ctx
        .health
        .as_ref()
        .map(|h| h.observe(&id, manager.verify(), &desired.secrets))
        .unwrap_or_default();
    let findings = Findings {
        generation: manager.meta().generation,
        targets: plan.targets.len(),
        synced: synced_namespaces(&plan, &issues),
        problems: desired.problems,
        issues,
        inline_passwords: desired.inline_passwords,
        shadowed_registries: desired.shadowed_registries,
        unusable_keys: desired.unusable_keys,
        retry_in: None,
        pull_secrets: pull_secret_registries(&desired.secrets, manager.current_status()),
        credentials,
        checks: health.checks,
        pull_failures: health.pull_failures,
        pod_mode_in_workloads: compiled.mode == cheiron_runtime::api::Mode::Pod,
        clusters,
    };
    let mut findings = findings;
    let requeue = next_reconcile(manager, ctx, &mut findings, cluster_retry);
    write_status(manager, ctx, &findings).await?;
    if manager.current_status().and_then(|s| s.observed_generation) != manager.meta().generation {
        // A new or changed spec may change who wins contested names: let the managers that
        // name one of them look (its names now, and those of the Secrets it lets go).
        let names = compiled
            .secret_names()
            .iter()
            .chain(plan.deletes.iter().map(|s| &s.name))
            .map(String::as_str);
        ctx.trigger(&plan::rivals(&id, names, &claimants));
    }
    Ok(Action::requeue(requeue))
}

/// The sources `manager` reads (its namespace is `own_namespace`), each once, in order.
fn source_keys<K: ManagerObject>(manager: &K, own_namespace: Option<&str>) -> Vec<SourceKey> {
    let mut keys: Vec<SourceKey> = manager
        .entries()
        .iter()
        .filter_map(|e| source_key(e, own_namespace))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// When to reconcile `manager` again after a pass that found `findings`: on the backoff of
/// its failures in a row (recorded in `findings.retry_in`) when something was refused or failed,
/// soon while a name is held by a Secret cheiron does not manage, else at the resync; sooner
/// when a workload cluster (`cluster_retry`) or a credential provider's answer is due.
fn next_reconcile<K: ManagerObject>(
    manager: &K,
    ctx: &Context,
    findings: &mut Findings,
    cluster_retry: Option<Duration>,
) -> Duration {
    let reference = manager.object_ref(&());
    let requeue = if findings.issues.iter().any(|i| !i.kind.is_conflict()) {
        // Something was refused or failed (429, 5xx, a webhook of someone else's): back off,
        // so a struggling apiserver is not hammered every few seconds.
        let delay = retry_delay(&manager.name_any(), ctx.record_failure(&reference));
        findings.retry_in = Some(delay);
        delay
    } else {
        ctx.reset_failures(&reference);
        if findings.issues.is_empty() {
            ctx.resync
        } else {
            RECHECK_CLASHES
        }
    };
    // A workload cluster out of step is retried on its own backoff.
    let requeue = cluster_retry.map_or(requeue, |retry| requeue.min(retry));
    // The plugin's answer triggers a reconcile; this is the fallback.
    if credential::entries::pending(&findings.problems) {
        requeue.min(credential::entries::PENDING_RECHECK)
    } else {
        requeue
    }
}

async fn write_status<K: ManagerObject>(
    manager: &K,
    ctx: &Context,
    findings: &Findings,
) -> Result<(), ControllerError> {
    let previous = manager.current_status();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let next = status::status(findings, previous, now);
    ctx.metrics().operations.managers.record(
        K::KIND,
        &manager_key(manager),
        next.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
    );
    if previous == Some(&next) {
        return Ok(());
    }
    let api = manager.api(ctx.home.client.clone());
    let mut patch = json!({"status": next});
    // The node fields are written apart (node/status.rs); a merge patch of this
    // reconcile's copy, older maybe, would undo those writes.
    if let Some(status) = patch.get_mut("status").and_then(|s| s.as_object_mut()) {
        for field in cheiron_runtime::api::NODE_STATUS_FIELDS {
            status.remove(field);
        }
    }
    if next.credentials.is_empty() && previous.is_some_and(|p| !p.credentials.is_empty()) {
        // A merge patch keeps what it does not name: clear the list explicitly.
        patch["status"]["credentials"] = serde_json::Value::Null;
    }
    if next.pull_failures.is_none() && previous.is_some_and(|p| p.pull_failures.is_some()) {
        patch["status"]["pullFailures"] = serde_json::Value::Null;
    }
    if next.clusters.is_empty() && previous.is_some_and(|p| !p.clusters.is_empty()) {
        patch["status"]["clusters"] = serde_json::Value::Null;
    }
    api.patch_status(
        &manager.name_any(),
        &PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        },
        &Patch::Merge(&patch),
    )
    .await
    .map_err(ControllerError::Kube)?;
    publish_check_change(manager, ctx, previous, &next).await;
    let old_reason = status::ready_reason(previous);
    let new_reason = status::ready_reason(Some(&next));
    if old_reason != new_reason {
        let condition = next.conditions.first();
        let healthy = matches!(
            new_reason,
            Some(reason::SYNCED | reason::INLINE_CREDENTIALS | reason::CREDENTIAL_PENDING)
        );
        let event = Event {
            type_: if healthy {
                EventType::Normal
            } else {
                EventType::Warning
            },
            reason: new_reason.unwrap_or("Unknown").to_owned(),
            note: condition.map(|c| c.message.clone()),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        ctx.publish(&event, &manager.object_ref(&())).await;
    }
    Ok(())
}

/// An Event when the `CredentialsAccepted` condition changes reason (not on every check):
/// Warning for a rejection or an unreachable registry, Normal once accepted.
async fn publish_check_change<K: ManagerObject>(
    manager: &K,
    ctx: &Context,
    previous: Option<&cheiron_runtime::api::ManagerStatus>,
    next: &cheiron_runtime::api::ManagerStatus,
) {
    let condition = |s: Option<&cheiron_runtime::api::ManagerStatus>| {
        s.and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == core_health::CONDITION)
                .cloned()
        })
    };
    let (old, new) = (condition(previous), condition(Some(next)));
    let Some(new) = new else {
        return;
    };
    if old.as_ref().is_some_and(|o| o.reason == new.reason)
        || new.reason == core_health::reason::CHECKING
    {
        return;
    }
    let event = Event {
        type_: if new.status == "True" {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: new.reason.clone(),
        note: Some(new.message.clone()),
        action: "CheckCredentials".to_owned(),
        secondary: None,
    };
    ctx.publish(&event, &manager.object_ref(&())).await;
}

mod cleanup;
#[cfg(test)]
mod tests;
