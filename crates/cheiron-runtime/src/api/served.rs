//! Whether the cluster serves this API: checked once at start-up, so that a cluster without
//! the CRDs gets one line saying how to install them instead of a watch that retries forever.

use cheiron_core::api::{ClusterImagePullSecretManager, ImagePullSecretManager};
use kube::{Api, Client, Resource, api::ListParams};
use serde::de::DeserializeOwned;

/// Why cheiron cannot work with the cluster's API.
#[derive(Debug, thiserror::Error)]
pub enum ApiCheckError {
    /// The CRDs are not installed.
    #[error(
        "the cluster does not serve {0} (cheiron.anny.co/v1alpha1): install the CRDs first, e.g. `cheiron crds | kubectl apply -f -`"
    )]
    CrdsMissing(&'static str),
    /// Any other API error on the first request.
    #[error("cannot list {kind}: {}", crate::message::api_error(error))]
    Api {
        /// What was listed.
        kind: &'static str,
        /// The client error, shown in the message (not as a source, so it is said once).
        error: kube::Error,
    },
}

/// Lists one object to tell a missing CRD from other failures before watching.
async fn probe<K>(api: Api<K>, kind: &'static str) -> Result<(), ApiCheckError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        // A group the apiserver does not serve gets a plain-text "404 page not found", which
        // kube reports with an unparsed reason: its `is_not_found` misses it, the code does not.
        Err(kube::Error::Api(status)) if status.code == 404 || status.is_not_found() => {
            Err(ApiCheckError::CrdsMissing(kind))
        }
        Err(error) => Err(ApiCheckError::Api { kind, error }),
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

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::http::{Request, Response, StatusCode};

    use super::*;

    /// A client whose every request is answered with `status` and `body`.
    fn answering(status: StatusCode, body: &'static str) -> Client {
        let service = tower::service_fn(move |_: Request<kube::client::Body>| async move {
            let mut response = Response::new(kube::client::Body::from(body.as_bytes().to_vec()));
            *response.status_mut() = status;
            Ok::<_, Infallible>(response)
        });
        Client::new(service, "default")
    }

    #[tokio::test]
    async fn a_plain_text_404_from_a_real_apiserver_means_the_crds_are_missing() {
        // What kube-apiserver answers for a group it does not serve.
        let client = answering(StatusCode::NOT_FOUND, "404 page not found\n");
        let error = ensure_crds(&client).await.err().map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some(
                "the cluster does not serve ImagePullSecretManager (cheiron.anny.co/v1alpha1): \
                 install the CRDs first, e.g. `cheiron crds | kubectl apply -f -`"
            )
        );
    }

    #[tokio::test]
    async fn another_failure_is_said_once_with_what_was_listed() -> Result<(), &'static str> {
        let client = answering(
            StatusCode::FORBIDDEN,
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden by test","reason":"Forbidden","code":403}"#,
        );
        let error = ensure_crds(&client)
            .await
            .err()
            .ok_or("a 403 must fail the check")?;
        let message = error.to_string();
        assert!(
            message.starts_with("cannot list ImagePullSecretManager: "),
            "{message}"
        );
        assert_eq!(message.matches("forbidden by test").count(), 1, "{message}");
        // The client error is in the message, not also a source an error chain would repeat.
        assert!(std::error::Error::source(&error).is_none());
        Ok(())
    }
}
