//! Credential health (docs/credential-health.md): what the registry checks found for a
//! manager's credentials, and the `CredentialsAccepted` condition and `status.credentials`
//! entries it makes. The checks themselves run in the `cheiron-health` room; this is the pure
//! part the reconcile's status is built from.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::CredentialStatus;

/// The condition's type.
pub const CONDITION: &str = "CredentialsAccepted";

/// The reasons of [`CONDITION`].
pub mod reason {
    /// Every registry checked accepted its credential.
    pub const ACCEPTED: &str = "Accepted";
    /// A registry (or its token service) refused a credential.
    pub const REGISTRY_REJECTED: &str = "RegistryRejected";
    /// A registry gave no answer about a credential (down, a timeout, an error status, an
    /// answer cheiron will not follow); nothing is known of the credential.
    pub const REGISTRY_UNREACHABLE: &str = "RegistryUnreachable";
    /// A credential is new or changed and its check has not answered yet.
    pub const CHECKING: &str = "Checking";
}

/// Where one check stands. The names are what `status.credentials[].result` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CheckResult {
    /// Not checked yet.
    Pending,
    /// The registry accepted the credential.
    Accepted,
    /// The registry refused the credential.
    Rejected,
    /// No answer about the credential.
    Unreachable,
    /// Cannot be checked: the key names no single registry (a glob, a key the kubelet skips).
    Unchecked,
}

impl CheckResult {
    /// The name in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckResult::Pending => "Pending",
            CheckResult::Accepted => "Accepted",
            CheckResult::Rejected => "Rejected",
            CheckResult::Unreachable => "Unreachable",
            CheckResult::Unchecked => "Unchecked",
        }
    }
}

/// Docker Hub's pull allowance for one credential (its `ratelimit-*` headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Allowance {
    /// No `ratelimit-*` headers: a paid account.
    Unlimited,
    /// `ratelimit-limit: 100;w=21600` and `ratelimit-remaining: 76;w=21600`.
    Limited {
        /// Pulls allowed per window.
        limit: u64,
        /// Pulls left in the current window.
        remaining: u64,
        /// The window (`w=`), when given.
        window: Option<Duration>,
    },
}

/// What the checks know of one registry key of one of a manager's Secrets.
#[derive(Clone, Debug, PartialEq)]
pub struct CredentialCheck {
    /// The Secret's name in each target namespace.
    pub secret: String,
    /// The registry key in its `.dockerconfigjson`, as written.
    pub registry: String,
    /// Where the check stands.
    pub result: CheckResult,
    /// When the registry last answered (or failed to).
    pub checked_at: Option<Time>,
    /// Who refused or what failed, never a credential, a token or a response body.
    pub message: Option<String>,
    /// Docker Hub only: the pull allowance read with the check.
    pub allowance: Option<Allowance>,
}

/// The `CredentialsAccepted` condition for `checks`: none when nothing is checked. The first
/// rejection (in the order of the Secrets) is named in the message; then an unreachable
/// registry; then a check still running.
pub fn condition(
    checks: &[CredentialCheck],
    generation: Option<i64>,
    previous: Option<&Condition>,
    now: Time,
) -> Option<Condition> {
    let checked: Vec<&CredentialCheck> = checks
        .iter()
        .filter(|c| c.result != CheckResult::Unchecked)
        .collect();
    if checked.is_empty() {
        return None;
    }
    let first = |result| checked.iter().find(|c| c.result == result);
    let count = |result| checked.iter().filter(|c| c.result == result).count();
    let (status, why, message) = if let Some(c) = first(CheckResult::Rejected) {
        let others = count(CheckResult::Rejected) - 1;
        (
            "False",
            reason::REGISTRY_REJECTED,
            format!(
                "{} rejects the credential of Secret {}{}{}",
                c.registry,
                c.secret,
                c.message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default(),
                and_more(others),
            ),
        )
    } else if let Some(c) = first(CheckResult::Unreachable) {
        let others = count(CheckResult::Unreachable) - 1;
        (
            "Unknown",
            reason::REGISTRY_UNREACHABLE,
            format!(
                "cannot check the credential of Secret {} with {}{}{}",
                c.secret,
                c.registry,
                c.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default(),
                and_more(others),
            ),
        )
    } else if let Some(c) = first(CheckResult::Pending) {
        let others = count(CheckResult::Pending) - 1;
        (
            "Unknown",
            reason::CHECKING,
            format!(
                "checking the credential of Secret {} with {}{}",
                c.secret,
                c.registry,
                and_more(others)
            ),
        )
    } else {
        (
            "True",
            reason::ACCEPTED,
            format!(
                "{} accepted by {}",
                plural(checked.len(), "credential"),
                plural(distinct_registries(&checked), "registry"),
            ),
        )
    };
    let mut message = message;
    crate::message::truncate(&mut message, crate::message::MAX_CONDITION_MESSAGE);
    let last_transition_time = match previous {
        Some(c) if c.status == status && c.reason == why => c.last_transition_time.clone(),
        _ => now,
    };
    Some(Condition {
        type_: CONDITION.to_owned(),
        status: status.to_owned(),
        reason: why.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time,
    })
}

/// `status.credentials` with the checks merged in: a check of a provider-backed Secret fills
/// that Secret's entry (its first registry); every other check gets an entry of its own. At
/// most `max` entries.
pub fn credential_statuses(
    providers: &[CredentialStatus],
    checks: &[CredentialCheck],
    max: usize,
) -> Vec<CredentialStatus> {
    let mut out: Vec<CredentialStatus> = providers.to_vec();
    for check in checks {
        let entry = CredentialStatus {
            registry: Some(check.registry.clone()),
            result: Some(check.result.as_str().to_owned()),
            checked_at: check.checked_at.clone(),
            message: check.message.clone(),
            pulls_limit: match check.allowance {
                Some(Allowance::Limited { limit, .. }) => Some(saturating_i64(limit)),
                _ => None,
            },
            pulls_remaining: match check.allowance {
                Some(Allowance::Limited { remaining, .. }) => Some(saturating_i64(remaining)),
                _ => None,
            },
            pull_allowance: check.allowance.map(describe_allowance),
            ..CredentialStatus {
                name: check.secret.clone(),
                ..CredentialStatus::default()
            }
        };
        match out
            .iter_mut()
            .find(|s| s.name == check.secret && s.registry.is_none() && !s.provider.is_empty())
        {
            Some(provider) => {
                *provider = CredentialStatus {
                    name: provider.name.clone(),
                    provider: provider.provider.clone(),
                    expires_at: provider.expires_at.clone(),
                    refresh_failing: provider.refresh_failing.clone(),
                    ..entry
                };
            }
            None => out.push(entry),
        }
    }
    out.truncate(max);
    out
}

/// `76 of 100 pulls left per 6h`, or `unlimited`.
pub fn describe_allowance(allowance: Allowance) -> String {
    match allowance {
        Allowance::Unlimited => "unlimited".to_owned(),
        Allowance::Limited {
            limit,
            remaining,
            window,
        } => match window {
            Some(w) => format!("{remaining} of {limit} pulls left per {}", window_text(w)),
            None => format!("{remaining} of {limit} pulls left"),
        },
    }
}

fn window_text(window: Duration) -> String {
    let s = window.as_secs();
    if s > 0 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else {
        format!("{s}s")
    }
}

fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn distinct_registries(checks: &[&CredentialCheck]) -> usize {
    let mut registries: Vec<&str> = checks.iter().map(|c| c.registry.as_str()).collect();
    registries.sort_unstable();
    registries.dedup();
    registries.len()
}

fn plural(n: usize, word: &str) -> String {
    match (n, word) {
        (1, _) => format!("1 {word}"),
        (_, "registry") => format!("{n} registries"),
        _ => format!("{n} {word}s"),
    }
}

fn and_more(others: usize) -> String {
    match others {
        0 => String::new(),
        n => format!(", and {n} more"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(secret: &str, registry: &str, result: CheckResult) -> CredentialCheck {
        CredentialCheck {
            secret: secret.to_owned(),
            registry: registry.to_owned(),
            result,
            checked_at: None,
            message: None,
            allowance: None,
        }
    }

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).expect("a time"))
    }

    #[test]
    fn nothing_checked_makes_no_condition() {
        assert_eq!(condition(&[], Some(1), None, at(1)), None);
        let unchecked = [check("s", "*.example.com", CheckResult::Unchecked)];
        assert_eq!(condition(&unchecked, Some(1), None, at(1)), None);
    }

    #[test]
    fn a_rejection_wins_over_an_unreachable_registry_and_names_secret_and_registry() {
        let mut rejected = check("team", "ghcr.io", CheckResult::Rejected);
        rejected.message = Some("ghcr.io answered 401".to_owned());
        let checks = [
            check(
                "hub",
                "https://index.docker.io/v1/",
                CheckResult::Unreachable,
            ),
            rejected,
            check("other", "quay.io", CheckResult::Rejected),
        ];
        let c = condition(&checks, Some(3), None, at(1)).expect("a condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "RegistryRejected")
        );
        assert_eq!(
            c.message,
            "ghcr.io rejects the credential of Secret team (ghcr.io answered 401), and 1 more"
        );
        assert_eq!(c.observed_generation, Some(3));
    }

    #[test]
    fn an_unreachable_registry_is_unknown_not_a_rejection() {
        let checks = [
            check("a", "ghcr.io", CheckResult::Accepted),
            check("b", "registry.example.com", CheckResult::Unreachable),
        ];
        let c = condition(&checks, None, None, at(1)).expect("a condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("Unknown", "RegistryUnreachable")
        );
    }

    #[test]
    fn all_accepted_is_true_and_keeps_its_transition_time() {
        let checks = [
            check("a", "ghcr.io", CheckResult::Accepted),
            check("b", "ghcr.io", CheckResult::Accepted),
            check("c", "*.example.com", CheckResult::Unchecked),
        ];
        let first = condition(&checks, None, None, at(10)).expect("a condition");
        assert_eq!(
            (first.status.as_str(), first.reason.as_str()),
            ("True", "Accepted")
        );
        assert_eq!(first.message, "2 credentials accepted by 1 registry");
        let again = condition(&checks, None, Some(&first), at(20)).expect("a condition");
        assert_eq!(again.last_transition_time, at(10));
        let pending = [check("a", "ghcr.io", CheckResult::Pending)];
        let changed = condition(&pending, None, Some(&first), at(30)).expect("a condition");
        assert_eq!(changed.reason, "Checking");
        assert_eq!(changed.last_transition_time, at(30));
    }

    #[test]
    fn checks_fill_a_provider_entry_and_add_entries_of_their_own() {
        let providers = [CredentialStatus {
            name: "ecr".to_owned(),
            provider: "ecr-credential-provider".to_owned(),
            ..CredentialStatus::default()
        }];
        let mut hub = check("hub", "https://index.docker.io/v1/", CheckResult::Accepted);
        hub.allowance = Some(Allowance::Limited {
            limit: 100,
            remaining: 76,
            window: Some(Duration::from_secs(21_600)),
        });
        let checks = [
            check("ecr", "123.dkr.ecr.example.com", CheckResult::Accepted),
            hub,
        ];
        let statuses = credential_statuses(&providers, &checks, 64);
        assert_eq!(statuses.len(), 2);
        assert_eq!(statuses[0].provider, "ecr-credential-provider");
        assert_eq!(statuses[0].result.as_deref(), Some("Accepted"));
        assert_eq!(statuses[1].name, "hub");
        assert_eq!(statuses[1].pulls_remaining, Some(76));
        assert_eq!(statuses[1].pulls_limit, Some(100));
        assert_eq!(
            statuses[1].pull_allowance.as_deref(),
            Some("76 of 100 pulls left per 6h")
        );
        assert_eq!(credential_statuses(&providers, &checks, 1).len(), 1);
    }
}
