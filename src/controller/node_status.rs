//! The node status of mode Node managers: `status.nodesSelected`, `nodesSynced`,
//! `nodeSummary`, a bounded `nodes` and `nodesOmitted`, summed up from the node agents'
//! report Leases (node/report.rs) and the Nodes' labels.
//!
//! ```text
//!   idle until a mode Node manager exists, then watch:
//!     Nodes (metadata only) ─┐
//!     report Leases (the node namespace, by label) ─┼─► every tick, if anything changed
//!     the managers (uid, generation) ─┘                  (or every PERIOD): summarize, and
//!                                                        merge-patch what differs
//! ```
//!
//! The controller is the only writer of these fields; the reconcile leaves them out of its
//! own patch ([`FIELDS`]). Source Secrets are read by metadata only (their `resourceVersion`).

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, reflector, reflector::Store, watcher},
};
use serde_json::{Value, json};

use super::plan::FIELD_MANAGER;
use crate::{
    api::{ClusterImagePullSecretManager, Mode},
    message,
    node::report::{
        self, MAX_NODE_ENTRIES, NodeReport, REPORT_ANNOTATION, REPORT_LABEL, REPORT_LABEL_VALUE,
    },
};

/// The status fields written here, never by the reconcile.
pub const FIELDS: [&str; 5] = [
    "nodesSelected",
    "nodesSynced",
    "nodeSummary",
    "nodes",
    "nodesOmitted",
];
/// How often changes are looked for (and so the longest a report waits to be counted).
const TICK: Duration = Duration::from_secs(1);
/// How often every summary is computed again without a change seen: a rotated source is
/// counted against the nodes within this time, even before an agent reports it.
pub const PERIOD: Duration = Duration::from_secs(30);
/// How often, while no mode Node manager exists, the managers are looked at again.
const IDLE: Duration = Duration::from_secs(2);

/// Keeps the node status of every mode Node manager in `managers`, reading report Leases in
/// `namespace`. Runs until aborted.
pub async fn keep(
    client: Client,
    managers: Store<ClusterImagePullSecretManager>,
    namespace: String,
) {
    // Nothing is watched in a cluster that does not use mode Node.
    while !managers.state().iter().any(|m| m.spec.mode == Mode::Node) {
        tokio::time::sleep(IDLE).await;
    }
    let changed = Arc::new(AtomicBool::new(true));
    let (nodes, node_writer) = reflector::store::<PartialObjectMeta<Node>>();
    let (leases, lease_writer) = reflector::store::<Lease>();
    let watch_nodes = reflector(
        node_writer,
        watcher(
            Api::<PartialObjectMeta<Node>>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff(),
    )
    .touched_objects()
    .map(|r| r.map(|_| ()))
    .boxed();
    let watch_leases = reflector(
        lease_writer,
        watcher(
            Api::<Lease>::namespaced(client.clone(), &namespace),
            watcher::Config::default().labels(&format!("{REPORT_LABEL}={REPORT_LABEL_VALUE}")),
        )
        .default_backoff(),
    )
    .touched_objects()
    .map(|r| r.map(|_| ()))
    .boxed();
    let mut tasks = Vec::new();
    for (stream, what) in [(watch_nodes, "nodes"), (watch_leases, "node reports")] {
        let changed = changed.clone();
        tasks.push(AbortOnDrop(tokio::spawn(stream.for_each(move |event| {
            if let Err(e) = event {
                tracing::warn!(watch = what, error = %e, "watch failed; retrying");
            }
            changed.store(true, Ordering::Release);
            std::future::ready(())
        }))));
    }
    if let Err(e) = nodes.wait_until_ready().await {
        tracing::warn!(error = %e, "node watch ended");
        return;
    }
    if let Err(e) = leases.wait_until_ready().await {
        tracing::warn!(error = %e, "node report watch ended");
        return;
    }
    tracing::info!(namespace, "node status started");
    let mut seen: Vec<(String, Option<i64>)> = Vec::new();
    let mut last_full = Instant::now();
    let mut written: HashMap<String, Value> = HashMap::new();
    loop {
        let all = managers.state();
        let mut now_seen: Vec<(String, Option<i64>)> = all
            .iter()
            .map(|m| (m.uid().unwrap_or_default(), m.metadata.generation))
            .collect();
        now_seen.sort();
        let changed = changed.swap(false, Ordering::AcqRel) || now_seen != seen;
        if changed || last_full.elapsed() >= PERIOD {
            seen = now_seen;
            last_full = Instant::now();
            let reports = reports(&leases.state());
            let node_labels: Vec<(String, std::collections::BTreeMap<String, String>)> = nodes
                .state()
                .iter()
                .map(|n| (n.name_any(), n.labels().clone()))
                .collect();
            for manager in &all {
                write(&client, manager, &node_labels, &reports, &mut written).await;
            }
            let live: Vec<String> = all.iter().map(|m| m.uid().unwrap_or_default()).collect();
            written.retain(|uid, _| live.contains(uid));
        }
        tokio::time::sleep(TICK).await;
    }
}

/// The node reports by node name, from the Leases whose name and holder are their node's:
/// the node namespace's admission policy lets an agent write only a Lease held by its own
/// node (docs/node.md), so no node can speak for another.
fn reports(leases: &[Arc<Lease>]) -> HashMap<String, NodeReport> {
    leases
        .iter()
        .filter_map(|lease| {
            let text = lease.annotations().get(REPORT_ANNOTATION)?;
            let parsed: NodeReport = serde_json::from_str(text).ok()?;
            let holder = lease.spec.as_ref()?.holder_identity.as_deref()?;
            (report::lease_name(&parsed.node) == lease.name_any() && holder == parsed.node)
                .then_some(parsed)
        })
        .map(|r| (r.node.clone(), r))
        .collect()
}

/// The manager's current sources fingerprint, `None` when a source cannot be read.
async fn fingerprint(client: &Client, manager: &ClusterImagePullSecretManager) -> Option<String> {
    let keys = report::source_keys(manager);
    let mut sources = Vec::with_capacity(keys.len());
    for (namespace, name) in keys {
        let api: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(client.clone(), &namespace);
        match api.get_metadata_opt(&name).await {
            Ok(found) => {
                let version = found.and_then(|s| s.metadata.resource_version);
                sources.push((namespace, name, version));
            }
            Err(e) => {
                tracing::debug!(namespace, name, error = %message::api_error(&e), "cannot read a source's version");
                return None;
            }
        }
    }
    Some(report::sources_fingerprint(
        manager.metadata.generation,
        &sources,
    ))
}

/// The node fields of `manager`'s status as they should be (`null` for a manager not in mode
/// Node, so that a merge patch clears them).
async fn wanted(
    client: &Client,
    manager: &ClusterImagePullSecretManager,
    nodes: &[(String, std::collections::BTreeMap<String, String>)],
    reports: &HashMap<String, NodeReport>,
) -> Value {
    if manager.spec.mode != Mode::Node || manager.metadata.deletion_timestamp.is_some() {
        return json!({
            "nodesSelected": null, "nodesSynced": null, "nodeSummary": null,
            "nodes": null, "nodesOmitted": null,
        });
    }
    let fingerprint = fingerprint(client, manager).await;
    let summary = report::summarize(
        manager,
        nodes.iter().map(|(n, l)| (n.as_str(), l)),
        reports,
        fingerprint.as_deref(),
        MAX_NODE_ENTRIES,
    );
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    json!({
        "nodesSelected": count(summary.selected),
        "nodesSynced": count(summary.synced),
        "nodeSummary": format!("{}/{}", summary.synced, summary.selected),
        "nodes": summary.entries,
        "nodesOmitted": if summary.omitted > 0 { json!(count(summary.omitted)) } else { Value::Null },
    })
}

/// The node fields of a stored status, as [`wanted`] writes them.
fn stored(manager: &ClusterImagePullSecretManager) -> Value {
    let status = serde_json::to_value(&manager.status).unwrap_or_default();
    let field = |name: &str| status.get(name).cloned().unwrap_or(Value::Null);
    let mut out = serde_json::Map::new();
    for name in FIELDS {
        let value = match (name, field(name)) {
            ("nodes", Value::Array(a)) if a.is_empty() => Value::Null,
            (_, v) => v,
        };
        out.insert(name.to_owned(), value);
    }
    Value::Object(out)
}

async fn write(
    client: &Client,
    manager: &ClusterImagePullSecretManager,
    nodes: &[(String, std::collections::BTreeMap<String, String>)],
    reports: &HashMap<String, NodeReport>,
    written: &mut HashMap<String, Value>,
) {
    let mut next = wanted(client, manager, nodes, reports).await;
    if let Some(list) = next.get_mut("nodes")
        && list.as_array().is_some_and(Vec::is_empty)
    {
        *list = Value::Null;
    }
    let uid = manager.uid().unwrap_or_default();
    if stored(manager) == next || written.get(&uid) == Some(&next) {
        return;
    }
    let name = manager.name_any();
    let api: Api<ClusterImagePullSecretManager> = Api::all(client.clone());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    match api
        .patch_status(&name, &params, &Patch::Merge(&json!({"status": next})))
        .await
    {
        Ok(_) => {
            written.insert(uid, next);
        }
        Err(e) => {
            tracing::warn!(manager = name, error = %message::api_error(&e), "cannot write the node status");
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, annotation: Option<&str>) -> Arc<Lease> {
        held(
            name,
            name.strip_prefix("cheiron-node-").unwrap_or(name),
            annotation,
        )
    }

    fn held(name: &str, holder: &str, annotation: Option<&str>) -> Arc<Lease> {
        let mut lease = Lease::default();
        lease.metadata.name = Some(name.to_owned());
        lease.spec = Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            ..Default::default()
        });
        if let Some(text) = annotation {
            lease.metadata.annotations =
                Some([(REPORT_ANNOTATION.to_owned(), text.to_owned())].into());
        }
        Arc::new(lease)
    }

    #[test]
    fn reports_are_taken_only_from_the_lease_named_after_their_node() {
        let leases = [
            lease("cheiron-node-a", Some(r#"{"node":"a","managers":[]}"#)),
            // Claims node a from another node's Lease: ignored.
            lease(
                "cheiron-node-b",
                Some(r#"{"node":"a","managers":[{"uid":"x","synced":true}]}"#),
            ),
            lease("cheiron-node-c", Some("not json")),
            lease("cheiron-node-d", None),
            // Node f's Lease and report, held by node e: written by e, ignored.
            held(
                "cheiron-node-f",
                "e",
                Some(r#"{"node":"f","managers":[{"uid":"x","synced":true}]}"#),
            ),
        ];
        let reports = reports(&leases);
        assert_eq!(reports.len(), 1);
        assert!(reports["a"].managers.is_empty());
    }

    #[test]
    fn a_stored_status_without_node_fields_reads_as_all_null() {
        let manager = ClusterImagePullSecretManager::new("m", Default::default());
        let stored = stored(&manager);
        assert!(FIELDS.iter().all(|f| stored[f].is_null()), "{stored}");
    }
}
