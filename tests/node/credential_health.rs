//! Credential health (docs/credential-health.md) against the real registry: a
//! ClusterImagePullSecretManager with `spec.verify: Registry` gets the `CredentialsAccepted`
//! condition from the controller's v2 auth handshake with the node cluster's private registry
//! (TLS from the test CA, htpasswd auth), and what the check says is what the real kubelet then
//! finds: a rejected credential is refused to a Pod with 401, an accepted one pulls and runs.
//!
//! The host controller runs with `--registry-ca-file` (the registry's CA) and
//! `--registry-check-interval` [`REGISTRY_CHECK_INTERVAL_SECONDS`] (`harness::node`).

use std::time::{Duration, Instant};

use cheiron::api::{ClusterImagePullSecretManager, ManagerStatus};
use k8s_openapi::api::{core::v1::Pod, events::v1::Event};
use kube::{Api, ResourceExt, api::ListParams};

use crate::{
    harness::{
        Result, SETTLE,
        node::{PodOutcome, REGISTRY_CHECK_INTERVAL_SECONDS},
    },
    support::{NodeTest, TARGET_LABEL},
};

/// The target Secret the managers write.
const TARGET_SECRET: &str = "checked-pull";
/// The condition the checks write.
const CONDITION: &str = "CredentialsAccepted";
/// A new or changed credential is checked at once: the controller reconciles the manager,
/// asks the registry, and reconciles again with the answer. Seconds; this is the headroom of
/// a loaded 2-core machine.
const CHECKED_WITHIN: Duration = Duration::from_secs(20);
/// A credential the source did not change is checked again after the interval, spread by
/// ±10 % per credential; then the reconcile that writes the answer. With a 10 s interval the
/// registry's refusal is due at most 11 s after the last check; the rest is headroom.
const RECHECKED_WITHIN: Duration =
    Duration::from_secs(REGISTRY_CHECK_INTERVAL_SECONDS * 11 / 10 + 29);
/// The kubelet's Failed Event and the Pod's waiting status are written as the pull fails; the
/// controller reads them from its watch and writes the manager's status in its next
/// reconcile. Seconds; the rest is headroom.
const PULL_ATTRIBUTED_WITHIN: Duration = Duration::from_secs(30);
/// How long an unreachable registry is watched, once Unreachable, for a rejection that must
/// not come: past its first retry (the interval, as it is below the first backoff step).
const NEVER_REJECTED_FOR: Duration = Duration::from_secs(REGISTRY_CHECK_INTERVAL_SECONDS + 3);

/// A cluster manager `name` of mode ServiceAccount with `spec.verify: Registry` writing
/// [`TARGET_SECRET`] for `user` on `registry` (the password from Secret `registry-password` of
/// `source_ns`) into this test's target namespaces.
async fn apply_checked_manager(
    t: &NodeTest,
    name: &str,
    source_ns: &str,
    registry: &str,
    user: &str,
) -> Result {
    t.scenario
        .apply_cluster_manager(
            name,
            &format!(
                "  mode: ServiceAccount
  verify: Registry
  namespaceSelector:
    matchLabels:
      {TARGET_LABEL}: {id}
  secrets:
    - name: {TARGET_SECRET}
      registry: {registry}
      username: {user}
      passwordSecretRef: {{name: registry-password, key: password, namespace: {source_ns}}}
",
                id = t.scenario.id(),
            ),
        )
        .await?;
    Ok(())
}

/// What a wait on the manager's status makes of one reading.
enum Seen<T> {
    /// What was waited for.
    Done(T),
    /// Not yet: what was seen instead.
    NotYet(String),
    /// Something that must never be seen: fail at once.
    Wrong(String),
}

/// The manager's `CredentialsAccepted` condition: `(status, reason, message)`.
fn condition(status: &ManagerStatus) -> Option<(&str, &str, &str)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION)
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

/// The `result` of the `status.credentials` entry of [`TARGET_SECRET`] for `registry`.
fn result_for<'a>(status: &'a ManagerStatus, registry: &str) -> Option<&'a str> {
    status
        .credentials
        .iter()
        .find(|c| c.name == TARGET_SECRET && c.registry.as_deref() == Some(registry))
        .and_then(|c| c.result.as_deref())
}

/// The manager's status and the controller's log lines about registry checks or the manager,
/// for a failure message.
async fn report(t: &NodeTest, manager: &str) -> String {
    let api = Api::<ClusterImagePullSecretManager>::all(t.client().clone());
    let status = match api.get_opt(manager).await {
        Ok(Some(m)) => serde_json::to_string_pretty(&m.status)
            .unwrap_or_else(|e| format!("(unprintable: {e})")),
        Ok(None) => "(the manager does not exist)".to_owned(),
        Err(e) => format!("(cannot read it: {e})"),
    };
    let log = match t.node.controller_log() {
        Some(path) => {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| l.contains("registry check") || l.contains(manager))
                .collect();
            format!(
                "--- last lines of {} about registry checks or {manager} ---\n{}",
                path.display(),
                lines[lines.len().saturating_sub(30)..].join("\n")
            )
        }
        None => "(no controller on the host)".to_owned(),
    };
    format!("status of {manager}:\n{status}\n{log}")
}

/// Reads the manager's status until `check` is done with it, at most `within`; returns what
/// `check` returned and how long it took. A timeout or a wrong reading fails with the status
/// and the controller's log.
async fn until_status<T>(
    t: &NodeTest,
    manager: &str,
    what: &str,
    within: Duration,
    check: impl Fn(&ManagerStatus) -> Seen<T>,
) -> Result<(T, Duration)> {
    let api = Api::<ClusterImagePullSecretManager>::all(t.client().clone());
    let start = Instant::now();
    loop {
        t.node.check_running()?;
        let status = api
            .get_opt(manager)
            .await?
            .and_then(|m| m.status)
            .unwrap_or_default();
        let last = match check(&status) {
            Seen::Done(value) => return Ok((value, start.elapsed())),
            Seen::NotYet(last) => last,
            Seen::Wrong(wrong) => {
                return Err(format!(
                    "{manager}: {wrong} (waiting for {what}, after {:?})\n{}",
                    start.elapsed(),
                    report(t, manager).await
                )
                .into());
            }
        };
        if start.elapsed() > within {
            return Err(format!(
                "{manager}: no {what} within {within:?}; last seen: {last}\n{}",
                report(t, manager).await
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the condition is `want_status`/`want_reason` and the entry of `registry` says
/// `want_result`; returns the condition's message and how long it took.
async fn until_condition(
    t: &NodeTest,
    manager: &str,
    registry: &str,
    (want_status, want_reason, want_result): (&str, &str, &str),
    within: Duration,
) -> Result<(String, Duration)> {
    until_status(
        t,
        manager,
        &format!("{CONDITION}={want_status}/{want_reason} with result {want_result}"),
        within,
        |status| {
            let seen = condition(status);
            let result = result_for(status, registry);
            match seen {
                Some((s, r, message))
                    if s == want_status && r == want_reason && result == Some(want_result) =>
                {
                    Seen::Done(message.to_owned())
                }
                _ => Seen::NotYet(format!("condition {seen:?}, result {result:?}")),
            }
        },
    )
    .await
}

/// Waits until an Event with `reason` regards the manager (the recorder puts Events about
/// cluster-scoped objects in `default`), and returns it.
async fn until_event(t: &NodeTest, manager: &str, reason: &str) -> Result<Event> {
    let managers = Api::<ClusterImagePullSecretManager>::all(t.client().clone());
    let uid = managers.get(manager).await?.uid();
    let events = Api::<Event>::namespaced(t.client().clone(), "default");
    let start = Instant::now();
    loop {
        let about: Vec<Event> = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| uid.is_some() && e.regarding.as_ref().and_then(|r| r.uid.clone()) == uid)
            .collect();
        if let Some(event) = about.iter().find(|e| e.reason.as_deref() == Some(reason)) {
            return Ok(event.clone());
        }
        if start.elapsed() > SETTLE {
            let reasons: Vec<Option<&str>> = about.iter().map(|e| e.reason.as_deref()).collect();
            return Err(format!(
                "no Event {reason} about {manager} within {SETTLE:?}; Events about it: \
                 {reasons:?}\n{}",
                report(t, manager).await
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Fails if `text` (a status, a message, an Event) holds any of `passwords`.
fn holds_no_password(what: &str, text: &str, passwords: &[&str]) -> Result {
    if passwords.iter().any(|p| text.contains(p)) {
        return Err(format!("{what} holds a password: {text}").into());
    }
    Ok(())
}

/// A source Secret with a wrong password for a real user: the registry's refusal is in the
/// manager's status and a Warning Event before any Pod exists; once the source is fixed the
/// check runs at once, the condition turns Accepted, and a plain Pod pulls with cheiron's copy.
#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_is_rejected_before_any_pod_is_created() -> Result {
    let t = NodeTest::new("health-wrong").await?;
    let registry = t.node.registry.host.clone();
    let user = t.scenario.unique_name("user");
    let password = t.node.registry.set_user(&user)?;
    let wrong = format!("{password}-wrong");
    let source_ns = t.scenario.create_namespace(&[], &[]).await?;
    t.scenario
        .password_secret(&source_ns, "registry-password", &wrong)
        .await?;
    let ns = t.target_namespace().await?;
    let manager = t.scenario.unique_name("manager");
    apply_checked_manager(&t, &manager, &source_ns, &registry, &user).await?;

    let (message, took) = until_condition(
        &t,
        &manager,
        &registry,
        ("False", "RegistryRejected", "Rejected"),
        CHECKED_WITHIN,
    )
    .await?;
    eprintln!("timing: wrong password Rejected {took:?} after the manager was applied: {message}");
    for name in [registry.as_str(), TARGET_SECRET] {
        assert!(
            message.contains(name),
            "the condition's message should name {name}: {message}"
        );
    }
    holds_no_password("the condition's message", &message, &[&wrong, &password])?;
    let pods = Api::<Pod>::namespaced(t.client().clone(), &ns)
        .list(&ListParams::default())
        .await?;
    assert!(
        pods.items.is_empty(),
        "the rejection should come before any Pod: {:?}",
        pods.items
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>()
    );
    let event = until_event(&t, &manager, "RegistryRejected").await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"), "{event:?}");
    let note = event.note.clone().unwrap_or_default();
    assert!(
        note.contains(&registry),
        "the Event should name {registry}: {note}"
    );
    holds_no_password("the Event", &note, &[&wrong, &password])?;

    // The source is fixed: a changed credential is checked at once.
    let fixed = Instant::now();
    t.scenario
        .password_secret(&source_ns, "registry-password", &password)
        .await?;
    let (message, _) = until_condition(
        &t,
        &manager,
        &registry,
        ("True", "Accepted", "Accepted"),
        CHECKED_WITHIN,
    )
    .await?;
    eprintln!(
        "timing: Accepted {:?} after the source was fixed",
        fixed.elapsed()
    );
    holds_no_password("the condition's message", &message, &[&wrong, &password])?;
    let event = until_event(&t, &manager, "Accepted").await?;
    assert_eq!(event.type_.as_deref(), Some("Normal"), "{event:?}");

    // What the check accepted is what the kubelet pulls with.
    t.until_secret_holds(&ns, TARGET_SECRET, &user, &password)
        .await?;
    t.until_default_service_account_has(&ns, TARGET_SECRET)
        .await?;
    t.expect_running(&ns, "plain", &[]).await
}

/// An accepted credential whose password the registry revokes, the source untouched: the
/// periodic check finds the refusal within the interval (plus its spread and headroom), and the
/// kubelet, pulling with the same credential from cheiron's copy, gets 401, and that 401 is
/// attributed to the manager, its Secret and registry.
#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_password_is_found_by_the_periodic_check() -> Result {
    let t = NodeTest::new("health-revoked").await?;
    let registry = t.node.registry.host.clone();
    let user = t.scenario.unique_name("user");
    let password = t.node.registry.set_user(&user)?;
    let source_ns = t.scenario.create_namespace(&[], &[]).await?;
    t.scenario
        .password_secret(&source_ns, "registry-password", &password)
        .await?;
    let ns = t.target_namespace().await?;
    let manager = t.scenario.unique_name("manager");
    apply_checked_manager(&t, &manager, &source_ns, &registry, &user).await?;
    let (_, took) = until_condition(
        &t,
        &manager,
        &registry,
        ("True", "Accepted", "Accepted"),
        CHECKED_WITHIN,
    )
    .await?;
    eprintln!("timing: Accepted {took:?} after the manager was applied");
    t.until_secret_holds(&ns, TARGET_SECRET, &user, &password)
        .await?;
    t.until_default_service_account_has(&ns, TARGET_SECRET)
        .await?;

    // The registry revokes the password; nothing in the cluster changes.
    let revoked = Instant::now();
    t.node.registry.set_user(&user)?;
    let (message, _) = until_condition(
        &t,
        &manager,
        &registry,
        ("False", "RegistryRejected", "Rejected"),
        RECHECKED_WITHIN,
    )
    .await?;
    eprintln!(
        "timing: Rejected {:?} after the registry revoked the password (interval {}s)",
        revoked.elapsed(),
        REGISTRY_CHECK_INTERVAL_SECONDS
    );
    holds_no_password("the condition's message", &message, &[&password])?;
    let event = until_event(&t, &manager, "RegistryRejected").await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"), "{event:?}");

    // cheiron's copy still holds the credential the check rejected, and the kubelet, pulling
    // with it, is refused too.
    t.until_secret_holds(&ns, TARGET_SECRET, &user, &password)
        .await?;
    match t.run_pod(&ns, "after-revocation", &[]).await? {
        PodOutcome::PullFailed(message) if message.contains("401 Unauthorized") => {}
        other => {
            return Err(format!(
                "a Pod pulling with the revoked credential should get 401: {other:?}\n{}",
                t.node.kubelet_log_lines("after-revocation", 20)
            )
            .into());
        }
    }

    // The kubelet's 401 is attributed to this manager and its Secret (docs/credential-health.md,
    // "Pull failures"): the real kubelet's Event and the Pod's waiting status, read by the
    // controller.
    let (failure, took) = until_status(
        &t,
        &manager,
        "the Pod's refused pull in status.pullFailures",
        PULL_ATTRIBUTED_WITHIN,
        |status| match status.pull_failures.as_ref().and_then(|f| {
            f.recent
                .iter()
                .find(|r| r.namespace == ns && r.pod == "after-revocation")
        }) {
            Some(found) => Seen::Done(found.clone()),
            None => Seen::NotYet(format!("{:?}", status.pull_failures)),
        },
    )
    .await?;
    eprintln!("timing: the kubelet's 401 attributed {took:?} after the Pod's pull failed");
    assert_eq!(
        (failure.secret.as_str(), failure.registry.as_str()),
        (TARGET_SECRET, registry.as_str()),
        "{failure:?}"
    );
    let event = until_event(&t, &manager, "PullRejected").await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"), "{event:?}");
    holds_no_password(
        "the PullRejected Event",
        event.note.as_deref().unwrap_or_default(),
        &[&password],
    )?;
    Ok(())
}

/// A registry key naming a host:port where nothing listens: the check has no answer, so the
/// condition is Unknown/RegistryUnreachable, never a rejection of a credential nobody judged.
#[tokio::test(flavor = "multi_thread")]
async fn a_registry_that_is_down_is_unreachable_not_rejected() -> Result {
    let t = NodeTest::new("health-down").await?;
    let down = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        format!("127.0.0.1:{}", listener.local_addr()?.port())
    };
    let source_ns = t.scenario.create_namespace(&[], &[]).await?;
    t.scenario
        .password_secret(&source_ns, "registry-password", "any-password")
        .await?;
    t.target_namespace().await?;
    let manager = t.scenario.unique_name("manager");
    apply_checked_manager(&t, &manager, &source_ns, &down, "anyone").await?;

    let wanted = ("Unknown", "RegistryUnreachable", "Unreachable");
    let never_rejected = |status: &ManagerStatus| {
        let seen = condition(status);
        let result = result_for(status, &down);
        if result == Some("Rejected") || seen.is_some_and(|(_, r, _)| r == "RegistryRejected") {
            return Seen::Wrong(format!(
                "a registry that is down rejected a credential: condition {seen:?}, result \
                 {result:?}"
            ));
        }
        match seen {
            Some((s, r, message)) if (s, r, result) == (wanted.0, wanted.1, Some(wanted.2)) => {
                Seen::Done(message.to_owned())
            }
            _ => Seen::NotYet(format!("condition {seen:?}, result {result:?}")),
        }
    };
    let (message, took) = until_status(
        &t,
        &manager,
        "CredentialsAccepted=Unknown/RegistryUnreachable with result Unreachable",
        CHECKED_WITHIN,
        never_rejected,
    )
    .await?;
    eprintln!("timing: Unreachable {took:?} after the manager was applied: {message}");
    assert!(
        message.contains(&down),
        "the condition's message should name {down}: {message}"
    );
    let event = until_event(&t, &manager, "RegistryUnreachable").await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"), "{event:?}");
    // It stays so, through the registry's first retry.
    let api = Api::<ClusterImagePullSecretManager>::all(t.client().clone());
    let watch = Instant::now();
    while watch.elapsed() < NEVER_REJECTED_FOR {
        let status = api.get(&manager).await?.status.unwrap_or_default();
        if let Seen::Wrong(wrong) = never_rejected(&status) {
            return Err(format!("{manager}: {wrong}\n{}", report(&t, &manager).await).into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
