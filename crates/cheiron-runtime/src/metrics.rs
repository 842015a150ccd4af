//! Prometheus metrics (docs/design.md §7), served as OpenMetrics text on `/metrics` of the admin port.
//!
//! Every label value is a `&'static str` from a closed set, so nothing a client sends can
//! create new time series. Each part of cheiron has its metrics in a file of its own, which
//! registers them; [`Metrics`] holds them all.

mod admission;
mod connections;
mod credentials;
mod family;
mod fleet;
mod health;
mod operations;
mod process;
mod reconcile;

pub use admission::{
    AdmissionLabels, AdmissionMetrics, InvalidRequestLabels, ResourceLabels, resource_label,
};
pub use connections::{ClosedLabels, ConnectionMetrics, ListenerLabels, RefusedLabels};
pub use credentials::{CredentialMetrics, ProviderCallLabels, ProviderLabels};
pub use family::HistogramFamily;
pub use fleet::{ClusterLabels, ClusterSyncLabels, FleetMetrics};
pub use health::{
    AllowanceLabels, CheckedKindLabels, HealthMetrics, PullFailureLabels, RegistryCheckLabels,
};
pub use operations::{ManagerReadiness, Operations};
pub use process::ProcessCollector;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{family::Family, gauge::Gauge},
    registry::{Registry, Unit},
};
pub use reconcile::{
    IssueLabels, RECONCILE_ERRORS, ReconcileErrorLabels, ReconcileLabels, ReconcileMetrics,
};

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("cheiron");
        let admission = AdmissionMetrics::registered(&mut registry);
        let reconcile = ReconcileMetrics::registered(&mut registry);
        let connections = ConnectionMetrics::registered(&mut registry);
        let certificate_expiry = Gauge::default();
        let audit_findings = Gauge::default();
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
        let credentials = CredentialMetrics::registered(&mut registry);
        let operations = Operations::registered(&mut registry);
        let fleet = FleetMetrics::registered(&mut registry);
        let health = HealthMetrics::registered(&mut registry);

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
    use std::time::Duration;

    use cheiron_core::{
        admission::Outcome,
        findings::IssueKind,
        policy::{ManagerKind, Skip},
    };

    use super::*;

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
