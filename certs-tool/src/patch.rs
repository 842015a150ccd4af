//! `cheiron-certs patch`: the `ca.crt` of the serving Secret into `clientConfig.caBundle` of
//! every webhook of a MutatingWebhookConfiguration, keeping previous CAs that are still valid
//! (see [`ca_bundle`](crate::ca_bundle)). Writes nothing when every bundle already holds
//! those CAs.
//!
//! The write is a strategic merge patch naming each changed webhook (the list merges on
//! `name`) with only its `caBundle`, plus the `resourceVersion` read as a precondition: no
//! other field is touched, nothing written by a newer API version is dropped, and a
//! concurrent change makes the patch fail (409) and be computed again.

use std::fmt;

use base64::Engine;
use k8s_openapi::api::{admissionregistration::v1::MutatingWebhookConfiguration, core::v1::Secret};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, ResourceExt},
};
use serde_json::json;
use time::OffsetDateTime;

use crate::{
    ca_bundle::changes,
    create::FIELD_MANAGER,
    error::{Error, Result},
    pki::certificates_from_pem,
    secret::{CA_KEY, data},
};

/// How often a patch that lost a race is computed again.
const ATTEMPTS: usize = 3;

/// What `patch` is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchRequest {
    /// `metadata.name` of the MutatingWebhookConfiguration.
    pub webhook_name: String,
    /// The serving Secret whose `ca.crt` is injected.
    pub secret_name: String,
    /// The Secret's namespace.
    pub namespace: String,
}

/// What `patch` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Patched {
    /// Every webhook already trusts the CA; nothing was written.
    Unchanged {
        /// The configuration.
        configuration: String,
    },
    /// These webhooks got a new `caBundle`.
    Updated {
        /// The configuration.
        configuration: String,
        /// The webhooks changed.
        webhooks: Vec<String>,
        /// How many CAs the first changed bundle holds (the new one and those kept).
        cas: usize,
    },
}

impl fmt::Display for Patched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Patched::Unchanged { configuration } => write!(
                f,
                "MutatingWebhookConfiguration {configuration} already trusts the CA: unchanged"
            ),
            Patched::Updated {
                configuration,
                webhooks,
                cas,
            } => write!(
                f,
                "MutatingWebhookConfiguration {configuration}: caBundle of {} now holds {cas} CA(s)",
                webhooks.join(", ")
            ),
        }
    }
}

/// Injects the Secret's `ca.crt` into every webhook of the configuration.
pub async fn patch(client: &Client, request: &PatchRequest) -> Result<Patched> {
    let PatchRequest {
        webhook_name,
        secret_name,
        namespace,
    } = request;
    let secret = format!("{namespace}/{secret_name}");
    let stored = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(secret_name)
        .await
        .map_err(|source| Error::Api {
            action: "get",
            object: format!("Secret {secret}"),
            source,
        })?
        .ok_or_else(|| Error::SecretMissing(secret.clone()))?;
    let current =
        certificates_from_pem(data(&stored, CA_KEY).unwrap_or_default()).map_err(|source| {
            Error::NoCa {
                secret: secret.clone(),
                source,
            }
        })?;

    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let object = format!("MutatingWebhookConfiguration {webhook_name}");
    let api_error = |action| {
        let object = object.clone();
        move |source| Error::Api {
            action,
            object,
            source,
        }
    };
    for _ in 0..ATTEMPTS {
        let configuration = api
            .get_opt(webhook_name)
            .await
            .map_err(api_error("get"))?
            .ok_or_else(|| Error::WebhookMissing(webhook_name.clone()))?;
        let now = OffsetDateTime::now_utc().unix_timestamp();
        let changes = changes(&configuration, &current, now);
        let Some(first) = changes.first() else {
            return Ok(Patched::Unchanged {
                configuration: webhook_name.clone(),
            });
        };
        let cas = first.cas;
        let webhooks: Vec<_> = changes
            .iter()
            .map(|change| {
                json!({
                    "name": change.webhook,
                    "clientConfig": {
                        "caBundle": base64::engine::general_purpose::STANDARD.encode(&change.ca_bundle),
                    },
                })
            })
            .collect();
        let body = json!({
            "metadata": {"resourceVersion": configuration.resource_version()},
            "webhooks": webhooks,
        });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        match api
            .patch(webhook_name, &params, &Patch::Strategic(body))
            .await
        {
            Ok(_) => {
                return Ok(Patched::Updated {
                    configuration: webhook_name.clone(),
                    webhooks: changes.into_iter().map(|c| c.webhook).collect(),
                    cas,
                });
            }
            Err(kube::Error::Api(status)) if status.is_conflict() => continue,
            Err(source) => return Err(api_error("patch")(source)),
        }
    }
    Err(Error::Conflict(object))
}
