//! The node-local credentials file: the registries of the Node managers that select one node,
//! written by `cheiron node-agent` and read by `cheiron credential-provider`. A docker config
//! (`{"auths": {"<registry key>": {"username", "password", "auth"}}}`), mode 0600, written
//! atomically ([`super::atomic`]). Errors describe structure, never a value.

use std::collections::BTreeMap;

use base64::{Engine, engine::general_purpose::STANDARD};
pub use cheiron_core::content::logins::Login;
use cheiron_core::registry::{ImageRef, RegistryKey, offered_for};
use serde::{Deserialize, Serialize};

/// The credentials of one node, by registry key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeCredentials {
    logins: Vec<Login>,
}

/// Why a credentials file (or a docker config turned into one) cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("credentials file: {0}")]
pub struct InvalidCredentials(pub String);

#[derive(Serialize, Deserialize)]
struct FileEntry {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    username: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    password: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    auth: String,
}

#[derive(Serialize, Deserialize)]
struct File {
    auths: BTreeMap<String, FileEntry>,
}

impl NodeCredentials {
    /// From logins; on two keys the kubelet reads as one registry, the first is kept.
    pub fn new(logins: impl IntoIterator<Item = Login>) -> Self {
        let mut kept: Vec<Login> = Vec::new();
        for login in logins {
            let key = RegistryKey::parse(&login.key);
            if !kept
                .iter()
                .any(|k| RegistryKey::parse(&k.key).same_registry(&key))
            {
                kept.push(login);
            }
        }
        kept.sort_by(|a, b| a.key.cmp(&b.key));
        Self { logins: kept }
    }

    /// Reads a docker config (`{"auths": ...}`): each entry's `username` and `password`, or
    /// its `auth` (base64 of `username:password`) when they are absent.
    pub fn parse(bytes: &[u8]) -> Result<Self, InvalidCredentials> {
        cheiron_core::content::logins::logins(bytes)
            .map(Self::new)
            .map_err(|e| InvalidCredentials(e.0))
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let file = File {
            auths: self
                .logins
                .iter()
                .map(|l| {
                    (
                        l.key.clone(),
                        FileEntry {
                            username: l.username.clone(),
                            password: l.password.clone(),
                            auth: STANDARD.encode(format!("{}:{}", l.username, l.password)),
                        },
                    )
                })
                .collect(),
        };
        let mut bytes = serde_json::to_vec_pretty(&file).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    /// Every login, by key.
    pub fn logins(&self) -> &[Login] {
        &self.logins
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.logins.is_empty()
    }

    /// The logins the kubelet's keyring would offer for `image`, in its order
    /// ([`cheiron_core::registry::offered_for`]).
    pub fn for_image(&self, image: &ImageRef) -> Vec<&Login> {
        let keys: Vec<RegistryKey> = self
            .logins
            .iter()
            .map(|l| RegistryKey::parse(&l.key))
            .collect();
        offered_for(&keys, image)
            .into_iter()
            .filter_map(|k| self.logins.iter().find(|l| l.key == k.raw()))
            .collect()
    }

    /// The entries to merge into the kubelet's config.json: key and entry JSON text.
    pub fn config_json_entries(&self) -> Vec<(String, String)> {
        self.logins
            .iter()
            .map(|l| {
                let entry = serde_json::json!({
                    "username": l.username,
                    "password": l.password,
                    "auth": STANDARD.encode(format!("{}:{}", l.username, l.password)),
                });
                (l.key.clone(), entry.to_string())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login(key: &str, user: &str) -> Login {
        Login {
            key: key.to_owned(),
            username: user.to_owned(),
            password: format!("{user}-password"),
        }
    }

    #[test]
    fn the_file_reads_back_what_was_written() -> Result<(), InvalidCredentials> {
        let creds = NodeCredentials::new([login("quay.io", "q"), login("docker.io", "d")]);
        assert_eq!(NodeCredentials::parse(&creds.to_bytes())?, creds);
        Ok(())
    }

    #[test]
    fn an_auth_only_entry_is_decoded() -> Result<(), InvalidCredentials> {
        let creds = NodeCredentials::parse(br#"{"auths":{"quay.io":{"auth":"dTpwOnE="}}}"#)?;
        assert_eq!(creds.logins()[0].username, "u");
        assert_eq!(creds.logins()[0].password, "p:q");
        Ok(())
    }

    #[test]
    fn one_registry_in_two_spellings_is_kept_once() {
        let creds = NodeCredentials::new([
            login("https://index.docker.io/v1/", "first"),
            login("docker.io", "second"),
        ]);
        assert_eq!(creds.logins().len(), 1);
        assert_eq!(creds.logins()[0].username, "first");
    }

    #[test]
    fn errors_never_quote_a_value() {
        let secret = "hunter2";
        for bad in [
            format!("{{\"auths\": {secret}"),
            format!(r#"{{"auths":{{"r":{{"password":7,"username":"{secret}"}}}}}}"#),
            format!(r#"{{"auths":{{"r":{{"auth":"{secret}"}}}}}}"#),
        ] {
            match NodeCredentials::parse(bad.as_bytes()) {
                Err(e) => assert!(!e.to_string().contains(secret), "{e}"),
                Ok(c) => panic!("accepted {bad}: {c:?}"),
            }
        }
    }
}
