//! One reconcile of one manager: fetch its sources, plan against the caches, write what
//! differs, backfill or clean ServiceAccounts, and record status and Events. The decisions
//! are made by the pure modules; this file only reads and writes.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::{
    api::core::v1::{Secret, ServiceAccount},
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
    runtime::{
        controller::Action,
        events::{Event, EventType},
        finalizer::{self, finalizer},
    },
};
use serde_json::json;

use super::{
    context::Context,
    desired::{self, Fetched, SourceKey, source_key},
    error::{ControllerError, Issue, IssueKind},
    kinds::{ManagerObject, ManagerRef},
    plan::{self, Stale, is_managed, labelled_owner},
    serviceaccount,
    status::{self, Findings, reason},
};
use crate::{
    api::FINALIZER,
    policy::{Manager, ManagerId, NamespaceMeta},
};

/// Field manager of every write.
const FIELD_MANAGER: &str = "cheiron";
/// Writes in flight at once within one reconcile.
const WRITE_CONCURRENCY: usize = 16;
/// Attempts at a ServiceAccount patch that loses a race with another writer.
const PATCH_ATTEMPTS: usize = 5;
/// Requeue after a reconcile that left something undone.
const RETRY_SOON: Duration = Duration::from_secs(10);
/// Requeue while a name is held by a Secret cheiron does not manage: its deletion is not
/// watched (only cheiron's own Secrets are), so it is looked at again this often.
const RECHECK_CLASHES: Duration = Duration::from_secs(30);

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Entry point for the kube-runtime controller of kind `K`.
pub async fn reconcile<K: ManagerObject>(
    manager: Arc<K>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let started = Instant::now();
    let api = manager.api(ctx.client.clone());
    let result = finalizer(&api, FINALIZER, manager, |event| async {
        match event {
            finalizer::Event::Apply(m) => apply(&*m, &ctx).await,
            finalizer::Event::Cleanup(m) => cleanup(&*m, &ctx).await,
        }
    })
    .await;
    let result = match result {
        // A second queued cleanup of a manager whose finalizer is already gone: done.
        Err(finalizer::Error::RemoveFinalizer(kube::Error::Api(s))) if s.code == 404 => {
            Ok(Action::await_change())
        }
        other => other.map_err(|e| ControllerError::Finalizer(Box::new(e))),
    };
    ctx.metrics.reconcile.record(
        K::KIND,
        started.elapsed(),
        result.as_ref().err().map(ControllerError::kind),
    );
    result
}

/// Requeues a failed reconcile with exponential backoff per manager (5 s doubling to 5 min).
pub fn error_policy<K: ManagerObject>(
    manager: Arc<K>,
    error: &ControllerError,
    ctx: Arc<Context>,
) -> Action {
    let failures = ctx.record_failure(&manager.object_ref(&()));
    let delay = Duration::from_secs(5u64.saturating_mul(1 << failures.min(6)))
        .min(Duration::from_secs(300));
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

/// Reads each source Secret directly (fresh data, no cluster-wide cache).
async fn fetch_sources(
    ctx: &Context,
    keys: &[SourceKey],
) -> Result<HashMap<SourceKey, Fetched>, ControllerError> {
    let mut fetched = HashMap::new();
    for key in keys {
        let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &key.0);
        let secret = api.get_opt(&key.1).await.map_err(ControllerError::Kube)?;
        fetched.insert(
            key.clone(),
            match secret {
                None => Fetched::Missing,
                Some(s) => Fetched::Present {
                    secret_type: s.type_,
                    data: s.data.unwrap_or_default(),
                },
            },
        );
    }
    Ok(fetched)
}

/// Creates and replaces the Secrets of `plan`, [`WRITE_CONCURRENCY`] at a time, and returns
/// what could not be written.
async fn write_secrets(ctx: &Context, manager: &ManagerId, plan: &plan::Plan) -> Vec<Issue> {
    enum Outcome {
        Written,
        Unmanaged(String, String),
        Failed(Issue),
    }
    let failed = |namespace: String, message: String| {
        Outcome::Failed(Issue::new(IssueKind::SecretWrite, namespace, message))
    };
    let creates = plan.creates.iter().map(|s| (s.clone(), true));
    let updates = plan.updates.iter().map(|s| (s.clone(), false));
    let writes: Vec<(Secret, bool)> = creates.chain(updates).collect();
    let outcomes: Vec<Outcome> = stream::iter(writes)
        .map(|(secret, create)| async move {
            let namespace = secret.metadata.namespace.clone().unwrap_or_default();
            let name = secret.metadata.name.clone().unwrap_or_default();
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            };
            // A name known to be held by someone else is read, not written again.
            if create && ctx.is_known_clash(&namespace, &name) {
                match api.get_opt(&name).await {
                    Ok(Some(existing)) if !is_managed(&existing) => {
                        return Outcome::Unmanaged(namespace, name);
                    }
                    Ok(_) => ctx.forget_clash(&namespace, &name),
                    Err(e) => {
                        return failed(
                            namespace,
                            format!("reading Secret {name}: {}", describe(&e)),
                        );
                    }
                }
            }
            let result = if create {
                api.create(&pp, &secret).await
            } else {
                api.replace(&name, &pp, &secret).await
            };
            match result {
                Ok(_) => Outcome::Written,
                Err(e) if create && is_status(&e, 409) => match api.get_opt(&name).await {
                    Ok(Some(existing)) if !is_managed(&existing) => {
                        Outcome::Unmanaged(namespace, name)
                    }
                    // Ours after all (the cache lagged): the next reconcile compares it.
                    _ => failed(
                        namespace,
                        format!("Secret {name} appeared meanwhile; retrying"),
                    ),
                },
                Err(e) => failed(
                    namespace,
                    format!("writing Secret {name}: {}", describe(&e)),
                ),
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    let mut issues = Vec::new();
    for outcome in outcomes {
        match outcome {
            Outcome::Written => {
                ctx.metrics.reconcile.secrets_written.inc();
            }
            Outcome::Unmanaged(namespace, name) => {
                if ctx.remember_clash(&namespace, &name) {
                    tracing::warn!(manager = %manager, namespace, name, "a Secret cheiron does not manage holds this name; left untouched");
                }
                issues.push(Issue::new(
                    IssueKind::Unmanaged,
                    namespace,
                    format!(
                        "Secret {name} exists and is not managed by cheiron; it is left untouched"
                    ),
                ));
            }
            Outcome::Failed(issue) => issues.push(issue),
        }
    }
    issues
}

/// An API error as one line, without any object content.
fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

fn references(sa: &ServiceAccount, name: &str) -> bool {
    sa.image_pull_secrets
        .iter()
        .flatten()
        .any(|r| r.name == name)
}

/// Patches one ServiceAccount (`removing`: the patch takes entries away), recomputing the
/// patch from a fresh read when another writer got there first.
async fn patch_service_account(
    ctx: &Context,
    namespace: &str,
    name: &str,
    first: Option<&ServiceAccount>,
    removing: bool,
    compute: impl Fn(&ServiceAccount) -> Option<(json_patch::Patch, Vec<String>)>,
) -> Result<Option<Vec<String>>, String> {
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), namespace);
    let mut current = first.cloned();
    for _ in 0..PATCH_ATTEMPTS {
        let sa = match current.take() {
            Some(sa) => sa,
            None => match api.get_opt(name).await {
                Ok(Some(sa)) => sa,
                Ok(None) => return Ok(None),
                Err(e) => return Err(describe(&e)),
            },
        };
        let Some((patch, names)) = compute(&sa) else {
            return Ok(None);
        };
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        match api.patch(name, &params, &Patch::<()>::Json(patch)).await {
            // The patch also passes the webhook: if it put a removed name back (its view of a
            // manager being deleted lagging), try again once the view has caught up.
            Ok(stored) if removing && names.iter().any(|n| references(&stored, n)) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Ok(_) => {
                ctx.metrics.reconcile.service_accounts_patched.inc();
                return Ok(Some(names));
            }
            // 409/422: the resourceVersion test failed; read again and recompute.
            Err(e) if is_status(&e, 409) || is_status(&e, 422) => continue,
            Err(e) if is_status(&e, 404) => return Ok(None),
            Err(e) => return Err(describe(&e)),
        }
    }
    Err(format!(
        "ServiceAccount {name} kept changing under {PATCH_ATTEMPTS} attempts; retrying later"
    ))
}

async fn backfill(ctx: &Context, manager: &Manager, targets: &[NamespaceMeta]) -> Vec<Issue> {
    let mut failures = Vec::new();
    for namespace in targets {
        for sa in ctx.service_accounts_in(&namespace.name) {
            if serviceaccount::backfill(&sa, namespace, manager).is_none() {
                continue;
            }
            let name = sa.name_any();
            match patch_service_account(ctx, &namespace.name, &name, Some(&sa), false, |sa| {
                serviceaccount::backfill(sa, namespace, manager)
            })
            .await
            {
                Ok(Some(added)) => {
                    ctx.publish_on_service_account(
                        &sa,
                        "PullSecretsAdded",
                        &format!("cheiron added {} for {}", added.join(", "), manager.id),
                    )
                    .await;
                }
                Ok(None) => {}
                Err(message) => failures.push(Issue::new(
                    IssueKind::ServiceAccount,
                    namespace.name.clone(),
                    format!("ServiceAccount {name}: {message}"),
                )),
            }
        }
    }
    failures
}

/// Removes from the ServiceAccounts of `namespace` the entries of `names` that cheiron added
/// and that no other manager (`others`) still wants there.
async fn remove_entries(
    ctx: &Context,
    namespace: &NamespaceMeta,
    names: &[String],
    others: &[Manager],
) -> Vec<Issue> {
    let mut failures = Vec::new();
    for sa in ctx.service_accounts_in(&namespace.name) {
        let compute = |sa: &ServiceAccount| {
            let still_wanted = serviceaccount::wanted(sa, namespace, others.iter());
            let remove: Vec<String> = names
                .iter()
                .filter(|n| !still_wanted.contains(n))
                .cloned()
                .collect();
            serviceaccount::removal(sa, &remove)
        };
        if compute(&sa).is_none() {
            continue;
        }
        let name = sa.name_any();
        match patch_service_account(ctx, &namespace.name, &name, Some(&sa), true, compute).await {
            Ok(Some(removed)) => {
                ctx.publish_on_service_account(
                    &sa,
                    "PullSecretsRemoved",
                    &format!("cheiron removed {}", removed.join(", ")),
                )
                .await;
            }
            Ok(None) => {}
            Err(message) => failures.push(Issue::new(
                IssueKind::ServiceAccount,
                namespace.name.clone(),
                format!("ServiceAccount {name}: {message}"),
            )),
        }
    }
    failures
}

async fn delete_secret(ctx: &Context, stale: &Stale) -> Result<(), Issue> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &stale.namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: stale.uid.clone(),
            resource_version: stale.resource_version.clone(),
        }),
        ..DeleteParams::default()
    };
    match api.delete(&stale.name, &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => Err(Issue::new(
            IssueKind::SecretDelete,
            stale.namespace.clone(),
            format!("deleting Secret {}: {}", stale.name, describe(&e)),
        )),
    }
}

/// Removes what `manager` put where it no longer belongs: first the ServiceAccount entries of
/// `names` in each namespace (those cheiron added and no manager of `others` still wants),
/// then the `stale` Secrets, so an interrupted cleanup is retried from the Secrets left. A
/// Secret is kept while its namespace's ServiceAccounts could not be cleaned.
async fn remove(
    ctx: &Context,
    manager: &ManagerId,
    names: &BTreeMap<String, Vec<String>>,
    stale: &[Stale],
    others: &[Manager],
) -> Vec<Issue> {
    let mut failures = Vec::new();
    for (namespace, names) in names {
        let meta = ctx.namespace_or_bare(namespace);
        failures.extend(remove_entries(ctx, &meta, names, others).await);
    }
    for s in stale {
        if failures.iter().any(|f: &Issue| f.namespace == s.namespace) {
            continue;
        }
        match delete_secret(ctx, s).await {
            Ok(()) => {
                tracing::info!(manager = %manager, namespace = s.namespace, name = s.name, "removed a Secret no longer wanted")
            }
            Err(issue) => failures.push(issue),
        }
    }
    failures
}

async fn apply<K: ManagerObject>(manager: &K, ctx: &Context) -> Result<Action, ControllerError> {
    let compiled = manager.compile().map_err(ControllerError::Invalid)?;
    let id = compiled.id.clone();
    let own_namespace = manager.namespace();

    let mut keys: Vec<SourceKey> = manager
        .entries()
        .iter()
        .filter_map(|e| source_key(e, own_namespace.as_deref()))
        .collect();
    keys.sort();
    keys.dedup();
    ctx.sources.set(&id, keys.iter().cloned());
    let fetched = fetch_sources(ctx, &keys).await?;
    let desired = desired::desired(
        manager.entries(),
        manager.merge_into(),
        own_namespace.as_deref(),
        &fetched,
    );

    let namespaces = ctx.live_namespaces();
    let claimants = ctx.live_managers();
    let plan = plan::plan(
        &compiled,
        &manager.owner_reference(),
        &desired.secrets,
        &namespaces,
        &claimants,
        &ctx.secrets.state(),
    );
    let mut issues = write_secrets(ctx, &id, &plan).await;
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

    let targets: Vec<NamespaceMeta> = namespaces
        .iter()
        .filter(|n| plan.targets.binary_search(&n.name).is_ok())
        .cloned()
        .collect();
    if compiled.mode == crate::api::Mode::ServiceAccount {
        issues.extend(backfill(ctx, &compiled, &targets).await);
    }
    let others: Vec<Manager> = claimants.iter().filter(|m| m.id != id).cloned().collect();
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in &plan.deletes {
        names
            .entry(s.namespace.clone())
            .or_default()
            .push(s.name.clone());
    }
    issues.extend(remove(ctx, &id, &names, &plan.deletes, &others).await);
    for issue in &issues {
        ctx.metrics.reconcile.record_issue(issue.kind.as_str());
    }

    let troubled: BTreeSet<&str> = issues
        .iter()
        .map(|i| i.namespace.as_str())
        .chain(plan.held.iter().map(|(ns, _)| ns.as_str()))
        .collect();
    let findings = Findings {
        generation: manager.meta().generation,
        targets: plan.targets.len(),
        synced: plan
            .targets
            .iter()
            .filter(|t| !troubled.contains(t.as_str()))
            .count(),
        problems: desired.problems,
        issues,
        inline_passwords: desired.inline_passwords,
        shadowed_registries: desired.shadowed_registries,
    };
    let requeue = if findings.issues.iter().any(|i| !i.kind.is_conflict()) {
        RETRY_SOON
    } else if !findings.issues.is_empty() {
        RECHECK_CLASHES
    } else {
        ctx.resync
    };
    write_status(manager, ctx, &findings).await?;
    if manager.current_status().and_then(|s| s.observed_generation) != manager.meta().generation {
        // A new or changed spec may change who wins contested names: let the others look.
        ctx.trigger_all_but(&ManagerRef::from(&id));
    }
    ctx.reset_failures(&manager.object_ref(&()));
    Ok(Action::requeue(requeue))
}

async fn write_status<K: ManagerObject>(
    manager: &K,
    ctx: &Context,
    findings: &Findings,
) -> Result<(), ControllerError> {
    let previous = manager.current_status();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let next = status::status(findings, previous, now);
    if previous == Some(&next) {
        return Ok(());
    }
    let api = manager.api(ctx.client.clone());
    let patch = json!({"status": next});
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
    let old_reason = status::ready_reason(previous);
    let new_reason = status::ready_reason(Some(&next));
    if old_reason != new_reason {
        let condition = next.conditions.first();
        let healthy = matches!(
            new_reason,
            Some(reason::SYNCED | reason::INLINE_CREDENTIALS)
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

async fn cleanup<K: ManagerObject>(manager: &K, ctx: &Context) -> Result<Action, ControllerError> {
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
    let mine: Vec<Arc<Secret>> = ctx
        .secrets
        .state()
        .into_iter()
        .filter(|s| labelled_owner(s).as_ref() == Some(&id))
        .collect();
    let names: Vec<String> = match manager.compile() {
        Ok(m) => m.secret_names().to_vec(),
        Err(_) => mine.iter().map(|s| s.name_any()).collect(),
    };
    let mut namespaces: BTreeSet<String> = mine.iter().filter_map(|s| s.namespace()).collect();
    if let Ok(m) = manager.compile() {
        namespaces.extend(plan::targets(&m, &ctx.live_namespaces()));
    }
    let names: BTreeMap<String, Vec<String>> = namespaces
        .into_iter()
        .map(|ns| (ns, names.clone()))
        .collect();
    let stale: Vec<Stale> = mine
        .iter()
        .map(|s| Stale {
            namespace: s.namespace().unwrap_or_default(),
            name: s.name_any(),
            uid: s.metadata.uid.clone(),
            resource_version: s.metadata.resource_version.clone(),
            namespace_left: true,
        })
        .collect();
    let failures = remove(ctx, &id, &names, &stale, &others).await;
    if let Some(issue) = failures.into_iter().next() {
        return Err(ControllerError::Cleanup(issue));
    }
    ctx.sources.set(&id, []);
    tracing::info!(manager = %id, secrets = stale.len(), "cleaned up after a deleted manager");
    // Younger managers may now win the names this one held.
    ctx.trigger_all_but(&ManagerRef::from(&id));
    Ok(Action::await_change())
}
