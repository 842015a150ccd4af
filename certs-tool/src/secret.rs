//! The two Secrets `create` maintains, and whether an existing Secret is cheiron's to touch.
//!
//! - `<name>`: the serving Secret, type `kubernetes.io/tls`, keys `tls.crt`, `tls.key`,
//!   `ca.crt`. The webhook mounts it (`--tls-cert-dir`); `patch` reads its `ca.crt`.
//! - `<name>-ca`: the CA, type `kubernetes.io/tls` (`tls.crt` = CA certificate, `tls.key` = CA
//!   key). Kept apart so that the webhook's volume never holds a key that can mint
//!   certificates, and read on re-issue so that the CA, and with it `caBundle`, stays the same.
//!
//! Both carry `app.kubernetes.io/managed-by: cheiron`. A Secret of either name that is not of
//! type `kubernetes.io/tls` or lacks that label is not cheiron's, and is never overwritten.

use std::{collections::BTreeMap, fmt};

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{ResourceExt, api::ObjectMeta};

use crate::pki::{Ca, ServingCertificate};

/// The Secret type both Secrets have.
pub const TLS_TYPE: &str = "kubernetes.io/tls";
/// Certificate key of a `kubernetes.io/tls` Secret.
pub const CERT_KEY: &str = "tls.crt";
/// Private key key of a `kubernetes.io/tls` Secret.
pub const KEY_KEY: &str = "tls.key";
/// The CA certificate in the serving Secret.
pub const CA_KEY: &str = "ca.crt";
/// The label that marks what cheiron owns (docs/design.md §4; `cheiron::api::label::MANAGED_BY`, not
/// linked so that this tool stays small).
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY`].
pub const MANAGED_BY_VALUE: &str = "cheiron";
/// Which of the two Secrets an object is.
pub const COMPONENT: &str = "app.kubernetes.io/component";

/// The name of the CA Secret that goes with serving Secret `secret_name`.
pub fn ca_secret_name(secret_name: &str) -> String {
    format!("{secret_name}-ca")
}

/// Why an existing Secret is not cheiron's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Foreign {
    /// Its type is not `kubernetes.io/tls`.
    NotTls {
        /// The type it has.
        secret_type: String,
    },
    /// It lacks `app.kubernetes.io/managed-by: cheiron`.
    NotManaged,
}

impl fmt::Display for Foreign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Foreign::NotTls { secret_type } => {
                write!(f, "its type is {secret_type}, not {TLS_TYPE}")
            }
            Foreign::NotManaged => write!(f, "it lacks the label {MANAGED_BY}={MANAGED_BY_VALUE}"),
        }
    }
}

/// `Ok` if `secret` is cheiron's to overwrite.
pub fn ownership(secret: &Secret) -> Result<(), Foreign> {
    // The API server defaults a missing type to Opaque.
    let secret_type = secret.type_.as_deref().unwrap_or("Opaque");
    if secret_type != TLS_TYPE {
        return Err(Foreign::NotTls {
            secret_type: secret_type.to_owned(),
        });
    }
    if secret.labels().get(MANAGED_BY).map(String::as_str) != Some(MANAGED_BY_VALUE) {
        return Err(Foreign::NotManaged);
    }
    Ok(())
}

/// The bytes under `key`, if present.
pub fn data<'a>(secret: &'a Secret, key: &str) -> Option<&'a [u8]> {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|value| value.0.as_slice())
}

/// The serving Secret holding `serving` and the certificate of `ca`. Metadata of `existing`
/// (labels, annotations, resourceVersion for an optimistic update) is kept.
pub fn serving_secret(
    name: &str,
    namespace: &str,
    serving: &ServingCertificate,
    ca: &Ca,
    existing: Option<&Secret>,
) -> Secret {
    secret(
        name,
        namespace,
        "webhook-certificate",
        [
            (CERT_KEY, serving.cert_pem.clone()),
            (KEY_KEY, serving.key_pem.clone()),
            (CA_KEY, ca.cert_pem().to_owned()),
        ],
        existing,
    )
}

/// The CA Secret holding `ca`'s certificate and key.
pub fn ca_secret(name: &str, namespace: &str, ca: &Ca, existing: Option<&Secret>) -> Secret {
    secret(
        name,
        namespace,
        "webhook-ca",
        [
            (CERT_KEY, ca.cert_pem().to_owned()),
            (KEY_KEY, ca.key_pem()),
        ],
        existing,
    )
}

fn secret<const N: usize>(
    name: &str,
    namespace: &str,
    component: &str,
    data: [(&str, String); N],
    existing: Option<&Secret>,
) -> Secret {
    let mut metadata = existing.map_or_else(ObjectMeta::default, |s| s.metadata.clone());
    metadata.name = Some(name.to_owned());
    metadata.namespace = Some(namespace.to_owned());
    metadata.managed_fields = None;
    let labels = metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned());
    labels.insert(COMPONENT.to_owned(), component.to_owned());
    Secret {
        metadata,
        type_: Some(TLS_TYPE.to_owned()),
        data: Some(
            data.into_iter()
                .map(|(key, value)| (key.to_owned(), ByteString(value.into_bytes())))
                .collect(),
        ),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labelled(secret_type: Option<&str>, labels: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("cheiron-tls".to_owned()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            type_: secret_type.map(str::to_owned),
            ..Secret::default()
        }
    }

    #[test]
    fn only_tls_secrets_with_the_managed_by_label_are_cheirons() {
        let ours = [(MANAGED_BY, MANAGED_BY_VALUE)];
        assert_eq!(ownership(&labelled(Some(TLS_TYPE), &ours)), Ok(()));
        assert_eq!(
            ownership(&labelled(Some(TLS_TYPE), &[])),
            Err(Foreign::NotManaged)
        );
        assert_eq!(
            ownership(&labelled(Some(TLS_TYPE), &[(MANAGED_BY, "helm")])),
            Err(Foreign::NotManaged)
        );
        assert_eq!(
            ownership(&labelled(None, &ours)),
            Err(Foreign::NotTls {
                secret_type: "Opaque".to_owned()
            })
        );
    }
}
