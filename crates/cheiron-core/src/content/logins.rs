//! The logins a docker config holds: each registry key's username and password, read from
//! `username`/`password` or from `auth` (base64 of `username:password`). The node agent hands
//! them to the kubelet; the registry checks send them to their registry. Errors describe
//! structure, never a value.

use std::{collections::BTreeMap, fmt};

use base64::{Engine, engine::general_purpose::STANDARD};
use serde::Deserialize;

/// One registry's login.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    /// The registry key, as the docker config names it (kubelet rules apply).
    pub key: String,
    /// User name.
    pub username: String,
    /// Password or token.
    pub password: String,
}

impl fmt::Debug for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Login({}, <redacted>)", self.key)
    }
}

/// Why a docker config's logins cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidLogins(pub String);

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
}

#[derive(Deserialize)]
struct Config {
    auths: BTreeMap<String, Entry>,
}

/// The logins of a docker config (`{"auths": ...}`), in key order: each entry's `username`
/// and `password`, or its `auth` when they are absent.
pub fn logins(bytes: &[u8]) -> Result<Vec<Login>, InvalidLogins> {
    // Untyped first: serde_json's syntax errors carry positions, never content.
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        InvalidLogins(format!(
            "not JSON (line {}, column {})",
            e.line(),
            e.column()
        ))
    })?;
    let config: Config = serde_json::from_value(value).map_err(|_| {
        InvalidLogins(
            "not {\"auths\": {registry: {username, password, auth}}} (strings)".to_owned(),
        )
    })?;
    config
        .auths
        .into_iter()
        .map(|(key, entry)| {
            let (username, password) = if entry.username.is_empty() && entry.password.is_empty()
            {
                decode_auth(&entry.auth).ok_or_else(|| {
                    InvalidLogins(format!(
                        "the entry for {key:?} has neither username and password nor a base64 user:password auth"
                    ))
                })?
            } else {
                (entry.username, entry.password)
            };
            Ok(Login {
                key,
                username,
                password,
            })
        })
        .collect()
}

fn decode_auth(auth: &str) -> Option<(String, String)> {
    let bytes = STANDARD.decode(auth.trim()).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn username_and_password_win_over_auth_and_auth_alone_is_decoded() {
        let read = logins(
            br#"{"auths":{"quay.io":{"auth":"dTpwOnE="},"ghcr.io":{"username":"a","password":"b","auth":"eDp5"}}}"#,
        )
        .expect("valid");
        assert_eq!(
            read.iter()
                .map(|l| (l.key.as_str(), l.username.as_str(), l.password.as_str()))
                .collect::<Vec<_>>(),
            [("ghcr.io", "a", "b"), ("quay.io", "u", "p:q")]
        );
    }

    #[test]
    fn errors_never_show_a_value() {
        let err =
            logins(br#"{"auths":{"quay.io":{"auth":"not-base64-s3cr3t"}}}"#).expect_err("no login");
        assert!(!err.0.contains("s3cr3t"), "{err}");
        let err = logins(br#"{"auths":{"quay.io":{"password":7}}}"#).expect_err("not a string");
        assert!(err.0.contains("strings"), "{err}");
        assert!(
            format!(
                "{:?}",
                Login {
                    key: "k".to_owned(),
                    username: "u".to_owned(),
                    password: "s3cr3t".to_owned()
                }
            )
            .contains("redacted")
        );
    }
}
