//! What can go wrong in the controller: a reconcile that fails as a whole
//! ([`ControllerError`], retried with backoff). What one reconcile could not do in one
//! namespace ([`Issue`], reported in status and counted by its kind in metrics) is a plain
//! value of the pure core (`cheiron_core::findings`).

use crate::{api::ApiCheckError, findings::Issue, policy::InvalidManager};

/// Why a reconcile or the controller failed.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// An API call failed.
    #[error("{0}")]
    Kube(#[source] kube::Error),
    /// The manager cannot be compiled (the CRD schema should have rejected it).
    #[error("{0}")]
    Invalid(#[source] InvalidManager),
    /// Adding or removing the finalizer, or the wrapped reconcile, failed.
    #[error("{0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<ControllerError>>),
    /// Cleaning up after a deleted manager is incomplete; retried.
    #[error("cleanup incomplete: {0}")]
    Cleanup(Issue),
    /// The CRDs are not installed, or the cluster cannot be reached.
    #[error(transparent)]
    Start(#[from] ApiCheckError),
}

impl ControllerError {
    /// A short fixed name for the `error` label of `cheiron_reconcile_errors_total`, one of
    /// [`crate::metrics::RECONCILE_ERRORS`].
    pub fn kind(&self) -> &'static str {
        match self {
            ControllerError::Kube(_) => "api",
            ControllerError::Invalid(_) => "invalid_manager",
            ControllerError::Finalizer(inner) => match &**inner {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.kind(),
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
        use crate::findings::IssueKind;
        use kube::runtime::finalizer::Error as FinalizerError;
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
                crate::metrics::RECONCILE_ERRORS.contains(&error.kind()),
                "{} is not pre-registered",
                error.kind()
            );
        }
    }
}
