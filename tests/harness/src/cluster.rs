//! The one cluster of this test binary: control plane, CRDs, one shared `cheiron webhook` in
//! cluster mode (as `admin`, or with the split install's rights:
//! [`ControlPlaneOptions::split_webhook`]) and its registration, started on first use and
//! checked end to end (a canary ServiceAccount is mutated through the apiserver) before any
//! test runs.

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
    time::Duration,
};

use cheiron::install::{WebhookClient, WebhookRegistration};
use k8s_openapi::api::rbac::v1::Subject;
use kube::Client;

use super::{
    Cheiron, Result, Scenario,
    control_plane::{ControlPlane, ControlPlaneOptions, WEBHOOK_USER, apiserver_log_lines},
    objects::grant_cluster_role,
    process::log_tail,
    webhook::{self, WebhookCertificates, WebhookProcess},
};

/// `metadata.name` of the shared webhook's MutatingWebhookConfiguration.
pub const WEBHOOK_CONFIGURATION: &str = "cheiron-e2e";
/// cheiron's own namespace as far as the registration is concerned (never sent to the webhook).
pub const CHEIRON_NAMESPACE: &str = "cheiron-system";

/// The running cluster. Lives in a static and is never dropped: the process watchdog stops
/// its processes when the test binary exits.
pub struct Cluster {
    /// Files and logs of this run (kept until the next run starts).
    pub dir: PathBuf,
    cheiron: Cheiron,
    control_plane: ControlPlane,
    certificates: WebhookCertificates,
    _webhook: WebhookProcess,
}

impl Cluster {
    /// The cheiron it runs, and every process a test starts on it runs.
    pub fn cheiron(&self) -> Cheiron {
        self.cheiron
    }

    /// The client configuration of `admin` (`system:masters`); build a `Client` per test,
    /// since a `Client` is bound to the runtime it was first used on.
    pub fn admin_config(&self) -> kube::Config {
        self.control_plane.admin_config.clone()
    }

    /// kubeconfig of `admin`, for the cheiron processes a test starts itself (the controller
    /// tests' [`super::controller`]).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.control_plane.admin_kubeconfig
    }

    /// kubeconfig of the group-less user the readiness test grants rights to.
    pub fn limited_kubeconfig(&self) -> &Path {
        &self.control_plane.limited_kubeconfig
    }

    /// The CA that signed every webhook serving certificate (PEM).
    pub fn webhook_ca_pem(&self) -> &str {
        &self.certificates.ca_pem
    }

    /// `tls.crt` + `tls.key` for IP 127.0.0.1.
    pub fn webhook_tls_dir(&self) -> &Path {
        &self.certificates.dir
    }

    /// Starts a workload cluster `name` on this cluster's etcd (see [`super::workload`]).
    pub async fn start_workload(&self, name: &str) -> Result<super::workload::WorkloadCluster> {
        self.control_plane
            .start_workload(&self.dir.join("workloads"), name)
            .await
    }

    /// The apiserver's log file.
    pub fn apiserver_log(&self) -> &Path {
        &self.control_plane.apiserver_log
    }

    async fn start(cheiron: Cheiron, dir: PathBuf) -> Result<Self> {
        let options = OPTIONS.get().cloned().unwrap_or_default();
        let split_webhook = options.split_webhook;
        let control_plane = ControlPlane::start_with(&dir, options).await?;
        let client = Client::try_from(control_plane.admin_config.clone())?;
        webhook::install_crds(cheiron, &client).await?;
        let webhook_kubeconfig = if split_webhook {
            grant_split_webhook_rights(&client).await?;
            &control_plane.webhook_kubeconfig
        } else {
            &control_plane.admin_kubeconfig
        };

        let certificates = WebhookCertificates::generate(&dir.join("webhook-tls"))?;
        let mut webhook = WebhookProcess::start(
            cheiron,
            "cheiron webhook",
            webhook_kubeconfig,
            &certificates.dir,
            &dir.join("cheiron-webhook.log"),
        )?;
        webhook
            .wait_for_admin_status("/readyz", 200, Duration::from_secs(30))
            .await?;

        let mut registration = WebhookRegistration::new(
            WEBHOOK_CONFIGURATION,
            WebhookClient::Url(webhook.url()),
            CHEIRON_NAMESPACE,
        );
        registration.ca_bundle = Some(certificates.ca_pem.clone().into_bytes());
        webhook::register(&client, &registration.configuration()).await?;

        if let Err(e) = canary(client).await {
            webhook.check_running()?;
            return Err(format!(
                "the apiserver does not apply cheiron's mutations: {e}\n\
                 --- kube-apiserver log lines mentioning webhooks ({}) ---\n{}\n\
                 --- last 40 lines of {} ---\n{}",
                control_plane.apiserver_log.display(),
                apiserver_log_lines(&control_plane.apiserver_log, "webhook", 20),
                webhook.log().display(),
                log_tail(webhook.log(), 40),
            )
            .into());
        }

        Ok(Self {
            dir,
            cheiron,
            control_plane,
            certificates,
            _webhook: webhook,
        })
    }
}

/// Grants [`WEBHOOK_USER`] what the split install's webhook may do, and nothing else.
async fn grant_split_webhook_rights(client: &Client) -> Result<()> {
    grant_cluster_role(
        client,
        "cheiron-harness-split-webhook",
        cheiron::install::rbac::webhook_rules(),
        Subject {
            kind: "User".to_owned(),
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            name: WEBHOOK_USER.to_owned(),
            namespace: None,
        },
    )
    .await
}

/// Proves the whole path works before tests rely on it: the apiserver has loaded the
/// registration, calls the webhook, and applies its patch to a (dry-run) ServiceAccount.
async fn canary(client: Client) -> Result<()> {
    let scenario = Scenario::with_client(client, "canary");
    let ns = scenario.create_namespace(&[], &[]).await?;
    scenario
        .apply_manager(&format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: canary
  namespace: {ns}
spec:
  secrets:
    - existingSecretRef:
        name: canary-pull
"
        ))
        .await?;
    scenario
        .until_new_service_account_gets(&ns, "canary", &["canary-pull"])
        .await
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

/// The cluster running `cheiron`, started on the first call (which blocks until it is up or has
/// failed; every later call returns the same outcome).
pub fn start(cheiron: Cheiron) -> Result<&'static Cluster> {
    // A cluster started without options is started with the defaults, whoever asks later.
    OPTIONS.get_or_init(ControlPlaneOptions::default);
    let cluster = CLUSTER.get_or_init(|| start_on_own_thread("cluster", cheiron, Cluster::start));
    outcome(cluster)
}

/// What the cluster's control plane is started with: fixed by the first [`start`] or
/// [`start_with`] of the process.
static OPTIONS: OnceLock<ControlPlaneOptions> = OnceLock::new();

/// [`start`], with a control plane started with `options`; refused when the cluster of this
/// process is started, or is being started, with others.
pub fn start_with(cheiron: Cheiron, options: ControlPlaneOptions) -> Result<&'static Cluster> {
    let chosen = OPTIONS.get_or_init(|| options.clone());
    if *chosen != options {
        return Err(format!(
            "the cluster of this process is started with {chosen:?}, not {options:?}"
        )
        .into());
    }
    start(cheiron)
}

/// Runs `start` in a fresh run directory on a thread of its own, with a runtime of its own (the
/// calling test's runtime ends with the test, and what `start` spawns must outlive it), and
/// returns its outcome, naming the run directory on failure. `what` names the thread.
pub(crate) fn start_on_own_thread<T, Fut>(
    what: &str,
    cheiron: Cheiron,
    start: fn(Cheiron, PathBuf) -> Fut,
) -> Result<T, String>
where
    T: Send + 'static,
    Fut: std::future::Future<Output = Result<T>> + 'static,
{
    let started = std::thread::Builder::new()
        .name(format!("{what}-start"))
        .spawn(move || -> Result<T, String> {
            let dir =
                run_dir(cheiron).map_err(|e| format!("cannot create the run directory: {e}"))?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime
                .block_on(start(cheiron, dir.clone()))
                .map_err(|e| format!("{e}\n(files and logs of this run: {})", dir.display()))
        });
    match started {
        Ok(handle) => handle
            .join()
            .unwrap_or_else(|_| Err(format!("the {what} start-up thread panicked"))),
        Err(e) => Err(format!("cannot spawn the {what} start-up thread: {e}")),
    }
}

/// The cluster a [`Scenario::new`] has started.
pub fn started() -> Result<&'static Cluster> {
    let cluster = CLUSTER
        .get()
        .ok_or("no test has started the end-to-end test cluster: create a Scenario first")?;
    outcome(cluster)
}

fn outcome(cluster: &'static Result<Cluster, String>) -> Result<&'static Cluster> {
    cluster
        .as_ref()
        .map_err(|e| format!("the end-to-end test cluster did not start: {e}").into())
}

/// A fresh `run-<pid>-XXXXXX` directory under `$CARGO_TARGET_TMPDIR/cheiron-e2e/`. Directories
/// of earlier runs whose process is gone are removed first, so the logs of the last run stay
/// available for inspection until the next one.
pub fn run_dir(cheiron: Cheiron) -> Result<PathBuf> {
    let base = Path::new(cheiron.target_tmpdir).join("cheiron-e2e");
    std::fs::create_dir_all(&base)?;
    for entry in std::fs::read_dir(&base)?.flatten() {
        let name = entry.file_name();
        let owner = name
            .to_str()
            .and_then(|n| n.strip_prefix("run-"))
            .and_then(|n| n.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = owner
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = tempfile::Builder::new()
        .prefix(&format!("run-{}-", std::process::id()))
        .tempdir_in(&base)?
        .keep();
    Ok(dir)
}
