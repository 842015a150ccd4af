//! `cheiron credential-provider`: the kubelet's credential-provider exec protocol
//! (`credentialprovider.kubelet.k8s.io/v1`, docs/node.md), answered from the node-local
//! credentials file ([`super::credentials`]). The kubelet writes one `CredentialProviderRequest`
//! on stdin; the answer is one `CredentialProviderResponse` on stdout with the credentials the
//! kubelet's own keyring would offer for the image ([`cheiron_core::registry::offered_for`]), cache key
//! type `Image` and a short `cacheDuration`, so a rotated or removed credential is seen within
//! that time without restarting the kubelet. The wire types are the ones cheiron uses to call
//! plugins ([`cheiron_credential::exec`]).

use std::{collections::BTreeMap, time::Duration};

use cheiron_core::registry::ImageRef;
use cheiron_credential::{
    config::PROVIDER_API_VERSIONS,
    exec::{AuthConfig, WireRequest, WireResponse},
};

use super::credentials::NodeCredentials;

/// How long the kubelet may cache an answer (the response's `cacheDuration`).
pub const DEFAULT_CACHE_DURATION: Duration = Duration::from_secs(60);
/// Most bytes of a request read from stdin (a service-account token is a few KiB).
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// Why a request cannot be answered. Never quotes the request: it may hold a token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("credential-provider request: {0}")]
pub struct BadRequest(pub String);

/// The response to `request` (the bytes the kubelet wrote), from `credentials`.
pub fn answer(
    request: &[u8],
    credentials: &NodeCredentials,
    cache_duration: Duration,
) -> Result<Vec<u8>, BadRequest> {
    if request.len() > MAX_REQUEST_BYTES {
        return Err(BadRequest(format!("longer than {MAX_REQUEST_BYTES} bytes")));
    }
    let value: serde_json::Value = serde_json::from_slice(request).map_err(|e| {
        BadRequest(format!(
            "not JSON (line {}, column {})",
            e.line(),
            e.column()
        ))
    })?;
    let api_version = value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    if !PROVIDER_API_VERSIONS.contains(&api_version) {
        return Err(BadRequest(format!(
            "apiVersion must be one of {}",
            PROVIDER_API_VERSIONS.join(", ")
        )));
    }
    if value.get("kind").and_then(|v| v.as_str()) != Some("CredentialProviderRequest") {
        return Err(BadRequest(
            "kind is not CredentialProviderRequest".to_owned(),
        ));
    }
    let wire: WireRequest = serde_json::from_value(value).map_err(|_| {
        BadRequest("fields do not decode as a CredentialProviderRequest".to_owned())
    })?;
    let image = ImageRef::parse(&wire.image).map_err(|e| BadRequest(format!("image: {e}")))?;
    let auth: BTreeMap<String, AuthConfig> = credentials
        .for_image(&image)
        .into_iter()
        .map(|login| {
            (
                login.key.clone(),
                AuthConfig {
                    username: login.username.clone(),
                    password: login.password.clone(),
                },
            )
        })
        .collect();
    let response = WireResponse {
        api_version: wire.api_version,
        kind: "CredentialProviderResponse".to_owned(),
        cache_key_type: "Image".to_owned(),
        cache_duration: Some(format!("{}s", cache_duration.as_secs())),
        auth,
    };
    let mut out = serde_json::to_vec(&response)
        .map_err(|e| BadRequest(format!("encoding the response: {e}")))?;
    out.push(b'\n');
    Ok(out)
}

#[cfg(test)]
mod tests;
