//! The one error type of cheiron-certs. Each message is one line that says what failed and,
//! where there is one, how to fix it.

use std::path::PathBuf;

use crate::{decision::Refusal, names::InvalidName, pki::PkiError};

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A name given on the command line.
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// A certificate could not be issued, or a stored CA could not be read back.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// A file or directory could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// No kubeconfig and not in a Pod, or the kubeconfig is unusable.
    #[error("cannot reach the cluster (set KUBECONFIG or run in a Pod with a ServiceAccount): {0}")]
    Connect(#[source] kube::Error),
    /// An API call failed.
    #[error("cannot {action} {object}: {}", api_message(.source))]
    Api {
        /// `get`, `create`, `update`, `patch`.
        action: &'static str,
        /// `Secret ns/name`, `MutatingWebhookConfiguration name`.
        object: String,
        /// The client's error.
        source: kube::Error,
    },
    /// A Secret exists under the name asked for and is not cheiron's.
    #[error("{0}")]
    Refused(Refusal),
    /// `patch` was pointed at a Secret that does not exist.
    #[error("Secret {0} not found: run `cheiron-certs create` first")]
    SecretMissing(String),
    /// `patch` was pointed at a Secret without a usable `ca.crt`.
    #[error("Secret {secret} has no usable ca.crt ({source}): run `cheiron-certs create` first")]
    NoCa {
        /// `namespace/name`.
        secret: String,
        /// What is wrong with it.
        source: PkiError,
    },
    /// `patch` was pointed at a configuration that does not exist.
    #[error(
        "MutatingWebhookConfiguration {0} not found: install cheiron's manifests (or the chart) first"
    )]
    WebhookMissing(String),
    /// Another writer kept changing the object between read and write.
    #[error("{0} kept changing while it was being updated; run the command again")]
    Conflict(String),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The API server's message without the client's debug dump.
fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}
