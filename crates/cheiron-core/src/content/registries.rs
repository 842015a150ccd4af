//! The registries each of a manager's Secrets holds, for `status.pullSecrets`: the webhook
//! keeps no Secret data (the split install's webhook may not even list Secrets), so this is
//! how it learns which Secrets serve a Pod's images under `injection: MatchingImages`
//! (docs/design.md §5). Registry keys only, as the kubelet reads them, never a credential.
//! Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, de::IgnoredAny};

use super::desired::DesiredSecret;
use crate::{
    api::{ManagerStatus, PullSecretRegistries},
    policy::{MAX_REGISTRIES, RegistryList},
};

/// The `auths` keys of a `.dockerconfigjson`; the credentials are skipped, not read.
#[derive(Deserialize)]
struct Auths {
    auths: BTreeMap<String, IgnoredAny>,
}

/// The registries of each Secret in `secrets`, in order. A Secret held back by a source
/// problem keeps the registries `previous` listed for it (its copies are left as they were);
/// a Secret whose registries cannot be told, or that holds more than [`MAX_REGISTRIES`], is
/// not listed, and the webhook then injects it whatever a Pod's images.
pub fn pull_secret_registries(
    secrets: &[DesiredSecret],
    previous: Option<&ManagerStatus>,
) -> Vec<PullSecretRegistries> {
    secrets
        .iter()
        .filter_map(|secret| match &secret.content {
            Some(content) => registries(content).map(|registries| PullSecretRegistries {
                name: secret.name.clone(),
                registries,
            }),
            None => previous?
                .pull_secrets
                .iter()
                .find(|p| p.name == secret.name)
                .cloned(),
        })
        .collect()
}

/// The keys as the kubelet reads them (what the webhook parses again), or `None` when they
/// cannot be listed faithfully: more than [`MAX_REGISTRIES`], or a key whose reading, read
/// again, is another key (`host/v1/v1/x` is read as `host/v1/x`, and that as `host/x`).
fn registries(content: &[u8]) -> Option<Vec<String>> {
    let config: Auths = serde_json::from_slice(content).ok()?;
    let list = RegistryList::parse(config.auths.keys().map(String::as_str));
    let read: Vec<String> = list.as_kubelet_reads().map(str::to_owned).collect();
    let faithful = RegistryList::parse(read.iter().map(String::as_str)) == list;
    (faithful && read.len() <= MAX_REGISTRIES).then_some(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, content: Option<&str>) -> DesiredSecret {
        DesiredSecret {
            name: name.to_owned(),
            content: content.map(|c| c.as_bytes().to_vec()),
            source: None,
        }
    }

    fn listed(name: &str, registries: &[&str]) -> PullSecretRegistries {
        PullSecretRegistries {
            name: name.to_owned(),
            registries: registries.iter().map(|r| (*r).to_owned()).collect(),
        }
    }

    #[test]
    fn each_secret_lists_its_registries_as_the_kubelet_reads_them_and_never_a_credential() {
        let secrets = [
            secret(
                "hub",
                Some(
                    r#"{"auths":{"https://index.docker.io/v1/":{"username":"alice","password":"s3cr3t","auth":"YWxpY2U6czNjcjN0"}}}"#,
                ),
            ),
            secret(
                "many",
                Some(
                    r#"{"auths":{"ghcr.io":{"auth":"eDp5"},"registry.example.com:5000":{},"*.example.com":{}}}"#,
                ),
            ),
        ];
        let status = pull_secret_registries(&secrets, None);
        assert_eq!(
            status,
            [
                listed("hub", &["index.docker.io"]),
                listed(
                    "many",
                    &["*.example.com", "ghcr.io", "registry.example.com:5000"]
                ),
            ]
        );
        let text = format!("{status:?}");
        for credential in ["alice", "s3cr3t", "YWxpY2U6czNjcjN0", "eDp5"] {
            assert!(!text.contains(credential), "{credential} in {text}");
        }
    }

    #[test]
    fn a_held_back_secret_keeps_what_was_listed_and_an_unreadable_or_huge_one_is_left_out() {
        let previous = ManagerStatus {
            pull_secrets: vec![listed("held", &["ghcr.io"]), listed("gone", &["quay.io"])],
            ..ManagerStatus::default()
        };
        let huge: String = format!(
            r#"{{"auths":{{{}}}}}"#,
            (0..=MAX_REGISTRIES)
                .map(|i| format!(r#""r{i}.example.com":{{}}"#))
                .collect::<Vec<_>>()
                .join(",")
        );
        let secrets = [
            secret("held", None),
            secret("new-and-held", None),
            secret("not-json", Some("{")),
            secret("huge", Some(&huge)),
            secret(
                "read-twice-differs",
                Some(r#"{"auths":{"https://registry.example.com/v1/v1/team":{}}}"#),
            ),
        ];
        assert_eq!(
            pull_secret_registries(&secrets, Some(&previous)),
            [listed("held", &["ghcr.io"])]
        );
    }
}
