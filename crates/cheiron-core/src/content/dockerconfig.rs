//! The content of a `kubernetes.io/dockerconfigjson` Secret: building it from credentials,
//! validating and reading sources (converting legacy `kubernetes.io/dockercfg`), merging, and
//! encoding. Messages describe structure only, never a value.

use std::collections::BTreeMap;

use base64::{Engine, engine::general_purpose::STANDARD};
use k8s_openapi::ByteString;
use serde_json::{Map, Value, json};

use crate::registry::RegistryKey;

/// Secret type of the Secrets cheiron writes.
pub const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
/// The data key of [`DOCKER_CONFIG_JSON`].
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
/// Legacy Secret type, converted on read.
pub const DOCKER_CFG: &str = "kubernetes.io/dockercfg";
/// The data key of [`DOCKER_CFG`].
pub const DOCKER_CFG_KEY: &str = ".dockercfg";

/// Why a source Secret cannot be used. The text names what is wrong, never a value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidSource(pub String);

/// A registry key a merge dropped: a config earlier in the merge holds the same registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shadowed {
    /// The dropped key, as written.
    pub registry: String,
    /// Position of its config in the merge.
    pub config: usize,
    /// The key that won, as written (it may be spelt differently: `docker.io` loses to
    /// `https://index.docker.io/v1/`).
    pub kept: String,
    /// Position of the winner's config in the merge.
    pub kept_config: usize,
}

/// Registry → auth entry, as in `{"auths": {...}}`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DockerConfig {
    auths: Map<String, Value>,
}

impl DockerConfig {
    /// One registry's credentials, with `auth` = base64(`username:password`).
    pub fn from_credentials(
        registry: &str,
        username: &str,
        password: &str,
        email: Option<&str>,
    ) -> Self {
        let mut entry = json!({
            "username": username,
            "password": password,
            "auth": STANDARD.encode(format!("{username}:{password}")),
        });
        if let Some(email) = email {
            entry["email"] = Value::from(email);
        }
        let mut auths = Map::new();
        auths.insert(registry.to_owned(), entry);
        Self { auths }
    }

    /// Reads a source Secret's type and data: a dockerconfigjson with an `auths` object of
    /// objects, or a legacy dockercfg (converted).
    pub fn from_secret(
        secret_type: Option<&str>,
        data: &BTreeMap<String, ByteString>,
    ) -> Result<Self, InvalidSource> {
        let (key, legacy) = match secret_type {
            Some(DOCKER_CONFIG_JSON) => (DOCKER_CONFIG_JSON_KEY, false),
            Some(DOCKER_CFG) => (DOCKER_CFG_KEY, true),
            other => {
                return Err(InvalidSource(format!(
                    "type is {}, not {DOCKER_CONFIG_JSON} (or legacy {DOCKER_CFG})",
                    other.unwrap_or("unset")
                )));
            }
        };
        let bytes = data
            .get(key)
            .ok_or_else(|| InvalidSource(format!("has no {key} key")))?;
        // Parse untyped: serde_json's syntax errors carry positions, never content.
        let value: Value = serde_json::from_slice(&bytes.0).map_err(|e| {
            InvalidSource(format!(
                "{key} is not JSON (line {}, column {})",
                e.line(),
                e.column()
            ))
        })?;
        let auths = if legacy {
            value
        } else {
            value
                .get("auths")
                .cloned()
                .ok_or_else(|| InvalidSource(format!("{key} has no \"auths\" object")))?
        };
        let Value::Object(auths) = auths else {
            return Err(InvalidSource(format!("{key}: \"auths\" is not an object")));
        };
        if let Some((registry, _)) = auths.iter().find(|(_, entry)| !entry.is_object()) {
            return Err(InvalidSource(format!(
                "{key}: the entry for registry {registry:?} is not an object"
            )));
        }
        Ok(Self { auths })
    }

    /// The registries, in key order.
    pub fn registries(&self) -> impl Iterator<Item = &str> {
        self.auths.keys().map(String::as_str)
    }

    /// Merges `configs` in order; on a registry present in several configs the earlier one
    /// wins. "The same registry" is what the kubelet reads as one (`docker.io` and
    /// `https://index.docker.io/v1/` are both Docker Hub), not the same string: two keys the
    /// kubelet offers for the same images would let the later credential win whenever it
    /// matches first. Keys within one config are all kept, as written. Returns the merged
    /// config and what was dropped, naming the key that won.
    pub fn merge<'a>(configs: impl IntoIterator<Item = &'a DockerConfig>) -> (Self, Vec<Shadowed>) {
        let mut merged = Map::new();
        let mut kept: Vec<(RegistryKey, usize)> = Vec::new();
        let mut shadowed = Vec::new();
        for (index, config) in configs.into_iter().enumerate() {
            let earlier = kept.len();
            for (registry, entry) in &config.auths {
                let key = RegistryKey::parse(registry);
                if let Some((winner, winner_config)) =
                    kept[..earlier].iter().find(|(k, _)| k.same_registry(&key))
                {
                    shadowed.push(Shadowed {
                        registry: registry.clone(),
                        config: index,
                        kept: winner.raw().to_owned(),
                        kept_config: *winner_config,
                    });
                } else {
                    merged.insert(registry.clone(), entry.clone());
                    kept.push((key, index));
                }
            }
        }
        (Self { auths: merged }, shadowed)
    }

    /// The `.dockerconfigjson` bytes: `{"auths": {...}}`, keys sorted, so equal configs
    /// encode to equal bytes and unchanged copies are never rewritten.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Map::new();
        out.insert("auths".to_owned(), Value::Object(self.auths.clone()));
        Value::Object(out).to_string().into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn data(key: &str, value: &str) -> BTreeMap<String, ByteString> {
        BTreeMap::from([(key.to_owned(), ByteString(value.as_bytes().to_vec()))])
    }

    #[test]
    fn credentials_encode_username_password_email_and_auth() -> TestResult {
        let config =
            DockerConfig::from_credentials("ghcr.io", "bob", "pa:ss", Some("b@example.com"));
        let value: Value = serde_json::from_slice(&config.to_bytes())?;
        let entry = &value["auths"]["ghcr.io"];
        assert_eq!(entry["username"], "bob");
        assert_eq!(entry["password"], "pa:ss");
        assert_eq!(entry["email"], "b@example.com");
        assert_eq!(entry["auth"], STANDARD.encode("bob:pa:ss"));
        let without_email = DockerConfig::from_credentials("ghcr.io", "bob", "x", None);
        let value: Value = serde_json::from_slice(&without_email.to_bytes())?;
        assert!(value["auths"]["ghcr.io"].get("email").is_none());
        Ok(())
    }

    #[test]
    fn dockerconfigjson_sources_are_read_as_is() -> TestResult {
        let source = r#"{"auths":{"quay.io":{"auth":"eDp5"}},"credsStore":"ignored"}"#;
        let config = DockerConfig::from_secret(
            Some(DOCKER_CONFIG_JSON),
            &data(DOCKER_CONFIG_JSON_KEY, source),
        )?;
        assert_eq!(config.registries().collect::<Vec<_>>(), ["quay.io"]);
        assert_eq!(
            config.to_bytes(),
            br#"{"auths":{"quay.io":{"auth":"eDp5"}}}"#
        );
        Ok(())
    }

    #[test]
    fn legacy_dockercfg_is_converted() -> TestResult {
        let source = r#"{"registry.example.com":{"auth":"eDp5","email":"a@b"}}"#;
        let config = DockerConfig::from_secret(Some(DOCKER_CFG), &data(DOCKER_CFG_KEY, source))?;
        assert_eq!(
            config.to_bytes(),
            br#"{"auths":{"registry.example.com":{"auth":"eDp5","email":"a@b"}}}"#
        );
        Ok(())
    }

    #[test]
    fn invalid_sources_say_what_is_wrong_without_the_value() {
        let secret_value = "hunter2-secret-value";
        let cases = [
            (
                Some("Opaque"),
                data("token", secret_value),
                "type is Opaque",
            ),
            (
                Some(DOCKER_CONFIG_JSON),
                data("other", secret_value),
                "has no .dockerconfigjson key",
            ),
            (
                Some(DOCKER_CONFIG_JSON),
                data(DOCKER_CONFIG_JSON_KEY, secret_value),
                "is not JSON",
            ),
            (
                Some(DOCKER_CONFIG_JSON),
                data(
                    DOCKER_CONFIG_JSON_KEY,
                    &format!(r#"{{"x":"{secret_value}"}}"#),
                ),
                "no \"auths\" object",
            ),
            (
                Some(DOCKER_CONFIG_JSON),
                data(
                    DOCKER_CONFIG_JSON_KEY,
                    &format!(r#"{{"auths":"{secret_value}"}}"#),
                ),
                "\"auths\" is not an object",
            ),
            (
                Some(DOCKER_CONFIG_JSON),
                data(
                    DOCKER_CONFIG_JSON_KEY,
                    &format!(r#"{{"auths":{{"r":"{secret_value}"}}}}"#),
                ),
                "registry \"r\" is not an object",
            ),
        ];
        for (kind, data, expected) in cases {
            let message = DockerConfig::from_secret(kind, &data)
                .err()
                .map(|e| e.0)
                .unwrap_or_default();
            assert!(message.contains(expected), "{message:?} lacks {expected:?}");
            assert!(
                !message.contains(secret_value),
                "{message:?} leaks the value"
            );
        }
    }

    #[test]
    fn merge_keeps_the_earlier_entry_for_a_registry_present_twice() {
        let first = DockerConfig::from_credentials("docker.io", "first", "p1", None);
        let second = DockerConfig::from_credentials("docker.io", "second", "p2", None);
        let third = DockerConfig::from_credentials("ghcr.io", "third", "p3", None);
        let (merged, shadowed) = DockerConfig::merge([&first, &second, &third]);
        assert_eq!(
            shadowed,
            [Shadowed {
                registry: "docker.io".into(),
                config: 1,
                kept: "docker.io".into(),
                kept_config: 0,
            }]
        );
        assert_eq!(
            merged.registries().collect::<Vec<_>>(),
            ["docker.io", "ghcr.io"]
        );
        let value: Value = serde_json::from_slice(&merged.to_bytes()).unwrap_or_default();
        assert_eq!(value["auths"]["docker.io"]["username"], "first");
    }

    #[test]
    fn merge_compares_registries_as_the_kubelet_reads_them() {
        let hub =
            DockerConfig::from_credentials("https://index.docker.io/v1/", "first", "p1", None);
        let alias = DockerConfig::from_credentials("docker.io", "second", "p2", None);
        let ghcr = DockerConfig::from_credentials("https://ghcr.io/v2/", "third", "p3", None);
        let ghcr_again = DockerConfig::from_credentials("ghcr.io", "fourth", "p4", None);
        let (merged, shadowed) = DockerConfig::merge([&hub, &alias, &ghcr, &ghcr_again]);
        assert_eq!(
            merged.registries().collect::<Vec<_>>(),
            ["https://ghcr.io/v2/", "https://index.docker.io/v1/"]
        );
        let winners: Vec<(&str, usize, &str, usize)> = shadowed
            .iter()
            .map(|s| {
                (
                    s.registry.as_str(),
                    s.config,
                    s.kept.as_str(),
                    s.kept_config,
                )
            })
            .collect();
        assert_eq!(
            winners,
            [
                ("docker.io", 1, "https://index.docker.io/v1/", 0),
                ("ghcr.io", 3, "https://ghcr.io/v2/", 2)
            ]
        );
        // Within one source both spellings stay, byte for byte as the source has them.
        let mut both = hub.clone();
        both.auths.extend(alias.auths.clone());
        let (merged, shadowed) = DockerConfig::merge([&both]);
        assert_eq!(merged, both);
        assert!(shadowed.is_empty());
    }
}
