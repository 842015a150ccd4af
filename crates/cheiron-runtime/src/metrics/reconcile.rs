//! The controller's metrics: reconciles run, failed and timed, issues found, and the Secrets
//! and ServiceAccounts written.

use std::time::Duration;

use cheiron_core::{findings::IssueKind, policy::ManagerKind};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::{Registry, Unit},
};

use super::family::HistogramFamily;

/// Reconcile duration buckets, in seconds: a reconcile writes to the API server.
const RECONCILE_BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Labels of the reconcile metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// `ImagePullSecretManager` or `ClusterImagePullSecretManager`.
    pub kind: &'static str,
}

/// Every value of the `error` label of `cheiron_reconcile_errors_total` (what
/// `ControllerError::kind` returns): each series starts at 0, so an alert's `rate()` sees the
/// first error.
pub const RECONCILE_ERRORS: [&str; 5] = ["api", "invalid_manager", "finalizer", "cleanup", "start"];

/// Labels of `cheiron_reconcile_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileErrorLabels {
    /// `ImagePullSecretManager` or `ClusterImagePullSecretManager`.
    pub kind: &'static str,
    /// What failed, e.g. `api`, `invalid_manager` or `cleanup`.
    pub error: &'static str,
}

/// Labels of `cheiron_reconcile_issues_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IssueLabels {
    /// What kept a namespace out of step, e.g. `unmanaged_secret` or `secret_write`.
    pub issue: &'static str,
}

impl From<ManagerKind> for ReconcileLabels {
    fn from(kind: ManagerKind) -> Self {
        Self {
            kind: kind.as_str(),
        }
    }
}

/// The controller's metrics.
#[derive(Clone, Debug)]
pub struct ReconcileMetrics {
    /// `cheiron_reconcile_runs_total{kind}`: reconciles started.
    pub runs: Family<ReconcileLabels, Counter>,
    /// `cheiron_reconcile_errors_total{kind, error}`: reconciles that failed, by what failed.
    pub errors: Family<ReconcileErrorLabels, Counter>,
    /// `cheiron_reconcile_issues_total{issue}`: per-namespace issues reconciles found (name
    /// clashes, failed writes), by kind.
    pub issues: Family<IssueLabels, Counter>,
    /// `cheiron_reconcile_duration_seconds{kind}`: time per reconcile.
    pub duration: HistogramFamily<ReconcileLabels>,
    /// `cheiron_secrets_written_total`: Secrets created or updated.
    pub secrets_written: Counter,
    /// `cheiron_secrets_repaired_total`: copies whose data someone else changed, found and
    /// written again.
    pub secrets_repaired: Counter,
    /// `cheiron_service_accounts_patched_total`: ServiceAccounts whose pull secrets changed.
    pub service_accounts_patched: Counter,
}

impl ReconcileMetrics {
    /// The controller's metrics, registered in `registry`.
    pub(super) fn registered(registry: &mut Registry) -> Self {
        let reconcile = Self {
            runs: Family::default(),
            errors: Family::default(),
            issues: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(RECONCILE_BUCKETS)),
            secrets_written: Counter::default(),
            secrets_repaired: Counter::default(),
            service_accounts_patched: Counter::default(),
        };
        registry.register(
            "reconcile_runs",
            "Manager reconciles run",
            reconcile.runs.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Manager reconciles that failed",
            reconcile.errors.clone(),
        );
        registry.register(
            "reconcile_issues",
            "Per-namespace issues found by reconciles (name clashes, failed writes), by kind",
            reconcile.issues.clone(),
        );
        registry.register_with_unit(
            "reconcile_duration",
            "Time to reconcile a manager",
            Unit::Seconds,
            reconcile.duration.clone(),
        );
        registry.register(
            "secrets_written",
            "Pull secrets created or updated by cheiron",
            reconcile.secrets_written.clone(),
        );
        registry.register(
            "secrets_repaired",
            "Pull secret copies whose data someone else changed, written again by cheiron",
            reconcile.secrets_repaired.clone(),
        );
        registry.register(
            "service_accounts_patched",
            "ServiceAccounts whose imagePullSecrets cheiron changed",
            reconcile.service_accounts_patched.clone(),
        );
        // The series alerts and the dashboard watch exist from the start, at 0 (docs/alerts.md,
        // charts/cheiron/dashboards/): a rate() of a series not yet there is no data, not 0.
        for kind in [ManagerKind::Namespaced, ManagerKind::Cluster] {
            for error in RECONCILE_ERRORS {
                let _guard = reconcile.errors.get_or_create(&ReconcileErrorLabels {
                    kind: kind.as_str(),
                    error,
                });
            }
            let _guard = reconcile.runs.get_or_create(&ReconcileLabels::from(kind));
            let _guard = reconcile
                .duration
                .get_or_create(&ReconcileLabels::from(kind));
        }
        for issue in IssueKind::ALL {
            let _guard = reconcile.issues.get_or_create(&IssueLabels {
                issue: issue.as_str(),
            });
        }
        reconcile
    }

    /// Records one finished reconcile of a manager of `kind`, failed with `error` if any.
    pub fn record(&self, kind: ManagerKind, elapsed: Duration, error: Option<&'static str>) {
        let labels = ReconcileLabels::from(kind);
        self.runs.get_or_create(&labels).inc();
        if let Some(error) = error {
            self.errors
                .get_or_create(&ReconcileErrorLabels {
                    kind: labels.kind,
                    error,
                })
                .inc();
        }
        self.duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one per-namespace issue of kind `issue`.
    pub fn record_issue(&self, issue: &'static str) {
        self.issues.get_or_create(&IssueLabels { issue }).inc();
    }
}
