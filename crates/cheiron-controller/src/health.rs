//! The seam between the reconcile and credential health (docs/credential-health.md): each
//! reconcile hands over the Secrets a manager writes, and gets back what the registry checks
//! know of them, for the manager's status. How and when registries are asked is the health
//! room's (`crates/cheiron-health`); a result that changes asks for a reconcile through the
//! callback given to [`Health::on_change`].

use std::sync::Arc;

use cheiron_core::{content::desired::DesiredSecret, health::CredentialCheck, policy::ManagerId};

/// What credential health knows of one manager.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HealthReport {
    /// The registry checks of its credentials.
    pub checks: Vec<CredentialCheck>,
    /// Pulls refused with its credentials lately.
    pub pull_failures: Option<cheiron_runtime::api::PullFailures>,
}

/// Called with a manager whose check results changed.
pub type OnChange = Arc<dyn Fn(&ManagerId) + Send + Sync>;

/// Credential health, as the reconcile sees it.
pub trait Health: Send + Sync {
    /// Calls `changed` whenever what [`Health::observe`] would return for a manager changes.
    fn on_change(&self, changed: OnChange);

    /// Hands over the Secrets `manager` writes (`verify`: its `spec.verify` asks for registry
    /// checks). Returns what is known of them: one check per registry key of each Secret
    /// checked, in order (none when the manager is not checked), and the pulls refused with
    /// its credentials lately. Never blocks on a registry.
    fn observe(&self, manager: &ManagerId, verify: bool, secrets: &[DesiredSecret])
    -> HealthReport;

    /// Forgets a deleted manager.
    fn forget(&self, manager: &ManagerId);
}
