//! Prometheus metrics (docs/design.md §7), served as OpenMetrics text on `/metrics` of the admin port.
//!
//! Every label value is a `&'static str` from a closed set, so nothing a client sends can
//! create new time series.

mod operations;
mod process;

use std::time::Duration;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::{Registry, Unit},
};

use crate::{admission::Outcome, findings::IssueKind, policy::ManagerKind};

pub use operations::{ManagerReadiness, Operations};
pub use process::ProcessCollector;

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Admission latency buckets, in seconds: a review takes microseconds, so they start at 100 µs.
const ADMISSION_BUCKETS: [f64; 15] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Reconcile duration buckets, in seconds: a reconcile writes to the API server.
const RECONCILE_BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A histogram family whose histograms all share one set of buckets.
pub type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Labels of `cheiron_admission_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// `pods`, `serviceaccounts` or `other` (see [`resource_label`]).
    pub resource: &'static str,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'static str,
    /// [`Outcome::as_str`].
    pub outcome: &'static str,
}

/// Labels of `cheiron_admission_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// `pods`, `serviceaccounts` or `other` (see [`resource_label`]).
    pub resource: &'static str,
}

/// Labels of `cheiron_admission_invalid_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InvalidRequestLabels {
    /// Why the body was refused, e.g. `not_json` or `too_large`.
    pub reason: &'static str,
}

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

/// The resource label of an admission request: the resources cheiron handles by name, anything
/// else as `other`, so that a client cannot create unbounded series.
pub fn resource_label(resource: &str) -> &'static str {
    match resource {
        "pods" => "pods",
        "serviceaccounts" => "serviceaccounts",
        _ => "other",
    }
}

/// The webhook's metrics.
#[derive(Clone, Debug)]
pub struct AdmissionMetrics {
    /// `cheiron_admission_requests_total{resource, operation, outcome}`: answered reviews.
    pub requests: Family<AdmissionLabels, Counter>,
    /// `cheiron_admission_duration_seconds{resource}`: time from request to response.
    pub duration: HistogramFamily<ResourceLabels>,
    /// `cheiron_admission_patches_total`: reviews answered with a patch.
    pub patches: Counter,
    /// `cheiron_admission_invalid_requests_total{reason}`: bodies refused with 4xx.
    pub invalid_requests: Family<InvalidRequestLabels, Counter>,
}

impl AdmissionMetrics {
    /// Records one answered review.
    pub fn record(
        &self,
        resource: &str,
        operation: &'static str,
        outcome: Outcome,
        elapsed: Duration,
    ) {
        let resource = resource_label(resource);
        self.requests
            .get_or_create(&AdmissionLabels {
                resource,
                operation,
                outcome: outcome.as_str(),
            })
            .inc();
        self.duration
            .get_or_create(&ResourceLabels { resource })
            .observe(elapsed.as_secs_f64());
        if outcome == Outcome::Patched {
            self.patches.inc();
        }
    }

    /// Records one refused body.
    pub fn record_invalid(&self, reason: &'static str) {
        self.invalid_requests
            .get_or_create(&InvalidRequestLabels { reason })
            .inc();
    }
}

/// Labels of `cheiron_connections_open`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    /// `webhook` or `admin`.
    pub listener: &'static str,
}

/// Labels of `cheiron_connections_refused_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// `webhook` or `admin`.
    pub listener: &'static str,
    /// `max_connections` or `max_connections_per_peer`.
    pub reason: &'static str,
}

/// Labels of `cheiron_connections_closed_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClosedLabels {
    /// The limit that ended the connection, e.g. `idle` or `preface_timeout`.
    pub reason: &'static str,
}

/// The server's limits at work (docs/design.md §7, Limits).
#[derive(Clone, Debug, Default)]
pub struct ConnectionMetrics {
    /// `cheiron_connections_open{listener}`: connections holding a slot.
    pub open: Family<ListenerLabels, Gauge>,
    /// `cheiron_connections_refused_total{listener, reason}`: connections closed at accept
    /// because the listener or the peer had its maximum open.
    pub refused: Family<RefusedLabels, Counter>,
    /// `cheiron_connections_closed_total{reason}`: connections the server ended because of a
    /// limit (a timeout, the idle timeout or the maximum age).
    pub closed: Family<ClosedLabels, Counter>,
    /// `cheiron_body_budget_used_bytes`: bytes of request bodies reserved.
    pub body_budget_used: Gauge,
}

impl ConnectionMetrics {
    /// Counts one connection refused at accept.
    pub fn record_refused(&self, listener: &'static str, reason: &'static str) {
        self.refused
            .get_or_create(&RefusedLabels { listener, reason })
            .inc();
    }

    /// Counts one connection ended by a limit.
    pub fn record_closed(&self, reason: &'static str) {
        self.closed.get_or_create(&ClosedLabels { reason }).inc();
    }

    /// The open-connections gauge of `listener`.
    pub fn open(&self, listener: &'static str) -> Gauge {
        self.open
            .get_or_create(&ListenerLabels { listener })
            .clone()
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

/// Labels of `cheiron_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

/// All of cheiron's metrics, registered under the `cheiron_` prefix, and the standard
/// unprefixed `process_*` ones ([`ProcessCollector`]).
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// `process_*`, without the prefix.
    process: Registry,
    /// Webhook metrics.
    pub admission: AdmissionMetrics,
    /// Controller metrics.
    pub reconcile: ReconcileMetrics,
    /// Connection and body limits of the webhook's server.
    pub connections: ConnectionMetrics,
    /// `cheiron_certificate_expiry_timestamp_seconds`: `notAfter` of the serving certificate,
    /// in seconds since the Unix epoch.
    pub certificate_expiry: Gauge,
    /// `cheiron_audit_findings`: ServiceAccounts lacking a pull secret policy says they
    /// should reference, counted by the controller at every resync (docs/design.md §7).
    pub audit_findings: Gauge,
    /// Credential-provider metrics.
    pub credentials: CredentialMetrics,
    /// Readiness, leadership and managers not `Ready`: what the alerts watch.
    pub operations: Operations,
    /// Workload clusters (docs/fleet.md).
    pub fleet: FleetMetrics,
    /// Credential health (docs/credential-health.md).
    pub health: HealthMetrics,
}

/// Labels of the fleet's gauges: one workload cluster, `<namespace>/<name>` of its kubeconfig
/// Secret's cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    /// `<namespace>/<cluster>`.
    pub cluster: String,
}

/// Labels of `cheiron_fleet_syncs_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterSyncLabels {
    /// `<namespace>/<cluster>`.
    pub cluster: String,
    /// `synced` or `failed`.
    pub outcome: &'static str,
}

/// Metrics of the workload clusters a management cluster reaches.
#[derive(Clone, Debug, Default)]
pub struct FleetMetrics {
    /// 1 while the workload cluster answers and its watches have listed, else 0; the series
    /// goes with the cluster.
    pub connected: Family<ClusterLabels, Gauge>,
    /// Syncs of one manager into one workload cluster, by outcome.
    pub syncs: Family<ClusterSyncLabels, Counter>,
    /// Workload clusters with a client and watches open: those a manager selects or still has
    /// copies in to clean up.
    pub connections: Gauge,
}

impl FleetMetrics {
    /// Sets whether `cluster` is connected.
    pub fn set_connected(&self, cluster: &str, connected: bool) {
        self.connected
            .get_or_create(&ClusterLabels {
                cluster: cluster.to_owned(),
            })
            .set(i64::from(connected));
    }

    /// Drops the series of a cluster that left the fleet.
    pub fn forget(&self, cluster: &str) {
        let labels = ClusterLabels {
            cluster: cluster.to_owned(),
        };
        self.connected.remove(&labels);
        for outcome in ["synced", "failed"] {
            self.syncs.remove(&ClusterSyncLabels {
                cluster: cluster.to_owned(),
                outcome,
            });
        }
    }

    /// Counts one sync of a manager into `cluster`.
    pub fn record_sync(&self, cluster: &str, synced: bool) {
        self.syncs
            .get_or_create(&ClusterSyncLabels {
                cluster: cluster.to_owned(),
                outcome: if synced { "synced" } else { "failed" },
            })
            .inc();
    }
}

/// Labels of `cheiron_credential_expiry_timestamp_seconds`. The provider names come from the
/// operator's config file, a closed set.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    /// The provider's `name`.
    pub provider: String,
}

/// Labels of `cheiron_credential_provider_calls_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderCallLabels {
    /// The provider's `name`.
    pub provider: String,
    /// `success` or `failure`.
    pub outcome: &'static str,
}

/// Metrics of the credential-provider plugins.
#[derive(Clone, Debug, Default)]
pub struct CredentialMetrics {
    /// When each provider's soonest-expiring current credential expires (Unix seconds; 0:
    /// none held).
    pub expiry: Family<ProviderLabels, Gauge>,
    /// Plugin calls, by provider and outcome.
    pub calls: Family<ProviderCallLabels, Counter>,
}

impl CredentialMetrics {
    /// Sets a provider's expiry timestamp.
    pub fn set_expiry(&self, provider: &str, unix_seconds: i64) {
        self.expiry
            .get_or_create(&ProviderLabels {
                provider: provider.to_owned(),
            })
            .set(unix_seconds);
    }

    /// Counts one plugin call.
    pub fn record_call(&self, provider: &str, outcome: &'static str) {
        self.calls
            .get_or_create(&ProviderCallLabels {
                provider: provider.to_owned(),
                outcome,
            })
            .inc();
    }
}

/// Labels of `cheiron_registry_check_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistryCheckLabels {
    /// `accepted`, `rejected` or `unreachable`.
    pub result: &'static str,
}

/// Labels of `cheiron_credential_rejected`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CheckedKindLabels {
    /// `ImagePullSecretManager` or `ClusterImagePullSecretManager`.
    pub manager_kind: &'static str,
}

/// Labels of Docker Hub's pull-allowance gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AllowanceLabels {
    /// The registry key checked.
    pub registry: String,
    /// `<manager>/<secret>`: the manager (`namespace/name` or `name`) and its Secret.
    pub entry: String,
}

/// Labels of `cheiron_pull_failures_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PullFailureLabels {
    /// `ImagePullSecretManager` or `ClusterImagePullSecretManager`.
    pub manager_kind: &'static str,
    /// The registry key whose credential was refused.
    pub registry: String,
}

/// Metrics of credential health (docs/credential-health.md).
#[derive(Clone, Debug, Default)]
pub struct HealthMetrics {
    /// Registry checks done, by result.
    pub checks: Family<RegistryCheckLabels, Counter>,
    /// Per manager kind: the managers' credentials a registry rejected at the last check
    /// (`kubectl describe` of a manager names them).
    pub rejected: Family<CheckedKindLabels, Gauge>,
    /// Docker Hub: pulls left in the window, per credential of a manager.
    pub pulls_remaining: Family<AllowanceLabels, Gauge>,
    /// Docker Hub: pulls allowed per window, per credential of a manager.
    pub pulls_limit: Family<AllowanceLabels, Gauge>,
    /// Pulls a registry refused, attributed to a manager's credential.
    pub pull_failures: Family<PullFailureLabels, Counter>,
}

impl HealthMetrics {
    /// Counts one registry check.
    pub fn record_check(&self, result: &'static str) {
        self.checks
            .get_or_create(&RegistryCheckLabels { result })
            .inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("cheiron");
        let admission = AdmissionMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(ADMISSION_BUCKETS)),
            patches: Counter::default(),
            invalid_requests: Family::default(),
        };
        let reconcile = ReconcileMetrics {
            runs: Family::default(),
            errors: Family::default(),
            issues: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(RECONCILE_BUCKETS)),
            secrets_written: Counter::default(),
            secrets_repaired: Counter::default(),
            service_accounts_patched: Counter::default(),
        };
        let certificate_expiry = Gauge::default();
        let audit_findings = Gauge::default();
        let connections = ConnectionMetrics::default();

        registry.register(
            "admission_requests",
            "Admission reviews answered, by resource, operation and outcome",
            admission.requests.clone(),
        );
        registry.register_with_unit(
            "admission_duration",
            "Time to answer an admission review",
            Unit::Seconds,
            admission.duration.clone(),
        );
        registry.register(
            "admission_patches",
            "Admission reviews answered with a pull secret patch",
            admission.patches.clone(),
        );
        registry.register(
            "admission_invalid_requests",
            "Admission requests refused because the body is not a usable AdmissionReview",
            admission.invalid_requests.clone(),
        );
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
        registry.register(
            "connections_open",
            "Connections open, by listener",
            connections.open.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed at accept because the listener or the peer had its maximum open",
            connections.refused.clone(),
        );
        registry.register(
            "connections_closed",
            "Connections the server ended because of a limit, by limit",
            connections.closed.clone(),
        );
        registry.register_with_unit(
            "body_budget_used",
            "Bytes of request bodies held, out of the body budget",
            Unit::Bytes,
            connections.body_budget_used.clone(),
        );
        registry.register_with_unit(
            "certificate_expiry_timestamp",
            "notAfter of the webhook serving certificate, as a Unix timestamp",
            Unit::Seconds,
            certificate_expiry.clone(),
        );
        registry.register(
            "audit_findings",
            "ServiceAccounts lacking a pull secret policy says they should reference, at the last resync",
            audit_findings.clone(),
        );

        let credentials = CredentialMetrics::default();
        registry.register_with_unit(
            "credential_expiry_timestamp",
            "When the soonest-expiring credential of each credential provider expires, as a Unix timestamp",
            Unit::Seconds,
            credentials.expiry.clone(),
        );
        registry.register(
            "credential_provider_calls",
            "Credential-provider plugin calls, by provider and outcome",
            credentials.calls.clone(),
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
        let operations = Operations::default();
        operations.managers.start();
        registry.register(
            "ready",
            "1 while /readyz answers 200, 0 while it answers 503",
            operations.ready.clone(),
        );
        registry.register(
            "leader",
            "1 while this controller replica runs the reconcilers, 0 while it stands by",
            operations.leader.clone(),
        );
        registry.register(
            "managers_not_ready",
            "Managers whose last written status is not Ready, by kind",
            operations.managers.family(),
        );

        let fleet = FleetMetrics::default();
        registry.register(
            "fleet_cluster_connected",
            "1 while a workload cluster answers and its watches have listed, by cluster",
            fleet.connected.clone(),
        );
        registry.register(
            "fleet_syncs",
            "Syncs of a manager into a workload cluster, by cluster and outcome",
            fleet.syncs.clone(),
        );
        registry.register(
            "fleet_connections",
            "Workload clusters with a client and watches open (selected by a manager, or with copies to clean up)",
            fleet.connections.clone(),
        );

        let health = HealthMetrics::default();
        registry.register(
            "registry_check",
            "Checks of a credential against its registry (docs/credential-health.md), by result",
            health.checks.clone(),
        );
        for result in ["accepted", "rejected", "unreachable"] {
            let _guard = health.checks.get_or_create(&RegistryCheckLabels { result });
        }
        registry.register(
            "credential_rejected",
            "Managers' credentials that their registry rejected at the last check, by manager kind",
            health.rejected.clone(),
        );
        for kind in [ManagerKind::Namespaced, ManagerKind::Cluster] {
            let _guard = health.rejected.get_or_create(&CheckedKindLabels {
                manager_kind: kind.as_str(),
            });
        }
        registry.register(
            "registry_pulls_remaining",
            "Docker Hub: pulls left in the current window for a manager's credential",
            health.pulls_remaining.clone(),
        );
        registry.register(
            "registry_pulls_limit",
            "Docker Hub: pulls allowed per window for a manager's credential",
            health.pulls_limit.clone(),
        );
        registry.register(
            "pull_failures",
            "Image pulls a registry refused, attributed to a manager's credential (kubelet Events)",
            health.pull_failures.clone(),
        );

        let mut process = Registry::default();
        process.register_collector(Box::new(ProcessCollector));
        Self {
            registry,
            process,
            admission,
            reconcile,
            connections,
            certificate_expiry,
            audit_findings,
            credentials,
            operations,
            fleet,
            health,
        }
    }

    /// The registry, to register further metrics.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Adds `cheiron_build_info{version, commit}`, always 1: what the binary serving the
    /// metrics was built from (the version and commit `cheiron version` prints).
    pub fn with_build_info(mut self, version: &'static str, commit: &'static str) -> Self {
        let info = Family::<BuildLabels, Gauge>::default();
        info.get_or_create(&BuildLabels { version, commit }).set(1);
        self.registry.register(
            "build_info",
            "The version and git commit cheiron was built from; always 1",
            info,
        );
        self
    }

    /// Every metric in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut text = String::new();
        encode_registry(&mut text, &self.process)?;
        encode_registry(&mut text, &self.registry)?;
        encode_eof(&mut text)?;
        Ok(text)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::policy::Skip;

    #[test]
    fn admission_is_counted_by_resource_operation_and_outcome() {
        let metrics = Metrics::new();
        metrics.admission.record(
            "pods",
            "CREATE",
            Outcome::Patched,
            Duration::from_micros(150),
        );
        metrics.admission.record(
            "serviceaccounts",
            "UPDATE",
            Outcome::Skipped(Skip::NoManager),
            Duration::from_micros(50),
        );
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(r#"cheiron_admission_requests_total{resource="pods",operation="CREATE",outcome="patched"} 1"#),
            "{text}"
        );
        assert!(text.contains(
            r#"cheiron_admission_requests_total{resource="serviceaccounts",operation="UPDATE",outcome="no_manager"} 1"#
        ));
        assert!(text.contains("cheiron_admission_patches_total 1"));
        assert!(text.contains(
            r#"cheiron_admission_duration_seconds_bucket{le="0.00025",resource="pods"} 1"#
        ));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn process_metrics_are_unprefixed_and_build_info_names_version_and_commit() {
        let metrics = Metrics::new().with_build_info("1.2.3", "0123456789ab");
        let text = metrics.encode().unwrap();
        for name in [
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_threads ",
            "process_start_time_seconds ",
            "process_cpu_seconds_total ",
        ] {
            assert!(
                text.lines().any(|l| l.starts_with(name)),
                "{name}missing:\n{text}"
            );
        }
        assert!(
            text.contains(r#"cheiron_build_info{version="1.2.3",commit="0123456789ab"} 1"#),
            "{text}"
        );
        assert_eq!(text.matches("# EOF").count(), 1);
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn unknown_resources_share_one_series() {
        let metrics = Metrics::new();
        for resource in ["a", "b", "c"] {
            metrics
                .admission
                .record(resource, "CREATE", Outcome::NotHandled, Duration::ZERO);
        }
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(r#"cheiron_admission_requests_total{resource="other",operation="CREATE",outcome="not_handled"} 3"#),
            "{text}"
        );
    }

    #[test]
    fn the_series_the_dashboard_and_alerts_rate_exist_from_the_start_at_zero() {
        let text = Metrics::new().encode().unwrap();
        for kind in ["ImagePullSecretManager", "ClusterImagePullSecretManager"] {
            for line in [
                format!(r#"cheiron_reconcile_runs_total{{kind="{kind}"}} 0"#),
                format!(r#"cheiron_reconcile_errors_total{{kind="{kind}",error="api"}} 0"#),
                format!(r#"cheiron_reconcile_duration_seconds_count{{kind="{kind}"}} 0"#),
            ] {
                assert!(text.contains(&line), "missing {line} in\n{text}");
            }
        }
        for issue in IssueKind::ALL {
            let line = format!(
                r#"cheiron_reconcile_issues_total{{issue="{}"}} 0"#,
                issue.as_str()
            );
            assert!(text.contains(&line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn controller_and_certificate_metrics_are_exposed() {
        let metrics = Metrics::new();
        metrics
            .reconcile
            .record(ManagerKind::Cluster, Duration::from_millis(20), Some("api"));
        metrics.reconcile.record_issue("unmanaged_secret");
        metrics.reconcile.secrets_written.inc();
        metrics.certificate_expiry.set(1_900_000_000);
        metrics.audit_findings.set(3);
        let text = metrics.encode().unwrap();
        for line in [
            r#"cheiron_reconcile_runs_total{kind="ClusterImagePullSecretManager"} 1"#,
            r#"cheiron_reconcile_errors_total{kind="ClusterImagePullSecretManager",error="api"} 1"#,
            r#"cheiron_reconcile_issues_total{issue="unmanaged_secret"} 1"#,
            "cheiron_secrets_written_total 1",
            "cheiron_secrets_repaired_total 0",
            "cheiron_service_accounts_patched_total 0",
            "cheiron_certificate_expiry_timestamp_seconds 1900000000",
            "# TYPE cheiron_audit_findings gauge",
            "cheiron_audit_findings 3",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
