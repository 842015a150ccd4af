//! What can go wrong in the controller, as named types: a reconcile that fails as a whole
//! ([`ControllerError`], retried with backoff), and what one reconcile could not do in one
//! namespace ([`Issue`], reported in status and counted by [`IssueKind`] in metrics).

use crate::{api::ApiCheckError, policy::InvalidManager};

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

/// What kind of thing kept a namespace from being in step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IssueKind {
    /// A Secret cheiron does not manage holds the name; it is left untouched (a conflict).
    Unmanaged,
    /// An older manager claims the name (a conflict).
    ClaimedByOlder,
    /// Creating, replacing or reading a Secret failed.
    SecretWrite,
    /// Deleting a Secret no longer wanted failed.
    SecretDelete,
    /// Patching a ServiceAccount's pull secrets failed.
    ServiceAccount,
}

impl IssueKind {
    /// Whether this is a name clash (status reason `Conflict`) rather than a failed write
    /// (`SyncFailed`, retried soon).
    pub fn is_conflict(self) -> bool {
        matches!(self, IssueKind::Unmanaged | IssueKind::ClaimedByOlder)
    }

    /// A short fixed name for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            IssueKind::Unmanaged => "unmanaged_secret",
            IssueKind::ClaimedByOlder => "claimed_by_older_manager",
            IssueKind::SecretWrite => "secret_write",
            IssueKind::SecretDelete => "secret_delete",
            IssueKind::ServiceAccount => "service_account_patch",
        }
    }
}

/// What one reconcile could not do in one namespace. The message says what and why in words
/// and never quotes a credential.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{namespace}: {message}")]
pub struct Issue {
    /// The namespace concerned.
    pub namespace: String,
    /// What kind of trouble.
    pub kind: IssueKind,
    /// One line for the status and the log.
    pub message: String,
}

impl Issue {
    /// An issue of `kind` in `namespace`.
    pub fn new(kind: IssueKind, namespace: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            kind,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_name_clashes_count_as_conflicts() {
        assert!(IssueKind::Unmanaged.is_conflict());
        assert!(IssueKind::ClaimedByOlder.is_conflict());
        for kind in [
            IssueKind::SecretWrite,
            IssueKind::SecretDelete,
            IssueKind::ServiceAccount,
        ] {
            assert!(!kind.is_conflict(), "{kind:?}");
        }
    }

    #[test]
    fn every_error_kind_has_its_series_from_the_start() {
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

    #[test]
    fn an_issue_reads_as_namespace_then_message() {
        let issue = Issue::new(
            IssueKind::SecretWrite,
            "team-a",
            "writing Secret x: denied (403)",
        );
        assert_eq!(issue.to_string(), "team-a: writing Secret x: denied (403)");
    }
}
