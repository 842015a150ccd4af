//! The branches of the writes that a real apiserver reaches only under races: conflicts,
//! objects gone meanwhile, refused writes, and patches that keep losing. A scripted fake API
//! answers each request in turn (a mock, for error paths only; the happy paths and the races
//! themselves are covered against a real kube-apiserver in `tests/controller/`).

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use cheiron_core::policy::ManagerKind;
use cheiron_runtime::{
    api::{annotation, label},
    metrics::Metrics,
    runtime::{
        events::EventPublisher,
        fake_api::{FakeApi, reply, status},
    },
};
use k8s_openapi::api::core::v1::{LocalObjectReference, Secret, ServiceAccount};
use kube::{
    api::ObjectMeta,
    runtime::{events::Reporter, watcher},
};
use serde_json::json;

use super::*;
use crate::{cluster::ClusterCaches, service_accounts::ServiceAccountCache};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A cluster reached through `fake`, with `service_accounts` in its cache.
fn context(fake: &FakeApi, service_accounts: Vec<ServiceAccount>) -> Cluster {
    let client = fake.client();
    let cache = ServiceAccountCache::default();
    let events = std::iter::once(watcher::Event::Init)
        .chain(service_accounts.into_iter().map(watcher::Event::InitApply))
        .chain(std::iter::once(watcher::Event::InitDone));
    for event in events {
        cache.apply(&event);
    }
    let caches = ClusterCaches {
        namespaces: Default::default(),
        secrets: Default::default(),
        service_accounts: cache,
    };
    let reporter = Reporter {
        controller: "cheiron-test".to_owned(),
        instance: None,
    };
    Cluster::new(
        client.clone(),
        caches,
        EventPublisher::new(client, reporter, 16),
        Arc::new(Metrics::new()),
    )
}

fn manager() -> ManagerId {
    ManagerId {
        kind: ManagerKind::Cluster,
        namespace: None,
        name: "company".to_owned(),
    }
}

fn secret(namespace: &str, name: &str, managed: bool) -> Secret {
    // cheiron's own: the managed-by label and the labels naming its manager.
    let labels = managed.then(|| {
        BTreeMap::from([
            (
                label::MANAGED_BY.to_owned(),
                label::MANAGED_BY_VALUE.to_owned(),
            ),
            (
                label::MANAGER_KIND.to_owned(),
                "ClusterImagePullSecretManager".to_owned(),
            ),
            (label::MANAGER_NAME.to_owned(), "company".to_owned()),
        ])
    });
    // ... and an ownerReference to a manager: labels alone prove nothing (plan::is_managed).
    let owner_references = managed.then(|| {
        vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "cheiron.anny.co/v1alpha1".to_owned(),
                kind: "ClusterImagePullSecretManager".to_owned(),
                name: "company".to_owned(),
                uid: "u1".to_owned(),
                ..Default::default()
            },
        ]
    });
    Secret {
        metadata: ObjectMeta {
            namespace: Some(namespace.to_owned()),
            name: Some(name.to_owned()),
            labels,
            owner_references,
            resource_version: Some("7".to_owned()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".to_owned()),
        ..Secret::default()
    }
}

fn service_account(resource_version: &str, pull_secrets: &[&str], added: &str) -> ServiceAccount {
    ServiceAccount {
        metadata: ObjectMeta {
            namespace: Some("team".to_owned()),
            name: Some("default".to_owned()),
            resource_version: Some(resource_version.to_owned()),
            annotations: Some(BTreeMap::from([(
                annotation::RECONCILE_WITH.to_owned(),
                added.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        image_pull_secrets: Some(
            pull_secrets
                .iter()
                .map(|n| LocalObjectReference {
                    name: (*n).to_owned(),
                })
                .collect(),
        ),
        ..ServiceAccount::default()
    }
}

const SECRETS: &str = "/api/v1/namespaces/team/secrets";
const PULL: &str = "/api/v1/namespaces/team/secrets/pull";
const DEFAULT_SA: &str = "/api/v1/namespaces/team/serviceaccounts/default";

#[tokio::test]
async fn a_name_held_by_an_unmanaged_secret_is_a_conflict_and_is_read_not_written_again()
-> TestResult {
    let fake = FakeApi::new(vec![
        reply("POST", SECRETS, 409, status(409, "AlreadyExists")),
        reply(
            "GET",
            PULL,
            200,
            serde_json::to_value(secret("team", "pull", false))?,
        ),
        // The next reconcile: the known clash is read first, and nothing is written.
        reply(
            "GET",
            PULL,
            200,
            serde_json::to_value(secret("team", "pull", false))?,
        ),
    ]);
    let ctx = context(&fake, vec![]);
    let create = || vec![secret("team", "pull", true)];

    let issues = write_secrets(&ctx, &manager(), create(), vec![]).await;
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].kind, IssueKind::Unmanaged);
    assert_eq!(issues[0].namespace, "team");
    assert!(ctx.is_known_clash("team", "pull"));

    let again = write_secrets(&ctx, &manager(), create(), vec![]).await;
    assert_eq!(
        again.iter().map(|i| i.kind).collect::<Vec<_>>(),
        [IssueKind::Unmanaged]
    );
    assert_eq!(
        fake.seen(),
        [
            format!("POST {SECRETS}"),
            format!("GET {PULL}"),
            format!("GET {PULL}")
        ],
        "a known clash must not be written again"
    );
    assert_eq!(fake.left(), 0);
    Ok(())
}

#[tokio::test]
async fn a_create_that_races_cheirons_own_copy_is_a_failure_to_retry_not_a_conflict() -> TestResult
{
    let fake = FakeApi::new(vec![
        reply("POST", SECRETS, 409, status(409, "AlreadyExists")),
        reply(
            "GET",
            PULL,
            200,
            serde_json::to_value(secret("team", "pull", true))?,
        ),
    ]);
    let ctx = context(&fake, vec![]);
    let issues = write_secrets(&ctx, &manager(), vec![secret("team", "pull", true)], vec![]).await;
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].kind, IssueKind::SecretWrite);
    assert!(
        issues[0].message.contains("appeared meanwhile"),
        "{}",
        issues[0].message
    );
    assert!(!ctx.is_known_clash("team", "pull"));
    assert_eq!(fake.left(), 0);
    Ok(())
}

#[tokio::test]
async fn a_known_clash_that_has_gone_is_forgotten_and_the_secret_created() -> TestResult {
    let fake = FakeApi::new(vec![
        reply("GET", PULL, 404, status(404, "NotFound")),
        reply(
            "POST",
            SECRETS,
            201,
            serde_json::to_value(secret("team", "pull", true))?,
        ),
    ]);
    let ctx = context(&fake, vec![]);
    ctx.remember_clash("team", "pull");
    let issues = write_secrets(&ctx, &manager(), vec![secret("team", "pull", true)], vec![]).await;
    assert!(issues.is_empty(), "{issues:?}");
    assert!(!ctx.is_known_clash("team", "pull"));
    assert_eq!(fake.left(), 0);
    Ok(())
}

#[tokio::test]
async fn a_refused_write_is_an_issue_that_names_the_secret_and_the_status_code() -> TestResult {
    let fake = FakeApi::new(vec![reply("POST", SECRETS, 403, status(403, "Forbidden"))]);
    let ctx = context(&fake, vec![]);
    let issues = write_secrets(&ctx, &manager(), vec![secret("team", "pull", true)], vec![]).await;
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].kind, IssueKind::SecretWrite);
    assert!(
        issues[0].message.starts_with("writing Secret pull: "),
        "{}",
        issues[0].message
    );
    assert!(
        issues[0].message.ends_with("(403)"),
        "{}",
        issues[0].message
    );
    Ok(())
}

/// A patch computation that removes `pull` and records the resourceVersion it was given.
/// Removes `pull` from ServiceAccount team/default (starting from `first`, or a fresh read),
/// and returns the outcome with the resourceVersions each attempt computed its patch from.
async fn remove_pull(
    ctx: &Cluster,
    first: Option<&ServiceAccount>,
) -> (Result<Option<Vec<String>>, String>, Vec<String>) {
    let seen = Mutex::new(Vec::new());
    let compute = |sa: &ServiceAccountRecord| {
        if let Ok(mut s) = seen.lock() {
            s.push(sa.resource_version().to_owned());
        }
        pull_entries::removal(sa, &["pull".to_owned()])
    };
    let first = first.and_then(ServiceAccountRecord::of);
    let result = patch_service_account(ctx, "team", "default", first.as_ref(), true, compute).await;
    (result, seen.into_inner().unwrap_or_default())
}

#[tokio::test]
async fn a_patch_that_fails_its_resource_version_test_is_recomputed_from_a_fresh_read() -> TestResult
{
    let stale = service_account("1", &["pull"], "pull");
    let fresh = service_account("2", &["foreign", "pull"], "pull");
    let stored = service_account("3", &["foreign"], "");
    let fake = FakeApi::new(vec![
        reply("PATCH", DEFAULT_SA, 422, status(422, "Invalid")),
        reply("GET", DEFAULT_SA, 200, serde_json::to_value(&fresh)?),
        reply("PATCH", DEFAULT_SA, 200, serde_json::to_value(&stored)?),
    ]);
    let ctx = context(&fake, vec![]);
    let (result, versions) = remove_pull(&ctx, Some(&stale)).await;
    assert_eq!(result, Ok(Some(vec!["pull".to_owned()])));
    assert_eq!(
        versions,
        ["1", "2"],
        "the second patch is computed from the fresh read"
    );
    assert_eq!(fake.left(), 0);
    Ok(())
}

#[tokio::test]
async fn a_service_account_that_keeps_changing_is_given_up_after_a_bounded_number_of_attempts()
-> TestResult {
    let sa = service_account("1", &["pull"], "pull");
    let mut script = vec![reply("PATCH", DEFAULT_SA, 409, status(409, "Conflict"))];
    for _ in 1..PATCH_ATTEMPTS {
        script.push(reply("GET", DEFAULT_SA, 200, serde_json::to_value(&sa)?));
        script.push(reply("PATCH", DEFAULT_SA, 409, status(409, "Conflict")));
    }
    let fake = FakeApi::new(script);
    let ctx = context(&fake, vec![]);
    let result = remove_pull(&ctx, Some(&sa)).await.0;
    let message = result.err().unwrap_or_default();
    assert!(message.contains("kept changing"), "{message}");
    assert_eq!(fake.seen().len(), 2 * PATCH_ATTEMPTS - 1);
    assert_eq!(fake.left(), 0);
    Ok(())
}

#[tokio::test]
async fn a_service_account_deleted_meanwhile_is_nothing_to_do() -> TestResult {
    let sa = service_account("1", &["pull"], "pull");
    let fake = FakeApi::new(vec![
        reply("PATCH", DEFAULT_SA, 404, status(404, "NotFound")),
        reply("GET", DEFAULT_SA, 404, status(404, "NotFound")),
    ]);
    let ctx = context(&fake, vec![]);
    let patched = remove_pull(&ctx, Some(&sa)).await.0;
    assert_eq!(patched, Ok(None));
    let read = remove_pull(&ctx, None).await.0;
    assert_eq!(read, Ok(None));
    assert_eq!(fake.left(), 0);
    Ok(())
}

#[tokio::test]
async fn deleting_a_secret_already_gone_is_done_and_a_refused_delete_is_an_issue() -> TestResult {
    let fake = FakeApi::new(vec![
        reply("DELETE", PULL, 404, status(404, "NotFound")),
        reply("DELETE", PULL, 403, status(403, "Forbidden")),
    ]);
    let ctx = context(&fake, vec![]);
    let stale = Stale {
        namespace: "team".to_owned(),
        name: "pull".to_owned(),
        uid: Some("u1".to_owned()),
        resource_version: Some("7".to_owned()),
        namespace_left: true,
    };
    assert_eq!(delete_secret(&ctx, &stale).await, Ok(()));
    let refused = delete_secret(&ctx, &stale)
        .await
        .err()
        .ok_or("a 403 must be an issue")?;
    assert_eq!(refused.kind, IssueKind::SecretDelete);
    assert_eq!(refused.namespace, "team");
    assert!(refused.message.ends_with("(403)"), "{}", refused.message);
    Ok(())
}

#[tokio::test]
async fn a_secret_stays_while_the_service_accounts_of_its_namespace_could_not_be_cleaned()
-> TestResult {
    let sa = service_account("1", &["pull"], "pull");
    let fake = FakeApi::new(vec![reply(
        "PATCH",
        DEFAULT_SA,
        500,
        status(500, "InternalError"),
    )]);
    let ctx = context(&fake, vec![sa]);
    let stale = Stale {
        namespace: "team".to_owned(),
        name: "pull".to_owned(),
        uid: None,
        resource_version: None,
        namespace_left: true,
    };
    let names = BTreeMap::from([("team".to_owned(), vec!["pull".to_owned()])]);
    let issues = remove(
        &ctx,
        &manager(),
        &names,
        &[stale],
        &[],
        &ServiceAccountReport::default(),
    )
    .await;
    assert_eq!(
        issues.iter().map(|i| i.kind).collect::<Vec<_>>(),
        [IssueKind::ServiceAccount]
    );
    assert_eq!(
        fake.seen(),
        [format!("PATCH {DEFAULT_SA}")],
        "no DELETE while a ServiceAccount still references the Secret"
    );
    Ok(())
}

#[tokio::test]
async fn a_patch_refused_by_an_admission_policy_is_reported_not_retried_as_a_race() -> TestResult {
    let sa = service_account("1", &["pull"], "pull");
    let denied = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "ValidatingAdmissionPolicy 'freeze' denied request: frozen", "reason": "Invalid",
        "code": 422,
    });
    let fake = FakeApi::new(vec![
        reply("PATCH", DEFAULT_SA, 422, denied),
        // Read again: unchanged, so this was not a lost race.
        reply("GET", DEFAULT_SA, 200, serde_json::to_value(&sa)?),
    ]);
    let ctx = context(&fake, vec![]);
    let result = remove_pull(&ctx, Some(&sa)).await.0;
    assert_eq!(
        result,
        Err("ValidatingAdmissionPolicy 'freeze' denied request: frozen (422)".to_owned())
    );
    assert_eq!(fake.left(), 0, "no further attempt");
    Ok(())
}
