//! `cheiron controller` and `cheiron run`.

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use clap::Args;
use tokio_util::sync::CancellationToken;

use super::{
    admin::{AdminArgs, process_metrics},
    cluster::ClusterArgs,
    webhook::{ListArgs, ServeArgs},
};
use crate::{
    admin::{AdminState, ReadyFlag},
    audit::gauge::{self, Counted},
    controller::{self, Controller, ControllerError, ControllerOptions},
    credential::{CredentialProviders, ProviderSettings},
    fleet::{Fleet, FleetOptions},
    health::checks::Checks,
    metrics::Metrics,
    node,
    runtime::{
        API_REQUEST_DEADLINE, LeaderElection,
        pace::{self, MAX_API_REQUESTS_IN_FLIGHT, Pace},
    },
    source::ClusterSource,
    warnings::missing_secrets,
};

/// Controller flags, shared by `controller` and `run`.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Controller")]
pub struct ControllerArgs {
    /// Run the controller only while holding the Lease (default; safe with several replicas).
    /// `CHEIRON_LEADER_ELECTION=false` turns it off like --no-leader-election.
    #[arg(
        long,
        overrides_with = "no_leader_election",
        env = "CHEIRON_LEADER_ELECTION",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_value_t = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub leader_election: bool,
    /// Run the controller without leader election (a single replica only).
    #[arg(
        long,
        overrides_with = "leader_election",
        env = "CHEIRON_NO_LEADER_ELECTION"
    )]
    pub no_leader_election: bool,
    /// Namespace of the Lease (default: --pod-namespace, else the client's default namespace).
    #[arg(long, value_name = "NS", env = "CHEIRON_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// This replica's name: its leader-election identity and the reporting instance of its
    /// Events (in a cluster, the Pod name from the downward API; default: $HOSTNAME).
    #[arg(long, value_name = "NAME", env = "CHEIRON_POD_NAME")]
    pub pod_name: Option<String>,
    /// The namespace this replica runs in (in a cluster, from the downward API).
    #[arg(long, value_name = "NS", env = "CHEIRON_POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "cheiron-controller",
        env = "CHEIRON_LEADER_ELECTION_ID"
    )]
    pub leader_election_id: String,
    /// Seconds a Lease is valid without renewal; a standby takes over after this.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 15,
        env = "CHEIRON_LEASE_DURATION"
    )]
    pub lease_duration: u64,
    /// Seconds between full reconciles of every manager (repairs unannounced drift); at least 10.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 600,
        value_parser = clap::value_parser!(u64).range(10..),
        env = "CHEIRON_RESYNC"
    )]
    pub resync: u64,
    /// Most source Secrets watched at once for rotation; sources beyond it are re-read at
    /// each resync instead. Bounds what tenants' managers can make the controller hold.
    #[arg(
        long,
        value_name = "N",
        default_value_t = controller::source_watches::DEFAULT_MAX_SOURCE_WATCHES,
        env = "CHEIRON_MAX_SOURCE_WATCHES"
    )]
    pub max_source_watches: usize,
    /// Seconds after a Pod's creation before the controller checks the pull secrets the webhook
    /// found missing when it admitted the Pod, and puts a Warning Event (PullSecretMissing) on
    /// the Pod for those still missing.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = crate::warnings::missing_secrets::DEFAULT_GRACE.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..=86_400),
        env = "CHEIRON_MISSING_SECRET_GRACE"
    )]
    pub missing_secret_grace: u64,
    /// Where the node agents write their report Leases (docs/node.md): the node namespace of
    /// `cheiron manifests --node` and the chart (default: this replica's namespace).
    #[arg(long, value_name = "NS", env = "CHEIRON_NODE_NAMESPACE")]
    pub node_namespace: Option<String>,
    #[command(flatten)]
    pub credential_providers: CredentialProviderArgs,
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[command(flatten)]
    pub registry_checks: RegistryCheckArgs,
}

/// Registry-check flags: credential health (docs/credential-health.md).
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Registry checks (credential health)")]
pub struct RegistryCheckArgs {
    /// Check the credentials of every manager against their registries, not only of those
    /// with `spec.verify: Registry` (the controller then needs egress to the registries).
    #[arg(long, env = "CHEIRON_VERIFY_REGISTRIES")]
    pub verify_registries: bool,
    /// Seconds between two checks of one credential (each credential is also checked when it
    /// first appears or changes); spread by ±10 % per credential.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = crate::health::checks::DEFAULT_INTERVAL.as_secs(),
        value_parser = clap::value_parser!(u64).range(10..=604_800),
        env = "CHEIRON_REGISTRY_CHECK_INTERVAL"
    )]
    pub registry_check_interval: u64,
    /// Most registry checks running at once.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::health::checks::DEFAULT_CONCURRENCY,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64),
        env = "CHEIRON_REGISTRY_CHECK_CONCURRENCY"
    )]
    pub registry_check_concurrency: usize,
    /// Seconds one whole check (every connection and request of the handshake) may take; then
    /// the registry counts as unreachable.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = crate::health::registry::DEFAULT_CHECK_TIMEOUT.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..=300),
        env = "CHEIRON_REGISTRY_CHECK_TIMEOUT"
    )]
    pub registry_check_timeout: u64,
    /// Registry hosts the checks may contact (globs such as `*.example.com` or
    /// `registry.example.com:5000`; repeatable, or comma-separated). Without it, cluster
    /// managers' registries are checked whatever their host, and namespaced managers' not at
    /// all: a tenant must not make the controller probe hosts of its choosing.
    #[arg(
        long,
        value_name = "GLOB",
        value_delimiter = ',',
        env = "CHEIRON_REGISTRY_CHECK_HOSTS"
    )]
    pub registry_check_hosts: Vec<String>,
    /// PEM file of CA certificates the checks trust besides the built-in web roots (private
    /// registries).
    #[arg(long, value_name = "FILE", env = "CHEIRON_REGISTRY_CA_FILE")]
    pub registry_ca_file: Option<std::path::PathBuf>,
    /// Watch the kubelets' pull-failure Events and attribute the pulls a registry refused to
    /// the manager whose credential the Pod used (status.pullFailures, a PullRejected Event).
    #[arg(
        long,
        env = "CHEIRON_ATTRIBUTE_PULL_FAILURES",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_value_t = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub attribute_pull_failures: bool,
}

impl RegistryCheckArgs {
    /// The checks these flags ask for; a CA file that cannot be read or holds no certificate
    /// is refused here, before the controller starts.
    pub fn checks(&self, metrics: Arc<Metrics>) -> anyhow::Result<crate::health::checks::Checks> {
        use crate::health::{checks, registry};
        let ca_bundle =
            match &self.registry_ca_file {
                Some(path) => Some(std::fs::read(path).with_context(|| {
                    format!("--registry-ca-file: cannot read {}", path.display())
                })?),
                None => None,
            };
        let client = registry::RegistryClient::new(registry::ClientOptions {
            timeout: Duration::from_secs(self.registry_check_timeout),
            ca_bundle,
            ..registry::ClientOptions::default()
        })
        .context("--registry-ca-file")?;
        Ok(checks::Checks::new(
            checks::CheckOptions {
                all_managers: self.verify_registries,
                interval: Duration::from_secs(self.registry_check_interval),
                concurrency: self.registry_check_concurrency,
                hosts: self.registry_check_hosts.clone(),
            },
            Arc::new(client),
            Some(metrics),
        ))
    }
}

/// Workload-cluster flags (docs/fleet.md).
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Workload clusters (--fleet)")]
pub struct FleetArgs {
    /// Act in workload clusters too: ClusterImagePullSecretManagers whose spec.clusters
    /// selects them reach the clusters whose kubeconfig Secrets (Cluster API's
    /// `<cluster>-kubeconfig`) this controller may read (docs/fleet.md).
    #[arg(long, env = "CHEIRON_FLEET")]
    pub fleet: bool,
    /// With --fleet: read kubeconfig Secrets and Cluster API Clusters in this namespace
    /// (repeatable; default: cheiron's own namespace, never every namespace). Whoever may write
    /// Secrets or Clusters there can enrol a workload cluster: list only namespaces that only
    /// administrators write.
    #[arg(long, value_name = "NAMESPACE", requires = "fleet")]
    pub fleet_namespace: Vec<String>,
    /// With --fleet: a kubeconfig Secret's own labels select its cluster when no Cluster API
    /// Cluster of that name is in its namespace (off: only Clusters select).
    #[arg(
        long,
        requires = "fleet",
        env = "CHEIRON_FLEET_SELECT_BY_SECRET_LABELS"
    )]
    pub fleet_select_by_secret_labels: bool,
    /// With --fleet: accept kubeconfigs that set insecure-skip-tls-verify or name a plain
    /// http:// server (refused by default).
    #[arg(long, requires = "fleet", env = "CHEIRON_FLEET_ALLOW_INSECURE")]
    pub fleet_allow_insecure: bool,
    /// With --fleet: most workload clusters connected to at once; those wanted beyond it are
    /// reported in status.clusters, not connected to.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::fleet::DEFAULT_MAX_CLUSTERS,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000),
        requires = "fleet",
        env = "CHEIRON_FLEET_MAX_CLUSTERS"
    )]
    pub fleet_max_clusters: usize,
    /// With --fleet: most bytes of one answer of a workload cluster (a list page, a watch
    /// stream, which is then resumed); a longer one fails.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = crate::fleet::DEFAULT_MAX_RESPONSE_BYTES,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(65_536..=1_073_741_824),
        requires = "fleet",
        env = "CHEIRON_FLEET_MAX_RESPONSE_BYTES"
    )]
    pub fleet_max_response_bytes: usize,
    /// With --fleet: most pages of one list of a workload cluster (500 objects a page); the
    /// page past it is not asked for, and the cluster is reported until the list completes.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::fleet::DEFAULT_MAX_LIST_PAGES,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000),
        requires = "fleet",
        env = "CHEIRON_FLEET_MAX_LIST_PAGES"
    )]
    pub fleet_max_list_pages: usize,
    /// With --fleet: how long after a ClusterImagePullSecretManager's deletion its cleanup in
    /// a workload cluster that does not answer (or refuses) is retried; then its finalizer is
    /// released with a Warning Event naming the clusters where copies were left.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = crate::fleet::DEFAULT_CLEANUP_TIMEOUT.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..=604_800),
        requires = "fleet",
        env = "CHEIRON_FLEET_CLEANUP_TIMEOUT"
    )]
    pub fleet_cleanup_timeout: u64,
}

impl FleetArgs {
    /// The fleet's options; without --fleet-namespace, `own_namespace` (never every
    /// namespace).
    pub fn options(self, own_namespace: Option<&String>) -> crate::fleet::FleetOptions {
        let Self {
            fleet,
            fleet_namespace,
            fleet_select_by_secret_labels,
            fleet_allow_insecure,
            fleet_max_clusters,
            fleet_max_response_bytes,
            fleet_max_list_pages,
            fleet_cleanup_timeout,
        } = self;
        crate::fleet::FleetOptions {
            enabled: fleet,
            namespaces: if fleet_namespace.is_empty() {
                own_namespace.into_iter().cloned().collect()
            } else {
                fleet_namespace
            },
            cleanup_timeout: Duration::from_secs(fleet_cleanup_timeout),
            select_by_secret_labels: fleet_select_by_secret_labels,
            allow_insecure: fleet_allow_insecure,
            max_clusters: fleet_max_clusters,
            max_response_bytes: fleet_max_response_bytes,
            max_list_pages: fleet_max_list_pages,
        }
    }
}

/// Credential-provider flags: the kubelet's exec plugins, run by the controller
/// (docs/credential-providers.md).
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Credential providers")]
pub struct CredentialProviderArgs {
    /// The kubelet's CredentialProviderConfig (a file, or a directory of .json/.yaml/.yml
    /// files), as the kubelet's --image-credential-provider-config. Without it, entries with
    /// credentialProvider report CredentialProviderFailed.
    #[arg(
        long,
        value_name = "FILE",
        requires = "credential_provider_bin_dir",
        env = "CHEIRON_CREDENTIAL_PROVIDER_CONFIG"
    )]
    pub credential_provider_config: Option<std::path::PathBuf>,
    /// Where the plugins are, as the kubelet's --image-credential-provider-bin-dir.
    #[arg(long, value_name = "DIR", env = "CHEIRON_CREDENTIAL_PROVIDER_BIN_DIR")]
    pub credential_provider_bin_dir: Option<std::path::PathBuf>,
    /// Seconds a plugin may run before it is killed.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = crate::credential::DEFAULT_PLUGIN_TIMEOUT.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..=600),
        env = "CHEIRON_CREDENTIAL_PROVIDER_TIMEOUT"
    )]
    pub credential_provider_timeout: u64,
    /// Most bytes read from a plugin's stdout, and from its stderr; more fails the call.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = crate::credential::DEFAULT_MAX_PLUGIN_OUTPUT,
        env = "CHEIRON_CREDENTIAL_PROVIDER_MAX_OUTPUT"
    )]
    pub credential_provider_max_output: usize,
    /// Most plugin calls running at once, over all providers; more wait their turn. Reconciles
    /// never wait for a plugin, so this bounds the controller's processes, not its work.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::credential::DEFAULT_MAX_CONCURRENT_PLUGINS,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256),
        env = "CHEIRON_CREDENTIAL_PROVIDER_MAX_CONCURRENT"
    )]
    pub credential_provider_max_concurrent: usize,
}

impl CredentialProviderArgs {
    /// The settings, with the config read and every plugin found (one-line error otherwise).
    pub fn settings(
        self,
        own_namespace: Option<String>,
    ) -> anyhow::Result<crate::credential::ProviderSettings> {
        let Self {
            credential_provider_config,
            credential_provider_bin_dir,
            credential_provider_timeout,
            credential_provider_max_output,
            credential_provider_max_concurrent,
        } = self;
        let (config, bin_dir) = match (credential_provider_config, credential_provider_bin_dir) {
            (Some(config), Some(bin_dir)) => (
                crate::credential::ProviderConfig::load(&config, &bin_dir)?,
                bin_dir,
            ),
            _ => Default::default(),
        };
        Ok(crate::credential::ProviderSettings {
            config,
            bin_dir,
            limits: crate::credential::ExecLimits {
                timeout: Duration::from_secs(credential_provider_timeout),
                max_output: credential_provider_max_output,
            },
            policy: crate::credential::RefreshPolicy::default(),
            own_namespace,
            max_concurrent: credential_provider_max_concurrent,
        })
    }
}

impl ControllerArgs {
    /// Runs the controller (under leader election unless disabled) until `shutdown`.
    pub async fn run(
        self,
        client: kube::Client,
        metrics: Arc<Metrics>,
        ready: Arc<ReadyFlag>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        match self.prepare(&client, &metrics)? {
            (leading, None) => {
                metrics.operations.leader.set(1);
                lead_within_grace(leading, ready, shutdown).await?;
                Ok(())
            }
            (leading, Some(election)) => {
                lead_while_elected(election, client, leading, ready, shutdown).await
            }
        }
    }

    /// What the leader runs, and the election that makes a replica the leader (`None` when
    /// leader election is disabled).
    fn prepare(
        self,
        client: &kube::Client,
        metrics: &Arc<Metrics>,
    ) -> anyhow::Result<(Leading, Option<LeaderElection>)> {
        let Self {
            leader_election,
            no_leader_election,
            leader_election_namespace,
            pod_name,
            pod_namespace,
            leader_election_id,
            lease_duration,
            resync,
            max_source_watches,
            missing_secret_grace,
            credential_providers,
            fleet,
            node_namespace,
            registry_checks,
        } = self;
        let instance = pod_name
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "cheiron".to_owned());
        let own_namespace = pod_namespace
            .clone()
            .or_else(|| leader_election_namespace.clone())
            .or_else(|| Some(client.default_namespace().to_owned()));
        let fleet = fleet.options(own_namespace.as_ref());
        let node_namespace = node_namespace
            .or_else(|| own_namespace.clone())
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let options = ControllerOptions {
            resync: Duration::from_secs(resync),
            instance,
            max_source_watches,
            ..ControllerOptions::default()
        };
        let credentials = credential_providers.settings(own_namespace)?;
        let health = registry_checks.checks(metrics.clone())?;
        let attribute_pull_failures = registry_checks.attribute_pull_failures;
        let identity = format!("{}-{}", options.instance, std::process::id());
        let leading = Leading {
            node_namespace,
            client: client.clone(),
            controller: options,
            credentials,
            fleet,
            missing_secret_grace: Duration::from_secs(missing_secret_grace),
            metrics: metrics.clone(),
            health,
            attribute_pull_failures,
        };
        if no_leader_election || !leader_election {
            return Ok((leading, None));
        }
        let namespace = leader_election_namespace
            .or(pod_namespace)
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let election = LeaderElection {
            namespace,
            name: leader_election_id,
            identity,
            lease_duration: Duration::from_secs(lease_duration),
        };
        Ok((leading, Some(election)))
    }
}

/// Stands by as a ready replica, leads whenever `election` is won, and stands by again when
/// the term ends, until `shutdown`. The error of a term that failed is the result.
async fn lead_while_elected(
    election: LeaderElection,
    client: kube::Client,
    leading: Leading,
    ready: Arc<ReadyFlag>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let errors = Arc::new(std::sync::Mutex::new(None));
    // A standby replica is doing its job.
    ready.set(true);
    election
        .run(client, shutdown, |term| {
            let (leading, ready, errors) = (leading.clone(), ready.clone(), errors.clone());
            async move {
                // Back to standing by when the term ends, also when the election drops the
                // work because it did not stop in time.
                let _standing_by = StandingBy {
                    metrics: leading.metrics.clone(),
                    ready: ready.clone(),
                };
                leading.metrics.operations.leader.set(1);
                if let Err(e) = lead_within_grace(leading, ready, term).await {
                    tracing::error!(error = %e, "controller failed");
                    if let Ok(mut slot) = errors.lock() {
                        *slot = Some(e);
                    }
                }
            }
        })
        .await;
    let failed = errors.lock().ok().and_then(|mut e| e.take());
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// A replica's gauges and readiness as a standby, set when a term ends however it ends.
struct StandingBy {
    metrics: Arc<Metrics>,
    ready: Arc<ReadyFlag>,
}

impl Drop for StandingBy {
    fn drop(&mut self) {
        self.metrics.operations.leader.set(0);
        self.metrics.operations.managers.clear();
        self.metrics.audit_findings.set(0);
        // A standby replica is doing its job.
        self.ready.set(true);
    }
}

/// What the leader runs: the controller and the capabilities around it.
#[derive(Clone)]
struct Leading {
    client: kube::Client,
    controller: ControllerOptions,
    credentials: ProviderSettings,
    fleet: FleetOptions,
    /// Where mode Node managers' credentials go and the node agents report (docs/node.md).
    node_namespace: String,
    missing_secret_grace: Duration,
    metrics: Arc<Metrics>,
    /// The registry checks (docs/credential-health.md); they keep their results across terms.
    health: Checks,
    /// Watch the kubelets' pull failures (docs/credential-health.md).
    attribute_pull_failures: bool,
}

/// How long the reconciles in progress may take to finish once the controller is told to stop
/// (SIGTERM, or a term as leader ending), before they are dropped: a reconcile waiting for an
/// apiserver that does not answer must not hold up the exit past the Pod's grace (30 s in the
/// installs; the Lease's release follows, within 5 s). Dropping one is safe: every write is
/// guarded by a precondition, and the next leader reconciles every manager again.
const WORK_GRACE: Duration = Duration::from_secs(10);

/// [`lead`] until `stop`; then the reconciles in progress get [`WORK_GRACE`] to finish.
async fn lead_within_grace(
    leading: Leading,
    ready: Arc<ReadyFlag>,
    stop: CancellationToken,
) -> Result<(), ControllerError> {
    let working = lead(leading, ready, stop.clone());
    tokio::pin!(working);
    tokio::select! {
        result = &mut working => return result,
        () = stop.cancelled() => {}
    }
    match tokio::time::timeout(WORK_GRACE, working).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!(
                grace = ?WORK_GRACE,
                "reconciles still in progress when the controller stopped; dropped"
            );
            Ok(())
        }
    }
}

/// The composition root of one term as leader: builds the controller, starts each capability
/// around it with only what it reads (the credential providers, the node agents' hand-off,
/// the registry checks, the fleet, the node status, the audit gauge, the missing-secret warnings), and runs the controller until `shutdown`. The capabilities stop
/// with it.
async fn lead(
    leading: Leading,
    ready: Arc<ReadyFlag>,
    shutdown: CancellationToken,
) -> Result<(), ControllerError> {
    let Leading {
        client,
        controller,
        credentials,
        fleet,
        node_namespace,
        missing_secret_grace,
        metrics,
        health,
        attribute_pull_failures,
    } = leading;
    let resync = controller.resync;
    let mut controller = Controller::new(client.clone(), controller, metrics.clone()).await?;
    let reporter = controller.reporter();
    controller = controller.with_credentials(CredentialProviders::new(
        credentials,
        Some(client.clone()),
        Some(metrics.clone()),
    ));
    controller = controller.with_nodes(Arc::new(node::handoff::Handoff::new(
        client.clone(),
        node_namespace.clone(),
    )));
    controller = controller.with_health(Arc::new(health.clone()));
    // Aborted when the term ends, whichever way.
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(health.clone().run());
    if fleet.enabled {
        let fleet = Arc::new(Fleet::new(
            client.clone(),
            fleet,
            metrics.clone(),
            controller.triggers(),
            controller.managers().cluster,
            reporter.clone(),
        ));
        tasks.spawn(fleet.clone().run());
        controller = controller.with_other_clusters(fleet);
    }
    tasks.spawn(node::status::keep(
        client.clone(),
        controller.managers().cluster,
        node_namespace,
        reporter.clone(),
    ));
    let caches = controller.caches();
    let counted = Counted {
        managers: controller.managers(),
        namespaces: caches.namespaces,
        service_accounts: caches.service_accounts,
    };
    tasks.spawn(after(
        controller.synced(),
        gauge::keep(counted, metrics.clone(), gauge::FIRST_COUNT_AFTER, resync),
    ));
    if attribute_pull_failures {
        tasks.spawn(after(
            controller.synced(),
            crate::health::pulls::watch::watch(
                client.clone(),
                health,
                controller.managers(),
                controller.recorder(),
                metrics.clone(),
            ),
        ));
    }
    tasks.spawn(after(
        controller.synced(),
        missing_secrets::watch(client, controller.recorder(), missing_secret_grace),
    ));
    controller.run(ready, shutdown).await
}

/// Runs `then` once `first` is done.
async fn after(first: impl Future<Output = ()>, then: impl Future<Output = ()>) {
    first.await;
    then.await;
}

/// What a server says when it finds no cluster.
const NO_CLUSTER: &str =
    "cannot reach the cluster (set KUBECONFIG or --kubeconfig, or run in a Pod)";

/// The controller's client: its requests paced to what the apiserver serves
/// ([`crate::runtime::pace`]) and each bounded in time ([`crate::runtime::deadline`]).
async fn paced_client(cluster: &ClusterArgs) -> anyhow::Result<kube::Client> {
    let config = cluster.config(NO_CLUSTER).await?;
    let pace = Arc::new(Pace::new(MAX_API_REQUESTS_IN_FLIGHT));
    pace::paced_client(config, pace, API_REQUEST_DEADLINE)
        .context("cannot build the Kubernetes client")
}

/// Arguments of `cheiron controller`.
#[derive(Args, Debug, Clone)]
pub struct ControllerCommand {
    #[command(flatten)]
    admin: AdminArgs,
    #[command(flatten)]
    controller: ControllerArgs,
}

impl ControllerCommand {
    /// Runs the controller and its admin server until `shutdown`.
    pub async fn run(
        self,
        cluster: &ClusterArgs,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let Self { admin, controller } = self;
        let client = paced_client(cluster).await?;
        // Before the first log line: a cluster without the CRDs is one line on stderr.
        crate::api::ensure_crds(&client).await?;
        let admin = admin.resolve(Some(&client)).await?;
        let (admin_listen, https) = (admin.listen, admin.tls_cert_dir.is_some());
        let metrics = Arc::new(process_metrics());
        let ready = Arc::new(ReadyFlag::default());
        let state = AdminState::new(ready.clone(), metrics.clone()).with_shutdown(shutdown.clone());
        let admin_server = tokio::spawn(admin.serve(state).await?);
        tracing::info!(%admin_listen, https, "controller admin server listening");
        let result = controller
            .run(client, metrics, ready, shutdown.clone())
            .await;
        shutdown.cancel();
        let _ = admin_server.await;
        result
    }
}

/// Arguments of `cheiron run`: the webhook on every replica, the controller on the leader.
/// Cluster mode only, so it has no `--from`.
#[derive(Args, Debug, Clone)]
pub struct RunCommand {
    #[command(flatten)]
    webhook: ServeArgs,
    #[command(flatten)]
    lists: ListArgs,
    #[command(flatten)]
    controller: ControllerArgs,
}

impl RunCommand {
    /// Runs both until `shutdown`.
    pub async fn run(
        self,
        cluster: &ClusterArgs,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let Self {
            webhook,
            lists,
            controller,
        } = self;
        let client = cluster.client(NO_CLUSTER).await?;
        // Bound first, before the controller and the source start and log: a failure to
        // listen is then one line.
        let prepared = webhook.prepare(Some(&client)).await?;
        let metrics = Arc::new(process_metrics());
        let ready = Arc::new(ReadyFlag::default());
        let controller_task = {
            // The webhook's reads are not paced behind the controller's writes.
            let client = paced_client(cluster).await?;
            let (metrics, shutdown) = (metrics.clone(), shutdown.clone());
            tokio::spawn(async move { controller.run(client, metrics, ready, shutdown).await })
        };
        let served = async {
            let (source, watches) =
                ClusterSource::start(client.clone(), lists.initial_list).await?;
            tokio::spawn(watches);
            prepared.serve(source, metrics, shutdown.clone()).await?;
            anyhow::Ok(())
        }
        .await;
        shutdown.cancel();
        let controlled = controller_task.await.context("controller task")?;
        served.and(controlled)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::ControllerArgs;

    #[derive(Parser)]
    struct Test {
        #[command(flatten)]
        args: ControllerArgs,
    }

    fn elected(argv: &[&str]) -> Result<bool, clap::Error> {
        let args = Test::try_parse_from(std::iter::once("test").chain(argv.iter().copied()))?.args;
        Ok(args.leader_election && !args.no_leader_election)
    }

    #[test]
    fn resync_below_ten_seconds_is_refused_not_clamped() {
        let parse = |v: &str| Test::try_parse_from(["test", "--resync", v]).map(|t| t.args.resync);
        assert_eq!(parse("10").ok(), Some(10));
        let error = parse("5").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("--resync"), "{error}");
    }

    #[test]
    fn leader_election_is_on_by_default_and_the_last_flag_wins() -> Result<(), clap::Error> {
        assert!(elected(&[])?);
        assert!(!elected(&["--no-leader-election"])?);
        assert!(elected(&["--no-leader-election", "--leader-election"])?);
        assert!(!elected(&["--leader-election", "--no-leader-election"])?);
        assert!(!elected(&["--leader-election=false"])?);
        Ok(())
    }
}
