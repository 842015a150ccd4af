//! The node status of mode Node managers: `status.nodesSelected`, `nodesSynced`,
//! `nodeSummary`, a bounded `nodes` and `nodesOmitted`, summed up from the node agents'
//! report Leases (node/report.rs) and the Nodes' labels.
//!
//! ```text
//!   idle until a mode Node manager exists, then watch:
//!     Nodes (metadata only) ─┐
//!     report Leases (the node namespace, by label) ─┤
//!     node credentials (the node namespace, by label) ─┼─► every tick, if anything changed
//!     the managers (uid, generation) ─┘                  (or every PERIOD): summarize,
//!                                                        merge-patch what differs, and
//!                                                        delete stale node credentials
//! ```
//!
//! The controller is the only writer of these fields; the reconcile leaves them out of its
//! own patch (`api::NODE_STATUS_FIELDS`). A node counts as synced when it reports the `resourceVersion` of
//! the manager's current node credentials Secret (node/bundle.rs), watched here by metadata
//! only; a bundle whose manager is gone or left mode Node is deleted here.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use cheiron_runtime::{
    api::{ClusterImagePullSecretManager, FIELD_MANAGER, Mode, NODE_STATUS_FIELDS},
    message,
};
use futures::{StreamExt, stream::BoxStream};
use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{Node, ObjectReference, Secret},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        events::{Event, EventType, Recorder, Reporter},
        reflector,
        reflector::Store,
        watcher,
    },
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{
    bundle::{BUNDLE_LABEL, BUNDLE_LABEL_VALUE, bundle_name},
    report::{
        self, MAX_NODE_ENTRIES, NodeReport, REPORT_ANNOTATION, REPORT_LABEL, REPORT_LABEL_VALUE,
    },
};
/// How often changes are looked for (and so the longest a report waits to be counted).
const TICK: Duration = Duration::from_secs(1);
/// How often every summary is computed again without a change seen: a rotated source is
/// counted against the nodes within this time, even before an agent reports it.
pub const PERIOD: Duration = Duration::from_secs(30);
/// How often, while no mode Node manager exists, the managers are looked at again.
const IDLE: Duration = Duration::from_secs(2);

/// A reflector of `api` under `config`: its store, and a stream that yields once per change
/// (or watch error) and must be polled for the store to fill.
fn reflected<K>(
    api: Api<K>,
    config: watcher::Config,
) -> (Store<K>, BoxStream<'static, Result<(), watcher::Error>>)
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store::<K>();
    let stream = reflector(writer, watcher(api, config).default_backoff())
        .touched_objects()
        .map(|r| r.map(|_| ()))
        .boxed();
    (store, stream)
}

/// Keeps the node status of every mode Node manager in `managers`, reading report Leases in
/// `namespace`. Runs until aborted.
pub async fn keep(
    client: Client,
    managers: Store<ClusterImagePullSecretManager>,
    namespace: String,
    reporter: Reporter,
) {
    // Nothing is watched in a cluster that does not use mode Node: no mode Node manager and no
    // node report (a report outlives its managers when it lists config.json leftovers, which
    // must still be announced after a restart).
    while !managers.state().iter().any(|m| m.spec.mode == Mode::Node)
        && !has_reports(&client, &namespace).await
    {
        tokio::time::sleep(IDLE).await;
    }
    let Some(watched) = Watched::start(&client, &namespace).await else {
        return;
    };
    tracing::info!(namespace, "node status started");
    let mut passes = Passes {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        namespace,
        written: HashMap::new(),
        announced: HashMap::new(),
    };
    let mut seen: Vec<(String, Option<i64>)> = Vec::new();
    let mut last_full = Instant::now();
    loop {
        let all = managers.state();
        let mut now_seen: Vec<(String, Option<i64>)> = all
            .iter()
            .map(|m| (m.uid().unwrap_or_default(), m.metadata.generation))
            .collect();
        now_seen.sort();
        let changed = watched.changed.swap(false, Ordering::AcqRel) || now_seen != seen;
        if changed || last_full.elapsed() >= PERIOD {
            seen = now_seen;
            last_full = Instant::now();
            passes.pass(&all, &watched, &managers).await;
        }
        tokio::time::sleep(TICK).await;
    }
}

/// The Nodes, report Leases and node credentials, each in a reflector whose every change (or
/// watch error) sets `changed`.
struct Watched {
    nodes: Store<PartialObjectMeta<Node>>,
    leases: Store<Lease>,
    bundles: Store<PartialObjectMeta<Secret>>,
    changed: Arc<AtomicBool>,
    /// The tasks that drive the reflectors, aborted with this.
    _tasks: Vec<AbortOnDrop>,
}

impl Watched {
    /// Starts the three watches and waits for their first lists; `None` if one ended first.
    async fn start(client: &Client, namespace: &str) -> Option<Self> {
        let changed = Arc::new(AtomicBool::new(true));
        let (nodes, watch_nodes) = reflected(
            Api::<PartialObjectMeta<Node>>::all(client.clone()),
            watcher::Config::default(),
        );
        let (bundles, watch_bundles) = reflected(
            Api::<PartialObjectMeta<Secret>>::namespaced(client.clone(), namespace),
            watcher::Config::default().labels(&format!("{BUNDLE_LABEL}={BUNDLE_LABEL_VALUE}")),
        );
        let (leases, watch_leases) = reflected(
            Api::<Lease>::namespaced(client.clone(), namespace),
            watcher::Config::default().labels(&format!("{REPORT_LABEL}={REPORT_LABEL_VALUE}")),
        );
        let mut tasks = Vec::new();
        for (stream, what) in [
            (watch_nodes, "nodes"),
            (watch_leases, "node reports"),
            (watch_bundles, "node credentials"),
        ] {
            let changed = changed.clone();
            tasks.push(AbortOnDrop(tokio::spawn(stream.for_each(move |event| {
                if let Err(e) = event {
                    tracing::warn!(watch = what, error = %message::watch_error(&e), "watch failed; retrying");
                }
                changed.store(true, Ordering::Release);
                std::future::ready(())
            }))));
        }
        if let Err(e) = nodes.wait_until_ready().await {
            tracing::warn!(error = %e, "node watch ended");
            return None;
        }
        if let Err(e) = leases.wait_until_ready().await {
            tracing::warn!(error = %e, "node report watch ended");
            return None;
        }
        if let Err(e) = bundles.wait_until_ready().await {
            tracing::warn!(error = %e, "node credentials watch ended");
            return None;
        }
        Some(Self {
            nodes,
            leases,
            bundles,
            changed,
            _tasks: tasks,
        })
    }
}

/// What one pass over the managers writes with, and what it remembers between passes.
struct Passes {
    client: Client,
    namespace: String,
    recorder: Recorder,
    /// The node status last written, by manager uid: only what differs is patched.
    written: HashMap<String, Value>,
    /// The config.json leftovers already announced, by node.
    announced: HashMap<String, Vec<String>>,
}

impl Passes {
    /// Announces new config.json leftovers, writes each manager's node status where it
    /// changed, and deletes stale node credentials.
    async fn pass(
        &mut self,
        all: &[Arc<ClusterImagePullSecretManager>],
        watched: &Watched,
        managers: &Store<ClusterImagePullSecretManager>,
    ) {
        let reports = reports(&watched.leases.state());
        for (node, keys) in leftovers_to_announce(&reports, &mut self.announced) {
            let uid = watched
                .nodes
                .state()
                .iter()
                .find(|n| n.name_any() == node)
                .and_then(|n| n.uid());
            announce_leftovers(&self.recorder, &node, uid, &keys).await;
        }
        let node_labels: Vec<(String, std::collections::BTreeMap<String, String>)> = watched
            .nodes
            .state()
            .iter()
            .map(|n| (n.name_any(), n.labels().clone()))
            .collect();
        let versions = bundle_versions(&watched.bundles.state());
        for manager in all {
            let version = versions.get(&manager.uid().unwrap_or_default());
            write(
                &self.client,
                manager,
                &node_labels,
                &reports,
                version.map(String::as_str),
                &mut self.written,
            )
            .await;
        }
        // The bundles first, then the managers as they are now: a bundle is written only
        // for a manager already in this store, so none is taken for stale by mistake.
        let seen_bundles = watched.bundles.state();
        remove_stale(
            &self.client,
            &self.namespace,
            &managers.state(),
            &seen_bundles,
        )
        .await;
        let live: Vec<String> = all.iter().map(|m| m.uid().unwrap_or_default()).collect();
        self.written.retain(|uid, _| live.contains(uid));
    }
}

/// True when the node namespace holds a node report Lease (one is read, by label).
async fn has_reports(client: &Client, namespace: &str) -> bool {
    let params = kube::api::ListParams::default()
        .labels(&format!("{REPORT_LABEL}={REPORT_LABEL_VALUE}"))
        .limit(1);
    Api::<PartialObjectMeta<Lease>>::namespaced(client.clone(), namespace)
        .list_metadata(&params)
        .await
        .is_ok_and(|l| !l.items.is_empty())
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

/// The nodes whose config.json leftovers (node/config_json.rs) are new since the last call, and
/// those leftovers; `announced` remembers what was announced (a node whose leftovers are gone
/// is forgotten, so a new leftover there is announced again).
fn leftovers_to_announce(
    reports: &HashMap<String, NodeReport>,
    announced: &mut HashMap<String, Vec<String>>,
) -> Vec<(String, Vec<String>)> {
    announced.retain(|node, _| {
        reports
            .get(node)
            .is_some_and(|r| !r.config_json_leftovers.is_empty())
    });
    let mut out: Vec<(String, Vec<String>)> = reports
        .values()
        .filter(|r| !r.config_json_leftovers.is_empty())
        .filter(|r| announced.get(&r.node) != Some(&r.config_json_leftovers))
        .map(|r| (r.node.clone(), r.config_json_leftovers.clone()))
        .collect();
    out.sort();
    for (node, keys) in &out {
        announced.insert(node.clone(), keys.clone());
    }
    out
}

/// A Warning Event on the Node: its kubelet's config.json still holds a credential cheiron
/// wrote, in entries another tool changed (registry keys only, never a value).
async fn announce_leftovers(recorder: &Recorder, node: &str, uid: Option<String>, keys: &[String]) {
    let mut listed = keys.iter().take(16).cloned().collect::<Vec<_>>().join(", ");
    if keys.len() > 16 {
        listed.push_str(&format!(" and {} more", keys.len() - 16));
    }
    let event = Event {
        type_: EventType::Warning,
        reason: "ConfigJsonLeftover".to_owned(),
        note: Some(format!(
            "the kubelet's config.json on this node still holds a credential cheiron wrote, under \
             {listed}: another tool changed those entries, so cheiron left them; remove them by \
             hand (docs/node.md, \"When another tool edits config.json\")"
        )),
        action: "RestoreConfigJson".to_owned(),
        secondary: None,
    };
    let reference = ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Node".to_owned()),
        name: Some(node.to_owned()),
        uid,
        ..ObjectReference::default()
    };
    if let Err(e) = recorder.publish(&event, &reference).await {
        tracing::warn!(node, error = %message::api_error(&e), "cannot publish the config.json leftover Event");
    }
}

/// The `resourceVersion` of each manager's node credentials, by manager uid (the owner).
fn bundle_versions(bundles: &[Arc<PartialObjectMeta<Secret>>]) -> HashMap<String, String> {
    bundles
        .iter()
        .filter_map(|b| {
            let owner = b.owner_references().first()?.uid.clone();
            Some((owner, b.resource_version()?))
        })
        .collect()
}

/// The node credentials whose manager is gone, or no longer in mode Node: deleted (their
/// owner reference lets the garbage collector do it too, but only when the manager goes).
async fn remove_stale(
    client: &Client,
    namespace: &str,
    managers: &[Arc<ClusterImagePullSecretManager>],
    bundles: &[Arc<PartialObjectMeta<Secret>>],
) {
    for bundle in bundles {
        let Some(owner) = bundle.owner_references().first() else {
            continue;
        };
        let wanted = managers.iter().any(|m| {
            m.uid().as_deref() == Some(owner.uid.as_str())
                && m.spec.mode == Mode::Node
                && m.metadata.deletion_timestamp.is_none()
        });
        if !wanted && let Err(e) = delete_bundle(client, namespace, &owner.name, &owner.uid).await {
            tracing::warn!(
                namespace,
                secret = bundle_name(&owner.name),
                error = %message::api_error(&e),
                "cannot delete stale node credentials"
            );
        }
    }
}

/// Deletes the bundle of the manager `name` with `uid` from `namespace`, if it is that
/// manager's: a Secret of the name that is not is left alone, and one gone or replaced
/// meanwhile is not an error. The controller calls it when a manager goes, and the node
/// status for the bundles of managers gone or out of mode Node.
pub async fn delete_bundle(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<(), kube::Error> {
    let name = bundle_name(name);
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let Some(current) = api.get_metadata_opt(&name).await? else {
        return Ok(());
    };
    if !current.owner_references().iter().any(|o| o.uid == uid) {
        return Ok(());
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: current.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => {
            tracing::info!(namespace, secret = name, "node credentials deleted");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The node fields of `manager`'s status as they should be (`null` for a manager not in mode
/// Node, so that a merge patch clears them).
fn wanted(
    manager: &ClusterImagePullSecretManager,
    nodes: &[(String, std::collections::BTreeMap<String, String>)],
    reports: &HashMap<String, NodeReport>,
    version: Option<&str>,
) -> Value {
    if manager.spec.mode != Mode::Node || manager.metadata.deletion_timestamp.is_some() {
        return json!({
            "nodesSelected": null, "nodesSynced": null, "nodeSummary": null,
            "nodes": null, "nodesOmitted": null,
        });
    }
    let summary = report::summarize(
        manager,
        nodes.iter().map(|(n, l)| (n.as_str(), l)),
        reports,
        version,
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
    for name in NODE_STATUS_FIELDS {
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
    version: Option<&str>,
    written: &mut HashMap<String, Value>,
) {
    let mut next = wanted(manager, nodes, reports, version);
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
    fn each_new_set_of_config_json_leftovers_is_announced_once() {
        let report = |node: &str, keys: &[&str]| {
            (
                node.to_owned(),
                NodeReport {
                    node: node.to_owned(),
                    config_json_leftovers: keys.iter().map(|k| (*k).to_owned()).collect(),
                    ..NodeReport::default()
                },
            )
        };
        let mut announced = HashMap::new();
        let reports: HashMap<String, NodeReport> =
            [report("a", &["quay.io"]), report("b", &[])].into();
        assert_eq!(
            leftovers_to_announce(&reports, &mut announced),
            [("a".to_owned(), vec!["quay.io".to_owned()])]
        );
        // The same again: nothing new.
        assert!(leftovers_to_announce(&reports, &mut announced).is_empty());
        // Another key on a, one on b: both announced.
        let reports: HashMap<String, NodeReport> = [
            report("a", &["quay.io", "ghcr.io"]),
            report("b", &["docker.io"]),
        ]
        .into();
        assert_eq!(leftovers_to_announce(&reports, &mut announced).len(), 2);
        // Gone, then back: announced again.
        let gone: HashMap<String, NodeReport> = [report("a", &[]), report("b", &[])].into();
        assert!(leftovers_to_announce(&gone, &mut announced).is_empty());
        assert_eq!(leftovers_to_announce(&reports, &mut announced).len(), 2);
    }

    #[test]
    fn a_stored_status_without_node_fields_reads_as_all_null() {
        let manager = ClusterImagePullSecretManager::new("m", Default::default());
        let stored = stored(&manager);
        assert!(
            NODE_STATUS_FIELDS.iter().all(|f| stored[f].is_null()),
            "{stored}"
        );
    }
}
