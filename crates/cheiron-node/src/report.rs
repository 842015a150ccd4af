//! How node agents report to the controller, and how the controller sums the reports up into
//! a manager's status (docs/node.md, "Status").
//!
//! ```text
//!   node agent ──► Lease cheiron-node-<node> (the node namespace), one per node:
//!                  annotation node.cheiron.anny.co/report = {node, managers: [{uid, synced, ...}]}
//!   controller ──► watches those Leases and the Nodes' metadata, and writes per manager
//!                  status.nodesSelected / nodesSynced / nodeSummary and a bounded status.nodes
//! ```
//!
//! One small object per node, written by that node's agent only when its report changes, as the
//! kubelet's heartbeats are: 10 000 agents never write one shared object, and the controller is
//! the only writer of each manager's status. A node counts as synced when its agent reports the
//! manager's current generation and the current `resourceVersion` of the manager's node
//! credentials Secret (bundle.rs): a version, never anything derived from a credential.

use std::collections::{BTreeMap, HashMap};

use cheiron_runtime::api::{ClusterImagePullSecretManager, Mode, NodeStatus};
use kube::{
    ResourceExt,
    core::{Selector, SelectorExt},
};
use serde::{Deserialize, Serialize};

/// Longest `status.nodes[].message` (an agent's message is cut to it before it reports).
pub const MAX_NODE_MESSAGE: usize = 512;
/// Most conflicts listed in one node entry.
pub const MAX_NODE_CONFLICTS: usize = 16;

/// The annotation of a node's Lease holding its [`NodeReport`] (JSON).
pub const REPORT_ANNOTATION: &str = "node.cheiron.anny.co/report";
/// The label every node report Lease carries (value [`REPORT_LABEL_VALUE`]); the controller
/// watches Leases by it.
pub const REPORT_LABEL: &str = "node.cheiron.anny.co/report";
/// See [`REPORT_LABEL`].
pub const REPORT_LABEL_VALUE: &str = "v1";
/// Most node entries a manager's `status.nodes` lists (the nodes not synced first, then the
/// synced nodes with conflicts); `status.nodesOmitted` counts the rest.
pub const MAX_NODE_ENTRIES: usize = 20;

/// One node's report: how it applies each manager that selects it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    /// The node.
    pub node: String,
    /// One entry per manager selecting the node.
    #[serde(default)]
    pub managers: Vec<ManagerReport>,
    /// Registry keys of the kubelet's config.json whose entry still holds a credential cheiron
    /// wrote, changed by another tool so cheiron could not remove it (never a value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config_json_leftovers: Vec<String>,
}

/// How one node applies one manager.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagerReport {
    /// The manager's uid.
    pub uid: String,
    /// The manager's generation the node applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The `resourceVersion` of the manager's node credentials the node applied
    /// (bundle.rs). The field keeps its name from when agents read the sources themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<String>,
    /// The node's files hold what the node read.
    pub synced: bool,
    /// The registry keys the node serves from this manager.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub registries: Vec<String>,
    /// Registries the kubelet's config.json already held.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
    /// Why the node is not synced (bounded, never a value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The name of `node`'s report Lease (at most 253 characters, distinct per node).
pub fn lease_name(node: &str) -> String {
    const PREFIX: &str = "cheiron-node-";
    if PREFIX.len() + node.len() <= 253 {
        return format!("{PREFIX}{node}");
    }
    let digest = super::config_json::sha256_hex(node.as_bytes());
    format!("{PREFIX}{}", &digest[..40])
}

/// What the controller writes of a manager's node status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSummary {
    /// Nodes the manager's `nodeSelector` selects.
    pub selected: usize,
    /// Of those, the nodes whose agent reports the manager's current sources applied.
    pub synced: usize,
    /// The nodes not synced, then the synced nodes with conflicts, at most the cap.
    pub entries: Vec<NodeStatus>,
    /// Entries beyond the cap.
    pub omitted: usize,
}

/// Sums up the reports for `manager`: `nodes` are every Node's name and labels, `reports`
/// the node reports by node name, `fingerprint` the `resourceVersion` of the manager's node
/// credentials (bundle.rs)
/// (`None`: unknown, so no node counts as synced), `cap` the most entries listed.
pub fn summarize<'a>(
    manager: &ClusterImagePullSecretManager,
    nodes: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
    reports: &HashMap<String, NodeReport>,
    fingerprint: Option<&str>,
    cap: usize,
) -> NodeSummary {
    let selector = match (&manager.spec.mode, &manager.spec.node_selector) {
        (Mode::Node, Some(s)) => Selector::try_from(s.clone()).ok(),
        _ => None,
    };
    let Some(selector) = selector else {
        return NodeSummary::default();
    };
    let uid = manager.uid().unwrap_or_default();
    let mut summary = NodeSummary::default();
    let mut failing = Vec::new();
    let mut conflicting = Vec::new();
    for (name, labels) in nodes {
        if !selector.matches(labels) {
            continue;
        }
        summary.selected += 1;
        let report = reports
            .get(name)
            .and_then(|r| r.managers.iter().find(|m| m.uid == uid));
        let Some(report) = report else {
            failing.push(NodeStatus {
                name: name.to_owned(),
                synced: false,
                message: Some("no report from a cheiron node-agent on this node".to_owned()),
                ..NodeStatus::default()
            });
            continue;
        };
        let current = report.generation == manager.metadata.generation
            && fingerprint.is_some()
            && report.sources.as_deref() == fingerprint;
        let synced = report.synced && current;
        let message = if synced {
            None
        } else if report.synced {
            Some("the node has not applied the manager's current sources yet".to_owned())
        } else {
            report
                .message
                .clone()
                .or_else(|| Some("the node reports it is not synced".to_owned()))
        };
        let entry = NodeStatus {
            name: name.to_owned(),
            observed_generation: report.generation,
            synced,
            registries: report.registries.iter().take(64).cloned().collect(),
            conflicts: report
                .conflicts
                .iter()
                .take(MAX_NODE_CONFLICTS)
                .cloned()
                .collect(),
            message: message.map(|mut m| {
                cheiron_runtime::message::truncate(&mut m, MAX_NODE_MESSAGE);
                m
            }),
        };
        if synced {
            summary.synced += 1;
            if !entry.conflicts.is_empty() {
                conflicting.push(entry);
            }
        } else {
            failing.push(entry);
        }
    }
    failing.sort_by(|a, b| a.name.cmp(&b.name));
    conflicting.sort_by(|a, b| a.name.cmp(&b.name));
    let listed = failing.len() + conflicting.len();
    summary.entries = failing.into_iter().chain(conflicting).take(cap).collect();
    summary.omitted = listed - summary.entries.len();
    summary
}

#[cfg(test)]
mod tests {
    use cheiron_runtime::api::ClusterImagePullSecretManagerSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    use super::*;

    fn manager(pool: &str, generation: i64) -> ClusterImagePullSecretManager {
        let mut m = ClusterImagePullSecretManager::new(
            "pull",
            ClusterImagePullSecretManagerSpec {
                mode: Mode::Node,
                node_selector: Some(LabelSelector {
                    match_labels: Some([("pool".to_owned(), pool.to_owned())].into()),
                    ..LabelSelector::default()
                }),
                ..ClusterImagePullSecretManagerSpec::default()
            },
        );
        m.metadata.uid = Some("uid-1".to_owned());
        m.metadata.generation = Some(generation);
        m
    }

    fn pool(value: &str) -> BTreeMap<String, String> {
        [("pool".to_owned(), value.to_owned())].into()
    }

    fn report(node: &str, entry: ManagerReport) -> (String, NodeReport) {
        (
            node.to_owned(),
            NodeReport {
                node: node.to_owned(),
                managers: vec![entry],
                config_json_leftovers: Vec::new(),
            },
        )
    }

    fn applied(generation: i64, sources: &str) -> ManagerReport {
        ManagerReport {
            uid: "uid-1".to_owned(),
            generation: Some(generation),
            sources: Some(sources.to_owned()),
            synced: true,
            registries: vec!["registry.example.com".to_owned()],
            ..ManagerReport::default()
        }
    }

    #[test]
    fn counts_selected_and_synced_nodes_and_lists_only_the_failing() {
        let gpu = pool("gpu");
        let cpu = pool("cpu");
        let nodes = [
            ("a", &gpu),
            ("b", &gpu),
            ("c", &gpu),
            ("d", &gpu),
            ("e", &gpu),
            ("other", &cpu),
        ];
        let reports: HashMap<String, NodeReport> = [
            report("a", applied(2, "now")),
            // An older generation, and older sources: not synced, though the node says so.
            report("b", applied(1, "now")),
            report("c", applied(2, "before")),
            report(
                "d",
                ManagerReport {
                    synced: false,
                    message: Some("reading Secret s/x: forbidden".to_owned()),
                    ..applied(2, "now")
                },
            ),
            // "e" has no agent; "other" is not selected, whatever it reports.
            report("other", applied(2, "now")),
        ]
        .into();
        let summary = summarize(&manager("gpu", 2), nodes, &reports, Some("now"), 20);
        assert_eq!(
            (summary.selected, summary.synced, summary.omitted),
            (5, 1, 0)
        );
        let listed: Vec<(&str, bool, &str)> = summary
            .entries
            .iter()
            .map(|e| {
                (
                    e.name.as_str(),
                    e.synced,
                    e.message.as_deref().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            listed,
            [
                (
                    "b",
                    false,
                    "the node has not applied the manager's current sources yet"
                ),
                (
                    "c",
                    false,
                    "the node has not applied the manager's current sources yet"
                ),
                ("d", false, "reading Secret s/x: forbidden"),
                (
                    "e",
                    false,
                    "no report from a cheiron node-agent on this node"
                ),
            ]
        );
    }

    #[test]
    fn the_list_is_capped_failures_first_and_the_rest_counted() {
        let gpu = pool("gpu");
        let names: Vec<String> = (0..30).map(|i| format!("n{i:02}")).collect();
        let nodes: Vec<(&str, &BTreeMap<String, String>)> =
            names.iter().map(|n| (n.as_str(), &gpu)).collect();
        // n00..n09 synced with a conflict, n10..n19 synced, n20..n29 without an agent.
        let mut reports = HashMap::new();
        for (i, name) in names.iter().enumerate().take(20) {
            let mut entry = applied(2, "now");
            if i < 10 {
                entry.conflicts = vec!["docker.io (kept the existing docker.io)".to_owned()];
            }
            reports.extend([report(name, entry)]);
        }
        let summary = summarize(&manager("gpu", 2), nodes, &reports, Some("now"), 15);
        assert_eq!((summary.selected, summary.synced), (30, 20));
        assert_eq!(summary.entries.len(), 15);
        assert_eq!(
            summary.omitted, 5,
            "10 failing + 10 with conflicts, 15 listed"
        );
        assert!(summary.entries[..10].iter().all(|e| !e.synced));
        assert_eq!(summary.entries[10].name, "n00");
        assert!(summary.entries[10].synced && !summary.entries[10].conflicts.is_empty());
    }

    #[test]
    fn an_unknown_fingerprint_counts_no_node_synced() {
        let gpu = pool("gpu");
        let reports: HashMap<String, NodeReport> = [report("a", applied(2, "now"))].into();
        let summary = summarize(&manager("gpu", 2), [("a", &gpu)], &reports, None, 20);
        assert_eq!((summary.selected, summary.synced), (1, 0));
    }

    #[test]
    fn another_managers_report_is_no_report() {
        let gpu = pool("gpu");
        let mut entry = applied(2, "now");
        entry.uid = "uid-2".to_owned();
        let reports: HashMap<String, NodeReport> = [report("a", entry)].into();
        let summary = summarize(&manager("gpu", 2), [("a", &gpu)], &reports, Some("now"), 20);
        assert_eq!((summary.selected, summary.synced), (1, 0));
    }

    #[test]
    fn lease_names_fit_and_stay_distinct() {
        assert_eq!(lease_name("node-a"), "cheiron-node-node-a");
        let long_a = "a".repeat(253);
        let long_b = format!("{}b", "a".repeat(252));
        assert!(lease_name(&long_a).len() <= 253);
        assert_ne!(lease_name(&long_a), lease_name(&long_b));
    }
}
