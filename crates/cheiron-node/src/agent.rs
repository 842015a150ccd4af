//! `cheiron node-agent`: one per node (a DaemonSet), keeping the node's files in step with the
//! `ClusterImagePullSecretManager`s in mode `Node` whose `nodeSelector` selects the node.
//!
//! ```text
//!   watch: the node credentials of the node namespace (bundle.rs), this Node
//!            ──► sync (on every change, and every --resync)
//!     1. the bundles selecting this node, their managers oldest first
//!     2. one credentials file (on two managers for one registry, the older wins)
//!     3. optionally, the kubelet's config.json merge (config_json::sync)
//!     4. this node's report Lease (report.rs), by server-side apply, when it changed;
//!        the controller sums the reports up in each manager's status
//! ```
//!
//! The agent reads no manager and no source Secret: the controller hands it each mode Node
//! manager's credentials, already resolved (node/handoff.rs). A manager whose
//! sources cannot be read keeps the credentials it gave last (the controller keeps them in the
//! bundle), and its node entry says why. Nothing a status or a log holds is a credential.

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use cheiron_runtime::{api::label, message};
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
    bundle::{BUNDLE_LABEL, BUNDLE_LABEL_VALUE, Bundle},
    config_json,
    credentials::{Login, NodeCredentials},
    metrics::NodeMetrics,
    report::{
        self, MAX_NODE_CONFLICTS, MAX_NODE_MESSAGE, ManagerReport, NodeReport, REPORT_ANNOTATION,
        REPORT_LABEL, REPORT_LABEL_VALUE,
    },
};

/// Default of `--resync`: how often the node's files are written again without a watch event
/// (a file changed by hand is put back within this time; a rotation comes through the watch).
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

/// The bundles selecting a node with `labels`, their managers oldest first (then by name).
pub fn selecting(bundles: &[Bundle], labels: &BTreeMap<String, String>) -> Vec<Bundle> {
    let mut out: Vec<Bundle> = bundles
        .iter()
        .filter(|b| {
            Selector::try_from(b.meta.node_selector.clone()).is_ok_and(|s| s.matches(labels))
        })
        .cloned()
        .collect();
    out.sort_by(|a, b| {
        a.meta
            .created
            .cmp(&b.meta.created)
            .then_with(|| a.meta.manager.cmp(&b.meta.manager))
    });
    out
}

/// One manager's credentials as last read.
#[derive(Clone, Debug)]
struct Given {
    logins: Vec<Login>,
    /// Why the node does not hold the manager's current credentials (the logins are then the
    /// last good ones).
    problem: Option<String>,
}

/// The agent's memory between syncs.
struct Agent {
    client: Client,
    config: AgentConfig,
    /// By manager uid: the last good credentials.
    last_good: HashMap<String, Vec<Login>>,
    /// The report last written to the node's Lease.
    reported: Option<NodeReport>,
    /// `/metrics`.
    metrics: NodeMetrics,
}

impl Agent {
    fn read(&mut self, bundle: &Bundle) -> Given {
        let uid = &bundle.meta.uid;
        let parsed = match &bundle.content {
            None => Err("the controller has no credentials for this manager yet".to_owned()),
            Some(content) => NodeCredentials::parse(content)
                .map(|c| c.logins().to_vec())
                .map_err(|e| e.to_string()),
        };
        match parsed {
            Ok(logins) => {
                self.last_good.insert(uid.clone(), logins.clone());
                Given {
                    logins,
                    problem: bundle.meta.problem.clone(),
                }
            }
            Err(problem) => Given {
                logins: self.last_good.get(uid).cloned().unwrap_or_default(),
                problem: Some(bundle.meta.problem.clone().unwrap_or(problem)),
            },
        }
    }

    /// One pass: files, then status.
    async fn sync(&mut self, bundles: &[Bundle], node: &Node) {
        let selected = selecting(bundles, node.labels());
        let given: Vec<Given> = selected.iter().map(|b| self.read(b)).collect();
        self.last_good
            .retain(|uid, _| selected.iter().any(|b| &b.meta.uid == uid));
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
        for (bundle, given) in selected.iter().zip(&given) {
            let registries: Vec<String> = given.logins.iter().map(|l| l.key.clone()).collect();
            let mine: Vec<String> = conflicts
                .iter()
                .filter(|c| registries.contains(&c.key))
                .map(|c| format!("{} (kept the existing {})", c.key, c.existing))
                .take(MAX_NODE_CONFLICTS)
                .collect();
            let problem = node_problem.clone().or_else(|| given.problem.clone());
            managers_reported.push(ManagerReport {
                uid: bundle.meta.uid.clone(),
                generation: bundle.meta.generation,
                sources: Some(bundle.version.clone()),
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
            tracing::warn!(watch = what, error = %message::watch_error(&e), "watch failed; retrying");
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

/// See [`selection_signature`]: the node's labels, and `(uid, resourceVersion)` per bundle.
type Selection = (BTreeMap<String, String>, Vec<(String, String)>);

/// What a sync depends on: the node's labels and, for each bundle selecting the node, its
/// manager and version (a new version is new credentials, a new spec or a new problem).
fn selection_signature(
    bundles: &[Bundle],
    labels: Option<&BTreeMap<String, String>>,
) -> Option<Selection> {
    let labels = labels?;
    let selected = selecting(bundles, labels)
        .into_iter()
        .map(|b| (b.meta.uid, b.version))
        .collect();
    Some((labels.clone(), selected))
}

/// The bundles among `secrets`.
fn bundles_of(secrets: &[Arc<Secret>]) -> Vec<Bundle> {
    secrets
        .iter()
        .filter_map(|s| Bundle::from_secret(s))
        .collect()
}

/// Runs the agent until `shutdown`. The files stay as they are on exit: the kubelet keeps
/// pulling while the agent restarts.
/// `ready` turns true once the watches have listed; `metrics` count the syncs.
pub async fn run(
    client: Client,
    config: AgentConfig,
    metrics: NodeMetrics,
    ready: Arc<cheiron_runtime::admin::ReadyFlag>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let changed = Arc::new(Notify::new());
    let (bundles, bundle_writer) = reflector::store::<Secret>();
    let (nodes, node_writer) = reflector::store::<Node>();
    let watch_bundles = reflector(
        bundle_writer,
        watcher(
            Api::<Secret>::namespaced(client.clone(), &config.namespace),
            watcher::Config::default().labels(&format!("{BUNDLE_LABEL}={BUNDLE_LABEL_VALUE}")),
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
    // Only what a sync depends on wakes it: the node's labels and the bundles selecting it.
    // Never a bundle of a manager selecting other nodes.
    let signature = {
        let (bundles, nodes) = (bundles.clone(), nodes.clone());
        move || {
            selection_signature(
                &bundles_of(&bundles.state()),
                nodes.state().first().map(|n| n.labels()),
            )
        }
    };
    let tasks = [
        forward(
            watch_bundles.map(|r| r.map(|_| ())).boxed(),
            "node credentials",
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
        ready = async { tokio::try_join!(bundles.wait_until_ready(), nodes.wait_until_ready()) } => {
            ready?;
        }
    }
    ready.set(true);
    tracing::info!(node = config.node_name, "node agent started");
    let resync = config.resync;
    let mut agent = Agent {
        client,
        config,
        last_good: HashMap::new(),
        reported: None,
        metrics,
    };
    loop {
        match nodes.state().into_iter().next() {
            // Raced against shutdown: a sync awaits nothing but its report, and an apiserver
            // that does not answer it must not hold up SIGTERM. The files are written by then.
            Some(node) => {
                let current = bundles_of(&bundles.state());
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = agent.sync(&current, &node) => {}
                }
            }
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    use super::*;
    use crate::bundle::BundleMeta;

    fn bundle(name: &str, created: i64, selector: LabelSelector) -> Bundle {
        Bundle {
            meta: BundleMeta {
                manager: name.to_owned(),
                uid: format!("uid-{name}"),
                generation: Some(1),
                created: Some(created),
                node_selector: selector,
                problem: None,
            },
            version: "1".to_owned(),
            content: None,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn pool(value: &str) -> LabelSelector {
        LabelSelector {
            match_labels: Some(labels(&[("pool", value)])),
            ..LabelSelector::default()
        }
    }

    #[test]
    fn only_bundles_whose_selector_matches_are_chosen_oldest_first() {
        let bundles = vec![
            bundle("young-gpu", 30, pool("gpu")),
            bundle("every-node", 20, LabelSelector::default()),
            bundle("old-gpu", 10, pool("gpu")),
            bundle("cpu", 5, pool("cpu")),
        ];
        let chosen: Vec<String> = selecting(&bundles, &labels(&[("pool", "gpu")]))
            .into_iter()
            .map(|b| b.meta.manager)
            .collect();
        assert_eq!(chosen, ["old-gpu", "every-node", "young-gpu"]);
        let chosen: Vec<String> = selecting(&bundles, &labels(&[]))
            .into_iter()
            .map(|b| b.meta.manager)
            .collect();
        assert_eq!(chosen, ["every-node"]);
    }

    #[test]
    fn only_a_change_to_the_node_or_its_selecting_bundles_wakes_the_agent() {
        let gpu = labels(&[("pool", "gpu")]);
        let mine = bundle("mine", 1, pool("gpu"));
        let other = bundle("other", 2, pool("cpu"));
        let before = selection_signature(&[mine.clone(), other.clone()], Some(&gpu));
        // Any change to a bundle selecting other nodes: the same.
        let mut other_changed = other.clone();
        other_changed.version = "7".to_owned();
        assert_eq!(
            before,
            selection_signature(&[mine.clone(), other_changed], Some(&gpu))
        );
        // A new version of its bundle, the node's labels: a change.
        let mut rotated = mine.clone();
        rotated.version = "2".to_owned();
        assert_ne!(
            before,
            selection_signature(&[rotated, other.clone()], Some(&gpu))
        );
        let relabelled = labels(&[("pool", "gpu"), ("zone", "a")]);
        assert_ne!(
            before,
            selection_signature(&[mine, other], Some(&relabelled))
        );
    }
}
