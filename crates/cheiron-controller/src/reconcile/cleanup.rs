//! The reconcile of a manager being deleted: take away what it left (its Secrets, its entries in
//! ServiceAccounts, what the node agents and the workload clusters hold of it), and say how to
//! stop waiting when a step keeps failing (`cheiron.anny.co/abandon-cleanup`).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use cheiron_core::{
    findings::Issue,
    policy::{Manager, ManagerId},
};
use cheiron_runtime::api::annotation;
use kube::{
    ResourceExt,
    runtime::{
        controller::Action,
        events::{Event, EventType},
    },
};

use crate::{
    context::Context,
    error::ControllerError,
    kinds::{ManagerObject, manager_key},
    plan::{self, SecretMetadata, Stale, belongs_to},
    pull_entries::ServiceAccountReport,
    secrets::SecretRecord,
    write::{delete_secret, remove},
};

/// What a deleted manager may have left in this cluster.
struct LeftBehind {
    /// By namespace, the Secret names whose entries may stand in its ServiceAccounts: every
    /// namespace it targets or holds a Secret in.
    names: BTreeMap<String, Vec<String>>,
    /// Its Secrets, to delete.
    stale: Vec<Stale>,
}

/// Cleans up after the deleted `manager`; an error (with an Event saying how to give up on it)
/// while a step fails and the manager is not annotated to abandon its cleanup.
pub(super) async fn cleanup<K: ManagerObject>(
    manager: &K,
    ctx: &Context,
) -> Result<Action, ControllerError> {
    ctx.metrics()
        .operations
        .managers
        .forget(K::KIND, &manager_key(manager));
    let id = ManagerId {
        kind: K::KIND,
        namespace: manager.namespace(),
        name: manager.name_any(),
    };
    let others: Vec<Manager> = ctx
        .live_managers()
        .into_iter()
        .filter(|m| m.id != id)
        .collect();
    let uid = manager.uid().unwrap_or_default();
    let LeftBehind { names, stale } = left_behind(manager, ctx, &id, &uid);
    let report = ServiceAccountReport::default();
    let mut failures = remove(&ctx.home, &id, &names, &stale, &others, &report).await;
    if let (Some(nodes), Some(_)) = (ctx.nodes.as_ref(), manager.as_cluster()) {
        failures.extend(nodes.remove(&id.name, &uid).await);
    }
    if let Some(health) = ctx.health.as_ref() {
        health.forget(&id);
    }
    if let (Some(others), Some(cluster_manager)) = (ctx.others.as_ref(), manager.as_cluster()) {
        let left = others.cleanup(cluster_manager, &report).await;
        for event in &left.events {
            ctx.publish(event, &manager.object_ref(&())).await;
        }
        failures.extend(left.issues);
    }
    for event in report.events() {
        ctx.publish(&event, &manager.object_ref(&())).await;
    }
    failed(manager, ctx, &id, &failures, &stale).await?;
    ctx.sources.set(&id, []);
    ctx.credentials.retain(&id, Vec::new());
    ctx.home.scopes.forget(&id);
    tracing::info!(manager = %id, secrets = stale.len(), "cleaned up after a deleted manager");
    // Younger managers may now win the names this one held.
    let held = names
        .values()
        .flatten()
        .chain(stale.iter().map(|s| &s.name));
    ctx.trigger(&plan::rivals(&id, held.map(String::as_str), &others));
    Ok(Action::await_change())
}

/// What `manager` (`id`, `uid`) left, from the caches: its Secrets, and the names it may have
/// added to ServiceAccounts (those it names now or, if its spec no longer compiles, those of
/// its Secrets) in every namespace it targets or holds a Secret in.
fn left_behind<K: ManagerObject>(
    manager: &K,
    ctx: &Context,
    id: &ManagerId,
    uid: &str,
) -> LeftBehind {
    let mine: Vec<Arc<SecretRecord>> = ctx
        .home
        .secrets
        .all()
        .into_iter()
        .filter(|s| belongs_to(&**s, id, uid))
        .collect();
    let name_of = |s: &SecretRecord| s.object_name().unwrap_or_default().to_owned();
    let names: Vec<String> = match manager.compile() {
        Ok(m) => m.secret_names().to_vec(),
        Err(_) => mine.iter().map(|s| name_of(s)).collect(),
    };
    let mut namespaces: BTreeSet<String> = mine
        .iter()
        .filter_map(|s| s.object_namespace().map(str::to_owned))
        .collect();
    if let Ok(m) = manager.compile() {
        let live = ctx.home.live_namespaces();
        namespaces.extend(plan::targets(&m, live.iter().map(|n| &**n)));
    }
    let names = namespaces
        .into_iter()
        .map(|ns| (ns, names.clone()))
        .collect();
    let stale = mine
        .iter()
        .map(|s| Stale {
            namespace: s.object_namespace().unwrap_or_default().to_owned(),
            name: name_of(s),
            uid: s.object_uid().map(str::to_owned),
            resource_version: s.object_resource_version().map(str::to_owned),
            namespace_left: true,
        })
        .collect();
    LeftBehind { names, stale }
}

/// What the failed steps of the cleanup (`failures`; nothing when there are none) lead to.
/// Unless the manager is annotated to abandon its cleanup: an Event saying how to, and an
/// error, so that the cleanup is retried with backoff. Annotated: an Event saying what stays,
/// and the Secrets of `stale` kept while their namespace's ServiceAccounts could not be cleaned
/// are deleted after all.
async fn failed<K: ManagerObject>(
    manager: &K,
    ctx: &Context,
    id: &ManagerId,
    failures: &[Issue],
    stale: &[Stale],
) -> Result<(), ControllerError> {
    let Some(issue) = failures.first().cloned() else {
        return Ok(());
    };
    let abandon = manager
        .annotations()
        .get(annotation::ABANDON_CLEANUP)
        .is_some_and(|v| v == "true");
    if !abandon {
        // Retried with backoff; the Event tells whoever waits on the deletion how to stop.
        let event = Event {
            type_: EventType::Warning,
            reason: "CleanupFailed".to_owned(),
            note: Some(format!(
                "{issue}; retrying. To delete the manager anyway, leaving the entries cheiron \
                 could not remove, annotate it {}=true",
                annotation::ABANDON_CLEANUP
            )),
            action: "Cleanup".to_owned(),
            secondary: None,
        };
        ctx.publish(&event, &manager.object_ref(&())).await;
        return Err(ControllerError::Cleanup(issue));
    }
    let event = Event {
        type_: EventType::Warning,
        reason: "CleanupAbandoned".to_owned(),
        note: Some(format!(
            "{} annotated: the finalizer is removed although {} cleanup step(s) failed, \
             first {issue}; the entries cheiron added there stay, its Secrets are deleted",
            annotation::ABANDON_CLEANUP,
            failures.len()
        )),
        action: "Cleanup".to_owned(),
        secondary: None,
    };
    ctx.publish(&event, &manager.object_ref(&())).await;
    tracing::warn!(manager = %id, failed = failures.len(), "cleanup abandoned on request");
    // The Secrets kept while their namespace's ServiceAccounts could not be cleaned go
    // now (a reference to a missing Secret is harmless); garbage collection is the backstop.
    for s in stale
        .iter()
        .filter(|s| failures.iter().any(|f| f.namespace == s.namespace))
    {
        if let Err(issue) = delete_secret(&ctx.home, s).await {
            tracing::warn!(manager = %id, %issue, "could not delete a Secret of an abandoned cleanup");
        }
    }
    Ok(())
}
