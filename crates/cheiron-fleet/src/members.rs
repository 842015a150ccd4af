//! The workload clusters the fleet knows of, which of them are worth a connection, and how a
//! manager last stood in each: plain values the watches fill in (`enrolment.rs`), and pure
//! functions of them, unit-tested without a cluster. A member's connection is whatever `C`
//! the fleet keeps there (a `workload::Workload`); nothing here looks into it.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
};

use cheiron_runtime::api::{
    ClusterImagePullSecretManager,
    fleet::{CLUSTER_NAME_LABEL, KUBECONFIG_SUFFIX},
};
use kube::{
    ResourceExt,
    core::{Selector, SelectorExt},
};

/// How a manager last stood in a workload cluster, for the Events about it: one per change,
/// never one per retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    /// Everything there is in step.
    Synced,
    /// The cluster is being connected to (its watches list): not a change worth an Event.
    Connecting,
    /// It does not answer, or its kubeconfig does not work.
    Unreachable,
    /// It answers, but refused or failed a write.
    WriteFailed,
}

impl Health {
    /// The Event's type and reason for a manager entering this state.
    pub(crate) fn reason(self) -> Option<(bool, &'static str)> {
        match self {
            Self::Synced => Some((false, "WorkloadClusterSynced")),
            Self::Connecting => None,
            Self::Unreachable => Some((true, "WorkloadClusterUnreachable")),
            Self::WriteFailed => Some((true, "WorkloadClusterWriteFailed")),
        }
    }
}

/// Why a workload cluster is not in step: its kind decides the cluster's health (and so the
/// Events), its message is what `status.clusters` says.
#[derive(Debug)]
pub(crate) enum NotSynced {
    /// Being connected to: its watches have not listed yet. Not worth an Event.
    Connecting(String),
    /// It does not answer, its kubeconfig does not work, or it is refused (a bound).
    Unreachable(String),
}

impl NotSynced {
    /// The health of a cluster this keeps out of step.
    pub(crate) fn health(&self) -> Health {
        match self {
            Self::Connecting(_) => Health::Connecting,
            Self::Unreachable(_) => Health::Unreachable,
        }
    }

    pub(crate) fn into_message(self) -> String {
        match self {
            Self::Connecting(m) | Self::Unreachable(m) => m,
        }
    }
}

/// Whether going from `previous` to `now` is worth an Event: a change into trouble, a change
/// of trouble, and the recovery from it; not the first sync, nor a repeat, nor connecting.
pub(crate) fn is_transition(previous: Option<Health>, now: Health) -> bool {
    match (previous, now) {
        (_, Health::Connecting) => false,
        (None, Health::Synced) => false,
        (Some(p), n) => p != n,
        (None, _) => true,
    }
}

/// A workload cluster as the management cluster describes it, and the connection `C` to it.
pub(crate) struct Member<C> {
    /// Labels of its kubeconfig Secret.
    pub(crate) secret_labels: BTreeMap<String, String>,
    /// `resourceVersion` of its kubeconfig Secret.
    pub(crate) secret_version: String,
    /// The connection, or why there is none (never the kubeconfig's content).
    pub(crate) workload: Option<Result<Arc<C>, String>>,
    /// Wanted, but beyond `--fleet-max-clusters`: not connected to.
    pub(crate) capped: bool,
}

// By hand: derived, it would ask `C` to be `Default`, which a connection is not.
impl<C> Default for Member<C> {
    fn default() -> Self {
        Self {
            secret_labels: BTreeMap::new(),
            secret_version: String::new(),
            workload: None,
            capped: false,
        }
    }
}

/// A Cluster API `Cluster`'s metadata.
#[derive(Clone, Debug, Default)]
pub(crate) struct CapiCluster {
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) deleting: bool,
}

/// What the fleet knows of its workload clusters, each connected through a `C`.
pub(crate) struct State<C> {
    /// `--fleet-select-by-secret-labels`.
    pub(crate) by_secret_labels: bool,
    /// By `<namespace>/<cluster>`.
    pub(crate) members: BTreeMap<String, Member<C>>,
    /// By `<namespace>/<name>`.
    pub(crate) capi: BTreeMap<String, CapiCluster>,
    /// By manager uid: the workload clusters where its last sync left (or may have left)
    /// copies: those it selects and those whose cleanup is pending. Unknown for a manager not
    /// synced since the start: its `status.clusters` stands in.
    pub(crate) holds: HashMap<String, BTreeSet<String>>,
    /// By manager uid and cluster: how it last stood there.
    pub(crate) health: HashMap<(String, String), Health>,
}

impl<C> Default for State<C> {
    fn default() -> Self {
        Self {
            by_secret_labels: false,
            members: BTreeMap::new(),
            capi: BTreeMap::new(),
            holds: HashMap::new(),
            health: HashMap::new(),
        }
    }
}

impl<C> State<C> {
    /// The labels that decide whether the cluster `name` is selected: those of its Cluster
    /// API `Cluster`, or, only with `--fleet-select-by-secret-labels`, those of its kubeconfig
    /// Secret; none (selected by nothing) otherwise.
    pub(crate) fn labels<'a>(
        &'a self,
        name: &str,
        member: &'a Member<C>,
    ) -> Option<&'a BTreeMap<String, String>> {
        match self.capi.get(name) {
            Some(c) => Some(&c.labels),
            None => self.by_secret_labels.then_some(&member.secret_labels),
        }
    }
}

/// The workload clusters worth a connection: those a manager that is not being deleted
/// selects, and those where a manager may still have copies to clean up (what it holds, or
/// while that is unknown, its `status.clusters`). A cluster whose Cluster API `Cluster` is
/// being deleted is never worth one: it is released, not cleaned.
pub(crate) fn wanted<C>(
    state: &State<C>,
    managers: &[Arc<ClusterImagePullSecretManager>],
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (name, member) in &state.members {
        let capi = state.capi.get(name);
        if capi.is_some_and(|c| c.deleting) {
            continue;
        }
        let labels = state.labels(name, member);
        let needed = managers.iter().any(|m| {
            let selects = m.metadata.deletion_timestamp.is_none()
                && labels.is_some_and(|l| cluster_selector(m).is_some_and(|s| s.matches(l)));
            let holds = match state.holds.get(&m.uid().unwrap_or_default()) {
                Some(held) => held.contains(name),
                None => m
                    .status
                    .as_ref()
                    .is_some_and(|s| s.clusters.iter().any(|c| c.name == *name)),
            };
            selects || holds
        });
        if needed {
            out.insert(name.clone());
        }
    }
    out
}

/// Of the `wanted` clusters, those to connect to: at most `max`, those connected already
/// first (a new cluster never takes the place of one in use), then by name.
pub(crate) fn within_cap<C>(
    state: &State<C>,
    wanted: &BTreeSet<String>,
    max: usize,
) -> BTreeSet<String> {
    let connected = |name: &String| {
        state
            .members
            .get(name)
            .is_some_and(|m| matches!(m.workload, Some(Ok(_))))
    };
    wanted
        .iter()
        .filter(|n| connected(n))
        .chain(wanted.iter().filter(|n| !connected(n)))
        .take(max)
        .cloned()
        .collect()
}

/// `<namespace>/<cluster>` of a kubeconfig Secret: named `<cluster>-kubeconfig` and labelled
/// with the cluster's name.
pub(crate) fn member_name<K: ResourceExt>(meta: &K) -> Option<String> {
    let cluster = meta.labels().get(CLUSTER_NAME_LABEL)?;
    let name = meta.name_any();
    (name.strip_suffix(KUBECONFIG_SUFFIX) == Some(cluster.as_str()))
        .then(|| format!("{}/{cluster}", meta.namespace().unwrap_or_default()))
}

/// `spec.clusters.selector`, compiled; `None` when absent (no workload cluster) or invalid
/// (the manager's compile reports it).
pub(crate) fn cluster_selector(manager: &ClusterImagePullSecretManager) -> Option<Selector> {
    let selector = manager.spec.clusters.as_ref()?.selector.clone()?;
    Selector::try_from(selector).ok()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Secret;

    use super::*;

    fn manager(
        uid: &str,
        selector: serde_json::Value,
        status_clusters: &[&str],
        deleting: bool,
    ) -> Arc<ClusterImagePullSecretManager> {
        let clusters: Vec<serde_json::Value> = status_clusters
            .iter()
            .map(|c| serde_json::json!({"name": c, "ready": false, "targetNamespaces": 0, "syncedNamespaces": 0}))
            .collect();
        let mut m: ClusterImagePullSecretManager = serde_json::from_value(serde_json::json!({
            "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
            "metadata": {"name": uid, "uid": uid},
            "spec": {
                "secrets": [{"existingSecretRef": {"name": "pull", "namespace": "src"}}],
                "clusters": {"selector": selector},
            },
            "status": {"clusters": clusters},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        if deleting {
            m.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        Arc::new(m)
    }

    fn member(env: &str) -> Member<()> {
        Member {
            secret_labels: [("env".to_owned(), env.to_owned())].into(),
            ..Member::default()
        }
    }

    #[test]
    fn only_selected_clusters_and_those_with_copies_to_clean_are_connected_to() {
        let mut state = State::<()> {
            by_secret_labels: true,
            ..State::default()
        };
        for (name, env) in [
            ("capi/prod", "prod"),
            ("capi/dev", "dev"),
            ("capi/old", "old"),
        ] {
            state.members.insert(name.to_owned(), member(env));
        }
        let prod = serde_json::json!({"matchLabels": {"env": "prod"}});
        // Nobody selects dev or old: no connection.
        let a = manager("a", prod.clone(), &[], false);
        assert_eq!(
            wanted(&state, std::slice::from_ref(&a)),
            ["capi/prod".to_owned()].into()
        );

        // A manager not synced since the start that lists old in its status may have copies
        // there: old is wanted until a sync of that manager says otherwise.
        let b = manager("b", prod.clone(), &["capi/old"], false);
        let both = [a.clone(), b.clone()];
        assert_eq!(
            wanted(&state, &both),
            ["capi/old".to_owned(), "capi/prod".to_owned()].into()
        );
        state
            .holds
            .insert("b".to_owned(), ["capi/prod".to_owned()].into());
        assert_eq!(wanted(&state, &both), ["capi/prod".to_owned()].into());
        // A failed cleanup keeps it.
        state.holds.insert(
            "b".to_owned(),
            ["capi/prod".to_owned(), "capi/old".to_owned()].into(),
        );
        assert!(wanted(&state, &both).contains("capi/old"));

        // A Cluster API Cluster's labels win over the Secret's.
        state.capi.insert(
            "capi/dev".to_owned(),
            CapiCluster {
                labels: [("env".to_owned(), "prod".to_owned())].into(),
                deleting: false,
            },
        );
        assert!(wanted(&state, std::slice::from_ref(&a)).contains("capi/dev"));
        // A Cluster being deleted is released: never connected to, even with copies there.
        state.capi.insert(
            "capi/dev".to_owned(),
            CapiCluster {
                labels: [("env".to_owned(), "prod".to_owned())].into(),
                deleting: true,
            },
        );
        state
            .holds
            .insert("a".to_owned(), ["capi/dev".to_owned()].into());
        assert!(!wanted(&state, &[a]).contains("capi/dev"));

        // A manager being deleted selects nothing; it needs only where its cleanup is
        // pending, and nothing once that is done.
        let gone = manager("gone", prod, &[], true);
        state
            .holds
            .insert("gone".to_owned(), ["capi/old".to_owned()].into());
        assert_eq!(
            wanted(&state, std::slice::from_ref(&gone)),
            ["capi/old".to_owned()].into()
        );
        state.holds.insert("gone".to_owned(), BTreeSet::new());
        assert!(wanted(&state, &[gone]).is_empty());
    }

    #[test]
    fn a_kubeconfig_secrets_own_labels_select_nothing_unless_allowed() {
        let mut state = State::<()>::default();
        state
            .members
            .insert("fleet/hers".to_owned(), member("prod"));
        state.members.insert("fleet/east".to_owned(), member("dev"));
        let a = manager(
            "a",
            serde_json::json!({"matchLabels": {"env": "prod"}}),
            &[],
            false,
        );
        let every = manager("every", serde_json::json!({}), &[], false);
        // Not even an empty selector selects a cluster only its Secret's labels describe.
        assert!(wanted(&state, &[a.clone(), every]).is_empty());
        // A Cluster API Cluster (in the Secret's namespace) decides.
        state.capi.insert(
            "fleet/east".to_owned(),
            CapiCluster {
                labels: [("env".to_owned(), "prod".to_owned())].into(),
                deleting: false,
            },
        );
        assert_eq!(
            wanted(&state, std::slice::from_ref(&a)),
            ["fleet/east".to_owned()].into()
        );
        // --fleet-select-by-secret-labels: the Secret's labels count where no Cluster is.
        state.by_secret_labels = true;
        assert_eq!(
            wanted(&state, &[a]),
            ["fleet/east".to_owned(), "fleet/hers".to_owned()].into()
        );
    }

    #[test]
    fn at_most_the_cap_is_connected_to_and_a_new_cluster_never_takes_a_connected_ones_place() {
        let mut state = State::<()>::default();
        for name in ["f/a", "f/b", "f/c"] {
            state.members.insert(name.to_owned(), member("prod"));
        }
        let all: BTreeSet<String> = state.members.keys().cloned().collect();
        assert_eq!(
            within_cap(&state, &all, 2),
            ["f/a".to_owned(), "f/b".to_owned()].into()
        );
        if let Some(c) = state.members.get_mut("f/c") {
            c.workload = Some(Err("stands in for a connection".to_owned()));
        }
        // An error is no connection: still by name.
        assert_eq!(within_cap(&state, &all, 1), ["f/a".to_owned()].into());
        assert_eq!(within_cap(&state, &all, 5), all);
    }

    #[test]
    fn an_event_marks_each_change_of_a_clusters_health_once() {
        use Health::*;
        // The first sync in step and connecting say nothing.
        assert!(!is_transition(None, Synced));
        assert!(!is_transition(None, Connecting));
        assert!(!is_transition(Some(Unreachable), Connecting));
        // Trouble, a change of trouble and the recovery do; a repeat does not.
        assert!(is_transition(None, Unreachable));
        assert!(is_transition(Some(Synced), Unreachable));
        assert!(!is_transition(Some(Unreachable), Unreachable));
        assert!(is_transition(Some(Unreachable), WriteFailed));
        assert!(!is_transition(Some(WriteFailed), WriteFailed));
        assert!(is_transition(Some(WriteFailed), Synced));
        assert!(!is_transition(Some(Synced), Synced));
        assert_eq!(
            Unreachable.reason(),
            Some((true, "WorkloadClusterUnreachable"))
        );
        assert_eq!(
            WriteFailed.reason(),
            Some((true, "WorkloadClusterWriteFailed"))
        );
        assert_eq!(Synced.reason(), Some((false, "WorkloadClusterSynced")));
    }

    #[test]
    fn a_kubeconfig_secret_is_named_after_its_labelled_cluster() {
        let secret = |name: &str, cluster: Option<&str>| {
            let mut s = Secret::default();
            s.metadata.name = Some(name.to_owned());
            s.metadata.namespace = Some("fleet".to_owned());
            s.metadata.labels =
                cluster.map(|c| [(CLUSTER_NAME_LABEL.to_owned(), c.to_owned())].into());
            s
        };
        assert_eq!(
            member_name(&secret("east-kubeconfig", Some("east"))).as_deref(),
            Some("fleet/east")
        );
        // CAPI's other Secrets of a cluster (CA, etcd, service-account keys) carry the label too.
        assert_eq!(member_name(&secret("east-ca", Some("east"))), None);
        assert_eq!(member_name(&secret("east-kubeconfig", Some("west"))), None);
        assert_eq!(member_name(&secret("east-kubeconfig", None)), None);
    }
}
