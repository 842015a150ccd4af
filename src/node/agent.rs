//! `cheiron node-agent`: one per node (a DaemonSet), keeping the node's files in step with the
//! `ClusterImagePullSecretManager`s in mode `Node` whose `nodeSelector` selects the node.
//!
//! ```text
//!   watch: the managers, this Node ──► sync (on every change, and every --resync)
//!     1. the Node managers selecting this node, oldest first
//!     2. their source Secrets, read one by one by name (nothing else is read)
//!     3. one credentials file (on two managers for one registry, the older wins)
//!     4. optionally, the kubelet's config.json merge (config_json::sync)
//!     5. this node's report Lease (report.rs), by server-side apply, when it changed;
//!        the controller sums the reports up in each manager's status
//! ```
//!
//! A manager whose sources cannot be read keeps the credentials it gave last (as the
//! controller keeps existing copies), and its node entry says why. Nothing a status or a log
//! holds is a credential.

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::{
    api::{
        coordination::v1::Lease,
        core::v1::{Node, Secret},
    },
    apimachinery::pkg::apis::meta::v1::MicroTime,
};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
    core::{Selector, SelectorExt},
    runtime::{WatchStreamExt, reflector, watcher},
};
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{
    atomic::{self, PRIVATE_MODE},
    config_json,
    credentials::{Login, NodeCredentials},
    metrics::NodeMetrics,
    report::{
        self, ManagerReport, NodeReport, REPORT_ANNOTATION, REPORT_LABEL, REPORT_LABEL_VALUE,
    },
};
use crate::{
    api::{ClusterImagePullSecretManager, Mode, label},
    controller::{Fetched, Provided, SourceKey, desired_with, source_key},
    message,
};

/// Longest `status.nodes[].message`.
pub const MAX_NODE_MESSAGE: usize = 512;
/// Most conflicts listed in one node entry.
pub const MAX_NODE_CONFLICTS: usize = 16;
/// Default of `--resync`: how often sources are read again without a watch event (a
/// rotated source Secret reaches the node within this time).
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(60);

/// What one agent looks after.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// This node's name.
    pub node_name: String,
    /// The node namespace, where the node's report Lease is (docs/node.md).
    pub namespace: String,
    /// The node-local credentials file.
    pub credentials_file: PathBuf,
    /// The kubelet's config.json to merge into, if any.
    pub kubelet_config_json: Option<PathBuf>,
    /// Where the merge is remembered.
    pub merge_state_file: PathBuf,
    /// How often to sync without an event.
    pub resync: Duration,
}

/// The Node managers selecting a node with `labels`, oldest first (then by name).
pub fn selecting(
    managers: &[Arc<ClusterImagePullSecretManager>],
    labels: &BTreeMap<String, String>,
) -> Vec<Arc<ClusterImagePullSecretManager>> {
    let mut out: Vec<Arc<ClusterImagePullSecretManager>> = managers
        .iter()
        .filter(|m| m.spec.mode == Mode::Node && m.metadata.deletion_timestamp.is_none())
        .filter(|m| {
            m.spec
                .node_selector
                .clone()
                .and_then(|s| Selector::try_from(s).ok())
                .is_some_and(|s| s.matches(labels))
        })
        .cloned()
        .collect();
    out.sort_by(|a, b| {
        let created = |m: &ClusterImagePullSecretManager| {
            m.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
        };
        created(a)
            .cmp(&created(b))
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    out
}

/// One manager's credentials as last read.
#[derive(Clone, Debug)]
struct Given {
    logins: Vec<Login>,
    /// Why the last read failed (the logins are those of the last good read).
    problem: Option<String>,
    /// The sources' fingerprint of the last good read (report.rs).
    sources: Option<String>,
}

/// The agent's memory between syncs.
struct Agent {
    client: Client,
    config: AgentConfig,
    /// By manager uid: the last good credentials, and their sources' fingerprint.
    last_good: HashMap<String, (Vec<Login>, String)>,
    /// The report last written to the node's Lease.
    reported: Option<NodeReport>,
    /// A watch on each source Secret the selected managers name.
    sources: SourceWatches,
    /// `/metrics`.
    metrics: NodeMetrics,
}

impl Agent {
    /// The sources, and each one's `resourceVersion` (for the fingerprint).
    async fn fetch(
        &self,
        keys: &[SourceKey],
    ) -> Result<(HashMap<SourceKey, Fetched>, Versions), String> {
        let mut out = HashMap::new();
        let mut versions = Vec::with_capacity(keys.len());
        for (namespace, name) in keys {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
            let fetched = match api.get_opt(name).await {
                Ok(None) => {
                    versions.push((namespace.clone(), name.clone(), None));
                    Fetched::Missing
                }
                Ok(Some(secret)) => {
                    versions.push((
                        namespace.clone(),
                        name.clone(),
                        secret.metadata.resource_version,
                    ));
                    Fetched::Present {
                        secret_type: secret.type_,
                        data: secret.data.unwrap_or_default(),
                    }
                }
                Err(e) => {
                    return Err(format!(
                        "reading Secret {namespace}/{name}: {}",
                        message::api_error(&e)
                    ));
                }
            };
            out.insert((namespace.clone(), name.clone()), fetched);
        }
        Ok((out, versions))
    }

    async fn read(&mut self, manager: &ClusterImagePullSecretManager) -> Given {
        let uid = manager.uid().unwrap_or_default();
        let keys = super::report::source_keys(manager);
        let fresh = match self.fetch(&keys).await {
            Err(problem) => Err(problem),
            Ok((fetched, versions)) => {
                let fingerprint =
                    report::sources_fingerprint(manager.metadata.generation, &versions);
                let desired = desired_with(
                    &manager.spec.secrets,
                    Some("node"),
                    None,
                    &fetched,
                    &Provided::new(),
                );
                let problems: Vec<String> = desired.problems.iter().map(|p| p.message()).collect();
                match desired.secrets.first().and_then(|s| s.content.as_ref()) {
                    Some(content) if problems.is_empty() => NodeCredentials::parse(content)
                        .map(|c| (c.logins().to_vec(), fingerprint))
                        .map_err(|e| e.to_string()),
                    _ => Err(problems.join("; ")),
                }
            }
        };
        match fresh {
            Ok((logins, fingerprint)) => {
                self.last_good
                    .insert(uid, (logins.clone(), fingerprint.clone()));
                Given {
                    logins,
                    problem: None,
                    sources: Some(fingerprint),
                }
            }
            Err(problem) => {
                let last = self.last_good.get(&uid).cloned();
                Given {
                    logins: last.map(|(l, _)| l).unwrap_or_default(),
                    problem: Some(problem),
                    sources: None,
                }
            }
        }
    }

    /// One pass: files, then status.
    async fn sync(&mut self, managers: &[Arc<ClusterImagePullSecretManager>], node: &Node) {
        let labels = node.labels().clone();
        let selected = selecting(managers, &labels);
        self.sources.watch(selected.iter().flat_map(|m| {
            m.spec
                .secrets
                .iter()
                .filter_map(|e| source_key(e, None))
                .collect::<Vec<_>>()
        }));
        let mut given = Vec::with_capacity(selected.len());
        for manager in &selected {
            given.push(self.read(manager).await);
        }
        let live: Vec<String> = selected
            .iter()
            .map(|m| m.uid().unwrap_or_default())
            .collect();
        self.last_good.retain(|uid, _| live.contains(uid));
        let credentials = NodeCredentials::new(given.iter().flat_map(|g| g.logins.iter().cloned()));
        let mut node_problem = self.write_credentials(&credentials).err();
        let mut conflicts: Vec<config_json::Conflict> = Vec::new();
        let mut leftovers: Vec<String> = Vec::new();
        if node_problem.is_none()
            && let Some(config) = &self.config.kubelet_config_json
        {
            match config_json::sync(
                config,
                &self.config.merge_state_file,
                &credentials.config_json_entries(),
            ) {
                Ok(synced) => {
                    conflicts = synced.conflicts;
                    leftovers = synced.leftovers;
                }
                Err(e) => node_problem = Some(e.to_string()),
            }
            if !leftovers.is_empty() {
                // Keys only: the entries hold credentials.
                tracing::warn!(
                    file = %config.display(),
                    registries = ?leftovers,
                    "config.json entries still hold a credential cheiron wrote, but another tool changed them; remove them by hand (docs/node.md)"
                );
            }
        }
        self.metrics.record_leftovers(leftovers.len());
        let mut managers_reported = Vec::with_capacity(selected.len());
        for (manager, given) in selected.iter().zip(&given) {
            let registries: Vec<String> = given.logins.iter().map(|l| l.key.clone()).collect();
            let mine: Vec<String> = conflicts
                .iter()
                .filter(|c| registries.contains(&c.key))
                .map(|c| format!("{} (kept the existing {})", c.key, c.existing))
                .take(MAX_NODE_CONFLICTS)
                .collect();
            let problem = node_problem.clone().or_else(|| given.problem.clone());
            managers_reported.push(ManagerReport {
                uid: manager.uid().unwrap_or_default(),
                generation: manager.metadata.generation,
                sources: given.sources.clone(),
                synced: problem.is_none(),
                registries: registries.into_iter().take(64).collect(),
                conflicts: mine,
                message: problem.map(|mut m| {
                    message::truncate(&mut m, MAX_NODE_MESSAGE);
                    m
                }),
            });
        }
        let synced = managers_reported.iter().all(|m| m.synced);
        self.metrics.record(
            managers_reported.len(),
            synced,
            k8s_openapi::jiff::Timestamp::now().as_second(),
        );
        self.report(NodeReport {
            node: self.config.node_name.clone(),
            managers: managers_reported,
            config_json_leftovers: leftovers,
        })
        .await;
    }

    fn write_credentials(&self, credentials: &NodeCredentials) -> Result<(), String> {
        let path = &self.config.credentials_file;
        let describe = |e: std::io::Error| format!("{}: {e}", path.display());
        if credentials.is_empty() {
            return atomic::remove(path).map_err(describe);
        }
        let bytes = credentials.to_bytes();
        let current = atomic::read(path).map_err(describe)?;
        let mode = atomic::mode_of(path).map_err(describe)?;
        if current.as_deref() == Some(&bytes[..]) && mode == Some(PRIVATE_MODE) {
            return Ok(());
        }
        atomic::write(path, &bytes, PRIVATE_MODE).map_err(describe)?;
        tracing::info!(
            file = %path.display(),
            registries = credentials.logins().len(),
            "credentials file written"
        );
        Ok(())
    }

    /// Applies the node's report Lease, unless it already holds `report`.
    async fn report(&mut self, report: NodeReport) {
        if self.reported.as_ref() == Some(&report) {
            return;
        }
        let name = report::lease_name(&self.config.node_name);
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let text = match serde_json::to_string(&report) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot encode the node's report");
                return;
            }
        };
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "labels": {
                    REPORT_LABEL: REPORT_LABEL_VALUE,
                    label::MANAGED_BY: label::MANAGED_BY_VALUE,
                },
                "annotations": {REPORT_ANNOTATION: text},
            },
            "spec": {
                "holderIdentity": self.config.node_name,
                "renewTime": MicroTime(k8s_openapi::jiff::Timestamp::now()),
            },
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match api.patch(&name, &params, &Patch::Apply(&lease)).await {
            Ok(_) => self.reported = Some(report),
            Err(e) => {
                tracing::warn!(lease = name, error = %message::api_error(&e), "cannot write the node's report");
            }
        }
    }
}

/// The field manager of the agents' report Leases.
pub const FIELD_MANAGER: &str = "cheiron-node-agent";

/// Spawns a task that notifies `changed` for each event of `stream` that `relevant` calls a
/// change (and logs the watch's errors).
fn forward(
    stream: futures::stream::BoxStream<'static, Result<(), watcher::Error>>,
    what: &'static str,
    changed: Arc<Notify>,
    mut relevant: impl FnMut() -> bool + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(stream.for_each(move |event| {
        if let Err(e) = event {
            tracing::warn!(watch = what, error = %e, "watch failed; retrying");
        }
        if relevant() {
            changed.notify_one();
        }
        std::future::ready(())
    }))
}

/// True when `signature` differs from what it was at the last call (and at the first).
fn changes_of<T: PartialEq + Send + 'static>(
    mut signature: impl FnMut() -> T + Send + 'static,
) -> impl FnMut() -> bool + Send + 'static {
    let mut last: Option<T> = None;
    move || {
        let now = signature();
        let changed = last.as_ref() != Some(&now);
        last = Some(now);
        changed
    }
}

/// See [`selection_signature`]: the node's labels, and `(uid, generation)` per manager.
type Selection = (BTreeMap<String, String>, Vec<(String, Option<i64>)>);

/// What a sync depends on, besides the sources: the node's labels and, for each manager
/// selecting the node, its uid and generation (its spec; the apiserver also bumps it when a
/// deletion starts, which deselects it).
fn selection_signature(
    managers: &[Arc<ClusterImagePullSecretManager>],
    labels: Option<&BTreeMap<String, String>>,
) -> Option<Selection> {
    let labels = labels?;
    let selected = selecting(managers, labels)
        .iter()
        .map(|m| (m.uid().unwrap_or_default(), m.metadata.generation))
        .collect();
    Some((labels.clone(), selected))
}

/// One watch per source Secret the selected managers name, each by a `metadata.name` field
/// selector (what RBAC `resourceNames` can grant), waking the agent when the Secret changes:
/// a rotation reaches the node within seconds, `--resync` is the safety net.
struct SourceWatches {
    client: Client,
    changed: Arc<Notify>,
    running: HashMap<SourceKey, tokio::task::JoinHandle<()>>,
}

impl SourceWatches {
    fn new(client: Client, changed: Arc<Notify>) -> Self {
        Self {
            client,
            changed,
            running: HashMap::new(),
        }
    }

    /// Watches exactly `keys`: starts the missing watches, stops the others.
    fn watch(&mut self, keys: impl IntoIterator<Item = SourceKey>) {
        let wanted: std::collections::HashSet<SourceKey> = keys.into_iter().collect();
        self.running.retain(|key, task| {
            let keep = wanted.contains(key);
            if !keep {
                task.abort();
            }
            keep
        });
        for key in wanted {
            if self.running.contains_key(&key) {
                continue;
            }
            let (namespace, name) = &key;
            let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
            let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let changed = self.changed.clone();
            let task = tokio::spawn(watcher(api, config).default_backoff().for_each(
                move |event| {
                    match event {
                        // The first list: nothing new but what changed since the last read.
                        Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                        Ok(_) => changed.notify_one(),
                        Err(e) => {
                            tracing::warn!(watch = "source Secret", error = %e, "watch failed; retrying");
                        }
                    }
                    std::future::ready(())
                },
            ));
            self.running.insert(key, task);
        }
    }
}

impl Drop for SourceWatches {
    fn drop(&mut self) {
        self.running
            .values()
            .for_each(tokio::task::JoinHandle::abort);
    }
}

/// `(namespace, name, resourceVersion)` of each source read.
type Versions = Vec<(String, String, Option<String>)>;

/// Runs the agent until `shutdown`. The files stay as they are on exit: the kubelet keeps
/// pulling while the agent restarts.
/// `ready` turns true once the watches have listed; `metrics` count the syncs.
pub async fn run(
    client: Client,
    config: AgentConfig,
    metrics: NodeMetrics,
    ready: Arc<crate::controller::ControllerReady>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let changed = Arc::new(Notify::new());
    let (managers, manager_writer) = reflector::store::<ClusterImagePullSecretManager>();
    let (nodes, node_writer) = reflector::store::<Node>();
    let watch_managers = reflector(
        manager_writer,
        watcher(
            Api::<ClusterImagePullSecretManager>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff(),
    )
    .touched_objects();
    let watch_node = reflector(
        node_writer,
        watcher(
            Api::<Node>::all(client.clone()),
            watcher::Config::default().fields(&format!("metadata.name={}", config.node_name)),
        )
        .default_backoff(),
    )
    .touched_objects();
    // Only what a sync depends on wakes it: the node's labels and the managers selecting it
    // (each one's spec, by its generation; a deletion starting; a manager coming or going).
    // Never a status write (the controller's node summary changes a manager's status as nodes
    // report, and would wake every agent), nor a manager selecting other nodes.
    let signature = {
        let (managers, nodes) = (managers.clone(), nodes.clone());
        move || selection_signature(&managers.state(), nodes.state().first().map(|n| n.labels()))
    };
    let tasks = [
        forward(
            watch_managers.map(|r| r.map(|_| ())).boxed(),
            "managers",
            changed.clone(),
            changes_of(signature.clone()),
        ),
        forward(
            watch_node.map(|r| r.map(|_| ())).boxed(),
            "node",
            changed.clone(),
            changes_of(signature),
        ),
    ];
    tokio::select! {
        () = shutdown.cancelled() => {
            tasks.iter().for_each(tokio::task::JoinHandle::abort);
            return Ok(());
        }
        ready = async { tokio::try_join!(managers.wait_until_ready(), nodes.wait_until_ready()) } => {
            ready?;
        }
    }
    ready.set(true);
    tracing::info!(node = config.node_name, "node agent started");
    let resync = config.resync;
    let mut agent = Agent {
        sources: SourceWatches::new(client.clone(), changed.clone()),
        client,
        config,
        last_good: HashMap::new(),
        reported: None,
        metrics,
    };
    loop {
        match nodes.state().into_iter().next() {
            Some(node) => agent.sync(&managers.state(), &node).await,
            None => tracing::warn!(
                node = agent.config.node_name,
                "no Node of this name; waiting for it"
            ),
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = changed.notified() => {}
            () = tokio::time::sleep(resync) => {}
        }
    }
    tasks.iter().for_each(tokio::task::JoinHandle::abort);
    Ok(())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

    use super::*;
    use crate::api::ClusterImagePullSecretManagerSpec;

    fn manager(
        name: &str,
        created: i64,
        selector: Option<LabelSelector>,
    ) -> Arc<ClusterImagePullSecretManager> {
        let mut m = ClusterImagePullSecretManager::new(
            name,
            ClusterImagePullSecretManagerSpec {
                mode: Mode::Node,
                node_selector: selector,
                ..ClusterImagePullSecretManagerSpec::default()
            },
        );
        m.metadata.creation_timestamp = k8s_openapi::jiff::Timestamp::from_second(created)
            .ok()
            .map(Time);
        Arc::new(m)
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn pool(value: &str) -> Option<LabelSelector> {
        Some(LabelSelector {
            match_labels: Some(labels(&[("pool", value)])),
            ..LabelSelector::default()
        })
    }

    #[test]
    fn only_node_managers_whose_selector_matches_are_chosen_oldest_first() {
        let mut service_account = (*manager("sa", 1, None)).clone();
        service_account.spec.mode = Mode::ServiceAccount;
        let managers = vec![
            manager("young-gpu", 30, pool("gpu")),
            manager("every-node", 20, Some(LabelSelector::default())),
            manager("old-gpu", 10, pool("gpu")),
            manager("cpu", 5, pool("cpu")),
            manager("no-selector", 1, None),
            Arc::new(service_account),
        ];
        let chosen: Vec<String> = selecting(&managers, &labels(&[("pool", "gpu")]))
            .iter()
            .map(|m| m.name_any())
            .collect();
        assert_eq!(chosen, ["old-gpu", "every-node", "young-gpu"]);
        let chosen: Vec<String> = selecting(&managers, &labels(&[]))
            .iter()
            .map(|m| m.name_any())
            .collect();
        assert_eq!(chosen, ["every-node"]);
    }

    #[test]
    fn only_a_change_to_the_node_or_its_selecting_managers_wakes_the_agent() {
        let gpu = labels(&[("pool", "gpu")]);
        let mut mine = (*manager("mine", 1, pool("gpu"))).clone();
        mine.metadata.uid = Some("uid-mine".to_owned());
        mine.metadata.generation = Some(1);
        let mut other = (*manager("other", 2, pool("cpu"))).clone();
        other.metadata.uid = Some("uid-other".to_owned());
        let before = selection_signature(
            &[Arc::new(mine.clone()), Arc::new(other.clone())],
            Some(&gpu),
        );
        // A status write, and any change to a manager selecting other nodes: the same.
        let mut written = mine.clone();
        written.status = Some(crate::api::ManagerStatus {
            nodes_synced: Some(1),
            ..Default::default()
        });
        let mut other_changed = other.clone();
        other_changed.metadata.generation = Some(7);
        assert_eq!(
            before,
            selection_signature(&[Arc::new(written), Arc::new(other_changed)], Some(&gpu))
        );
        // Its spec, a deletion starting, the node's labels: a change.
        let mut edited = mine.clone();
        edited.metadata.generation = Some(2);
        assert_ne!(
            before,
            selection_signature(&[Arc::new(edited), Arc::new(other.clone())], Some(&gpu))
        );
        let mut deleting = mine.clone();
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert_ne!(
            before,
            selection_signature(&[Arc::new(deleting), Arc::new(other.clone())], Some(&gpu))
        );
        let relabelled = labels(&[("pool", "gpu"), ("zone", "a")]);
        assert_ne!(
            before,
            selection_signature(&[Arc::new(mine), Arc::new(other)], Some(&relabelled))
        );
    }
}
