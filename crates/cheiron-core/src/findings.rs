//! What one reconcile found ([`Findings`], with what it could not do in each namespace:
//! [`Issue`]) and the manager status it makes ([`status`]): a judgement from plain values,
//! which the controller writes only when it differs from the stored status (ignoring the
//! transition time), so a resync writes nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::{
    ClusterStatus, CredentialStatus, ManagerStatus, NamespaceFailure, PullSecretRegistries, reason,
};
use crate::content::{
    desired::{Problem, ShadowedRegistry},
    registry_keys::UnusableKey,
};

/// Most per-namespace failures a status lists.
pub const MAX_FAILURES: usize = 20;
/// Most workload clusters `status.clusters` lists (the CRD's bound).
pub const MAX_CLUSTERS: usize = 1000;
/// Most entries in `status.credentials` (its schema's bound).
pub const MAX_CREDENTIALS: usize = 64;

/// What kind of thing kept a namespace from being in step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IssueKind {
    /// A Secret cheiron does not manage holds the name; it is left untouched (a conflict).
    Unmanaged,
    /// An older manager claims the name (a conflict).
    ClaimedByOlder,
    /// Creating, replacing or reading a Secret failed.
    SecretWrite,
    /// Deleting a Secret no longer wanted failed.
    SecretDelete,
    /// Patching a ServiceAccount's pull secrets failed.
    ServiceAccount,
}

impl IssueKind {
    /// Every kind, so that each metric series can exist from the start.
    pub const ALL: [IssueKind; 5] = [
        IssueKind::Unmanaged,
        IssueKind::ClaimedByOlder,
        IssueKind::SecretWrite,
        IssueKind::SecretDelete,
        IssueKind::ServiceAccount,
    ];

    /// Whether this is a name clash (status reason `Conflict`) rather than a failed write
    /// (`SyncFailed`, retried soon).
    pub fn is_conflict(self) -> bool {
        matches!(self, IssueKind::Unmanaged | IssueKind::ClaimedByOlder)
    }

    /// A short fixed name for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            IssueKind::Unmanaged => "unmanaged_secret",
            IssueKind::ClaimedByOlder => "claimed_by_older_manager",
            IssueKind::SecretWrite => "secret_write",
            IssueKind::SecretDelete => "secret_delete",
            IssueKind::ServiceAccount => "service_account_patch",
        }
    }
}

/// What one reconcile could not do in one namespace. The message says what and why in words
/// and never quotes a credential.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{namespace}: {message}")]
pub struct Issue {
    /// The namespace concerned.
    pub namespace: String,
    /// What kind of trouble.
    pub kind: IssueKind,
    /// One line for the status and the log.
    pub message: String,
}

impl Issue {
    /// An issue of `kind` in `namespace`.
    pub fn new(kind: IssueKind, namespace: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            kind,
            message: message.into(),
        }
    }
}

/// What one reconcile found.
#[derive(Clone, Debug, Default)]
pub struct Findings {
    /// `metadata.generation` reconciled.
    pub generation: Option<i64>,
    /// Namespaces in scope.
    pub targets: usize,
    /// Namespaces fully synced.
    pub synced: usize,
    /// Source problems.
    pub problems: Vec<Problem>,
    /// What could not be done, per namespace: name clashes and failed writes.
    pub issues: Vec<Issue>,
    /// Entries with inline passwords.
    pub inline_passwords: Vec<usize>,
    /// Registries shadowed in a merge.
    pub shadowed_registries: Vec<ShadowedRegistry>,
    /// Registry keys the kubelet would never use as meant.
    pub unusable_keys: Vec<UnusableKey>,
    /// When failed writes are retried (backing off), if any failed.
    pub retry_in: Option<std::time::Duration>,
    /// The registries of each Secret, for `status.pullSecrets`.
    pub pull_secrets: Vec<PullSecretRegistries>,
    /// The provider-backed Secrets, for `status.credentials`.
    pub credentials: Vec<CredentialStatus>,
    /// What the registry checks know of the manager's credentials (empty when they are off),
    /// for `status.credentials` and the `CredentialsAccepted` condition.
    pub checks: Vec<crate::health::CredentialCheck>,
    /// Pulls refused with the manager's credentials lately, for `status.pullFailures`.
    pub pull_failures: Option<crate::api::PullFailures>,
    /// The workload clusters selected, for `status.clusters` (empty without `spec.clusters`).
    pub clusters: Vec<ClusterStatus>,
    /// Mode Pod with workload clusters selected: the Secrets reach them, but only a cheiron
    /// webhook running there can add them to Pods (docs/fleet.md), which the message says.
    pub pod_mode_in_workloads: bool,
}

impl Findings {
    /// The name clashes, then the failed writes, each in the order found.
    fn split_issues(&self) -> (Vec<&Issue>, Vec<&Issue>) {
        self.issues.iter().partition(|i| i.kind.is_conflict())
    }
}

fn truncate(mut message: String) -> String {
    crate::message::truncate(&mut message, crate::message::MAX_CONDITION_MESSAGE);
    message
}

/// The `Ready` status, reason and message.
fn ready(f: &Findings) -> (&'static str, &'static str, String) {
    let counts = format!("{}/{} namespaces synced", f.synced, f.targets);
    match not_ready(f, &counts) {
        Some((why, message)) => ("False", why, message),
        None => {
            let (why, message) = in_step(f, counts);
            ("True", why, message)
        }
    }
}

/// Why the manager is not `Ready`, if it is not, and the message, ending in `counts`: the
/// first of a credential provider's trouble, an invalid or missing source, an unusable
/// registry key, a conflict, a failed write, a workload cluster out of step.
fn not_ready(f: &Findings, counts: &str) -> Option<(&'static str, String)> {
    let (conflicts, failures) = f.split_issues();
    let invalid: Vec<String> = f
        .problems
        .iter()
        .filter(|p| matches!(p, Problem::InvalidSource { .. }))
        .map(Problem::message)
        .collect();
    let missing: Vec<String> = f
        .problems
        .iter()
        .filter(|p| matches!(p, Problem::SourceMissing { .. }))
        .map(Problem::message)
        .collect();
    for why in [
        reason::CREDENTIAL_PROVIDER_NOT_ALLOWED,
        reason::CREDENTIAL_PROVIDER_FAILED,
        reason::CREDENTIAL_PENDING,
    ] {
        let provider: Vec<String> = f
            .problems
            .iter()
            .filter(|p| matches!(p, Problem::CredentialProvider { reason, .. } if *reason == why))
            .map(Problem::message)
            .collect();
        if !provider.is_empty() {
            return Some((why, format!("{}; {counts}", provider.join("; "))));
        }
    }
    if !invalid.is_empty() {
        return Some((
            reason::INVALID_SOURCE,
            format!("{}; {counts}", invalid.join("; ")),
        ));
    }
    if !missing.is_empty() {
        return Some((
            reason::SOURCE_MISSING,
            format!("{}; {counts}", missing.join("; ")),
        ));
    }
    if !f.unusable_keys.is_empty() {
        let keys: Vec<String> = f.unusable_keys.iter().map(UnusableKey::message).collect();
        return Some((
            reason::UNUSABLE_REGISTRY_KEY,
            format!("{}; {counts}", keys.join("; ")),
        ));
    }
    for (list, why) in [
        (&conflicts, reason::CONFLICT),
        (&failures, reason::SYNC_FAILED),
    ] {
        if let Some(first) = list.first() {
            let more = list.len() - 1;
            let tail = if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            };
            let mut message = format!("{first}{tail}; {counts}");
            if why == reason::SYNC_FAILED
                && let Some(delay) = f.retry_in
            {
                message.push_str(&format!("; retrying in {}s", delay.as_secs()));
            }
            return Some((why, message));
        }
    }
    let unsynced: Vec<String> = f
        .clusters
        .iter()
        .filter(|c| !c.ready)
        .map(|c| match &c.message {
            Some(m) => format!("cluster {}: {m}", c.name),
            None => format!("cluster {}", c.name),
        })
        .collect();
    if !unsynced.is_empty() {
        return Some((
            reason::WORKLOAD_CLUSTER_NOT_SYNCED,
            format!("{}; {counts} here", unsynced.join("; ")),
        ));
    }
    None
}

/// The reason and message of a manager in step, starting with `counts`: what else it should
/// know (workload clusters, a failing refresh, shadowed registries, inline passwords).
fn in_step(f: &Findings, counts: String) -> (&'static str, String) {
    let mut message = counts;
    if !f.clusters.is_empty() {
        message.push_str(&format!(
            "; {} workload cluster(s) synced",
            f.clusters.len()
        ));
    }
    if f.pod_mode_in_workloads && !f.clusters.is_empty() {
        message.push_str(
            "; mode Pod: the Secrets are in the workload clusters, but their Pods get them only \
             from a cheiron webhook running in each of them (docs/fleet.md)",
        );
    }
    for c in &f.credentials {
        if let Some(why) = &c.refresh_failing {
            message.push_str(&format!(
                "; Secret {}: refreshing the credential failed ({why}); the current one is still valid",
                c.name
            ));
        }
    }
    if !f.shadowed_registries.is_empty() {
        message.push_str(&format!(
            "; mergeInto: registries present in several entries, the earlier entry wins: {}",
            f.shadowed_registries
                .iter()
                .map(ShadowedRegistry::message)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !f.inline_passwords.is_empty() {
        let entries: Vec<String> = f
            .inline_passwords
            .iter()
            .map(|i| format!("spec.secrets[{i}]"))
            .collect();
        message.push_str(&format!(
            "; {} keep the password inline in the manager: prefer passwordSecretRef",
            entries.join(", ")
        ));
        return (reason::INLINE_CREDENTIALS, message);
    }
    (reason::SYNCED, message)
}

/// The status for `findings`, keeping `previous`'s transition time when the condition did
/// not change.
pub fn status(findings: &Findings, previous: Option<&ManagerStatus>, now: Time) -> ManagerStatus {
    let (state, why, message) = ready(findings);
    let message = truncate(message);
    let old = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == "Ready"));
    let last_transition_time = match old {
        Some(c) if c.status == state && c.reason == why && c.message == message => {
            c.last_transition_time.clone()
        }
        _ => now.clone(),
    };
    let (conflicts, failures) = findings.split_issues();
    let failures = conflicts
        .into_iter()
        .chain(failures)
        .take(MAX_FAILURES)
        .map(|issue| NamespaceFailure {
            namespace: issue.namespace.clone(),
            message: truncate(issue.message.clone()),
        })
        .collect();
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    ManagerStatus {
        observed_generation: findings.generation,
        conditions: std::iter::once(Condition {
            type_: "Ready".to_owned(),
            status: state.to_owned(),
            reason: why.to_owned(),
            message,
            observed_generation: findings.generation,
            last_transition_time,
        })
        .chain(crate::health::condition(
            &findings.checks,
            findings.generation,
            previous.and_then(|p| {
                p.conditions
                    .iter()
                    .find(|c| c.type_ == crate::health::CONDITION)
            }),
            now,
        ))
        .collect(),
        target_namespaces: Some(count(findings.targets)),
        synced_namespaces: Some(count(findings.synced)),
        namespaces: Some(format!("{}/{}", findings.synced, findings.targets)),
        failures,
        pull_secrets: findings.pull_secrets.clone(),
        credentials: crate::health::credential_statuses(
            &findings.credentials,
            &findings.checks,
            MAX_CREDENTIALS,
        ),
        pull_failures: findings.pull_failures.clone(),
        clusters: findings
            .clusters
            .iter()
            .take(MAX_CLUSTERS)
            .map(|c| crate::api::ClusterStatus {
                message: c.message.clone().map(truncate),
                ..c.clone()
            })
            .collect(),
        // Mode Node: written apart from the reconcile, from the node agents' reports
        // (node/status.rs); kept as seen here.
        nodes_selected: previous.and_then(|p| p.nodes_selected),
        nodes_synced: previous.and_then(|p| p.nodes_synced),
        node_summary: previous.and_then(|p| p.node_summary.clone()),
        nodes: previous.map(|p| p.nodes.clone()).unwrap_or_default(),
        nodes_omitted: previous.and_then(|p| p.nodes_omitted),
    }
}

/// The `Ready` reason of a status, if any.
pub fn ready_reason(status: Option<&ManagerStatus>) -> Option<&str> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(s: &str) -> Result<Time, serde_json::Error> {
        serde_json::from_value(serde_json::Value::from(s))
    }

    #[test]
    fn synced_manager_is_ready_with_counts() -> Result<(), serde_json::Error> {
        let f = Findings {
            generation: Some(3),
            targets: 4,
            synced: 4,
            ..Findings::default()
        };
        let s = status(&f, None, time("2026-01-01T00:00:00Z")?);
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(s.namespaces.as_deref(), Some("4/4"));
        assert_eq!(s.conditions[0].status, "True");
        assert_eq!(s.conditions[0].reason, reason::SYNCED);
        Ok(())
    }

    #[test]
    fn an_unchanged_status_compares_equal_so_nothing_is_written() -> Result<(), serde_json::Error> {
        let f = Findings {
            targets: 2,
            synced: 2,
            ..Findings::default()
        };
        let first = status(&f, None, time("2026-01-01T00:00:00Z")?);
        let again = status(&f, Some(&first), time("2026-01-02T00:00:00Z")?);
        assert_eq!(first, again);
        let changed = status(
            &Findings {
                synced: 1,
                ..f.clone()
            },
            Some(&first),
            time("2026-01-02T00:00:00Z")?,
        );
        assert_ne!(first, changed);
        Ok(())
    }

    #[test]
    fn reasons_follow_severity_and_failures_are_bounded() -> Result<(), serde_json::Error> {
        let mut issues: Vec<Issue> = vec![Issue::new(
            IssueKind::SecretWrite,
            "ns-failed",
            "writing Secret a: denied (403)",
        )];
        issues.extend((0..30).map(|i| Issue::new(IssueKind::Unmanaged, format!("ns{i}"), "taken")));
        let f = Findings {
            targets: 31,
            issues,
            inline_passwords: vec![0],
            ..Findings::default()
        };
        let s = status(&f, None, time("2026-01-01T00:00:00Z")?);
        assert_eq!(s.conditions[0].reason, reason::CONFLICT);
        assert!(
            s.conditions[0]
                .message
                .starts_with("ns0: taken (and 29 more)"),
            "{}",
            s.conditions[0].message
        );
        assert_eq!(s.failures.len(), MAX_FAILURES);
        assert_eq!(
            s.failures[0].namespace, "ns0",
            "conflicts are listed before failures"
        );
        let missing = Findings {
            problems: vec![Problem::SourceMissing {
                entry: 0,
                source: "a/b".into(),
            }],
            ..f
        };
        let s = status(&missing, None, time("2026-01-01T00:00:00Z")?);
        assert_eq!(
            (
                s.conditions[0].status.as_str(),
                s.conditions[0].reason.as_str()
            ),
            ("False", reason::SOURCE_MISSING)
        );
        let inline = Findings {
            targets: 1,
            synced: 1,
            inline_passwords: vec![1],
            ..Findings::default()
        };
        let s = status(&inline, None, time("2026-01-01T00:00:00Z")?);
        assert_eq!(
            (
                s.conditions[0].status.as_str(),
                s.conditions[0].reason.as_str()
            ),
            ("True", reason::INLINE_CREDENTIALS)
        );
        assert!(s.conditions[0].message.contains("spec.secrets[1]"));
        Ok(())
    }

    #[test]
    fn a_failed_write_says_when_it_is_retried() -> Result<(), serde_json::Error> {
        let f = Findings {
            targets: 2,
            synced: 1,
            issues: vec![Issue::new(
                IssueKind::SecretWrite,
                "team",
                "writing Secret pull: too many requests (429)",
            )],
            retry_in: Some(std::time::Duration::from_secs(20)),
            ..Findings::default()
        };
        let s = status(&f, None, time("2026-01-01T00:00:00Z")?);
        assert_eq!(s.conditions[0].reason, reason::SYNC_FAILED);
        assert_eq!(
            s.conditions[0].message,
            "team: writing Secret pull: too many requests (429); 1/2 namespaces synced; retrying in 20s"
        );
        Ok(())
    }

    #[test]
    fn an_unusable_key_makes_the_manager_not_ready_and_says_what_to_write()
    -> Result<(), serde_json::Error> {
        use crate::registry::RegistryKey;
        let problem = RegistryKey::parse("https://index.docker.io/v1").problem();
        let f = Findings {
            targets: 2,
            synced: 2,
            unusable_keys: problem
                .into_iter()
                .map(|problem| UnusableKey {
                    entry: 0,
                    secret: "hub".into(),
                    key: "https://index.docker.io/v1".into(),
                    problem,
                })
                .collect(),
            inline_passwords: vec![0],
            ..Findings::default()
        };
        let s = status(&f, None, time("2026-01-01T00:00:00Z")?);
        let ready = &s.conditions[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", reason::UNUSABLE_REGISTRY_KEY)
        );
        assert!(
            ready.message.starts_with(
                "spec.secrets[0] (Secret hub): registry key \"https://index.docker.io/v1\" is unusable: "
            ) && ready.message.contains("reads \"index.docker.io/v1\"")
                && ready.message.ends_with("; 2/2 namespaces synced"),
            "{}",
            ready.message
        );
        // A source problem is worse: nothing is written for that entry.
        let missing = Findings {
            problems: vec![Problem::SourceMissing {
                entry: 1,
                source: "a/b".into(),
            }],
            ..f
        };
        let s = status(&missing, None, time("2026-01-01T00:00:00Z")?);
        assert_eq!(s.conditions[0].reason, reason::SOURCE_MISSING);
        Ok(())
    }

    #[test]
    fn a_shadowed_registry_names_the_entry_that_won() -> Result<(), serde_json::Error> {
        let f = Findings {
            targets: 1,
            synced: 1,
            shadowed_registries: vec![ShadowedRegistry {
                registry: "docker.io".into(),
                entry: 2,
                kept: "https://index.docker.io/v1/".into(),
                kept_entry: 0,
            }],
            ..Findings::default()
        };
        let s = status(&f, None, time("2026-01-01T00:00:00Z")?);
        assert_eq!(
            s.conditions[0].message,
            "1/1 namespaces synced; mergeInto: registries present in several entries, the earlier entry wins: docker.io (spec.secrets[2]) lost to https://index.docker.io/v1/ (spec.secrets[0])"
        );
        Ok(())
    }

    #[test]
    fn a_workload_cluster_out_of_step_makes_the_manager_not_ready_and_says_which()
    -> Result<(), serde_json::Error> {
        let cluster = |name: &str, ready: bool, message: Option<&str>| ClusterStatus {
            name: name.to_owned(),
            ready,
            target_namespaces: 2,
            synced_namespaces: if ready { 2 } else { 0 },
            message: message.map(str::to_owned),
        };
        let f = Findings {
            targets: 1,
            synced: 1,
            clusters: vec![
                cluster("capi/east", true, None),
                cluster("capi/west", false, Some("unreachable: connection refused")),
            ],
            ..Findings::default()
        };
        let s = status(&f, None, time("2026-01-01T00:00:00Z")?);
        assert_eq!(s.conditions[0].status, "False");
        assert_eq!(s.conditions[0].reason, reason::WORKLOAD_CLUSTER_NOT_SYNCED);
        assert_eq!(
            s.conditions[0].message,
            "cluster capi/west: unreachable: connection refused; 1/1 namespaces synced here"
        );
        assert_eq!(s.clusters, f.clusters);
        let all_ready = Findings {
            clusters: vec![cluster("capi/east", true, None)],
            ..f
        };
        let s = status(&all_ready, None, time("2026-01-01T00:00:00Z")?);
        assert_eq!(s.conditions[0].reason, reason::SYNCED);
        assert_eq!(
            s.conditions[0].message,
            "1/1 namespaces synced; 1 workload cluster(s) synced"
        );
        // Mode Pod: said, not pretended.
        let pods = Findings {
            pod_mode_in_workloads: true,
            ..all_ready
        };
        let s = status(&pods, None, time("2026-01-01T00:00:00Z")?);
        assert!(
            s.conditions[0].message.contains(
                "mode Pod: the Secrets are in the workload clusters, but their Pods get them only from a cheiron webhook running in each of them"
            ),
            "{}",
            s.conditions[0].message
        );
        Ok(())
    }

    #[test]
    fn only_name_clashes_count_as_conflicts() {
        assert!(IssueKind::Unmanaged.is_conflict());
        assert!(IssueKind::ClaimedByOlder.is_conflict());
        for kind in [
            IssueKind::SecretWrite,
            IssueKind::SecretDelete,
            IssueKind::ServiceAccount,
        ] {
            assert!(!kind.is_conflict(), "{kind:?}");
        }
    }

    #[test]
    fn an_issue_reads_as_namespace_then_message() {
        let issue = Issue::new(
            IssueKind::SecretWrite,
            "team-a",
            "writing Secret x: denied (403)",
        );
        assert_eq!(issue.to_string(), "team-a: writing Secret x: denied (403)");
    }
}
