//! What can go wrong in the controller: a reconcile that fails as a whole
//! ([`ControllerError`], retried with backoff). What one reconcile could not do in one
//! namespace ([`Issue`], reported in status and counted by its kind in metrics) is a plain
//! value of the pure core (`cheiron_core::findings`).

use cheiron_core::{findings::Issue, policy::InvalidManager};
use cheiron_runtime::{api::ApiCheckError, message::api_error};
use kube::runtime::finalizer::Error as FinalizerError;

/// Why a reconcile or the controller failed.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// An API call failed.
    #[error("{}", api_error(.0))]
    Kube(#[source] kube::Error),
    /// The manager cannot be compiled (the CRD schema should have rejected it).
    #[error("{0}")]
    Invalid(#[source] InvalidManager),
    /// Adding or removing the finalizer, or the wrapped reconcile, failed.
    #[error("{}", finalizer_message(.0))]
    Finalizer(#[source] Box<FinalizerError<ControllerError>>),
    /// Cleaning up after a deleted manager is incomplete; retried.
    #[error("cleanup incomplete: {0}")]
    Cleanup(Issue),
    /// The CRDs are not installed, or the cluster cannot be reached.
    #[error(transparent)]
    Start(#[from] ApiCheckError),
}

/// What a finalizer error says, with the apiserver's answer as [`api_error`] gives it: its
/// message and code (kube's own Display appends the whole Status as debug output).
fn finalizer_message(e: &FinalizerError<ControllerError>) -> String {
    match e {
        FinalizerError::AddFinalizer(k) => format!("failed to add finalizer: {}", api_error(k)),
        FinalizerError::RemoveFinalizer(k) => {
            format!("failed to remove finalizer: {}", api_error(k))
        }
        other => other.to_string(),
    }
}

impl ControllerError {
    /// A short fixed name for the `error` label of `cheiron_reconcile_errors_total`, one of
    /// [`cheiron_runtime::metrics::RECONCILE_ERRORS`].
    pub fn kind(&self) -> &'static str {
        match self {
            ControllerError::Kube(_) => "api",
            ControllerError::Invalid(_) => "invalid_manager",
            ControllerError::Finalizer(inner) => match &**inner {
                FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e) => e.kind(),
                _ => "finalizer",
            },
            ControllerError::Cleanup(_) => "cleanup",
            ControllerError::Start(_) => "start",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_kind_has_its_series_from_the_start() {
        use cheiron_core::findings::IssueKind;
        let cleanup = || ControllerError::Cleanup(Issue::new(IssueKind::SecretDelete, "a", "b"));
        let errors = [
            ControllerError::Kube(kube::Error::TlsRequired),
            ControllerError::Finalizer(Box::new(FinalizerError::UnnamedObject)),
            ControllerError::Finalizer(Box::new(FinalizerError::CleanupFailed(cleanup()))),
            cleanup(),
            ControllerError::Start(ApiCheckError::CrdsMissing("x")),
        ];
        for error in &errors {
            assert!(
                cheiron_runtime::metrics::RECONCILE_ERRORS.contains(&error.kind()),
                "{} is not pre-registered",
                error.kind()
            );
        }
    }

    #[test]
    fn an_apiserver_refusal_reads_as_its_message_and_code_without_the_status_dump() {
        let refused = || {
            kube::Error::Api(Box::new(kube::core::Status {
                code: 422,
                message: "the server rejected our request due to an error in our request"
                    .to_owned(),
                reason: "Invalid".to_owned(),
                ..kube::core::Status::default()
            }))
        };
        let expected = "the server rejected our request due to an error in our request (422)";
        assert_eq!(ControllerError::Kube(refused()).to_string(), expected);
        assert_eq!(
            ControllerError::Finalizer(Box::new(FinalizerError::AddFinalizer(refused())))
                .to_string(),
            format!("failed to add finalizer: {expected}")
        );
        assert_eq!(
            ControllerError::Finalizer(Box::new(FinalizerError::ApplyFailed(
                ControllerError::Kube(refused())
            )))
            .to_string(),
            format!("failed to apply object: {expected}")
        );
    }
}
