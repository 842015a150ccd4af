//! Registry credentials as the tests write them into source Secrets and read them back from
//! the copies cheiron materialises.

use std::collections::BTreeMap;

use base64::{Engine, engine::general_purpose::STANDARD};
use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::core::ObjectMeta;
use serde_json::{Value, json};

use crate::harness::Result;

/// `type` of every Secret cheiron writes.
pub const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";

/// `base64(username:password)`, the `auth` field of a registry entry.
pub fn auth(username: &str, password: &str) -> String {
    STANDARD.encode(format!("{username}:{password}"))
}

/// One registry entry as cheiron writes it for inline or referenced credentials.
pub fn registry_entry(username: &str, password: &str, email: Option<&str>) -> Value {
    let mut entry = json!({
        "username": username,
        "password": password,
        "auth": auth(username, password),
    });
    if let Some(email) = email {
        entry["email"] = Value::from(email);
    }
    entry
}

/// A Secret named `name` of type `secret_type` holding `data` (keys → text values).
pub fn secret(name: &str, secret_type: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        type_: Some(secret_type.to_owned()),
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Secret::default()
    }
}

/// A `kubernetes.io/dockerconfigjson` source Secret with `{"auths": auths}`.
pub fn dockerconfigjson_secret(name: &str, auths: &Value) -> Secret {
    secret(
        name,
        DOCKER_CONFIG_JSON,
        &[(".dockerconfigjson", &json!({ "auths": auths }).to_string())],
    )
}

/// The decoded `.dockerconfigjson` of a copy, after checking that the copy is a
/// `kubernetes.io/dockerconfigjson` Secret with that one key and nothing else.
pub fn decoded(copy: &Secret) -> Result<Value> {
    let name = copy.metadata.name.as_deref().unwrap_or("?");
    if copy.type_.as_deref() != Some(DOCKER_CONFIG_JSON) {
        return Err(format!("Secret {name} has type {:?}", copy.type_).into());
    }
    let data = copy.data.clone().unwrap_or_default();
    let keys: Vec<&String> = data.keys().collect();
    if keys != [".dockerconfigjson"] {
        return Err(format!("Secret {name} has data keys {keys:?}").into());
    }
    let body = &data[".dockerconfigjson"].0;
    serde_json::from_slice(body)
        .map_err(|e| format!("Secret {name}: .dockerconfigjson is not JSON: {e}").into())
}

/// `decoded(copy)` equals `{"auths": auths}`, or says what it is instead.
pub fn holds(copy: &Secret, auths: &Value) -> Result<()> {
    let actual = decoded(copy)?;
    let expected = json!({ "auths": auths });
    if actual == expected {
        Ok(())
    } else {
        Err(format!("holds {actual}, expected {expected}").into())
    }
}
