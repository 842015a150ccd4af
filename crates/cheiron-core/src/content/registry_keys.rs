//! Registry keys the kubelet would never use for the images they plausibly mean
//! (`https://index.docker.io/v1` without its slash, a foreign scheme, no host): found in every
//! `.dockerconfigjson` a manager materialises, whether written from an inline entry or copied
//! from a source, and reported as `UnusableRegistryKey` (docs/registries.md). Keys name
//! registries, never credentials, so they may appear in status, Events and logs. Pure.

use super::dockerconfig::DockerConfig;
use crate::{
    api::PullSecretEntry,
    registry::{KeyProblem, RegistryKey, canonical_key},
};

/// One key of one entry the kubelet would never use as meant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnusableKey {
    /// Index in `spec.secrets`.
    pub entry: usize,
    /// The Secret the key is written to.
    pub secret: String,
    /// The key as written in that Secret.
    pub key: String,
    /// Why the kubelet would not use it.
    pub problem: KeyProblem,
}

impl UnusableKey {
    /// The status message: the entry, the Secret, the key and, in words, how the kubelet
    /// reads it and what to write instead.
    pub fn message(&self) -> String {
        format!(
            "spec.secrets[{}] (Secret {}): registry key {:?} is unusable: {}",
            self.entry, self.secret, self.key, self.problem
        )
    }
}

/// The unusable keys of `config`, which entry `entry` contributes to Secret `secret`.
pub fn in_config(entry: usize, secret: &str, config: &DockerConfig) -> Vec<UnusableKey> {
    config
        .registries()
        .filter_map(|key| {
            RegistryKey::parse(key)
                .problem()
                .map(|problem| UnusableKey {
                    entry,
                    secret: secret.to_owned(),
                    key: key.to_owned(),
                    problem,
                })
        })
        .collect()
}

/// The unusable keys of the inline `registry:` values of `entries`, under the canonical form
/// cheiron writes them as: what is known without reading any Secret (`cheiron mutate`,
/// `--from`). Copied sources are checked by the controller, which reads them.
pub fn inline(entries: &[PullSecretEntry], merge_into: Option<&str>) -> Vec<UnusableKey> {
    entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.existing_secret_ref.is_none())
        .filter_map(|(entry, e)| {
            let key = canonical_key(e.registry.as_deref()?);
            let problem = RegistryKey::parse(&key).problem()?;
            let secret = merge_into.or(e.target_name()).unwrap_or_default();
            Some(UnusableKey {
                entry,
                secret: secret.to_owned(),
                key,
                problem,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inline_entry(name: &str, registry: &str) -> PullSecretEntry {
        PullSecretEntry {
            name: Some(name.into()),
            registry: Some(registry.into()),
            username: Some("u".into()),
            password: Some("hunter2".into()),
            ..PullSecretEntry::default()
        }
    }

    #[test]
    fn inline_registries_are_checked_as_written_in_canonical_form() {
        let entries = [
            // Written as https://index.docker.io/v1/: fixed, not reported.
            inline_entry("hub", "https://index.docker.io/v1"),
            inline_entry("ghcr", "ghcr.io"),
            inline_entry("bad", "oci://registry.example.com"),
        ];
        let unusable = inline(&entries, None);
        assert_eq!(unusable.len(), 1, "{unusable:?}");
        assert_eq!(unusable[0].entry, 2);
        assert_eq!(unusable[0].secret, "bad");
        let message = unusable[0].message();
        assert!(
            message.starts_with(
                "spec.secrets[2] (Secret bad): registry key \"oci://registry.example.com\" is unusable: "
            ),
            "{message}"
        );
        assert!(!message.contains("hunter2"));
        assert_eq!(inline(&entries, Some("merged"))[0].secret, "merged");
    }

    #[test]
    fn copied_keys_are_checked_as_they_are() {
        let config =
            DockerConfig::from_credentials("https://index.docker.io/v1", "u", "hunter2", None);
        let unusable = in_config(1, "hub", &config);
        assert_eq!(unusable.len(), 1);
        assert_eq!(
            unusable[0].message(),
            "spec.secrets[1] (Secret hub): registry key \"https://index.docker.io/v1\" is unusable: the kubelet strips /v1/ and /v2/ only with the trailing slash, so it reads \"index.docker.io/v1\", a repository path no image has; write \"https://index.docker.io/v1/\""
        );
        let fine = DockerConfig::from_credentials("https://index.docker.io/v1/", "u", "p", None);
        assert!(in_config(0, "hub", &fine).is_empty());
    }
}
