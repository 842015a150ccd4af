//! Workload clusters (docs/fleet.md): a `ClusterImagePullSecretManager` in a management
//! cluster whose `spec.clusters.selector` selects workload clusters does in each of them what
//! it does here, from the same sources (which stay here).
//!
//! The workload clusters are found from their kubeconfig Secrets (Cluster API's convention:
//! `<cluster>-kubeconfig`, key `value`, label `cluster.x-k8s.io/cluster-name`), watched as
//! metadata only; a Secret's data is read once per `resourceVersion`, so a rotated kubeconfig
//! is picked up without a restart. Each cluster gets one client and one set of the watches
//! the controller keeps here (Namespaces and cheiron's Secrets as metadata, ServiceAccounts),
//! filling caches of its own, and a [`Context`] over them: the reconcile of a manager runs the
//! very same planning and writes against it ([`super::reconcile`]). A Cluster API `Cluster`
//! (when its CRD is served) decides with its labels whether a cluster is selected, and one
//! being deleted is released: cheiron stops acting there without cleaning up.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{StreamExt, future};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject},
    config::{KubeConfigOptions, Kubeconfig},
    core::{PartialObjectMeta, Selector, SelectorExt},
    discovery,
    runtime::{
        WatchStreamExt,
        events::Reporter,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tokio::task::AbortHandle;

use super::{
    context::{Caches, Context},
    events,
    kinds::ManagerRef,
    namespaces::NamespaceCache,
    secrets::SecretCache,
    service_accounts::ServiceAccountCache,
    triggers::{self, CompiledManagers, Routing, Triggers},
};
use crate::{
    api::{
        ClusterImagePullSecretManager,
        fleet::{CAPI_GROUP, CLUSTER_NAME_LABEL, KUBECONFIG_KEY, KUBECONFIG_SUFFIX},
    },
    metrics::Metrics,
    policy::Manager,
};

/// How long the connection to a workload cluster may take before it counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest sync of one manager into one workload cluster (a probe, then the writes): a slow
/// cluster is reported and retried, never waited on by the others.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// Settings of the fleet (`--fleet`, `--fleet-namespace`).
#[derive(Clone, Debug, Default)]
pub struct FleetOptions {
    /// Whether to act in workload clusters at all (reading kubeconfig Secrets needs RBAC the
    /// chart grants only with `fleet.enabled`).
    pub enabled: bool,
    /// The namespaces whose kubeconfig Secrets are read; empty: every namespace.
    pub namespaces: Vec<String>,
}

/// A workload cluster as the management cluster describes it.
#[derive(Clone, Default)]
struct Member {
    /// Labels of its kubeconfig Secret.
    secret_labels: BTreeMap<String, String>,
    /// `resourceVersion` of its kubeconfig Secret.
    secret_version: String,
    /// The connection, or why there is none (never the kubeconfig's content).
    workload: Option<Result<Arc<Workload>, String>>,
}

/// A Cluster API `Cluster`'s metadata.
#[derive(Clone, Debug, Default)]
struct CapiCluster {
    labels: BTreeMap<String, String>,
    deleting: bool,
}

#[derive(Default)]
struct State {
    /// By `<namespace>/<cluster>`.
    members: BTreeMap<String, Member>,
    /// By `<namespace>/<name>`.
    capi: BTreeMap<String, CapiCluster>,
}

/// One connected workload cluster: its client, caches and watches, behind a [`Context`].
pub(super) struct Workload {
    /// `<namespace>/<cluster>`.
    pub name: String,
    /// The context a reconcile writes through there.
    pub ctx: Arc<Context>,
    routing: AbortHandle,
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.routing.abort();
    }
}

impl Workload {
    /// True once its watches have listed everything.
    pub fn synced(&self) -> bool {
        self.ctx.namespaces.is_ready()
            && self.ctx.secrets.is_ready()
            && self.ctx.service_accounts.is_ready()
    }
}

/// How one manager stands towards one workload cluster.
pub(super) enum Role {
    /// Selected: act there.
    Selected(Arc<Workload>),
    /// Not selected (any more): take away what this manager left there.
    Unselected(Arc<Workload>),
    /// Selected, but there is no connection: why.
    Unusable(String),
}

/// The workload clusters, as found from the management cluster.
pub(super) struct Fleet {
    management: Client,
    options: FleetOptions,
    state: Mutex<State>,
    metrics: Arc<Metrics>,
    triggers: Triggers,
    managers: Store<ClusterImagePullSecretManager>,
    reporter: Reporter,
    /// Failed syncs in a row, by manager name and cluster, for the backoff.
    failures: Mutex<HashMap<(String, String), u32>>,
}

impl Fleet {
    pub(super) fn new(
        management: Client,
        options: FleetOptions,
        metrics: Arc<Metrics>,
        triggers: Triggers,
        managers: Store<ClusterImagePullSecretManager>,
        reporter: Reporter,
    ) -> Self {
        Self {
            management,
            options,
            state: Mutex::default(),
            metrics,
            triggers,
            managers,
            reporter,
            failures: Mutex::default(),
        }
    }

    /// Each workload cluster, with what `manager` is to do there. Clusters whose Cluster API
    /// `Cluster` is being deleted are left out: released, not cleaned.
    pub(super) fn roles(&self, manager: &ClusterImagePullSecretManager) -> Vec<(String, Role)> {
        let selector = cluster_selector(manager);
        let Ok(state) = self.state.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (name, member) in &state.members {
            let capi = state.capi.get(name);
            if capi.is_some_and(|c| c.deleting) {
                continue;
            }
            let labels = capi.map_or(&member.secret_labels, |c| &c.labels);
            let selected = selector.as_ref().is_some_and(|s| s.matches(labels));
            let role = match (&member.workload, selected) {
                (Some(Ok(w)), true) => Role::Selected(w.clone()),
                (Some(Ok(w)), false) => Role::Unselected(w.clone()),
                (Some(Err(why)), true) => Role::Unusable(why.clone()),
                (None, true) => Role::Unusable("connecting".to_owned()),
                (_, false) => continue,
            };
            out.push((name.clone(), role));
        }
        out
    }

    /// The live cluster managers that select the workload cluster `cluster`, compiled for
    /// workload clusters, oldest first: who may claim a Secret name there.
    pub(super) fn claimants_in(&self, cluster: &str) -> Vec<Manager> {
        let labels = {
            let Ok(state) = self.state.lock() else {
                return Vec::new();
            };
            let Some(member) = state.members.get(cluster) else {
                return Vec::new();
            };
            state
                .capi
                .get(cluster)
                .map_or(member.secret_labels.clone(), |c| c.labels.clone())
        };
        let mut out: Vec<Manager> = self
            .managers
            .state()
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .filter(|m| cluster_selector(m).is_some_and(|s| s.matches(&labels)))
            .filter_map(|m| Manager::from_cluster_for_workloads(m).ok())
            .collect();
        out.sort_by(|a, b| a.seniority().cmp(&b.seniority()));
        out
    }

    /// Counts a failed sync of `manager` into `cluster`; how many came before it.
    pub(super) fn record_failure(&self, manager: &str, cluster: &str) -> u32 {
        let Ok(mut failures) = self.failures.lock() else {
            return 0;
        };
        let n = failures
            .entry((manager.to_owned(), cluster.to_owned()))
            .or_insert(0);
        *n = n.saturating_add(1);
        *n - 1
    }

    pub(super) fn reset_failures(&self, manager: &str, cluster: &str) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.remove(&(manager.to_owned(), cluster.to_owned()));
        }
    }

    pub(super) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Asks every cluster manager to reconcile: the fleet changed.
    fn trigger_all(&self) {
        for m in self.managers.state() {
            self.triggers
                .send(ManagerRef::Cluster(ObjectRef::from_obj(&*m)));
        }
    }

    /// Watches the kubeconfig Secrets (and the Cluster API `Cluster`s, when served) until
    /// dropped.
    pub(super) async fn run(self: Arc<Self>) {
        let namespaces: Vec<Option<String>> = if self.options.namespaces.is_empty() {
            vec![None]
        } else {
            self.options.namespaces.iter().cloned().map(Some).collect()
        };
        let capi = match capi_cluster_resource(&self.management).await {
            Some(resource) => Some(resource),
            None => {
                tracing::info!(
                    "Cluster API's Cluster is not served: workload clusters are selected by the labels of their kubeconfig Secrets"
                );
                None
            }
        };
        let clusters = future::join_all(namespaces.iter().cloned().filter_map(|ns| {
            let resource = capi.clone()?;
            Some(self.clone().watch_capi(resource, ns))
        }));
        let secrets = future::join_all(
            namespaces
                .into_iter()
                .map(|ns| self.clone().watch_kubeconfigs(ns)),
        );
        future::join(clusters, secrets).await;
    }

    async fn watch_kubeconfigs(self: Arc<Self>, namespace: Option<String>) {
        let api: Api<Secret> = match &namespace {
            Some(ns) => Api::namespaced(self.management.clone(), ns),
            None => Api::all(self.management.clone()),
        };
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let metadata: Api<PartialObjectMeta<Secret>> = match &namespace {
            Some(ns) => Api::namespaced(self.management.clone(), ns),
            None => Api::all(self.management.clone()),
        };
        let stream = watcher(
            metadata,
            watcher::Config::default().labels(CLUSTER_NAME_LABEL),
        )
        .default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init) => seen.clear(),
                Ok(watcher::Event::InitApply(meta)) => {
                    if let Some(name) = self.kubeconfig_applied(&api, &meta).await {
                        seen.insert(name);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    self.forget_unseen(namespace.as_deref(), &seen);
                    self.trigger_all();
                }
                Ok(watcher::Event::Apply(meta)) => {
                    if self.kubeconfig_applied(&api, &meta).await.is_some() {
                        self.trigger_all();
                    }
                }
                Ok(watcher::Event::Delete(meta)) => {
                    if let Some(name) = member_name(&meta) {
                        self.forget(&name);
                        self.trigger_all();
                    }
                }
                Err(e) => {
                    tracing::warn!(kind = "Secret", error = %e, "kubeconfig watch failed; retrying")
                }
            }
        }
    }

    /// Takes in a kubeconfig Secret's metadata, connecting (again) when its
    /// `resourceVersion` changed; the cluster's name, if it is a kubeconfig Secret.
    async fn kubeconfig_applied(
        &self,
        api: &Api<Secret>,
        meta: &PartialObjectMeta<Secret>,
    ) -> Option<String> {
        let name = member_name(meta)?;
        let version = meta.resource_version().unwrap_or_default();
        let labels = meta.labels().clone();
        let unchanged = self.state.lock().is_ok_and(|mut state| {
            let member = state.members.entry(name.clone()).or_default();
            member.secret_labels = labels;
            member.secret_version == version && member.workload.is_some()
        });
        if unchanged {
            return Some(name);
        }
        let workload = match api.get(&meta.name_any()).await {
            Ok(secret) => self.connect(&name, &secret).await.map(Arc::new),
            Err(e) => Err(format!(
                "reading its kubeconfig Secret {}: {}",
                meta.name_any(),
                crate::message::api_error(&e)
            )),
        };
        if let Err(why) = &workload {
            tracing::warn!(cluster = name, error = why, "workload cluster not usable");
            self.metrics.fleet.set_connected(&name, false);
        } else {
            tracing::info!(cluster = name, "connected to a workload cluster");
        }
        if let Ok(mut state) = self.state.lock() {
            let member = state.members.entry(name.clone()).or_default();
            member.secret_version = version;
            member.workload = Some(workload);
        }
        Some(name)
    }

    fn forget(&self, name: &str) {
        if let Ok(mut state) = self.state.lock() {
            state.members.remove(name);
        }
        self.metrics.fleet.forget(name);
        tracing::info!(
            cluster = name,
            "a workload cluster left: its kubeconfig Secret is gone"
        );
    }

    fn forget_unseen(&self, namespace: Option<&str>, seen: &BTreeSet<String>) {
        let gone: Vec<String> = self
            .state
            .lock()
            .map(|state| {
                state
                    .members
                    .keys()
                    .filter(|k| namespace.is_none_or(|ns| k.split('/').next() == Some(ns)))
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for name in gone {
            self.forget(&name);
        }
    }

    /// A connection to the cluster `name` from its kubeconfig Secret.
    async fn connect(&self, name: &str, secret: &Secret) -> Result<Workload, String> {
        let value = secret
            .data
            .as_ref()
            .and_then(|d| d.get(KUBECONFIG_KEY))
            .ok_or_else(|| format!("its kubeconfig Secret has no key {KUBECONFIG_KEY}"))?;
        let text = std::str::from_utf8(&value.0)
            .map_err(|_| format!("key {KUBECONFIG_KEY} of its kubeconfig Secret is not text"))?;
        let config = client_config(text).await?;
        let client = Client::try_from(config)
            .map_err(|_| "no client can be built from its kubeconfig".to_owned())?;
        Ok(self.workload(name, client))
    }

    /// The caches, watches and context of one workload cluster reached through `client`.
    fn workload(&self, name: &str, client: Client) -> Workload {
        let (triggers, namespaced, secrets, service_accounts) = (
            self.triggers.clone(),
            // No namespaced manager acts in a workload cluster.
            reflector::store().0,
            SecretCache::default(),
            ServiceAccountCache::default(),
        );
        let namespaces = NamespaceCache::default();
        let routing = Routing {
            triggers: triggers.clone(),
            namespaced: namespaced.clone(),
            cluster: self.managers.clone(),
            namespaces: namespaces.clone(),
            secrets: secrets.clone(),
            service_accounts: service_accounts.clone(),
            compiled: CompiledManagers::for_workloads(),
        };
        let caches = Caches {
            namespaced,
            cluster: self.managers.clone(),
            namespaces,
            secrets,
            service_accounts,
        };
        let recorder = events::EventPublisher::new(
            client.clone(),
            self.reporter.clone(),
            events::MAX_CACHED_EVENTS,
        );
        let ctx = Arc::new(Context::new(
            client.clone(),
            caches,
            recorder,
            self.metrics.clone(),
            triggers,
            Duration::from_secs(600),
            0,
        ));
        let routing = tokio::spawn(triggers::route(client, routing)).abort_handle();
        Workload {
            name: name.to_owned(),
            ctx,
            routing,
        }
    }

    /// Watches Cluster API `Cluster`s (metadata only) in `namespace` (or every namespace).
    async fn watch_capi(self: Arc<Self>, resource: ApiResource, namespace: Option<String>) {
        let api: Api<PartialObjectMeta<DynamicObject>> = match &namespace {
            Some(ns) => Api::namespaced_with(self.management.clone(), ns, &resource),
            None => Api::all_with(self.management.clone(), &resource),
        };
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        let mut seen: BTreeSet<String> = BTreeSet::new();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init) => seen.clear(),
                Ok(watcher::Event::InitApply(meta)) => {
                    seen.insert(self.capi_applied(&meta));
                }
                Ok(watcher::Event::InitDone) => {
                    if let Ok(mut state) = self.state.lock() {
                        state.capi.retain(|k, _| {
                            seen.contains(k)
                                || namespace
                                    .as_deref()
                                    .is_some_and(|ns| k.split('/').next() != Some(ns))
                        });
                    }
                    self.trigger_all();
                }
                Ok(watcher::Event::Apply(meta)) => {
                    self.capi_applied(&meta);
                    self.trigger_all();
                }
                Ok(watcher::Event::Delete(meta)) => {
                    let key = format!(
                        "{}/{}",
                        meta.namespace().unwrap_or_default(),
                        meta.name_any()
                    );
                    if let Ok(mut state) = self.state.lock() {
                        state.capi.remove(&key);
                    }
                    self.trigger_all();
                }
                Err(e) => {
                    tracing::warn!(kind = "Cluster", error = %e, "Cluster watch failed; retrying")
                }
            }
        }
    }

    fn capi_applied(&self, meta: &PartialObjectMeta<DynamicObject>) -> String {
        let key = format!(
            "{}/{}",
            meta.namespace().unwrap_or_default(),
            meta.name_any()
        );
        let cluster = CapiCluster {
            labels: meta.labels().clone(),
            deleting: meta.metadata.deletion_timestamp.is_some(),
        };
        if let Ok(mut state) = self.state.lock() {
            state.capi.insert(key.clone(), cluster);
        }
        key
    }
}

/// `<namespace>/<cluster>` of a kubeconfig Secret: named `<cluster>-kubeconfig` and labelled
/// with the cluster's name.
fn member_name<K: ResourceExt>(meta: &K) -> Option<String> {
    let cluster = meta.labels().get(CLUSTER_NAME_LABEL)?;
    let name = meta.name_any();
    (name.strip_suffix(KUBECONFIG_SUFFIX) == Some(cluster.as_str()))
        .then(|| format!("{}/{cluster}", meta.namespace().unwrap_or_default()))
}

/// `spec.clusters.selector`, compiled; `None` when absent (no workload cluster) or invalid
/// (the manager's compile reports it).
fn cluster_selector(manager: &ClusterImagePullSecretManager) -> Option<Selector> {
    let selector = manager.spec.clusters.as_ref()?.selector.clone()?;
    Selector::try_from(selector).ok()
}

/// The served version of Cluster API's `Cluster`, if any.
async fn capi_cluster_resource(client: &Client) -> Option<ApiResource> {
    let group = discovery::group(client, CAPI_GROUP).await.ok()?;
    group
        .recommended_resources()
        .into_iter()
        .find(|(r, _)| r.kind == "Cluster")
        .map(|(r, _)| r)
}

/// The client configuration of a kubeconfig read from a Secret. Only what the kubeconfig
/// itself carries is used: credentials and certificates inline. A kubeconfig naming a file,
/// an exec plugin or an auth provider is refused, since whoever may write the Secret would
/// otherwise make cheiron run a command or send a file of its own Pod (its ServiceAccount
/// token) to a server of their choosing. Errors never quote the kubeconfig.
pub(super) async fn client_config(text: &str) -> Result<kube::Config, String> {
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|_| {
        format!("key {KUBECONFIG_KEY} of its kubeconfig Secret is not a kubeconfig")
    })?;
    refuse_outside_references(&kubeconfig)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|_| {
                "its kubeconfig has no usable current context, cluster and user".to_owned()
            })?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    Ok(config)
}

fn refuse_outside_references(kubeconfig: &Kubeconfig) -> Result<(), String> {
    for user in &kubeconfig.auth_infos {
        let Some(auth) = &user.auth_info else {
            continue;
        };
        let refused = [
            ("exec", auth.exec.is_some()),
            ("auth-provider", auth.auth_provider.is_some()),
            ("tokenFile", auth.token_file.is_some()),
            ("client-certificate", auth.client_certificate.is_some()),
            ("client-key", auth.client_key.is_some()),
        ];
        if let Some((field, _)) = refused.iter().find(|(_, set)| *set) {
            return Err(format!(
                "its kubeconfig's user {} uses {field}: only inline credentials are accepted (docs/fleet.md)",
                user.name
            ));
        }
    }
    for cluster in &kubeconfig.clusters {
        if cluster
            .cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            return Err(format!(
                "its kubeconfig's cluster {} uses certificate-authority (a file): only certificate-authority-data is accepted (docs/fleet.md)",
                cluster.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const INLINE: &str = "apiVersion: v1
kind: Config
clusters:
- name: w
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: the-token-value
contexts:
- name: w
  context: {cluster: w, user: u}
current-context: w
";

    #[tokio::test]
    async fn an_inline_kubeconfig_gives_a_client_configuration() {
        let config = client_config(INLINE).await;
        assert!(config.is_ok(), "{:?}", config.err());
    }

    #[tokio::test]
    async fn a_kubeconfig_that_runs_a_command_or_reads_a_file_is_refused() {
        for (field, replacement) in [
            (
                "exec",
                "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'cat /var/run/secrets/kubernetes.io/serviceaccount/token']}",
            ),
            (
                "tokenFile",
                "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
            ),
            (
                "client-certificate",
                "client-certificate: /etc/ssl/cert.pem",
            ),
            ("client-key", "client-key: /etc/ssl/key.pem"),
            ("auth-provider", "auth-provider: {name: oidc, config: {}}"),
        ] {
            let text = INLINE.replace("token: the-token-value", replacement);
            let err = client_config(&text).await.err();
            assert!(
                err.as_deref().is_some_and(|e| e.contains(field)),
                "{field}: {err:?}"
            );
        }
        let text = INLINE.replace(
            "insecure-skip-tls-verify: true",
            "certificate-authority: /etc/ssl/ca.pem",
        );
        let err = client_config(&text).await.err();
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("certificate-authority")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn an_error_never_quotes_the_kubeconfig() {
        for text in [
            "the-token-value: [",
            "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: the-token-value\n",
            "not: a\nkubeconfig: the-token-value\n",
        ] {
            let err = client_config(text).await.err().unwrap_or_default();
            assert!(!err.is_empty(), "{text}: accepted");
            assert!(!err.contains("the-token-value"), "{err}");
        }
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
