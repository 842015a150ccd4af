//! The provider entries of a manager, as the controller's reconcile asks for them
//! ([`resolve`]): each entry's shared credential ([`CredentialProviders::lookup`]) turned into
//! the docker config the entry writes,
//! every returned pattern a registry key as cheiron writes keys
//! ([`cheiron_core::registry::canonical_key`]). What the room refuses or cannot provide becomes a
//! [`Problem`]; the copies already written are then kept. Never waits for a plugin: a
//! credential not fetched yet is a pending problem, rechecked after [`PENDING_RECHECK`] unless
//! its answer triggers the reconcile first.

use std::time::{Duration, SystemTime};

use cheiron_core::{
    api::{CredentialStatus, PullSecretEntry, reason},
    content::{DockerConfig, Problem, Provided},
    policy::ManagerId,
    registry::canonical_key,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::{Credential, CredentialProviders, Key, Lookup, Wanted};

/// A manager waiting for a plugin's first answer is reconciled again after this, should the
/// answer's own trigger be lost.
pub const PENDING_RECHECK: Duration = Duration::from_secs(10);

/// True when some entry waits for a plugin's first answer.
pub fn pending(problems: &[Problem]) -> bool {
    problems.iter().any(|p| {
        matches!(p, Problem::CredentialProvider { reason, .. } if *reason == reason::CREDENTIAL_PENDING)
    })
}

/// Resolves every provider entry of `manager` (the docker config each writes, or why it
/// cannot) with the status the manager reports of each, and forgets the keys it no longer
/// uses.
pub fn resolve(
    providers: &CredentialProviders,
    manager: &ManagerId,
    entries: &[PullSecretEntry],
) -> (Provided, Vec<CredentialStatus>) {
    let mut provided = Provided::new();
    let mut statuses = Vec::new();
    let mut keys: Vec<Key> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let Some(wanted) = &entry.credential_provider else {
            continue;
        };
        let wanted = Wanted {
            image: wanted.image.clone(),
            service_account_name: wanted.service_account_name.clone(),
        };
        let (key, lookup) = providers.lookup(manager, &wanted);
        keys.extend(key);
        let name = entry.name.clone().unwrap_or_default();
        let result = match lookup {
            Lookup::Ready {
                provider,
                credential,
                failing,
            } => {
                statuses.push(CredentialStatus {
                    name,
                    provider,
                    expires_at: credential.expires_at.map(time),
                    refresh_failing: failing,
                    ..CredentialStatus::default()
                });
                Ok(docker_config(&credential))
            }
            Lookup::Pending { provider, message } => {
                statuses.push(CredentialStatus {
                    name,
                    provider,
                    expires_at: None,
                    refresh_failing: None,
                    ..CredentialStatus::default()
                });
                Err(Problem::CredentialProvider {
                    entry: index,
                    reason: reason::CREDENTIAL_PENDING,
                    message,
                })
            }
            Lookup::Failed {
                provider,
                message,
                expired_at,
            } => {
                statuses.push(CredentialStatus {
                    name,
                    provider,
                    expires_at: expired_at.map(time),
                    refresh_failing: None,
                    ..CredentialStatus::default()
                });
                Err(Problem::CredentialProvider {
                    entry: index,
                    reason: reason::CREDENTIAL_PROVIDER_FAILED,
                    message,
                })
            }
            Lookup::Refused {
                message,
                namespace_not_allowed,
            } => Err(Problem::CredentialProvider {
                entry: index,
                reason: if namespace_not_allowed {
                    reason::CREDENTIAL_PROVIDER_NOT_ALLOWED
                } else {
                    reason::CREDENTIAL_PROVIDER_FAILED
                },
                message,
            }),
        };
        provided.insert(index, result);
    }
    keys.sort();
    keys.dedup();
    providers.retain(manager, keys);
    (provided, statuses)
}

/// The `.dockerconfigjson` of a credential: one key per returned pattern.
fn docker_config(credential: &Credential) -> DockerConfig {
    let configs: Vec<DockerConfig> = credential
        .auth
        .iter()
        .map(|a| {
            DockerConfig::from_credentials(
                &canonical_key(&a.pattern),
                &a.username,
                &a.password,
                None,
            )
        })
        .collect();
    DockerConfig::merge(&configs).0
}

fn time(t: SystemTime) -> Time {
    let seconds = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap_or_default())
}
