//! The credential-provider plugins' metrics: calls by outcome, and when each provider's
//! credentials expire.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Registry, Unit},
};

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
    /// The plugins' metrics, registered in `registry`.
    pub(super) fn registered(registry: &mut Registry) -> Self {
        let credentials = Self::default();
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
        credentials
    }

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
