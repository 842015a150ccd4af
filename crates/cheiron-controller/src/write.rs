//! The API writes of a reconcile, each guarded so it cannot lose someone else's data:
//! Secrets are created, or replaced and deleted with `resourceVersion`/`uid` preconditions
//! and only when they carry cheiron's label; ServiceAccounts are patched with a `test` of
//! their `resourceVersion` and recomputed from a fresh read when another writer got there
//! first. What cannot be done becomes an [`Issue`] for the status, never a panic.

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

use cheiron_core::{
    content::{Fetched, SourceKey, desired::DesiredSecret},
    findings::{Issue, IssueKind},
    policy::{Manager, ManagerId, NamespaceMeta},
};
use cheiron_runtime::message::api_error;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
};

use super::{
    cluster::Cluster,
    error::ControllerError,
    plan::{self, Check, FIELD_MANAGER, Stale, is_managed},
    pull_entries::{self, ServiceAccountReport},
    service_accounts::ServiceAccountRecord,
};

/// Writes in flight at once within one reconcile.
const WRITE_CONCURRENCY: usize = 16;
/// Attempts at a ServiceAccount patch that loses a race with another writer.
const PATCH_ATTEMPTS: usize = 5;

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Reads each source Secret directly (fresh data, no cluster-wide cache).
pub(super) async fn fetch_sources(
    ctx: &Cluster,
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

/// Creates `creates` and replaces `updates`, [`WRITE_CONCURRENCY`] at a time, and returns
/// what could not be written. Taken by value and pulled as the writes go: each Secret (data
/// and all) is built, or kept, only until it is written, instead of all of them living until
/// the last write (100 000 of them for a manager over 100 000 namespaces).
pub(super) async fn write_secrets(
    ctx: &Cluster,
    manager: &ManagerId,
    creates: impl IntoIterator<Item = Secret, IntoIter: Send> + Send,
    updates: Vec<Secret>,
) -> Vec<Issue> {
    enum Outcome {
        Written(String, String, Option<String>),
        Unmanaged(String, String),
        Failed(Issue),
    }
    let failed = |namespace: String, message: String| {
        Outcome::Failed(Issue::new(IssueKind::SecretWrite, namespace, message))
    };
    let creates = creates.into_iter().map(|s| (s, true));
    let updates = updates.into_iter().map(|s| (s, false));
    let outcomes: Vec<Outcome> = stream::iter(creates.chain(updates))
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
                // Metadata only: the data of a Secret cheiron does not manage is not its to read.
                match api.get_metadata_opt(&name).await {
                    Ok(Some(existing)) if !is_managed(&existing.metadata) => {
                        return Outcome::Unmanaged(namespace, name);
                    }
                    Ok(_) => ctx.forget_clash(&namespace, &name),
                    Err(e) => {
                        return failed(
                            namespace,
                            format!("reading Secret {name}: {}", api_error(&e)),
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
                Ok(written) => Outcome::Written(namespace, name, written.metadata.resource_version),
                Err(e) if create && is_status(&e, 409) => match api.get_metadata_opt(&name).await {
                    Ok(Some(existing)) if !is_managed(&existing.metadata) => {
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
                    format!("writing Secret {name}: {}", api_error(&e)),
                ),
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    let mut issues = Vec::new();
    for outcome in outcomes {
        match outcome {
            Outcome::Written(namespace, name, resource_version) => {
                ctx.metrics.reconcile.secrets_written.inc();
                // The data at this version is what cheiron just wrote.
                if let Some(version) = resource_version {
                    ctx.secrets.checked(&namespace, &name, &version);
                }
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

/// Reads each copy of `checks` (see [`plan::Plan::checks`]) and returns the replacements of
/// those whose data is not what `desired` says, and what could not be read. A copy found as
/// wanted is remembered as checked at the version read; one that is gone or no longer cheiron's
/// (`is_managed`) is left to the watch, never written.
pub(super) async fn check_copies(
    ctx: &Cluster,
    manager: &ManagerId,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    desired: &[DesiredSecret],
    checks: Vec<Check>,
) -> (Vec<Secret>, Vec<Issue>) {
    let outcomes: Vec<Result<Option<Secret>, Issue>> = stream::iter(checks)
        .map(|check| async move {
            let Some(content) = desired.get(check.desired).and_then(|d| d.content.as_deref())
            else {
                return Ok(None);
            };
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &check.namespace);
            let fresh = match api.get_opt(&check.name).await {
                Ok(Some(fresh)) => fresh,
                Ok(None) => return Ok(None),
                Err(e) => {
                    return Err(Issue::new(
                        IssueKind::SecretWrite,
                        check.namespace,
                        format!("reading Secret {}: {}", check.name, api_error(&e)),
                    ));
                }
            };
            // Replaced by a Secret that is not cheiron's since the cache saw it: its data was
            // read, but is neither kept, logged nor written over.
            if !is_managed(&fresh.metadata) {
                return Ok(None);
            }
            if plan::holds_exactly(&fresh, content) {
                if let Some(version) = &fresh.metadata.resource_version {
                    ctx.secrets.checked(&check.namespace, &check.name, version);
                }
                return Ok(None);
            }
            tracing::info!(manager = %manager, namespace = check.namespace, name = check.name, "the data of a copy was changed by someone else; writing it again");
            ctx.metrics.reconcile.secrets_repaired.inc();
            Ok(Some(plan::updated(&fresh.metadata, content, manager, owner)))
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    let mut repairs = Vec::new();
    let mut issues = Vec::new();
    for outcome in outcomes {
        match outcome {
            Ok(Some(secret)) => repairs.push(secret),
            Ok(None) => {}
            Err(issue) => issues.push(issue),
        }
    }
    (repairs, issues)
}

fn references(sa: &ServiceAccount, name: &str) -> bool {
    sa.image_pull_secrets
        .iter()
        .flatten()
        .any(|r| r.name == name)
}

/// A fresh read of a ServiceAccount, as a record.
async fn read(
    api: &Api<ServiceAccount>,
    name: &str,
) -> Result<Option<ServiceAccountRecord>, String> {
    match api.get_opt(name).await {
        Ok(found) => Ok(found.as_ref().and_then(ServiceAccountRecord::of)),
        Err(e) => Err(api_error(&e)),
    }
}

/// Patches one ServiceAccount (`removing`: the patch takes entries away), recomputing the
/// patch from a fresh read when another writer got there first.
async fn patch_service_account(
    ctx: &Cluster,
    namespace: &str,
    name: &str,
    first: Option<&ServiceAccountRecord>,
    removing: bool,
    compute: impl Fn(&ServiceAccountRecord) -> Option<(json_patch::Patch, Vec<String>)>,
) -> Result<Option<Vec<String>>, String> {
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), namespace);
    let mut current = first.cloned();
    for _ in 0..PATCH_ATTEMPTS {
        let sa = match current.take() {
            Some(sa) => sa,
            None => match read(&api, name).await? {
                Some(sa) => sa,
                None => return Ok(None),
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
            Err(e) if is_status(&e, 409) => continue,
            // 422 is what a failed `test` of the resourceVersion gets, but also what an
            // admission policy's denial gets: read again, and if the ServiceAccount has not
            // changed, the refusal was not a race and is reported as it is.
            Err(e) if is_status(&e, 422) => match read(&api, name).await? {
                Some(fresh) if fresh.resource_version() == sa.resource_version() => {
                    return Err(api_error(&e));
                }
                Some(fresh) => current = Some(fresh),
                None => return Ok(None),
            },
            Err(e) if is_status(&e, 404) => return Ok(None),
            Err(e) => return Err(api_error(&e)),
        }
    }
    Err(format!(
        "ServiceAccount {name} kept changing under {PATCH_ATTEMPTS} attempts; retrying later"
    ))
}

/// What a ServiceAccount patch does: add entries for a manager, or remove entries.
#[derive(Clone, Copy)]
enum Change<'a> {
    Added(&'a ManagerId),
    Removed,
}

/// Patches `sa` with what `compute` says, counts it in `report` (with an Event about the
/// ServiceAccount while the report allows), and returns the failure as an [`Issue`].
async fn patch_and_report(
    ctx: &Cluster,
    namespace: &str,
    sa: &ServiceAccountRecord,
    change: Change<'_>,
    compute: impl Fn(&ServiceAccountRecord) -> Option<(json_patch::Patch, Vec<String>)>,
    report: &ServiceAccountReport,
) -> Option<Issue> {
    let name = sa.name().to_owned();
    let removing = matches!(change, Change::Removed);
    match patch_service_account(ctx, namespace, &name, Some(sa), removing, compute).await {
        Ok(Some(names)) => {
            if report.count(namespace, !removing) {
                let (reason, note) = match change {
                    Change::Added(manager) => (
                        "PullSecretsAdded",
                        format!("cheiron added {} for {manager}", names.join(", ")),
                    ),
                    Change::Removed => (
                        "PullSecretsRemoved",
                        format!("cheiron removed {}", names.join(", ")),
                    ),
                };
                ctx.publish_on_service_account(sa, reason, &note).await;
            }
            None
        }
        Ok(None) => None,
        Err(message) => Some(Issue::new(
            IssueKind::ServiceAccount,
            namespace,
            format!("ServiceAccount {name}: {message}"),
        )),
    }
}

/// Patches, [`WRITE_CONCURRENCY`] at a time, the ServiceAccounts of `targets` that lack what
/// `manager` wants, as the webhook would have at their creation.
pub(super) async fn backfill(
    ctx: &Cluster,
    manager: &Manager,
    targets: &[&NamespaceMeta],
    report: &ServiceAccountReport,
) -> Vec<Issue> {
    // Items carry an index into `targets`, not a reference: a stream of borrowed items trips
    // the compiler's higher-ranked lifetime inference inside the controller's Send future.
    let names = manager.secret_names();
    let work: Vec<(usize, std::sync::Arc<ServiceAccountRecord>)> = targets
        .iter()
        .enumerate()
        // Where every ServiceAccount already references every name, none lacks anything
        // (what `pull_entries::backfill` checks first), and no record is read.
        .filter(|(_, namespace)| !ctx.service_accounts.all_reference(&namespace.name, names))
        .flat_map(|(i, namespace)| {
            ctx.service_accounts_in(&namespace.name, |sa| {
                pull_entries::backfill(sa, namespace, manager).is_some()
            })
            .into_iter()
            .map(move |sa| (i, sa))
        })
        .collect();
    stream::iter(work)
        .map(|(i, sa)| async move {
            let namespace = &targets[i];
            let compute =
                |sa: &ServiceAccountRecord| pull_entries::backfill(sa, namespace, manager);
            let change = Change::Added(&manager.id);
            patch_and_report(ctx, &namespace.name, &sa, change, compute, report).await
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .filter_map(std::future::ready)
        .collect()
        .await
}

/// The managers of `claimants` that could want one of `names` somewhere: only they decide
/// whether an entry cheiron added is still wanted.
fn naming<'m>(claimants: &'m [Manager], names: &[String]) -> Vec<&'m Manager> {
    claimants
        .iter()
        .filter(|m| m.secret_names().iter().any(|n| names.contains(n)))
        .collect()
}

/// Removes from the ServiceAccounts of `namespace` the entries of `names` that cheiron added
/// and that no other manager (`others`, those [`naming`] them) still wants there,
/// [`WRITE_CONCURRENCY`] at a time.
async fn remove_entries(
    ctx: &Cluster,
    namespace: &NamespaceMeta,
    names: &[String],
    others: &[&Manager],
    report: &ServiceAccountReport,
) -> Vec<Issue> {
    // Every name wanted on every ServiceAccount here that does not opt out (and one that
    // opts out is never patched): nothing to look at, the usual case of a resync.
    let all_kept = names.iter().all(|n| {
        others.iter().any(|m| {
            m.secret_names().contains(n)
                && pull_entries::wants_every_service_account_in(m, namespace)
        })
    });
    if all_kept {
        return Vec::new();
    }
    let compute = |sa: &ServiceAccountRecord| {
        // Only names cheiron added can go: most ServiceAccounts are ruled out here, before
        // any decision is computed.
        if !names.iter().any(|n| sa.added_by_cheiron(n)) {
            return None;
        }
        let still_wanted = pull_entries::wanted(sa, namespace, others.iter().copied());
        let remove: Vec<String> = names
            .iter()
            .filter(|n| !still_wanted.contains(n))
            .cloned()
            .collect();
        pull_entries::removal(sa, &remove)
    };
    let work = ctx.service_accounts_in(&namespace.name, |sa| compute(sa).is_some());
    stream::iter(work)
        .map(|sa| async move {
            patch_and_report(ctx, &namespace.name, &sa, Change::Removed, compute, report).await
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .filter_map(std::future::ready)
        .collect()
        .await
}

/// Takes from the ServiceAccounts of `targets` the entries of `manager`'s names that cheiron
/// added and that no live manager (`claimants`, `manager` included as it is now) wants there
/// any more: what is left behind when a manager's `serviceAccountNames` or
/// `serviceAccountSelector` narrows, or its mode changes from ServiceAccount to Pod.
pub(super) async fn prune(
    ctx: &Cluster,
    manager: &Manager,
    targets: &[&NamespaceMeta],
    claimants: &[Manager],
    report: &ServiceAccountReport,
) -> Vec<Issue> {
    // In its target namespaces (in scope, not opted out), a manager in mode ServiceAccount
    // that selects every ServiceAccount wants all its names on all of them: nothing of its
    // can be left behind there. The usual case, and the whole of a resync's prune.
    if manager.mode == cheiron_runtime::api::Mode::ServiceAccount
        && manager.selects_every_service_account()
    {
        return Vec::new();
    }
    let names = manager.secret_names();
    let others = naming(claimants, names);
    let mut issues = Vec::new();
    for namespace in targets {
        issues.extend(remove_entries(ctx, namespace, names, &others, report).await);
    }
    issues
}

pub(super) async fn delete_secret(ctx: &Cluster, stale: &Stale) -> Result<(), Issue> {
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
            format!("deleting Secret {}: {}", stale.name, api_error(&e)),
        )),
    }
}

/// Removes what `manager` put where it no longer belongs: first the ServiceAccount entries of
/// `names` in each namespace (those cheiron added and no manager of `others` still wants),
/// then the `stale` Secrets, so an interrupted cleanup is retried from the Secrets left. A
/// Secret is kept while its namespace's ServiceAccounts could not be cleaned.
pub(super) async fn remove(
    ctx: &Cluster,
    manager: &ManagerId,
    names: &BTreeMap<String, Vec<String>>,
    stale: &[Stale],
    others: &[Manager],
    report: &ServiceAccountReport,
) -> Vec<Issue> {
    let mut failures = Vec::new();
    for (namespace, names) in names {
        let meta = ctx.namespace_or_bare(namespace);
        let others = naming(others, names);
        failures.extend(remove_entries(ctx, &meta, names, &others, report).await);
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

#[cfg(test)]
mod tests;
