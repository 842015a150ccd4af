//! `cheiron controller` and `cheiron run` processes, and the one shared controller of a test
//! binary that wants one (started on first use by [`shared_controller`]).
//!
//! Only the controller tests use this module: a controller acts on every manager in the cluster
//! (it would backfill the ServiceAccounts the admission tests assert on), so it runs in its own
//! test binary with its own control plane. Tests that must know which process did something
//! (leader election, `cheiron run`) take the cluster to themselves with
//! [`without_shared_controller`]: it waits until no test holds the shared controller, stops
//! it, and the next test asking for it starts a fresh one.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, ExitStatus},
    sync::{
        Arc, LazyLock, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use super::{
    Result,
    cluster::started,
    control_plane::free_ports,
    process::{Process, log_tail, rss_bytes},
};

/// How long a controller may take to sync its caches and answer `/readyz` with 200.
pub const READY_WITHIN: Duration = Duration::from_secs(30);
/// SIGTERM grace before SIGKILL in [`CheironProcess::stop`].
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A `cheiron controller` or `cheiron run` process on free loopback ports, as `admin` of the
/// test cluster. Stopped on drop (and by the watchdog when the test binary ends).
pub struct CheironProcess {
    name: String,
    process: Mutex<Process>,
    admin: SocketAddr,
    listen: Option<SocketAddr>,
    log: PathBuf,
}

/// Where a [`CheironProcess`] runs: the binary, the directory its log goes to, and the
/// kubeconfig it uses. [`Host::shared`] is the test binary's one cluster; tests with a control
/// plane of their own (`tests/reliability/`) build one.
#[derive(Clone, Debug)]
pub struct Host {
    /// The cheiron binary.
    pub binary: PathBuf,
    /// Logs go to `cheiron-<name>.log` here.
    pub dir: PathBuf,
    /// `KUBECONFIG` of the process.
    pub kubeconfig: PathBuf,
    /// `--tls-cert-dir` of the processes that serve the webhook.
    pub tls_dir: PathBuf,
}

impl Host {
    /// The shared cluster of this test binary, as `admin`.
    pub fn shared() -> Result<Self> {
        let cluster = started()?;
        Ok(Self {
            binary: PathBuf::from(cluster.cheiron().binary),
            dir: cluster.dir.clone(),
            kubeconfig: cluster.admin_kubeconfig().to_owned(),
            tls_dir: cluster.webhook_tls_dir().to_owned(),
        })
    }
}

impl CheironProcess {
    /// Starts `cheiron controller --admin-listen 127.0.0.1:PORT ARGS...` with
    /// `CHEIRON_POD_NAME=name` (the Events' reporting instance and the Lease identity's prefix),
    /// logging to `cheiron-<name>.log` in the run directory. Does not wait.
    pub fn controller(name: &str, args: &[&str]) -> Result<Self> {
        Self::controller_on(&Host::shared()?, name, args)
    }

    /// [`CheironProcess::controller`] on `host`.
    pub fn controller_on(host: &Host, name: &str, args: &[&str]) -> Result<Self> {
        let [admin_port] = free_ports()?;
        let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
        let mut command_line = vec![
            "controller".to_owned(),
            "--admin-listen".to_owned(),
            admin.to_string(),
        ];
        command_line.extend(args.iter().map(|a| (*a).to_owned()));
        Self::spawn(host, name, &command_line, admin, None)
    }

    /// Starts `cheiron node-agent --admin-listen 127.0.0.1:PORT ARGS...` as `admin` of the
    /// shared cluster. Does not wait.
    pub fn node_agent(name: &str, args: &[&str]) -> Result<Self> {
        Self::node_agent_on(&Host::shared()?, name, args)
    }

    /// [`CheironProcess::node_agent`] on `host` (e.g. with a kubeconfig of another identity).
    pub fn node_agent_on(host: &Host, name: &str, args: &[&str]) -> Result<Self> {
        let [admin_port] = free_ports()?;
        let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
        let mut command_line = vec![
            "node-agent".to_owned(),
            "--admin-listen".to_owned(),
            admin.to_string(),
        ];
        command_line.extend(args.iter().map(|a| (*a).to_owned()));
        Self::spawn(host, name, &command_line, admin, None)
    }

    /// Starts `cheiron run` (webhook and controller in one process) serving the webhook on
    /// `https://127.0.0.1:PORT/mutate` with the cluster's webhook certificate, followed by
    /// `ARGS...`. Does not wait.
    pub fn run(name: &str, args: &[&str]) -> Result<Self> {
        let mut command_line = vec!["run".to_owned()];
        command_line.extend(["--shutdown-delay", "0"].map(str::to_owned));
        command_line.extend(args.iter().map(|a| (*a).to_owned()));
        Self::serving(&Host::shared()?, name, &command_line)
    }

    /// Starts `cheiron webhook` on `host` serving `https://127.0.0.1:PORT/mutate` with
    /// `host.tls_dir`, followed by `ARGS...` (which may set `--shutdown-delay`). Does not wait.
    pub fn webhook_on(host: &Host, name: &str, args: &[&str]) -> Result<Self> {
        let mut command_line = vec!["webhook".to_owned()];
        command_line.extend(args.iter().map(|a| (*a).to_owned()));
        Self::serving(host, name, &command_line)
    }

    fn serving(host: &Host, name: &str, subcommand_and_args: &[String]) -> Result<Self> {
        let [listen_port, admin_port] = free_ports()?;
        let listen = SocketAddr::from(([127, 0, 0, 1], listen_port));
        let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
        let (subcommand, args) = subcommand_and_args
            .split_first()
            .ok_or("no cheiron subcommand")?;
        let mut command_line = vec![
            subcommand.clone(),
            "--listen".to_owned(),
            listen.to_string(),
            "--admin-listen".to_owned(),
            admin.to_string(),
            "--tls-cert-dir".to_owned(),
            host.tls_dir.display().to_string(),
        ];
        command_line.extend(args.iter().cloned());
        Self::spawn(host, name, &command_line, admin, Some(listen))
    }

    fn spawn(
        host: &Host,
        name: &str,
        command_line: &[String],
        admin: SocketAddr,
        listen: Option<SocketAddr>,
    ) -> Result<Self> {
        let log = host.dir.join(format!("cheiron-{name}.log"));
        let mut command = Command::new(&host.binary);
        // Nothing from the developer's environment may change what the test asked for.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("CHEIRON_") {
                command.env_remove(key);
            }
        }
        command
            .args(command_line)
            .env("KUBECONFIG", &host.kubeconfig)
            .env("CHEIRON_LOG", "info,cheiron=debug")
            .env("NO_COLOR", "1")
            .env("CHEIRON_POD_NAME", name)
            .env_remove("CHEIRON_POD_NAMESPACE");
        let process = Process::spawn(&format!("cheiron {name}"), &mut command, &log)?;
        Ok(Self {
            name: name.to_owned(),
            process: Mutex::new(process),
            admin,
            listen,
            log,
        })
    }

    /// The name it was started with (its `CHEIRON_POD_NAME`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `https://127.0.0.1:PORT/mutate` of a `cheiron run` process.
    pub fn webhook_url(&self) -> Option<String> {
        self.listen.map(|l| format!("https://{l}/mutate"))
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log, with its location, for failure messages.
    pub fn log_excerpt(&self, lines: usize) -> String {
        format!(
            "--- last {lines} lines of {} ---\n{}",
            self.log.display(),
            log_tail(&self.log, lines)
        )
    }

    /// An error quoting the log if the process has exited.
    pub fn check_running(&self) -> Result<()> {
        self.process
            .lock()
            .map_err(|_| "process lock poisoned")?
            .check_running()
    }

    /// SIGTERM, then SIGKILL after 10 s; the exit status (`None` if it could not be read).
    pub fn stop(&self) -> Option<ExitStatus> {
        self.process.lock().ok()?.stop(STOP_GRACE)
    }

    /// SIGKILL; the exit status.
    pub fn kill(&self) -> Option<ExitStatus> {
        self.process.lock().ok()?.kill()
    }

    /// Sends SIGTERM and returns at once.
    pub fn terminate(&self) {
        if let Ok(process) = self.process.lock() {
            process.terminate();
        }
    }

    /// The exit status if it has exited.
    pub fn exited(&self) -> Option<ExitStatus> {
        self.process.lock().ok()?.exited()
    }

    /// Its process id.
    pub fn pid(&self) -> Result<u32> {
        Ok(self
            .process
            .lock()
            .map_err(|_| "process lock poisoned")?
            .pid())
    }

    /// Its resident set size in bytes.
    pub fn rss_bytes(&self) -> Result<u64> {
        let pid = self
            .process
            .lock()
            .map_err(|_| "process lock poisoned")?
            .pid();
        rss_bytes(pid)
    }

    /// The webhook's `host:port` (processes that serve it).
    pub fn listen(&self) -> Option<SocketAddr> {
        self.listen
    }

    /// The admin server's `host:port`.
    pub fn admin(&self) -> SocketAddr {
        self.admin
    }

    /// The HTTP status of `GET /path` on the admin server, `None` if it does not answer.
    pub async fn admin_status(&self, path: &str) -> Option<u16> {
        let response = admin_client()
            .ok()?
            .get(format!("http://{}{path}", self.admin))
            .send()
            .await
            .ok()?;
        Some(response.status().as_u16())
    }

    /// Waits until `GET /path` answers `status`, failing early (with the log) if the process
    /// exits.
    pub async fn wait_for_admin_status(
        &self,
        path: &str,
        status: u16,
        timeout: Duration,
    ) -> Result<()> {
        let start = Instant::now();
        loop {
            self.check_running()?;
            let last = self.admin_status(path).await;
            if last == Some(status) {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(format!(
                    "cheiron {}: GET {path} answered {last:?}, not {status}, for {timeout:?}\n{}",
                    self.name,
                    self.log_excerpt(40)
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> Result<String> {
        let response = admin_client()?
            .get(format!("http://{}/metrics", self.admin))
            .send()
            .await?
            .error_for_status()?;
        Ok(response.text().await?)
    }

    /// The sum of every series of the metric `name` (all label sets); 0 when it has none yet.
    pub async fn metric(&self, name: &str) -> Result<f64> {
        let text = self.metrics().await?;
        let mut sum = 0.0;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let metric = series.split('{').next().unwrap_or(series);
            if metric == name {
                sum += value
                    .parse::<f64>()
                    .map_err(|e| format!("metric line {line:?}: {e}"))?;
            }
        }
        Ok(sum)
    }
}

/// A fresh client per request: a `reqwest::Client` is bound to the runtime it first ran on,
/// and these processes outlive the test that started them.
fn admin_client() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?)
}

/// Arguments of the shared controller: no leader election (it is the only one), a short
/// resync so that tests can wait past one, and a short grace before a Pod whose pull secret is
/// missing gets its Warning Event (`tests/controller/missing_secrets.rs`).
pub const SHARED_CONTROLLER_ARGS: [&str; 5] = [
    "--no-leader-election",
    "--resync",
    "15",
    "--missing-secret-grace",
    "3",
];

static SHARED: LazyLock<Arc<RwLock<Option<CheironProcess>>>> = LazyLock::new(Arc::default);
static SHARED_STARTS: AtomicUsize = AtomicUsize::new(0);

/// A test's hold on the shared controller: it keeps running (and no test takes the cluster to
/// itself) until this is dropped.
pub struct SharedController(OwnedRwLockReadGuard<Option<CheironProcess>, CheironProcess>);

impl std::ops::Deref for SharedController {
    type Target = CheironProcess;

    fn deref(&self) -> &CheironProcess {
        &self.0
    }
}

/// The shared `cheiron controller` (see [`SHARED_CONTROLLER_ARGS`]), started and waited for
/// (`/readyz` 200) if no test has needed it yet or a test stopped it.
pub async fn shared_controller() -> Result<SharedController> {
    loop {
        let held = SHARED.clone().read_owned().await;
        if let Ok(running) = OwnedRwLockReadGuard::try_map(held, Option::as_ref) {
            return Ok(SharedController(running));
        }
        let mut slot = SHARED.clone().write_owned().await;
        if slot.is_none() {
            let n = SHARED_STARTS.fetch_add(1, Ordering::Relaxed);
            let controller = CheironProcess::controller(
                &format!("shared-controller-{n}"),
                &SHARED_CONTROLLER_ARGS,
            )?;
            controller
                .wait_for_admin_status("/readyz", 200, READY_WITHIN)
                .await?;
            *slot = Some(controller);
        }
        // Read again: a test may take the cluster to itself in between.
    }
}

/// A test's exclusive hold on the cluster: the shared controller is stopped until this is
/// dropped, so the only controllers running are the ones the test starts.
pub struct WithoutSharedController {
    _held: OwnedRwLockWriteGuard<Option<CheironProcess>>,
}

/// Waits until no test holds the shared controller, and stops it.
pub async fn without_shared_controller() -> Result<WithoutSharedController> {
    let mut slot = SHARED.clone().write_owned().await;
    if let Some(controller) = slot.take() {
        let status = tokio::task::spawn_blocking(move || controller.stop()).await?;
        if !status.is_some_and(|s| s.success()) {
            return Err(format!(
                "the shared controller did not exit cleanly on SIGTERM: {status:?}"
            )
            .into());
        }
    }
    Ok(WithoutSharedController { _held: slot })
}
