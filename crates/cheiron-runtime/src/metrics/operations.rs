//! The gauges alerts are written against (docs/alerts.md): whether the process is ready,
//! whether it leads, and how many managers are not `Ready`.

use std::{collections::HashMap, sync::Mutex};

use cheiron_core::policy::ManagerKind;
use prometheus_client::{
    metrics::{family::Family, gauge::Gauge},
    registry::Registry,
};

use super::reconcile::ReconcileLabels;

/// `cheiron_managers_not_ready{kind}`: managers whose last written status is not `Ready`.
/// Each manager's state is kept by name, so a manager reported twice counts once and a
/// deleted one stops counting.
#[derive(Debug, Default)]
pub struct ManagerReadiness {
    not_ready: Family<ReconcileLabels, Gauge>,
    managers: Mutex<HashMap<(ManagerKind, String), bool>>,
}

impl ManagerReadiness {
    /// The gauge family, for registration.
    pub(super) fn family(&self) -> Family<ReconcileLabels, Gauge> {
        self.not_ready.clone()
    }

    /// Records a manager's `Ready` state (`key` is its `namespace/name` or `name`).
    pub fn record(&self, kind: ManagerKind, key: &str, ready: bool) {
        self.update(kind, |managers| {
            managers.insert((kind, key.to_owned()), ready);
        });
    }

    /// Starts both kinds' counts at 0, so a scrape shows the gauge before any reconcile.
    pub(super) fn start(&self) {
        for kind in [ManagerKind::Namespaced, ManagerKind::Cluster] {
            self.update(kind, |_| {});
        }
    }

    /// Forgets every manager: this replica stopped reconciling (it stepped down), and
    /// another one reports them now.
    pub fn clear(&self) {
        for kind in [ManagerKind::Namespaced, ManagerKind::Cluster] {
            self.update(kind, HashMap::clear);
        }
    }

    /// Forgets a deleted manager.
    pub fn forget(&self, kind: ManagerKind, key: &str) {
        self.update(kind, |managers| {
            managers.remove(&(kind, key.to_owned()));
        });
    }

    fn update(
        &self,
        kind: ManagerKind,
        change: impl FnOnce(&mut HashMap<(ManagerKind, String), bool>),
    ) {
        let Ok(mut managers) = self.managers.lock() else {
            return;
        };
        change(&mut managers);
        let count = managers
            .iter()
            .filter(|((k, _), ready)| *k == kind && !**ready)
            .count();
        self.not_ready
            .get_or_create(&ReconcileLabels {
                kind: kind.as_str(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
}

/// The process-level gauges.
#[derive(Debug, Default)]
pub struct Operations {
    /// `cheiron_ready`: 1 while `/readyz` would answer 200, set at scrape time.
    pub ready: Gauge,
    /// `cheiron_leader`: 1 while this controller replica runs the reconcilers (always 1
    /// without leader election), 0 while it stands by. The webhook reports 0.
    pub leader: Gauge,
    /// `cheiron_managers_not_ready{kind}`.
    pub managers: ManagerReadiness,
}

impl Operations {
    /// The gauges, registered in `registry`; the managers' counts start at 0.
    pub(super) fn registered(registry: &mut Registry) -> Self {
        let operations = Self::default();
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
        operations
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(readiness: &ManagerReadiness, kind: ManagerKind) -> i64 {
        readiness
            .not_ready
            .get_or_create(&ReconcileLabels {
                kind: kind.as_str(),
            })
            .get()
    }

    #[test]
    fn managers_not_ready_count_each_manager_once_and_forget_deleted_ones() {
        let r = ManagerReadiness::default();
        r.record(ManagerKind::Cluster, "a", false);
        r.record(ManagerKind::Cluster, "a", false);
        r.record(ManagerKind::Cluster, "b", false);
        r.record(ManagerKind::Namespaced, "team/a", false);
        assert_eq!(count(&r, ManagerKind::Cluster), 2);
        assert_eq!(count(&r, ManagerKind::Namespaced), 1);
        r.record(ManagerKind::Cluster, "a", true);
        assert_eq!(count(&r, ManagerKind::Cluster), 1);
        r.forget(ManagerKind::Cluster, "b");
        assert_eq!(count(&r, ManagerKind::Cluster), 0);
        assert_eq!(count(&r, ManagerKind::Namespaced), 1);
        r.clear();
        assert_eq!(count(&r, ManagerKind::Namespaced), 0);
    }
}
