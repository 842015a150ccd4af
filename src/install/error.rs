//! Why the install's objects cannot be rendered.

use super::setup::SetupError;

/// Why the manifests cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// An object did not serialise.
    #[error("cannot render {what}: {source}")]
    Render {
        /// What was being rendered.
        what: &'static str,
        /// Why.
        #[source]
        source: crate::yaml::WriteError,
    },
    /// An object did not serialise to JSON.
    #[error("cannot render an object: {0}")]
    Json(#[from] serde_json::Error),
    /// The credential-provider setup is invalid.
    #[error(transparent)]
    CredentialProviders(#[from] SetupError),
}
