//! Where `cheiron explain` reads from: the live cluster (the object, its Namespace's
//! metadata, every manager, and the metadata of the Secrets concerned, never their data) or,
//! offline, manager files as `cheiron mutate` reads them.

use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, ServiceAccount};
use kube::{Api, Client, api::ListParams};

use super::{Explanation, SecretState, explain};
use crate::{
    admission::{Uninterpretable, interpret},
    api::{
        ApiCheckError, ClusterImagePullSecretManager, ImagePullSecretManager, ensure_crds, label,
    },
    policy::{Manager, NamespaceMeta, SubjectKind, live_managers},
};

/// Why a live explanation failed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The CRDs are missing, or the first request failed.
    #[error(transparent)]
    Api(#[from] ApiCheckError),
    /// The object does not exist.
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        /// `Pod` or `ServiceAccount`.
        kind: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A read failed.
    #[error("cannot read {what}: {}", crate::message::api_error(error))]
    Read {
        /// What was read.
        what: String,
        /// The client error, shown in the message.
        error: kube::Error,
    },
    /// The object has a shape admission cannot read.
    #[error(transparent)]
    Uninterpretable(#[from] Uninterpretable),
    /// The object could not be turned into JSON.
    #[error("cannot read the object as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

fn read(what: impl Into<String>) -> impl FnOnce(kube::Error) -> SourceError {
    let what = what.into();
    move |error| SourceError::Read { what, error }
}

/// Every live manager, compiled, oldest first, as the webhook holds them (managers being
/// deleted and managers that do not compile are left out, as admission leaves them out).
pub async fn managers(client: &Client) -> Result<Vec<Manager>, SourceError> {
    let (namespaced, cluster) = manager_objects(client).await?;
    Ok(live_managers(&namespaced, &cluster).0)
}

/// Every manager of both kinds, as stored (with its status).
pub async fn manager_objects(
    client: &Client,
) -> Result<
    (
        Vec<ImagePullSecretManager>,
        Vec<ClusterImagePullSecretManager>,
    ),
    SourceError,
> {
    ensure_crds(client).await?;
    let namespaced = Api::<ImagePullSecretManager>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(read("ImagePullSecretManagers"))?;
    let cluster = Api::<ClusterImagePullSecretManager>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(read("ClusterImagePullSecretManagers"))?;
    Ok((namespaced.items, cluster.items))
}

/// The policy's view of namespace `name`, read as metadata.
pub async fn namespace(client: &Client, name: &str) -> Result<NamespaceMeta, SourceError> {
    let meta = Api::<Namespace>::all(client.clone())
        .get_metadata_opt(name)
        .await
        .map_err(read(format!("Namespace {name}")))?;
    Ok(meta.map_or_else(
        || NamespaceMeta::named(name),
        |m| NamespaceMeta::from_metadata(&m.metadata),
    ))
}

/// What the cluster says of Secret `namespace/name`, from its metadata; `None` when the
/// caller may not read it.
pub async fn secret_state(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<SecretState>, SourceError> {
    match Api::<Secret>::namespaced(client.clone(), namespace)
        .get_metadata_opt(name)
        .await
    {
        Ok(meta) => Ok(Some(SecretState {
            exists: meta.is_some(),
            managed_by_cheiron: meta.is_some_and(|m| {
                m.metadata.labels.is_some_and(|l| {
                    l.get(label::MANAGED_BY).map(String::as_str) == Some(label::MANAGED_BY_VALUE)
                })
            }),
        })),
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(None),
        Err(error) => Err(SourceError::Read {
            what: format!("Secret {namespace}/{name}"),
            error,
        }),
    }
}

/// The object `kind` `namespace/name`, as JSON.
async fn object(
    client: &Client,
    kind: SubjectKind,
    namespace: &str,
    name: &str,
) -> Result<serde_json::Value, SourceError> {
    let what = format!("{} {namespace}/{name}", kind.as_str());
    let found = match kind {
        SubjectKind::Pod => Api::<Pod>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(read(what))?
            .map(serde_json::to_value)
            .transpose()?,
        SubjectKind::ServiceAccount => Api::<ServiceAccount>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(read(what))?
            .map(serde_json::to_value)
            .transpose()?,
    };
    found.ok_or_else(|| SourceError::NotFound {
        kind: kind.as_str(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })
}

/// Explains the live object `kind` `namespace/name`.
pub async fn live(
    client: &Client,
    kind: SubjectKind,
    namespace: &str,
    name: &str,
) -> Result<Explanation, SourceError> {
    let managers = managers(client).await?;
    let value = object(client, kind, namespace, name).await?;
    let interpreted = interpret(&value, kind)?;
    let namespace_meta = self::namespace(client, namespace).await?;
    let mut explanation = explain(&interpreted, &namespace_meta, &managers);
    let mut states = Vec::new();
    for secret in explanation.secret_names() {
        let state = secret_state(client, namespace, &secret).await?;
        states.push((secret, state));
    }
    explanation.fill_secrets(|name| states.iter().find(|(n, _)| n == name).and_then(|(_, s)| *s));
    Ok(explanation)
}
