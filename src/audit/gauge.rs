//! The `cheiron_audit_findings` gauge: how many ServiceAccounts lack a pull secret policy
//! says they should reference, counted from the controller's caches at every resync with
//! `cheiron audit`'s own judgement ([`lacking`]), and no list call.
//!
//! It counts ServiceAccounts only. Counting Pods would need a watch of every Pod in the
//! cluster, which the controller does not keep (a metadata-only Pod watch is still one
//! event per Pod change, cluster-wide); `cheiron audit` lists Pods when asked instead.

use std::{sync::Arc, time::Duration};

use super::lacking;
use crate::{
    api::Mode,
    controller::{ManagerStores, NamespaceCache, ServiceAccountCache},
    metrics::Metrics,
    policy::{Manager, NamespaceMeta},
};

/// The first count waits this long after the caches have synced, so that it does not count
/// the ServiceAccounts the first reconciles are about to backfill.
pub const FIRST_COUNT_AFTER: Duration = Duration::from_secs(30);

/// What the gauge is counted from: the controller's stores and caches.
pub struct Counted {
    pub managers: ManagerStores,
    pub namespaces: NamespaceCache,
    pub service_accounts: ServiceAccountCache,
}

/// Sets the gauge `first` after the caches have synced and then every `resync`, until dropped
/// (aborted with the controller).
pub async fn keep(from: Counted, metrics: Arc<Metrics>, first: Duration, resync: Duration) {
    let start = tokio::time::Instant::now() + first.min(resync);
    let mut ticks = tokio::time::interval_at(start, resync);
    loop {
        ticks.tick().await;
        let managers = from.managers.live();
        let findings = count(&managers, &from.namespaces, &from.service_accounts);
        metrics
            .audit_findings
            .set(i64::try_from(findings).unwrap_or(i64::MAX));
        tracing::debug!(findings, "audit findings counted");
    }
}

/// ServiceAccounts in the caches that lack a pull secret one of `managers` (oldest first)
/// wants them to reference.
pub fn count(
    managers: &[Manager],
    namespaces: &NamespaceCache,
    service_accounts: &ServiceAccountCache,
) -> usize {
    let managers: Vec<&Manager> = managers
        .iter()
        .filter(|m| m.mode == Mode::ServiceAccount)
        .collect();
    if managers.is_empty() {
        return 0;
    }
    let mut findings = 0;
    for namespace in namespaces.live().iter() {
        let namespace: &NamespaceMeta = namespace;
        let applying: Vec<&Manager> = managers
            .iter()
            .copied()
            .filter(|m| m.scope.contains(namespace))
            .collect();
        let names: Vec<String> = applying
            .iter()
            .flat_map(|m| m.secret_names().iter().cloned())
            .collect();
        // Every ServiceAccount here already references every name: nothing can be lacking
        // (the usual case, answered from the cache's counts without reading a record).
        if names.is_empty() || service_accounts.all_reference(&namespace.name, &names) {
            continue;
        }
        findings += service_accounts
            .matching(&namespace.name, |sa| {
                lacking(&sa.interpreted(), namespace, applying.iter().copied()).is_some()
            })
            .len();
    }
    findings
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use k8s_openapi::api::core::v1::{LocalObjectReference, Namespace, ServiceAccount};
    use kube::{api::PartialObjectMeta, runtime::watcher};

    use super::*;
    use crate::api::{ClusterImagePullSecretManager, ImagePullSecretManager};

    fn namespace(name: &str, labels: &[(&str, &str)]) -> PartialObjectMeta<Namespace> {
        let mut ns = PartialObjectMeta::<Namespace>::default();
        ns.metadata.name = Some(name.to_owned());
        ns.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        ns
    }

    fn sa(ns: &str, name: &str, pull: &[&str], annotations: &[(&str, &str)]) -> ServiceAccount {
        let mut sa = ServiceAccount::default();
        sa.metadata.namespace = Some(ns.to_owned());
        sa.metadata.name = Some(name.to_owned());
        sa.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        sa.image_pull_secrets = Some(
            pull.iter()
                .map(|n| LocalObjectReference {
                    name: (*n).to_owned(),
                })
                .collect(),
        );
        sa
    }

    fn managers() -> Vec<Manager> {
        let cluster: ClusterImagePullSecretManager = serde_saphyr::from_str(
            "apiVersion: cheiron.anny.co/v1alpha1\nkind: ClusterImagePullSecretManager\n\
             metadata: {name: everywhere}\n\
             spec: {mode: ServiceAccount, excludeNamespaces: [skipped], secrets: [{name: regcred, registry: r.example, username: u, password: p}]}\n",
        )
        .unwrap();
        let pods: ImagePullSecretManager = serde_saphyr::from_str(
            "apiVersion: cheiron.anny.co/v1alpha1\nkind: ImagePullSecretManager\n\
             metadata: {name: pods, namespace: apps}\n\
             spec: {mode: Pod, secrets: [{name: podcred, registry: r.example, username: u, password: p}]}\n",
        )
        .unwrap();
        vec![
            Manager::from_cluster(&cluster).unwrap(),
            Manager::from_namespaced(&pods).unwrap(),
        ]
    }

    #[test]
    fn service_accounts_lacking_a_wanted_name_are_counted_and_no_others() {
        let namespaces = NamespaceCache::default();
        namespaces.apply(&watcher::Event::Init);
        for ns in ["apps", "skipped", "web"] {
            namespaces.apply(&watcher::Event::InitApply(namespace(ns, &[])));
        }
        namespaces.apply(&watcher::Event::InitDone);
        let accounts = ServiceAccountCache::default();
        accounts.apply(&watcher::Event::Init);
        for account in [
            sa("apps", "default", &["regcred"], &[]),
            sa("apps", "builder", &[], &[]),
            sa("apps", "quiet", &[], &[("cheiron.anny.co/ignore", "true")]),
            sa("skipped", "default", &[], &[]),
            sa("web", "default", &["other"], &[]),
        ] {
            accounts.apply(&watcher::Event::InitApply(account));
        }
        accounts.apply(&watcher::Event::InitDone);
        // apps/builder and web/default lack regcred; apps/quiet opted out, `skipped` is
        // excluded, and the Pod-mode manager says nothing of ServiceAccounts.
        assert_eq!(count(&managers(), &namespaces, &accounts), 2);
        accounts.apply(&watcher::Event::Apply(sa(
            "web",
            "default",
            &["other", "regcred"],
            &[],
        )));
        assert_eq!(count(&managers(), &namespaces, &accounts), 1);
        assert_eq!(count(&managers()[1..], &namespaces, &accounts), 0);
    }
}
