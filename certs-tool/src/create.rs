//! `cheiron-certs create`: the serving Secret (and its CA Secret) in the cluster, idempotent.
//! Reads both Secrets, [`decide`]s, and writes only when a new certificate is issued. Writes
//! carry the `resourceVersion` read, so two runs racing (two hook Jobs) cannot overwrite each
//! other's certificate unseen: the loser reads again and, usually, keeps the winner's.

use std::fmt;

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{PostParams, ResourceExt},
};
use time::OffsetDateTime;

use crate::{
    decision::{Decision, Reissue, date, decide},
    error::{Error, Result},
    names::ServingNames,
    pki::{Ca, Validity},
    secret::{CERT_KEY, KEY_KEY, ca_secret, ca_secret_name, data, serving_secret},
};

/// Field manager of cheiron-certs' writes.
pub const FIELD_MANAGER: &str = "cheiron-certs";

/// How often a write that lost a race is retried (after reading and deciding again).
const ATTEMPTS: usize = 3;

/// What `create` is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateRequest {
    /// The names to issue for; the Secrets go into [`ServingNames::namespace`].
    pub names: ServingNames,
    /// The serving Secret; the CA Secret is [`ca_secret_name`] of it.
    pub secret_name: String,
    /// Validity of what is issued ([`Validity::default`] from the command line).
    pub validity: Validity,
}

/// Which CA signed a newly issued certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaChoice {
    /// The CA stored in the CA Secret: a `caBundle` that trusted it still does.
    Kept,
    /// A new CA, now in the CA Secret: `caBundle` must be patched.
    New,
}

/// What `create` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Created {
    /// The stored certificate is kept; nothing was written.
    Kept {
        /// `namespace/name` of the serving Secret.
        secret: String,
        /// Its `notAfter` (Unix seconds).
        not_after: i64,
    },
    /// A new serving certificate was written.
    Issued {
        /// `namespace/name` of the serving Secret.
        secret: String,
        /// Why.
        reason: Reissue,
        /// Which CA signed it.
        ca: CaChoice,
        /// Its `notAfter` (Unix seconds).
        not_after: i64,
    },
}

impl fmt::Display for Created {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Created::Kept { secret, not_after } => write!(
                f,
                "Secret {secret} is valid until {}: unchanged",
                date(*not_after)
            ),
            Created::Issued {
                secret,
                reason,
                ca,
                not_after,
            } => {
                let ca = match ca {
                    CaChoice::Kept => "same CA",
                    CaChoice::New => "new CA: run `cheiron-certs patch`",
                };
                write!(
                    f,
                    "Secret {secret}: issued a certificate valid until {} ({ca}), because {reason}",
                    date(*not_after)
                )
            }
        }
    }
}

/// Makes sure the serving Secret holds a valid certificate for the names asked, issuing one
/// when there is none, it is unusable, expires within 30 days, or has other names. Refuses
/// to touch a Secret that is not cheiron's.
pub async fn create(client: &Client, request: &CreateRequest) -> Result<Created> {
    let CreateRequest {
        names,
        secret_name,
        validity,
    } = request;
    let namespace = names.namespace();
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let ca_name = ca_secret_name(secret_name);
    let secret = format!("{namespace}/{secret_name}");
    for _ in 0..ATTEMPTS {
        let serving = get(&api, namespace, secret_name).await?;
        let stored_ca = get(&api, namespace, &ca_name).await?;
        let now = OffsetDateTime::now_utc();
        let (reason, reuse_ca) = match decide(serving.as_ref(), stored_ca.as_ref(), names, now) {
            Decision::Keep { not_after } => return Ok(Created::Kept { secret, not_after }),
            Decision::Refuse(refusal) => return Err(Error::Refused(refusal)),
            Decision::Issue { reason, reuse_ca } => (reason, reuse_ca),
        };
        let (ca, choice) = match stored_ca.as_ref().filter(|_| reuse_ca) {
            Some(stored) => (
                Ca::from_pem(
                    data(stored, CERT_KEY).unwrap_or_default(),
                    data(stored, KEY_KEY).unwrap_or_default(),
                )?,
                CaChoice::Kept,
            ),
            None => (Ca::generate(now, validity.ca)?, CaChoice::New),
        };
        let issued = ca.issue(names, now, validity.serving)?;
        if choice == CaChoice::New
            && !write(
                &api,
                ca_secret(&ca_name, namespace, &ca, stored_ca.as_ref()),
                stored_ca.is_some(),
            )
            .await?
        {
            continue;
        }
        let exists = serving.is_some();
        let serving = serving_secret(secret_name, namespace, &issued, &ca, serving.as_ref());
        if write(&api, serving, exists).await? {
            return Ok(Created::Issued {
                secret,
                reason,
                ca: choice,
                not_after: issued.not_after.unix_timestamp(),
            });
        }
    }
    Err(Error::Conflict(format!("Secret {secret}")))
}

async fn get(api: &Api<Secret>, namespace: &str, name: &str) -> Result<Option<Secret>> {
    api.get_opt(name).await.map_err(|source| Error::Api {
        action: "get",
        object: format!("Secret {namespace}/{name}"),
        source,
    })
}

/// Creates `secret`, or replaces it under the `resourceVersion` it carries. `false` if
/// another writer got there first (409: changed or created meanwhile; 404: deleted
/// meanwhile), so the caller reads and decides again; never a blind overwrite.
async fn write(api: &Api<Secret>, secret: Secret, exists: bool) -> Result<bool> {
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let name = secret.name_any();
    let result = if exists {
        api.replace(&name, &params, &secret).await
    } else {
        api.create(&params, &secret).await
    };
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.is_conflict() || status.is_not_found() => Ok(false),
        Err(source) => Err(Error::Api {
            action: if exists { "update" } else { "create" },
            object: format!("Secret {}/{name}", secret.namespace().unwrap_or_default()),
            source,
        }),
    }
}
