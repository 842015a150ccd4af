//! Whether the cluster serves this API: checked once at start-up, so that a cluster without
//! the CRDs gets one line saying how to install them instead of a watch that retries forever.

use kube::{Api, Client, Resource, api::ListParams};
use serde::de::DeserializeOwned;

use super::{ClusterImagePullSecretManager, ImagePullSecretManager};

/// Why cheiron cannot work with the cluster's API.
#[derive(Debug, thiserror::Error)]
pub enum ApiCheckError {
    /// The CRDs are not installed.
    #[error(
        "the cluster does not serve {0} (cheiron.anny.co/v1alpha1): install the CRDs first, e.g. `cheiron crds | kubectl apply -f -`"
    )]
    CrdsMissing(&'static str),
    /// Any other API error on the first request.
    #[error("cannot list {kind}: {source}")]
    Api {
        /// What was listed.
        kind: &'static str,
        /// The client error.
        source: kube::Error,
    },
}

/// Lists one object to tell a missing CRD from other failures before watching.
async fn probe<K>(api: Api<K>, kind: &'static str) -> Result<(), ApiCheckError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_not_found() => {
            Err(ApiCheckError::CrdsMissing(kind))
        }
        Err(source) => Err(ApiCheckError::Api { kind, source }),
    }
}

/// Fails with a message saying how to install them when the cluster does not serve both CRDs.
pub async fn ensure_crds(client: &Client) -> Result<(), ApiCheckError> {
    probe(
        Api::<ImagePullSecretManager>::all(client.clone()),
        "ImagePullSecretManager",
    )
    .await?;
    probe(
        Api::<ClusterImagePullSecretManager>::all(client.clone()),
        "ClusterImagePullSecretManager",
    )
    .await
}
