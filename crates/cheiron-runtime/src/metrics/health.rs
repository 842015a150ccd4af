//! The metrics of credential health (docs/credential-health.md): registry checks, rejected
//! credentials, Docker Hub's pull allowance and refused pulls.

use cheiron_core::policy::ManagerKind;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

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
    /// Credential health's metrics, registered in `registry`, the series alerts watch at 0.
    pub(super) fn registered(registry: &mut Registry) -> Self {
        let health = Self::default();
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
        health
    }

    /// Counts one registry check.
    pub fn record_check(&self, result: &'static str) {
        self.checks
            .get_or_create(&RegistryCheckLabels { result })
            .inc();
    }
}
