//! A real one-node cluster for the node tests (`tests/node/`): the control plane with the Node
//! authorizer and `NodeRestriction`, cheiron's webhook and controller, a private registry with
//! TLS and htpasswd auth on 127.0.0.1, and containerd, runc and a kubelet that pull from it
//! with the credentials the Pods carry. The tools come from `tests/node/tools` (built or
//! installed on first use); everything this module sets up on the machine is recorded in a
//! state directory and undone by `tests/node/janitor` when the test binary exits, however it
//! exits. Needs root.

use std::{
    collections::BTreeMap,
    io::Write,
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::{Mutex, OnceLock},
    time::{Duration, Instant},
};

use base64::Engine;
use cheiron::install::{WebhookClient, WebhookRegistration};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{Api, Client, api::PostParams};
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose};

use super::{
    Cheiron, Result,
    control_plane::{
        ControlPlane, ControlPlaneOptions, KUBERNETES_SERVICE_IP, free_ports, random_token,
    },
    controller::{CheironProcess, Host, READY_WITHIN, SHARED_CONTROLLER_ARGS},
    process::{Process, log_tail},
    webhook::{WebhookCertificates, WebhookProcess, install_crds, register},
};

/// The private test image's repository in the registry.
pub const PRIVATE_REPOSITORY: &str = "private/app";
/// containerd's `sandbox_image`, imported from `tests/node/tools`' archive, never pulled.
const PAUSE_IMAGE: &str = "cheiron.test/pause:1";
/// The node's name: its client certificate says `system:node:<NODE_NAME>`.
pub const NODE_NAME: &str = "cheiron-node";

const REGISTRY_READY: Duration = Duration::from_secs(30);
const CONTAINERD_READY: Duration = Duration::from_secs(30);
const NODE_READY: Duration = Duration::from_secs(90);
/// How long a Pod may take to run or to fail its pull on a loaded 2-core machine.
pub const POD_SETTLES: Duration = Duration::from_secs(90);

/// The kernel settings the kubelet changes on start (`setupKernelTunables`) and the bridge
/// plugin may change; the janitor writes back what they were.
const SYSCTLS: [&str; 7] = [
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
];

/// The paths `tests/node/tools` prints.
#[derive(Clone, Debug)]
pub struct NodeTools {
    tools: BTreeMap<String, PathBuf>,
}

impl NodeTools {
    /// Runs `tests/node/tools` (which installs or builds what is missing, the first time).
    pub fn find() -> Result<Self> {
        require_root()?;
        let script = tests_dir()?.join("node/tools");
        let output = Command::new(&script)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !output.status.success() {
            return Err(format!(
                "the node tests need containerd, runc, the CNI plugins, a kubelet and a registry, \
                 and {} could not provide them ({}); its messages are above",
                script.display(),
                output.status
            )
            .into());
        }
        let tools = String::from_utf8(output.stdout)?
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), PathBuf::from(v)))
            .collect();
        Ok(Self { tools })
    }

    /// The path printed for `name`.
    pub fn get(&self, name: &str) -> Result<&Path> {
        self.tools
            .get(name)
            .map(PathBuf::as_path)
            .ok_or_else(|| format!("tests/node/tools printed no {name}=").into())
    }
}

/// An error saying the node tests need root, unless we are root.
pub fn require_root() -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1))
        .ok_or("no effective Uid in /proc/self/status")?;
    if uid != "0" {
        return Err(format!(
            "the node tests (tests/node/) need root: they run containerd, runc and a kubelet, and \
             create cgroups, mounts, network namespaces and a bridge (effective uid {uid}). Run \
             them as root (CI does); as another user, run the other layers alone, e.g. \
             `cargo test --test e2e` (see DEVELOPMENT.md)"
        )
        .into());
    }
    Ok(())
}

fn tests_dir() -> Result<PathBuf> {
    Ok(Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("the harness crate has no parent directory")?
        .to_owned())
}

/// A process of the node, killed by the janitor (in the right order), not by the watchdog.
struct NodeProcess {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl NodeProcess {
    fn spawn(name: &'static str, command: &mut Command, log: &Path) -> Result<Self> {
        let file = std::fs::File::create(log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        Ok(Self {
            name,
            child,
            log: log.to_owned(),
        })
    }

    fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(self.failure(&format!("{} exited ({status})", self.name))),
        }
    }

    fn failure(&self, what: &str) -> super::Error {
        format!(
            "{what}\n--- last 40 lines of {} ---\n{}",
            self.log.display(),
            log_tail(&self.log, 40)
        )
        .into()
    }
}

/// The janitor of this run: `tests/node/janitor STATE` waiting for end-of-file on its stdin.
struct Janitor {
    _stdin: ChildStdin,
    child: Child,
}

impl Janitor {
    fn start(state: &Path, log: &Path) -> Result<Self> {
        use std::os::unix::process::CommandExt;
        let script = tests_dir()?.join("node/janitor");
        let log = std::fs::File::create(log)?;
        let mut child = Command::new(&script)
            .arg(state)
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: a Ctrl-C aimed at cargo test does not stop the clean-up.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", script.display()))?;
        let stdin = child.stdin.take().ok_or("the janitor has no stdin")?;
        Ok(Self {
            _stdin: stdin,
            child,
        })
    }

    /// Waits until the janitor holds the machine's node lock (`/run/cheiron-node.lock`): an
    /// earlier run (the previous node test binary) keeps it until its clean-up is done.
    async fn wait_until_locked(&mut self, state: &Path, log: &Path) -> Result<()> {
        let start = Instant::now();
        while !state.join("locked").exists() {
            if let Some(status) = self.child.try_wait()? {
                return Err(format!(
                    "tests/node/janitor exited ({status}) before taking the node lock: {}",
                    log_tail(log, 20)
                )
                .into());
            }
            if start.elapsed() > NODE_LOCK_WAIT {
                return Err(format!(
                    "another node test run still holds /run/cheiron-node.lock after \
                     {NODE_LOCK_WAIT:?} (its janitor cleans up when its test binary exits)"
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }
}

/// How long a run waits for an earlier run's clean-up (see [`Janitor::wait_until_locked`]).
const NODE_LOCK_WAIT: Duration = Duration::from_secs(180);

/// The private registry: distribution's registry on `https://127.0.0.1:PORT` with a test CA and
/// htpasswd (bcrypt) auth. Each test makes users of its own ([`Registry::set_user`]), so one
/// test's rotation never breaks another's pulls. The registry re-reads the htpasswd file when
/// it changes, so a rotation is a file rewrite.
pub struct Registry {
    /// `127.0.0.1:PORT`, the registry part of image references and of pull secrets.
    pub host: String,
    /// The CA of its serving certificate (PEM file).
    pub ca_file: PathBuf,
    dir: PathBuf,
    htpasswd_tool: PathBuf,
    crane: PathBuf,
    pause: PathBuf,
    /// user -> htpasswd line.
    users: Mutex<BTreeMap<String, String>>,
    // Stopped by the process watchdog when the test binary exits.
    process: Mutex<Process>,
}

/// The user that pushes the test images.
const PUSHER: &str = "pusher";

impl Registry {
    async fn start(tools: &NodeTools, dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let certificates = WebhookCertificates::generate(&dir.join("tls"))?;
        let ca_file = dir.join("ca.crt");
        std::fs::write(&ca_file, &certificates.ca_pem)?;
        let [port] = free_ports()?;
        let host = format!("127.0.0.1:{port}");
        let htpasswd = dir.join("htpasswd");
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\n\
                 log:\n  level: info\n  accesslog:\n    disabled: true\n\
                 storage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\n\
                 http:\n  addr: {host}\n  secret: {secret}\n  tls:\n    certificate: {crt}\n    key: {key}\n\
                 auth:\n  htpasswd:\n    realm: cheiron-node-tests\n    path: {htpasswd}\n",
                data = dir.join("data").display(),
                secret = random_token()?,
                crt = certificates.dir.join("tls.crt").display(),
                key = certificates.dir.join("tls.key").display(),
                htpasswd = htpasswd.display(),
            ),
        )?;
        let mut registry = Self {
            host,
            ca_file,
            dir: dir.to_owned(),
            htpasswd_tool: tools.get("htpasswd")?.to_owned(),
            crane: tools.get("crane")?.to_owned(),
            pause: tools.get("pause")?.to_owned(),
            users: Mutex::new(BTreeMap::new()),
            process: Mutex::new(Process::spawn(
                "registry",
                Command::new(tools.get("registry")?)
                    .arg("serve")
                    .arg(&config)
                    .env_remove("REGISTRY_HTTP_ADDR"),
                &dir.join("registry.log"),
            )?),
        };
        registry.set_user(PUSHER)?;
        // Ready when it answers /v2/ with 401 (auth on).
        let http = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(
                certificates.ca_pem.as_bytes(),
            )?)
            .timeout(Duration::from_secs(2))
            .build()?;
        let start = Instant::now();
        let process = registry
            .process
            .get_mut()
            .map_err(|_| "registry lock poisoned")?;
        loop {
            process.check_running()?;
            if let Ok(response) = http
                .get(format!("https://{}/v2/", registry.host))
                .send()
                .await
                && response.status() == reqwest::StatusCode::UNAUTHORIZED
            {
                break;
            }
            if start.elapsed() > REGISTRY_READY {
                return Err(process
                    .failure("the registry did not answer /v2/ with 401")
                    .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(registry)
    }

    /// Gives `user` a new random password (an old one stops working at once: the registry
    /// re-reads its htpasswd file) and returns it.
    pub fn set_user(&self, user: &str) -> Result<String> {
        let password = random_token()?;
        self.set_password(user, &password)?;
        Ok(password)
    }

    /// Gives `user` the password `password` (an old one stops working at once).
    pub fn set_password(&self, user: &str, password: &str) -> Result<()> {
        let line = htpasswd_line(&self.htpasswd_tool, user, password)?;
        self.write_users(|users| {
            users.insert(user.to_owned(), line);
        })
    }

    /// Removes `user`: the registry refuses it from now on.
    pub fn remove_user(&self, user: &str) -> Result<()> {
        self.write_users(|users| {
            users.remove(user);
        })
    }

    fn write_users(&self, change: impl FnOnce(&mut BTreeMap<String, String>)) -> Result<()> {
        let mut users = self
            .users
            .lock()
            .map_err(|_| "registry users lock poisoned")?;
        change(&mut users);
        let file: String = users.values().map(String::as_str).collect();
        // Renamed into place, so the registry never reads half a file.
        let path = self.dir.join("htpasswd");
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, file)?;
        // The registry reloads the file only when its mtime differs from the one it read. On a
        // filesystem with coarse timestamps two writes close together can get the same mtime,
        // and the second would go unseen (a user of a test that started at the same moment as
        // another's would get 401); this machine's ext4 gave distinct ones in a quick check,
        // so this is a guard, not a proven cause. Each write's mtime is later than the last.
        let previous = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        let now = std::time::SystemTime::now();
        let modified = previous.map_or(now, |p| now.max(p + Duration::from_millis(1)));
        std::fs::File::options()
            .write(true)
            .open(&tmp)?
            .set_modified(modified)?;
        std::fs::rename(&tmp, &path)?;
        Ok(())
    }

    /// `.dockerconfigjson` content for `user` with `password` on this registry.
    pub fn docker_config_json(&self, user: &str, password: &str) -> String {
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, self.host)
    }

    /// Pushes a test image `repository:tag` (one static program that prints `tag`, then waits
    /// for SIGTERM) and returns its reference.
    pub fn push_test_image(&self, repository: &str, tag: &str) -> Result<String> {
        let reference = format!("{}/{repository}:{tag}", self.host);
        let work = tempfile::tempdir_in(&self.dir)?;
        std::fs::create_dir_all(work.path().join("rootfs"))?;
        std::fs::copy(&self.pause, work.path().join("rootfs/app"))?;
        let layer = work.path().join("layer.tar");
        run(Command::new("tar")
            .args([
                "--format=ustar",
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "-C",
            ])
            .arg(work.path().join("rootfs"))
            .arg("-cf")
            .arg(&layer)
            .arg("app"))?;
        let docker = self.pusher_config(work.path())?;
        let layer = layer.display().to_string();
        self.crane(
            &docker,
            &["append", "--oci-empty-base", "-f", &layer, "-t", &reference],
        )?;
        self.crane(
            &docker,
            &[
                "mutate",
                &reference,
                "-t",
                &reference,
                "--set-platform",
                "linux/amd64",
                "--entrypoint",
                &format!("/app,{tag}"),
            ],
        )?;
        Ok(reference)
    }

    /// Pushes the image archive `archive` (as `scripts/image` writes it) as `repository:tag`
    /// and returns its reference.
    pub fn push_archive(&self, archive: &Path, repository: &str, tag: &str) -> Result<String> {
        let reference = format!("{}/{repository}:{tag}", self.host);
        let work = tempfile::tempdir_in(&self.dir)?;
        let docker = self.pusher_config(work.path())?;
        let archive = archive.display().to_string();
        self.crane(&docker, &["push", &archive, &reference])?;
        Ok(reference)
    }

    /// A docker config directory in `dir` with a new password of [`PUSHER`].
    fn pusher_config(&self, dir: &Path) -> Result<PathBuf> {
        let docker = dir.join("docker");
        std::fs::create_dir_all(&docker)?;
        let password = self.set_user(PUSHER)?;
        std::fs::write(
            docker.join("config.json"),
            self.docker_config_json(PUSHER, &password),
        )?;
        Ok(docker)
    }

    /// Runs crane with `args`, its credentials in the docker config directory `docker`.
    fn crane(&self, docker: &Path, args: &[&str]) -> Result<()> {
        run(Command::new(&self.crane)
            .args(args)
            .env("DOCKER_CONFIG", docker)
            .env("SSL_CERT_FILE", &self.ca_file))
    }

    fn check_running(&self) -> Result<()> {
        self.process
            .lock()
            .map_err(|_| "registry lock poisoned")?
            .check_running()
    }
}

/// `USER:BCRYPT\n` from the htpasswd tool, the password on its stdin.
fn htpasswd_line(tool: &Path, user: &str, password: &str) -> Result<String> {
    let mut child = Command::new(tool)
        .arg(user)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or("htpasswd has no stdin")?
        .write_all(format!("{password}\n").as_bytes())?;
    let output = child.wait_with_output()?;
    if !output.status.success() {
        return Err(format!(
            "htpasswd failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// Runs `command` to completion; an error quotes its output.
fn run(command: &mut Command) -> Result<()> {
    let output = command.stdin(Stdio::null()).output()?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{} failed ({}): {}{}",
        command.get_program().to_string_lossy(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
    .into())
}

/// The node cluster of this test binary.
pub struct NodeCluster {
    /// Files and logs of this run.
    pub dir: PathBuf,
    /// The tools of `tests/node/tools`.
    pub tools: NodeTools,
    /// The private registry.
    pub registry: Registry,
    /// The private test image (`<registry>/private/app:1`), pushed when the cluster started.
    pub image: String,
    /// The same registry as `localhost:PORT`, the host mode Node tests pull from: only the
    /// kubelet's credential-provider plugin (cheiron's) is configured for it, so what another
    /// test's pull gets from a node agent's file never reaches the other tests' host.
    pub node_mode_host: String,
    /// The credentials file the kubelet's plugin reads (a node agent a test starts keeps it).
    pub node_credentials: PathBuf,
    /// The kubelet's `--root-dir`, where it looks for a docker `config.json` first (and
    /// keeps what it read for five minutes: `NewDefaultDockerKeyring` in the kubelet's
    /// `pkg/credentialprovider`).
    pub kubelet_root: PathBuf,
    /// The kubelet's `podLogsDir`: `<namespace>_<pod>_<uid>/<container>/<restart>.log`. The
    /// apiserver cannot reach this kubelet (it listens on loopback and accepts only its own
    /// clients), so `kubectl logs` and `helm test --logs` do not work: read the files.
    pub pod_logs: PathBuf,
    /// Where cheiron processes of this cluster run (for a node agent).
    pub cheiron_host: Host,
    /// The controller's credential-provider plugin [`SHORT_LIVED`].
    pub short_lived: ShortLivedProvider,
    /// The kubelet's `--image-credential-provider-bin-dir`, where cheiron's plugin is.
    pub plugin_bin_dir: PathBuf,
    /// The kubelet's `--image-credential-provider-config`.
    pub plugin_config: PathBuf,
    /// Where cheiron runs in this cluster.
    pub placement: Placement,
    control_plane: ControlPlane,
    /// The webhook and controller processes on the host (none with [`Placement::InCluster`]).
    _cheiron: Option<(WebhookProcess, CheironProcess)>,
    /// kube-scheduler ([`Placement::InCluster`] only).
    _scheduler: Option<Process>,
    containerd: Mutex<NodeProcess>,
    kubelet: Mutex<NodeProcess>,
    _janitor: Janitor,
}

static NODE_CLUSTER: OnceLock<Result<NodeCluster, String>> = OnceLock::new();

/// Where cheiron runs in a node cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// `cheiron webhook` and `cheiron controller` run on the host (the binary under test), the
    /// webhook registered by URL; the control plane runs only what those tests need.
    Host,
    /// Nothing of cheiron runs: the test installs it in-cluster (its chart, its image). The
    /// cluster then schedules Pods as a real one does: kube-scheduler runs, and
    /// kube-controller-manager adds the node-lifecycle (it lifts the node's `not-ready`
    /// taint), DaemonSet, Job and endpoint controllers; the apiserver reaches webhook Services
    /// through their endpoints (`--enable-aggregator-routing`, as there is no kube-proxy).
    InCluster,
}

/// A node cluster's start, whichever its [`Placement`].
type Starting = std::pin::Pin<Box<dyn std::future::Future<Output = Result<NodeCluster>>>>;

/// The kube-controller-manager controllers [`Placement::InCluster`] adds.
const IN_CLUSTER_CONTROLLERS: [&str; 5] = [
    "node-lifecycle-controller",
    "daemonset-controller",
    "job-controller",
    "endpoints-controller",
    "endpointslice-controller",
];

impl NodeCluster {
    /// The node cluster running `cheiron` on the host, started on the first call (which blocks
    /// until it is up or has failed; every later call returns the same outcome).
    pub fn start(cheiron: Cheiron) -> Result<&'static Self> {
        Self::start_placed(cheiron, Placement::Host)
    }

    /// The node cluster without cheiron ([`Placement::InCluster`]), started on the first call.
    pub fn start_in_cluster(cheiron: Cheiron) -> Result<&'static Self> {
        Self::start_placed(cheiron, Placement::InCluster)
    }

    fn start_placed(cheiron: Cheiron, placement: Placement) -> Result<&'static Self> {
        // Before anything else: as another user, say so rather than fail on a side effect.
        require_root()?;
        let cluster = NODE_CLUSTER.get_or_init(|| {
            let start = match placement {
                Placement::Host => Self::start_host,
                Placement::InCluster => Self::start_bare,
            };
            super::cluster::start_on_own_thread("node cluster", cheiron, start)
        });
        let cluster = cluster
            .as_ref()
            .map_err(|e| format!("the node test cluster did not start: {e}"))?;
        if cluster.placement != placement {
            return Err(format!(
                "this test binary's node cluster was started with cheiron {:?}, not {placement:?}",
                cluster.placement
            )
            .into());
        }
        Ok(cluster)
    }

    fn start_host(cheiron: Cheiron, dir: PathBuf) -> Starting {
        Box::pin(Self::start_in(cheiron, dir, Placement::Host))
    }

    fn start_bare(cheiron: Cheiron, dir: PathBuf) -> Starting {
        Box::pin(Self::start_in(cheiron, dir, Placement::InCluster))
    }

    /// What container `container` of Pod `namespace/pod` has logged so far (every Pod of that
    /// name the kubelet ran, every restart), from the kubelet's log files ([`Self::pod_logs`]).
    pub fn container_log(&self, namespace: &str, pod: &str, container: &str) -> Result<String> {
        let prefix = format!("{namespace}_{pod}_");
        let mut text = String::new();
        for entry in std::fs::read_dir(&self.pod_logs)?.flatten() {
            if !entry.file_name().to_string_lossy().starts_with(&prefix) {
                continue;
            }
            let dir = entry.path().join(container);
            for log in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                text.push_str(&std::fs::read_to_string(log.path())?);
            }
        }
        if text.is_empty() {
            return Err(format!(
                "no log of container {container} of Pod {namespace}/{pod} in {}",
                self.pod_logs.display()
            )
            .into());
        }
        Ok(text)
    }

    /// The admin kubeconfig file (`system:masters`), for helm and kubectl.
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.control_plane.admin_kubeconfig
    }

    /// The client configuration of `admin`.
    pub fn admin_config(&self) -> kube::Config {
        self.control_plane.admin_config.clone()
    }

    /// An error quoting the node's logs if containerd, the kubelet or the registry has exited.
    pub fn check_running(&self) -> Result<()> {
        self.containerd
            .lock()
            .map_err(|_| "containerd lock poisoned")?
            .check_running()?;
        self.kubelet
            .lock()
            .map_err(|_| "kubelet lock poisoned")?
            .check_running()?;
        self.registry.check_running()
    }

    /// The host controller's log file (none with [`Placement::InCluster`]).
    pub fn controller_log(&self) -> Option<&Path> {
        self._cheiron
            .as_ref()
            .map(|(_, controller)| controller.log())
    }

    /// The last lines of the kubelet's log mentioning `needle`.
    pub fn kubelet_log_lines(&self, needle: &str, max: usize) -> String {
        let log = self.dir.join("kubelet.log");
        let text = log_tail(&log, usize::MAX);
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(needle)).collect();
        lines[lines.len().saturating_sub(max)..].join("\n")
    }

    async fn start_in(cheiron: Cheiron, dir: PathBuf, placement: Placement) -> Result<Self> {
        let tools = NodeTools::find()?;

        // State the janitor undoes lives in a short directory (unix socket paths are limited).
        let state = tempfile::Builder::new()
            .prefix("cheiron-node-")
            .tempdir_in("/run")?
            .keep();
        let janitor_log = dir.join("janitor.log");
        let mut janitor = Janitor::start(&state, &janitor_log)?;
        janitor.wait_until_locked(&state, &janitor_log).await?;
        let id = state
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("cheiron-node-"))
            .ok_or("unexpected state directory name")?
            .to_ascii_lowercase()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>();

        // The kubelet authenticates with a client certificate of this CA.
        let node_pki = NodePki::generate(&dir.join("node-pki"))?;
        let mut options = ControlPlaneOptions {
            apiserver_args: vec![
                "--authorization-mode=Node,RBAC".to_owned(),
                "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook".to_owned(),
                format!("--client-ca-file={}", node_pki.ca_file.display()),
            ],
            ..ControlPlaneOptions::default()
        };
        if placement == Placement::InCluster {
            options
                .apiserver_args
                .push("--enable-aggregator-routing=true".to_owned());
            options.extra_controllers = IN_CLUSTER_CONTROLLERS.map(str::to_owned).to_vec();
        }
        let control_plane = ControlPlane::start_with(&dir, options).await?;
        let client = Client::try_from(control_plane.admin_config.clone())?;

        let certificates = WebhookCertificates::generate(&dir.join("webhook-tls"))?;
        let host = Host {
            binary: PathBuf::from(cheiron.binary),
            dir: dir.clone(),
            kubeconfig: control_plane.admin_kubeconfig.clone(),
            tls_dir: certificates.dir.clone(),
        };
        let registry = Registry::start(&tools, &dir.join("registry")).await?;
        let image = registry.push_test_image(PRIVATE_REPOSITORY, "1")?;
        let short_lived = ShortLivedProvider::install(
            cheiron,
            &dir.join("controller-credential-providers"),
            &registry.host,
        )?;
        let (cheiron_processes, scheduler) = match placement {
            Placement::Host => (
                Some(
                    start_cheiron_on_host(
                        cheiron,
                        &client,
                        &host,
                        &certificates,
                        &short_lived,
                        &registry,
                    )
                    .await?,
                ),
                None,
            ),
            Placement::InCluster => (None, Some(start_scheduler(&tools, &dir, &control_plane)?)),
        };
        let node_mode_host = registry.host.replacen("127.0.0.1", "localhost", 1);
        let node_credentials = dir.join("node-credentials").join("credentials.json");
        let provider = install_credential_provider(
            &host,
            &dir.join("credential-provider"),
            &node_credentials,
            &node_mode_host,
        )?;

        let (containerd, kubelet) = start_node(
            &tools,
            &dir,
            &state,
            &id,
            &node_pki,
            &control_plane,
            &registry,
            &provider,
        )
        .await?;

        let cluster = Self {
            pod_logs: pod_logs(&dir),
            dir,
            tools,
            registry,
            image,
            node_mode_host,
            node_credentials,
            kubelet_root: kubelet_root(&state),
            cheiron_host: host,
            short_lived,
            plugin_bin_dir: provider.bin_dir,
            plugin_config: provider.config,
            placement,
            control_plane,
            _cheiron: cheiron_processes,
            _scheduler: scheduler,
            containerd: Mutex::new(containerd),
            kubelet: Mutex::new(kubelet),
            _janitor: janitor,
        };
        cluster.wait_for_node_ready(&client).await?;
        Ok(cluster)
    }

    async fn wait_for_node_ready(&self, client: &Client) -> Result<()> {
        let nodes: Api<Node> = Api::all(client.clone());
        let start = Instant::now();
        loop {
            self.check_running()?;
            if let Ok(Some(node)) = nodes.get_opt(NODE_NAME).await
                && node
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            {
                return Ok(());
            }
            if start.elapsed() > NODE_READY {
                let kubelet = self.kubelet.lock().map_err(|_| "kubelet lock poisoned")?;
                return Err(
                    kubelet.failure(&format!("node {NODE_NAME} not Ready within {NODE_READY:?}"))
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// A CA the apiserver trusts for client certificates (`--client-ca-file`) and the kubelet's
/// client certificate `system:node:<NODE_NAME>` in group `system:nodes`.
struct NodePki {
    ca_file: PathBuf,
    cert_file: PathBuf,
    key_file: PathBuf,
}

impl NodePki {
    fn generate(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let (ca_cert, issuer) = super::webhook::test_ca("cheiron node tests client CA")?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("system:node:{NODE_NAME}"));
        params
            .distinguished_name
            .push(DnType::OrganizationName, "system:nodes");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &issuer)?;
        let pki = Self {
            ca_file: dir.join("ca.crt"),
            cert_file: dir.join("kubelet.crt"),
            key_file: dir.join("kubelet.key"),
        };
        std::fs::write(&pki.ca_file, ca_cert.pem())?;
        std::fs::write(&pki.cert_file, cert.pem())?;
        std::fs::write(&pki.key_file, key.serialize_pem())?;
        Ok(pki)
    }
}

/// Seconds between two registry checks of one credential in the host controller
/// (`--registry-check-interval`, its least): the credential-health tests wait for a revoked
/// password to be found by the periodic check.
pub const REGISTRY_CHECK_INTERVAL_SECONDS: u64 = 10;

/// Installs the CRDs, starts `cheiron webhook` (registered by URL) and `cheiron controller` on
/// the host, the controller with the plugin [`SHORT_LIVED`] for the registry, and registry
/// checks (only of managers with `spec.verify: Registry`) trusting the registry's CA every
/// [`REGISTRY_CHECK_INTERVAL_SECONDS`].
async fn start_cheiron_on_host(
    cheiron: Cheiron,
    client: &Client,
    host: &Host,
    certificates: &WebhookCertificates,
    short_lived: &ShortLivedProvider,
    registry: &Registry,
) -> Result<(WebhookProcess, CheironProcess)> {
    install_crds(cheiron, client).await?;
    let mut webhook = WebhookProcess::start(
        cheiron,
        "cheiron webhook",
        &host.kubeconfig,
        &certificates.dir,
        &host.dir.join("cheiron-webhook.log"),
    )?;
    webhook
        .wait_for_admin_status("/readyz", 200, Duration::from_secs(30))
        .await?;
    let mut registration = WebhookRegistration::new(
        "cheiron-node",
        WebhookClient::Url(webhook.url()),
        "cheiron-system",
    );
    registration.ca_bundle = Some(certificates.ca_pem.clone().into_bytes());
    register(client, &registration.configuration()).await?;
    let config = short_lived.config.display().to_string();
    let bin = short_lived.bin_dir.display().to_string();
    let registry_ca = registry.ca_file.display().to_string();
    let interval = REGISTRY_CHECK_INTERVAL_SECONDS.to_string();
    let mut args: Vec<&str> = SHARED_CONTROLLER_ARGS.to_vec();
    args.extend([
        "--credential-provider-config",
        &config,
        "--credential-provider-bin-dir",
        &bin,
        "--registry-ca-file",
        &registry_ca,
        "--registry-check-interval",
        &interval,
    ]);
    let controller = CheironProcess::controller_on(host, "controller", &args)?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    Ok((webhook, controller))
}

/// Starts kube-scheduler, as `admin` (`system:masters`).
fn start_scheduler(tools: &NodeTools, dir: &Path, control_plane: &ControlPlane) -> Result<Process> {
    let [port] = free_ports()?;
    Process::spawn(
        "kube-scheduler",
        Command::new(tools.get("kube-scheduler")?)
            .arg(format!(
                "--kubeconfig={}",
                control_plane.admin_kubeconfig.display()
            ))
            .args(["--leader-elect=false", "--bind-address=127.0.0.1"])
            .arg(format!("--secure-port={port}")),
        &dir.join("kube-scheduler.log"),
    )
}

/// Writes the configuration of containerd, the CNI and the kubelet, records what the janitor
/// must undo, and starts containerd (importing the pause image) and the kubelet.
/// The name of the controller's credential-provider plugin in the node cluster: the fake
/// plugin, issuing `user-N`/`pass-N` on its Nth call for the registry, each for
/// [`SHORT_LIVED_SECONDS`].
pub const SHORT_LIVED: &str = "short-lived";
/// How long a credential of [`SHORT_LIVED`] lives (its `cacheDuration`).
pub const SHORT_LIVED_SECONDS: u64 = 6;

/// The controller's credential-provider plugin [`SHORT_LIVED`], for images of the registry.
pub struct ShortLivedProvider {
    bin_dir: PathBuf,
    config: PathBuf,
    state: PathBuf,
}

impl ShortLivedProvider {
    fn install(cheiron: super::Cheiron, dir: &Path, registry: &str) -> Result<Self> {
        let provider = Self {
            bin_dir: dir.join("bin"),
            config: dir.join("config.yaml"),
            state: dir.join("state"),
        };
        std::fs::create_dir_all(&provider.bin_dir)?;
        std::fs::create_dir_all(&provider.state)?;
        std::fs::copy(
            cheiron.fake_credential_provider,
            provider.bin_dir.join(SHORT_LIVED),
        )?;
        std::fs::write(
            &provider.config,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - name: {SHORT_LIVED}\n    matchImages: [\"{registry}\"]\n    defaultCacheDuration: {SHORT_LIVED_SECONDS}s\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n    args: [--state, {state}, --cache-duration, {SHORT_LIVED_SECONDS}s, --pattern, \"{registry}\"]\n",
                state = provider.state.display(),
            ),
        )?;
        Ok(provider)
    }

    /// How many credentials the plugin has issued.
    pub fn calls(&self) -> u64 {
        std::fs::read_to_string(self.state.join("calls"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// How long the kubelet may reuse an answer of cheiron's credential-provider plugin here.
pub const PLUGIN_CACHE_DURATION: Duration = Duration::from_secs(1);

/// The kubelet's credential-provider plugin as the chart's init container installs it.
struct CredentialProvider {
    bin_dir: PathBuf,
    config: PathBuf,
    /// The registry host its `matchImages` name (the registry's other host names are not).
    host: String,
}

/// Installs cheiron's credential-provider plugin into `dir` as `cheiron node-agent
/// --install-only` does on a node, reading `credentials` and matching images of
/// `node_mode_host` only (every other test image has the registry's other host name; images
/// without a port match too, as on a real node, and get nothing while the file is absent).
/// The kubelet may reuse an answer for [`PLUGIN_CACHE_DURATION`].
fn install_credential_provider(
    host: &Host,
    dir: &Path,
    credentials: &Path,
    node_mode_host: &str,
) -> Result<CredentialProvider> {
    let provider = CredentialProvider {
        bin_dir: dir.join("bin"),
        config: dir.join("credential-provider-config.yaml"),
        host: node_mode_host.to_owned(),
    };
    if let Some(parent) = credentials.parent() {
        std::fs::create_dir_all(parent)?;
    }
    run(Command::new(&host.binary)
        .arg("node-agent")
        .args(["--node-name", NODE_NAME, "--install-only"])
        .arg("--credentials-file")
        .arg(credentials)
        .arg("--install-bin-dir")
        .arg(&provider.bin_dir)
        .arg("--install-provider-config")
        .arg(&provider.config)
        .args(["--extra-match-images", node_mode_host])
        .arg("--cache-duration")
        .arg(format!("{}s", PLUGIN_CACHE_DURATION.as_secs())))?;
    Ok(provider)
}

/// The kubelet's `--root-dir` in the state directory `state`.
fn kubelet_root(state: &Path) -> PathBuf {
    state.join("kubelet")
}

/// The kubelet's `podLogsDir`: in the run's directory `dir`, not in the state the janitor
/// removes, so what every container printed is still there after the run, beside the
/// kubelet's and containerd's logs (the directory a failing test names).
fn pod_logs(dir: &Path) -> PathBuf {
    dir.join("pod-logs")
}

// Everything a node is made of, each built by the caller: one parameter each.
#[allow(clippy::too_many_arguments)]
async fn start_node(
    tools: &NodeTools,
    dir: &Path,
    state: &Path,
    id: &str,
    pki: &NodePki,
    control_plane: &ControlPlane,
    registry: &Registry,
    provider: &CredentialProvider,
) -> Result<(NodeProcess, NodeProcess)> {
    // What the janitor restores, recorded before anything changes it.
    let mut saved = String::new();
    for key in SYSCTLS {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        if let Ok(value) = std::fs::read_to_string(&path) {
            saved.push_str(&format!("{key}={}\n", value.trim()));
        }
    }
    std::fs::write(state.join("sysctls"), saved)?;

    // A cgroup of our own in every v1 hierarchy: the kubelet's cgroupRoot.
    let cgroup = format!("cheiron-node-{id}");
    std::fs::write(state.join("cgroup-root"), &cgroup)?;
    for entry in std::fs::read_dir("/sys/fs/cgroup")?.flatten() {
        let hierarchy = entry.path();
        if hierarchy.file_name().is_some_and(|n| n == "unified")
            || !hierarchy.join("tasks").exists()
        {
            continue;
        }
        let ours = hierarchy.join(&cgroup);
        std::fs::create_dir_all(&ours)?;
        for file in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(value) = std::fs::read_to_string(hierarchy.join(file)) {
                std::fs::write(ours.join(file), value.trim())?;
            }
        }
    }

    // The Pods' network: a bridge of ours holding the Pods' gateway and the `kubernetes`
    // Service's address (there is no kube-proxy), created before containerd so that the CNI
    // bridge plugin finds it and touches neither its addresses nor iptables nor ip_forward.
    // Recorded first: the janitor deletes it, and its addresses go with it.
    let bridge = format!("chn{}", &id[..id.len().min(8)]);
    std::fs::write(state.join("bridge"), &bridge)?;
    let subnet = 200 + (id.bytes().map(u32::from).sum::<u32>() % 50);
    let gateway = format!("10.213.{subnet}.1");
    // A fixed address: a bridge without one takes the lowest address among its ports, so
    // removing the veth of a Pod that held it (any Pod that ends) changes the gateway's MAC
    // under the other Pods, whose cached neighbour entry then points nowhere until it ages
    // out (tens of seconds of a Pod unreachable: probes fail, the kubelet restarts it).
    // 0a:58 and the IPv4 address, as Kubernetes' CNI plugins derive a MAC (locally
    // administered, unicast).
    let mac = format!("0a:58:0a:d5:{subnet:02x}:01");
    run(Command::new("ip").args([
        "link", "add", "name", &bridge, "address", &mac, "type", "bridge",
    ]))?;
    for address in [
        format!("{gateway}/24"),
        format!("{KUBERNETES_SERVICE_IP}/32"),
    ] {
        run(Command::new("ip").args(["addr", "add", &address, "dev", &bridge]))?;
    }
    run(Command::new("ip").args(["link", "set", &bridge, "up"]))?;
    forward_kubernetes_service(&control_plane.server)?;
    let pod_logs = pod_logs(dir);
    std::fs::create_dir_all(&pod_logs)?;
    std::fs::write(state.join("pod-logs"), pod_logs.display().to_string())?;

    // containerd: everything below `state`; network namespaces too (netns_mounts_under_state_dir),
    // so nothing touches /run/netns.
    let sock = state.join("containerd.sock");
    let cni_conf = state.join("cni/net.d");
    std::fs::create_dir_all(&cni_conf)?;
    let certs_d = state.join("certs.d");
    for host in [registry.host.as_str(), provider.host.as_str()] {
        let hosts_dir = certs_d.join(host);
        std::fs::create_dir_all(&hosts_dir)?;
        std::fs::write(
            hosts_dir.join("hosts.toml"),
            format!(
                "server = \"https://{host}\"\n\n[host.\"https://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = \"{ca}\"\n",
                ca = registry.ca_file.display()
            ),
        )?;
    }
    std::fs::write(
        cni_conf.join("10-cheiron.conflist"),
        format!(
            r#"{{"cniVersion":"0.4.0","name":"cheiron-node","plugins":[{{"type":"bridge","bridge":"{bridge}","isGateway":false,"ipMasq":false,"hairpinMode":false,"ipam":{{"type":"host-local","ranges":[[{{"subnet":"10.213.{subnet}.0/24","gateway":"{gateway}"}}]],"routes":[{{"dst":"0.0.0.0/0","gw":"{gateway}"}}],"dataDir":"{ipam}"}}}}]}}"#,
            ipam = state.join("cni/ipam").display()
        ),
    )?;
    let containerd_config = state.join("containerd.toml");
    std::fs::write(
        &containerd_config,
        format!(
            r#"version = 2
root = "{root}"
state = "{cstate}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{sock}"

[ttrpc]
  address = "{ttrpc}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{certs_d}"
"#,
            root = state.join("containerd/root").display(),
            cstate = state.join("containerd/state").display(),
            sock = sock.display(),
            ttrpc = state.join("containerd.ttrpc.sock").display(),
            opt = state.join("containerd/opt").display(),
            runc = tools.get("runc")?.display(),
            cni_bin = tools.get("cni-bin-dir")?.display(),
            cni_conf = cni_conf.display(),
            certs_d = certs_d.display(),
        ),
    )?;
    let mut containerd = NodeProcess::spawn(
        "containerd",
        Command::new(tools.get("containerd")?)
            .arg("--config")
            .arg(&containerd_config),
        &dir.join("containerd.log"),
    )?;
    std::fs::write(
        state.join("containerd.pid"),
        containerd.child.id().to_string(),
    )?;
    let start = Instant::now();
    let ctr = tools.get("ctr")?;
    loop {
        containerd.check_running()?;
        if sock.exists()
            && Command::new(ctr)
                .arg("--address")
                .arg(&sock)
                .arg("version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        {
            break;
        }
        if start.elapsed() > CONTAINERD_READY {
            return Err(containerd.failure("containerd did not answer on its socket"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    run(Command::new(ctr)
        .arg("--address")
        .arg(&sock)
        .args(["-n", "k8s.io", "images", "import"])
        .arg(tools.get("pause-image")?))?;

    // The kubelet.
    let kubelet_dir = kubelet_root(state);
    std::fs::create_dir_all(&kubelet_dir)?;
    let [kubelet_port, healthz_port] = free_ports()?;
    let ca = std::fs::read_to_string(dir.join("apiserver-certs/apiserver.crt"))?;
    let kubeconfig = dir.join("kubelet.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: node\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
             users:\n- name: kubelet\n  user:\n    client-certificate: {crt}\n    client-key: {key}\n\
             contexts:\n- name: node\n  context:\n    cluster: node\n    user: kubelet\ncurrent-context: node\n",
            server = control_plane.server,
            ca = base64::engine::general_purpose::STANDARD.encode(ca),
            crt = pki.cert_file.display(),
            key = pki.key_file.display(),
        ),
    )?;
    let kubelet_config = dir.join("kubelet.yaml");
    std::fs::write(
        &kubelet_config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {kubelet_port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz_port}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: /{cgroup}
cgroupsPerQOS: true
failCgroupV1: false
oomScoreAdj: 0
failSwapOn: false
containerRuntimeEndpoint: unix://{sock}
podLogsDir: {pod_logs}
volumePluginDir: {plugins}
makeIPTablesUtilChains: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
  imagefs.inodesFree: 1%
rotateCertificates: false
serverTLSBootstrap: false
staticPodPath: \"\"
featureGates:
  KubeletEnsureSecretPulledImages: true
imagePullCredentialsVerificationPolicy: NeverVerifyPreloadedImages
",
            sock = sock.display(),
            pod_logs = pod_logs.display(),
            plugins = state.join("volume-plugins").display(),
        ),
    )?;
    let kubelet_exe = std::fs::canonicalize(tools.get("kubelet")?)?;
    std::fs::write(state.join("kubelet.exe"), kubelet_exe.display().to_string())?;
    let kubelet = NodeProcess::spawn(
        "kubelet",
        Command::new(&kubelet_exe)
            .arg(format!("--config={}", kubelet_config.display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--root-dir={}", kubelet_dir.display()))
            .arg(format!(
                "--cert-dir={}",
                state.join("kubelet-pki").display()
            ))
            .arg(format!("--hostname-override={NODE_NAME}"))
            .arg(format!(
                "--image-credential-provider-config={}",
                provider.config.display()
            ))
            .arg(format!(
                "--image-credential-provider-bin-dir={}",
                provider.bin_dir.display()
            ))
            .arg("--v=2"),
        &dir.join("kubelet.log"),
    )?;
    std::fs::write(state.join("kubelet.pid"), kubelet.child.id().to_string())?;
    Ok((containerd, kubelet))
}

/// Pods reach the apiserver at the `kubernetes` Service, `KUBERNETES_SERVICE_IP:443`
/// (`KUBERNETES_SERVICE_HOST`), as in a cluster; without kube-proxy that address is the
/// bridge's, and a thread of this binary forwards each connection to the apiserver on loopback
/// (TLS passes through: the apiserver's certificate names the Service's address).
fn forward_kubernetes_service(server: &str) -> Result<()> {
    let apiserver: SocketAddr = server
        .strip_prefix("https://")
        .ok_or_else(|| format!("unexpected apiserver URL {server}"))?
        .parse()?;
    let listener = TcpListener::bind((KUBERNETES_SERVICE_IP, 443))
        .map_err(|e| format!("cannot listen on {KUBERNETES_SERVICE_IP}:443: {e}"))?;
    std::thread::Builder::new()
        .name("kubernetes-service".to_owned())
        .spawn(move || {
            for pod in listener.incoming().flatten() {
                if let Ok(upstream) = TcpStream::connect(apiserver) {
                    let _ = splice(pod, upstream);
                }
            }
        })?;
    Ok(())
}

/// Copies bytes both ways between `a` and `b` on two threads, each half closed when its
/// source ends.
fn splice(a: TcpStream, b: TcpStream) -> std::io::Result<()> {
    for (mut from, mut to) in [(a.try_clone()?, b.try_clone()?), (b, a)] {
        std::thread::Builder::new()
            .name("kubernetes-service-conn".to_owned())
            .spawn(move || {
                let _ = std::io::copy(&mut from, &mut to);
                let _ = to.shutdown(Shutdown::Write);
            })?;
    }
    Ok(())
}

/// A mode Node ClusterImagePullSecretManager for every node ([`NodeCluster::apply_node_manager`]).
pub struct NodeManager {
    /// The manager as applied.
    pub object: kube::api::DynamicObject,
    /// The namespace of its source Secret `registry-password` (key `password`).
    pub source_ns: String,
    /// Its registry user.
    pub user: String,
    /// That user's password.
    pub password: String,
}

impl NodeCluster {
    /// Applies a mode Node ClusterImagePullSecretManager `name` for every node, whose one
    /// Secret entry is a new registry user for `host` (a host name of the registry), its
    /// password in Secret `registry-password` of a new namespace of `scenario`.
    pub async fn apply_node_manager(
        &self,
        scenario: &super::Scenario,
        name: &str,
        host: &str,
    ) -> Result<NodeManager> {
        let source_ns = scenario.create_namespace(&[], &[]).await?;
        let user = scenario.unique_name("user");
        let password = self.registry.set_user(&user)?;
        scenario
            .password_secret(&source_ns, "registry-password", &password)
            .await?;
        let object = scenario
            .apply_cluster_manager(
                &scenario.unique_name(name),
                &format!(
                    "  mode: Node
  nodeSelector: {{}}
  secrets:
    - name: node-registry
      registry: {host}
      username: {user}
      passwordSecretRef: {{name: registry-password, key: password, namespace: {source_ns}}}
"
                ),
            )
            .await?;
        Ok(NodeManager {
            object,
            source_ns,
            user,
            password,
        })
    }
}

/// How a Pod's pull ended.
#[derive(Debug)]
pub enum PodOutcome {
    /// Phase `Running`.
    Running,
    /// The container waits with `ErrImagePull` or `ImagePullBackOff`; the message.
    PullFailed(String),
}

impl NodeCluster {
    /// A plain Pod `name` on the node: one container of `image`, pulled `Always`, the given
    /// `imagePullSecrets`, no ServiceAccount token, DNS from the node (there is no cluster DNS).
    pub fn pod(&self, name: &str, image: &str, pull_secrets: &[&str]) -> Result<Pod> {
        let secrets: Vec<serde_json::Value> = pull_secrets
            .iter()
            .map(|s| serde_json::json!({ "name": s }))
            .collect();
        let mut spec = serde_json::json!({
            "nodeName": NODE_NAME,
            "dnsPolicy": "Default",
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Never",
            "containers": [{ "name": "app", "image": image, "imagePullPolicy": "Always" }],
        });
        if !secrets.is_empty() {
            spec["imagePullSecrets"] = serde_json::Value::Array(secrets);
        }
        Ok(serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": name },
            "spec": spec,
        }))?)
    }

    /// Creates `pod` in `ns` and waits until it runs or its pull fails.
    pub async fn run_pod(&self, client: &Client, ns: &str, pod: &Pod) -> Result<PodOutcome> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let created = pods.create(&PostParams::default(), pod).await?;
        let name = created.metadata.name.unwrap_or_default();
        self.wait_for_pod(client, ns, &name).await
    }

    /// Waits until Pod `ns/name` runs or its pull fails.
    pub async fn wait_for_pod(&self, client: &Client, ns: &str, name: &str) -> Result<PodOutcome> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let start = Instant::now();
        loop {
            self.check_running()?;
            let pod = pods.get(name).await?;
            let status = pod.status.clone().unwrap_or_default();
            if status.phase.as_deref() == Some("Running") {
                return Ok(PodOutcome::Running);
            }
            let waiting = status
                .container_statuses
                .unwrap_or_default()
                .into_iter()
                .filter_map(|c| c.state.and_then(|s| s.waiting))
                .find(|w| {
                    matches!(
                        w.reason.as_deref(),
                        Some("ErrImagePull" | "ImagePullBackOff")
                    )
                });
            if let Some(waiting) = waiting {
                // A kubelet that could not read a pull secret yet (the Node authorizer learns of
                // a new Pod's Secrets from a watch of its own, which can lag the kubelet's)
                // pulls without it, and retries after its back-off: that pull says nothing
                // about the Secret, so wait for the retry.
                let unread = format!("pod=\"{ns}/{name}\"");
                let secret_unread = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.image_pull_secrets.as_ref())
                    .is_some_and(|secrets| !secrets.is_empty())
                    && self
                        .kubelet_log_lines("Unable to retrieve pull secret", usize::MAX)
                        .lines()
                        .any(|line| line.contains(&unread));
                if !secret_unread {
                    return Ok(PodOutcome::PullFailed(waiting.message.unwrap_or_default()));
                }
            }
            if start.elapsed() > POD_SETTLES {
                return Err(format!(
                    "Pod {ns}/{name} neither ran nor failed its pull within {POD_SETTLES:?} \
                     (phase {:?}); kubelet log lines about it:\n{}",
                    status.phase,
                    self.kubelet_log_lines(name, 20)
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
