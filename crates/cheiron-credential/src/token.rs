//! KEP-4412: a service-account token for a plugin that asks for one (`tokenAttributes`),
//! minted with the TokenRequest API as the kubelet mints it, with the provider's audience.
//! The kubelet binds the token to the Pod pulling the image; cheiron pulls nothing, so the
//! token is bound to nothing and lives the shortest time the apiserver allows
//! ([`TOKEN_EXPIRATION_SECONDS`]). Which ServiceAccount: docs/credential-providers.md.

use std::collections::BTreeMap;

use cheiron_runtime::message::api_error;
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::ServiceAccount,
};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};

use super::config::TokenAttributes;

/// Lifetime asked for each token: the apiserver's minimum (it is used once, at once).
pub const TOKEN_EXPIRATION_SECONDS: i64 = 600;

/// Why no token was minted. Never holds a token.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The ServiceAccount does not exist.
    #[error("ServiceAccount {namespace}/{name} not found")]
    NoServiceAccount {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// It lacks an annotation the provider requires.
    #[error("ServiceAccount {namespace}/{name} lacks the annotation {key} the provider requires")]
    MissingAnnotation {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The annotation key.
        key: String,
    },
    /// The API refused.
    #[error("minting a token for ServiceAccount {namespace}/{name}: {message}")]
    Api {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The apiserver's answer.
        message: String,
    },
}

/// A token and the annotations the plugin gets with it.
pub struct Minted {
    /// The token.
    pub token: String,
    /// The ServiceAccount's annotations the provider names (required and optional present).
    pub annotations: BTreeMap<String, String>,
}

/// Reads the ServiceAccount (for its uid and annotations, as the kubelet does) and mints a
/// token for `attributes.audience`.
pub async fn mint(
    client: kube::Client,
    namespace: &str,
    name: &str,
    attributes: &TokenAttributes,
) -> Result<Minted, TokenError> {
    let api: Api<ServiceAccount> = Api::namespaced(client, namespace);
    let api_err = |e: kube::Error| TokenError::Api {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        message: api_error(&e),
    };
    let sa =
        api.get_opt(name)
            .await
            .map_err(api_err)?
            .ok_or_else(|| TokenError::NoServiceAccount {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })?;
    let present = sa.metadata.annotations.clone().unwrap_or_default();
    let mut annotations = BTreeMap::new();
    for key in &attributes.required_annotation_keys {
        let value = present
            .get(key)
            .ok_or_else(|| TokenError::MissingAnnotation {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                key: key.clone(),
            })?;
        annotations.insert(key.clone(), value.clone());
    }
    for key in &attributes.optional_annotation_keys {
        if let Some(value) = present.get(key) {
            annotations.insert(key.clone(), value.clone());
        }
    }
    let request = TokenRequest {
        metadata: ObjectMeta {
            uid: sa.metadata.uid.clone(),
            ..ObjectMeta::default()
        },
        spec: TokenRequestSpec {
            audiences: vec![attributes.audience.clone()],
            expiration_seconds: Some(TOKEN_EXPIRATION_SECONDS),
            bound_object_ref: None,
        },
        status: None,
    };
    let minted = api
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .map_err(api_err)?;
    let token = minted.status.map(|s| s.token).unwrap_or_default();
    if token.is_empty() {
        return Err(TokenError::Api {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            message: "the apiserver returned no token".to_owned(),
        });
    }
    Ok(Minted { token, annotations })
}
