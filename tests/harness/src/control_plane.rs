//! etcd, kube-apiserver and kube-controller-manager, started with the command lines verified in
//! `tests/k8s/README.md`, on free loopback ports, in a fresh directory.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use base64::Engine;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{
    Api, Client,
    config::{KubeConfigOptions, Kubeconfig},
};

use super::{
    Result,
    process::{Process, discard_at_exit, log_tail},
};

/// The user without groups whose rights the readiness test grants piece by piece.
pub const LIMITED_USER: &str = "cheiron-limited";
/// The user the shared webhook runs as under [`ControlPlaneOptions::split_webhook`].
pub const WEBHOOK_USER: &str = "cheiron-webhook";

const ETCD_READY: Duration = Duration::from_secs(30);
const APISERVER_READY: Duration = Duration::from_secs(60);
const CONTROLLER_MANAGER_READY: Duration = Duration::from_secs(30);

/// The Service CIDR (`--service-cluster-ip-range`).
const SERVICE_CIDR: &str = "10.0.0.0/24";
/// The first address of [`SERVICE_CIDR`]: the `kubernetes` Service's ClusterIP, which Pods
/// reach the apiserver at (`KUBERNETES_SERVICE_HOST`, port 443) and which the apiserver's
/// self-signed serving certificate names.
pub const KUBERNETES_SERVICE_IP: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 0, 0, 1);

/// The controllers kube-controller-manager runs by default here. deployment and replicaset:
/// Pods created from a Deployment's template, as in a GitOps rollout (tests/controller/gitops.rs);
/// clusterrole-aggregation: cheiron's ClusterRoles aggregated into admin, edit and view
/// (tests/install/rbac.rs).
const CONTROLLERS: &str = "garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,deployment-controller,replicaset-controller,clusterrole-aggregation-controller";

/// What a test may change about the control plane it starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControlPlaneOptions {
    /// Extra kube-apiserver flags, after the defaults, e.g. `--max-requests-inflight=10`. A
    /// `--flag=value` here replaces the default `--flag=...` (say `--authorization-mode`).
    pub apiserver_args: Vec<String>,
    /// kube-controller-manager controllers to run besides `CONTROLLERS`, e.g.
    /// `daemonset-controller`.
    pub extra_controllers: Vec<String>,
    /// Controllers of `CONTROLLERS` not to run, e.g. `serviceaccount-controller` for a
    /// benchmark that creates 100 000 namespaces and every ServiceAccount itself (kcm creates
    /// `default` ServiceAccounts at about 20 a second here, and would still be at it while the
    /// benchmark measures). Without `serviceaccount-controller` the start does not wait for
    /// `default/default`, and no namespace gets a `default` ServiceAccount by itself.
    pub without_controllers: Vec<String>,
    /// Runs the cluster's shared `cheiron webhook` as the split install's webhook (docs/install.md,
    /// "What each identity can do"): as [`WEBHOOK_USER`], granted only
    /// `cheiron::install::rbac::webhook_rules`, so that it cannot list Secrets, keeps no watch
    /// of cheiron's copies and gives no missing-Secret warning. Without it the webhook runs as
    /// `admin` and has the combined install's view. For the benchmarks that measure what a
    /// copy's watches cost (BENCHMARKS.md).
    pub split_webhook: bool,
}

/// How a process of the control plane is started again after a test stopped it.
#[derive(Debug)]
pub(crate) struct Launch {
    pub(crate) name: &'static str,
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) log: PathBuf,
    pub(crate) starts: u32,
}

impl Launch {
    /// Spawns it; the first start logs to `<name>.log`, the n-th to `<name>-<n>.log`.
    pub(crate) fn spawn(&mut self) -> Result<Process> {
        self.starts += 1;
        let log = if self.starts == 1 {
            self.log.clone()
        } else {
            self.log
                .with_file_name(format!("{}-{}.log", self.name, self.starts))
        };
        Process::spawn(
            self.name,
            Command::new(&self.program).args(&self.args),
            &log,
        )
    }
}

/// A running control plane. Dropping it stops the processes (kcm, apiserver, etcd).
pub struct ControlPlane {
    /// kubeconfig of `admin` (`system:masters`).
    pub admin_kubeconfig: PathBuf,
    /// kubeconfig of [`LIMITED_USER`] (no groups, no rights until a test grants some).
    pub limited_kubeconfig: PathBuf,
    /// kubeconfig of [`WEBHOOK_USER`], who has no rights until granted some.
    pub webhook_kubeconfig: PathBuf,
    /// The client configuration of `admin`.
    pub admin_config: kube::Config,
    /// The apiserver's log file.
    pub apiserver_log: PathBuf,
    /// `https://127.0.0.1:PORT`.
    pub server: String,
    admin_token: String,
    pub(crate) etcd_url: String,
    /// Where etcd and kube-apiserver were found.
    pub(crate) bin: PathBuf,
    apiserver_launch: Launch,
    etcd_launch: Launch,
    // Dropped in field order: kcm, then the apiserver, then etcd.
    _controller_manager: Process,
    apiserver: Option<Process>,
    etcd: Option<Process>,
}

impl ControlPlane {
    /// Builds (or finds) the binaries and starts the three processes in `dir`, returning once
    /// the apiserver is ready and the controllers work (`default` ServiceAccount exists).
    pub async fn start(dir: &Path) -> Result<Self> {
        Self::start_with(dir, ControlPlaneOptions::default()).await
    }

    /// [`ControlPlane::start`] with `options`.
    pub async fn start_with(dir: &Path, options: ControlPlaneOptions) -> Result<Self> {
        let bin = assets()?;
        let [etcd_port, peer_port, api_port, kcm_port] = free_ports()?;
        let admin_token = random_token()?;
        let kcm_token = random_token()?;
        let limited_token = random_token()?;
        let webhook_token = random_token()?;

        // ECDSA P-256 from rcgen. The apiserver's --service-account-key-file reads RSA/EC
        // private keys only in PKCS#1/SEC1 form, so rcgen's PKCS#8 key goes to the signing-key
        // flags and its SPKI public key to --service-account-key-file.
        let sa_key = rcgen::KeyPair::generate()?;
        let sa_private = dir.join("sa.key");
        let sa_public = dir.join("sa.pub");
        std::fs::write(&sa_private, sa_key.serialize_pem())?;
        std::fs::write(&sa_public, sa_key.public_key_pem())?;
        let tokens = dir.join("tokens.csv");
        // kcm needs system:masters because --use-service-account-credentials=false.
        std::fs::write(
            &tokens,
            format!(
                "{admin_token},admin,admin,\"system:masters\"\n\
                 {kcm_token},system:kube-controller-manager,system:kube-controller-manager,\"system:masters\"\n\
                 {limited_token},{LIMITED_USER},{LIMITED_USER}\n\
                 {webhook_token},{WEBHOOK_USER},{WEBHOOK_USER}\n"
            ),
        )?;

        let http = insecure_http()?;

        let etcd_data = dir.join("etcd-data");
        discard_at_exit(&etcd_data)?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut etcd_launch = Launch {
            name: "etcd",
            program: bin.join("etcd"),
            args: vec![
                "--name=default".to_owned(),
                format!("--data-dir={}", etcd_data.display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                "--initial-cluster-state=new".to_owned(),
                "--unsafe-no-fsync".to_owned(),
                "--log-level=warn".to_owned(),
            ],
            log: dir.join("etcd.log"),
            starts: 0,
        };
        let mut etcd = etcd_launch.spawn()?;
        wait_for_etcd(&mut etcd, &http, &etcd_url).await?;

        let cert_dir = dir.join("apiserver-certs");
        let server = format!("https://127.0.0.1:{api_port}");
        let apiserver_log = dir.join("kube-apiserver.log");
        let mut apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".to_owned(),
            format!("--secure-port={api_port}"),
            format!("--cert-dir={}", cert_dir.display()),
            format!("--token-auth-file={}", tokens.display()),
            "--authorization-mode=RBAC".to_owned(),
            "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,MutatingAdmissionWebhook,ValidatingAdmissionWebhook".to_owned(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
            format!("--service-account-key-file={}", sa_public.display()),
            format!("--service-account-signing-key-file={}", sa_private.display()),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--endpoint-reconciler-type=none".to_owned(),
        ];
        // A flag the options set replaces the default one: list flags such as
        // --authorization-mode would otherwise add up (and a mode named twice is an error).
        let flag = |arg: &str| arg.split_once('=').map(|(name, _)| name.to_owned());
        apiserver_args.retain(|default| {
            flag(default).is_none_or(|name| {
                !options
                    .apiserver_args
                    .iter()
                    .any(|a| flag(a).as_deref() == Some(&name))
            })
        });
        apiserver_args.extend(options.apiserver_args);
        let mut apiserver_launch = Launch {
            name: "kube-apiserver",
            program: bin.join("kube-apiserver"),
            args: apiserver_args,
            log: apiserver_log.clone(),
            starts: 0,
        };
        let mut apiserver = apiserver_launch.spawn()?;
        wait_for_apiserver(&mut apiserver, &http, &server, &admin_token).await?;

        let ca_pem = std::fs::read_to_string(cert_dir.join("apiserver.crt"))?;
        let admin_kubeconfig = dir.join("admin.kubeconfig");
        let kcm_kubeconfig = dir.join("kcm.kubeconfig");
        let limited_kubeconfig = dir.join("limited.kubeconfig");
        let webhook_kubeconfig = dir.join("webhook.kubeconfig");
        write_kubeconfig(&admin_kubeconfig, &server, &ca_pem, "admin", &admin_token)?;
        write_kubeconfig(&kcm_kubeconfig, &server, &ca_pem, "kcm", &kcm_token)?;
        write_kubeconfig(
            &limited_kubeconfig,
            &server,
            &ca_pem,
            LIMITED_USER,
            &limited_token,
        )?;
        write_kubeconfig(
            &webhook_kubeconfig,
            &server,
            &ca_pem,
            WEBHOOK_USER,
            &webhook_token,
        )?;

        let mut controller_manager = Process::spawn(
            "kube-controller-manager",
            Command::new(bin.join("kube-controller-manager")).args([
                format!("--kubeconfig={}", kcm_kubeconfig.display()),
                format!(
                    "--controllers={}",
                    CONTROLLERS
                        .split(',')
                        .filter(|c| !options.without_controllers.iter().any(|w| w == c))
                        .chain(options.extra_controllers.iter().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                format!(
                    "--service-account-private-key-file={}",
                    sa_private.display()
                ),
                format!(
                    "--root-ca-file={}",
                    cert_dir.join("apiserver.crt").display()
                ),
                "--use-service-account-credentials=false".to_owned(),
                "--leader-elect=false".to_owned(),
                "--bind-address=127.0.0.1".to_owned(),
                format!("--secure-port={kcm_port}"),
                format!("--cert-dir={}", dir.join("kcm-certs").display()),
            ]),
            &dir.join("kube-controller-manager.log"),
        )?;
        wait_until(
            &mut controller_manager,
            "kube-controller-manager /healthz",
            CONTROLLER_MANAGER_READY,
            || async {
                let body = http
                    .get(format!("https://127.0.0.1:{kcm_port}/healthz"))
                    .send()
                    .await
                    .ok()?
                    .text()
                    .await
                    .ok()?;
                (body == "ok").then_some(())
            },
        )
        .await?;

        let admin_config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&admin_kubeconfig)?,
            &KubeConfigOptions::default(),
        )
        .await?;
        let service_accounts: Api<ServiceAccount> =
            Api::namespaced(Client::try_from(admin_config.clone())?, "default");
        let creates_service_accounts = !options
            .without_controllers
            .iter()
            .any(|c| c == "serviceaccount-controller");
        if creates_service_accounts {
            wait_until(
                &mut controller_manager,
                "the serviceaccount controller to create ServiceAccount default/default",
                CONTROLLER_MANAGER_READY,
                || async {
                    service_accounts
                        .get_opt("default")
                        .await
                        .ok()
                        .flatten()
                        .map(|_| ())
                },
            )
            .await?;
        }

        Ok(Self {
            admin_kubeconfig,
            limited_kubeconfig,
            webhook_kubeconfig,
            admin_config,
            apiserver_log,
            server,
            admin_token,
            etcd_url,
            bin,
            apiserver_launch,
            etcd_launch,
            _controller_manager: controller_manager,
            apiserver: Some(apiserver),
            etcd: Some(etcd),
        })
    }

    /// Stops kube-apiserver: SIGTERM (it drains for a few seconds) or, with `kill`, SIGKILL.
    pub fn stop_apiserver(&mut self, kill: bool) {
        if let Some(mut apiserver) = self.apiserver.take() {
            if kill {
                apiserver.kill();
            } else {
                apiserver.stop(Duration::from_secs(60));
            }
        }
    }

    /// Starts kube-apiserver again with the same flags (and port) and waits until `/readyz`.
    pub async fn start_apiserver(&mut self) -> Result<()> {
        restart_apiserver(
            &mut self.apiserver,
            &mut self.apiserver_launch,
            &self.server,
            &self.admin_token,
        )
        .await
    }

    /// Stops etcd: SIGTERM or, with `kill`, SIGKILL. Its data stays.
    pub fn stop_etcd(&mut self, kill: bool) {
        if let Some(mut etcd) = self.etcd.take() {
            if kill {
                etcd.kill();
            } else {
                etcd.stop(Duration::from_secs(30));
            }
        }
    }

    /// Starts etcd again on its data and waits until it is healthy.
    pub async fn start_etcd(&mut self) -> Result<()> {
        if self.etcd.is_some() {
            return Err("etcd is already running".into());
        }
        let mut etcd = self.etcd_launch.spawn()?;
        wait_for_etcd(&mut etcd, &insecure_http()?, &self.etcd_url).await?;
        self.etcd = Some(etcd);
        Ok(())
    }

    /// Whether kube-apiserver answers `/readyz` with `ok` now.
    pub async fn apiserver_ready(&self) -> bool {
        let Ok(http) = insecure_http() else {
            return false;
        };
        apiserver_readyz(&http, &self.server, &self.admin_token).await
    }

    /// The apiserver's `/metrics` text (as `admin`).
    pub async fn apiserver_metrics(&self) -> Result<String> {
        let response = insecure_http()?
            .get(format!("{}/metrics", self.server))
            .bearer_auth(&self.admin_token)
            .send()
            .await?
            .error_for_status()?;
        Ok(response.text().await?)
    }

    /// The process id of kube-apiserver, if it runs.
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.apiserver.as_ref().map(Process::pid)
    }
}

/// Starts a stopped kube-apiserver (`running` empty) again from its `launch` and waits until
/// `server` answers `/readyz` to `token`.
pub(crate) async fn restart_apiserver(
    running: &mut Option<Process>,
    launch: &mut Launch,
    server: &str,
    token: &str,
) -> Result<()> {
    if running.is_some() {
        return Err("kube-apiserver is already running".into());
    }
    let mut apiserver = launch.spawn()?;
    wait_for_apiserver(&mut apiserver, &insecure_http()?, server, token).await?;
    *running = Some(apiserver);
    Ok(())
}

/// A client for the control plane's own endpoints (self-signed certificates).
pub(crate) fn insecure_http() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(2))
        .build()?)
}

async fn wait_for_etcd(etcd: &mut Process, http: &reqwest::Client, etcd_url: &str) -> Result<()> {
    wait_until(etcd, "etcd /health", ETCD_READY, || async {
        let body = http
            .get(format!("{etcd_url}/health"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        body.contains(r#""health":"true""#).then_some(())
    })
    .await
}

async fn apiserver_readyz(http: &reqwest::Client, server: &str, token: &str) -> bool {
    let Ok(response) = http
        .get(format!("{server}/readyz"))
        .bearer_auth(token)
        .send()
        .await
    else {
        return false;
    };
    response.text().await.is_ok_and(|body| body == "ok")
}

pub(crate) async fn wait_for_apiserver(
    apiserver: &mut Process,
    http: &reqwest::Client,
    server: &str,
    token: &str,
) -> Result<()> {
    wait_until(
        apiserver,
        "kube-apiserver /readyz",
        APISERVER_READY,
        || async { apiserver_readyz(http, server, token).await.then_some(()) },
    )
    .await
}

/// Polls `check` every 100 ms until it returns `Some`, failing early if `process` exits and
/// after `timeout` with the tail of its log.
pub async fn wait_until<T, F, Fut>(
    process: &mut Process,
    what: &str,
    timeout: Duration,
    mut check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        process.check_running()?;
        if let Some(value) = check().await {
            return Ok(value);
        }
        if start.elapsed() > timeout {
            return Err(process
                .failure(&format!("timed out after {timeout:?} waiting for {what}"))
                .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `tests/k8s/assets` and returns the directory it prints. Its stderr (build progress)
/// is passed through live and quoted in the error.
fn assets() -> Result<PathBuf> {
    assets_script(
        &[],
        "the end-to-end tests need etcd, kube-apiserver and kube-controller-manager",
        "Install Go (>= 1.26; the binaries are built once from the Go module proxy and cached) \
         or set CHEIRON_K8S_ASSETS to a directory holding etcd, kube-apiserver and kube-controller-manager.",
    )
}

/// Runs `tests/k8s/assets ARGS` and returns the path it prints. Its progress goes straight to
/// the terminal (cargo test's capture covers only the print macros, and a first build takes
/// minutes); on failure the error says what the tests `need`, quotes that progress, and ends
/// with the `remedy`.
pub(crate) fn assets_script(args: &[&str], need: &str, remedy: &str) -> Result<PathBuf> {
    // This crate is `tests/harness/`.
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("the harness crate has no parent directory")?;
    let script = tests.join("k8s/assets");
    let command = format!("{} {}", script.display(), args.join(" "));
    let mut child = Command::new(&script)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let mut stderr_lines = Vec::new();
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr)
            .lines()
            .map_while(std::result::Result::ok)
        {
            let _ = writeln!(std::io::stderr(), "{line}");
            stderr_lines.push(line);
        }
    }
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut stdout)?;
    }
    let status = child.wait()?;
    if !status.success() || stdout.trim().is_empty() {
        return Err(format!(
            "{need}, and {} could not provide it ({status}):\n{}\n{remedy}",
            command.trim_end(),
            stderr_lines.join("\n")
        )
        .into());
    }
    Ok(PathBuf::from(stdout.trim()))
}

/// `N` distinct free loopback ports (all bound at once, so they differ, then released).
pub fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    let ports = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<std::io::Result<Vec<_>>>()?;
    ports.try_into().map_err(|_| "port count mismatch".into())
}

/// 128 random bits, hex.
pub fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca_pem: &str,
    user: &str,
    token: &str,
) -> Result<()> {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: e2e\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
             users:\n\
             - name: {user}\n  user:\n    token: {token}\n\
             contexts:\n\
             - name: e2e\n  context:\n    cluster: e2e\n    user: {user}\n\
             current-context: e2e\n"
        ),
    )?;
    Ok(())
}

/// Quotes the apiserver log lines that mention `needle` (for webhook call failures).
pub fn apiserver_log_lines(log: &Path, needle: &str, max: usize) -> String {
    let text = log_tail(log, usize::MAX);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(needle)).collect();
    lines[lines.len().saturating_sub(max)..].join("\n")
}
