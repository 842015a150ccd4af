//! The processes the bench compares: each started by the bench itself (so it knows the pid),
//! logging into the run directory, killed on every way out.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use cheiron_harness::Result;

/// What a process was started with: program, arguments, environment changes (`None`
/// removes the variable).
type Spec = (OsString, Vec<OsString>, Vec<(OsString, Option<OsString>)>);

/// A server or controller process.
pub struct Server {
    /// What the tables call it.
    pub name: &'static str,
    child: Child,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
    /// How to start it again.
    spec: Spec,
    /// Whether an exit is followed by a restart, as a kubelet does for a Deployment's Pod.
    restart_always: bool,
    /// Restarts so far.
    pub restarts: u32,
}

impl Server {
    /// Spawns `command` logging to `dir/NAME.log`.
    pub fn spawn(name: &'static str, dir: &Path, command: &mut Command) -> Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log)?;
        let spec = (
            command.get_program().to_owned(),
            command.get_args().map(ToOwned::to_owned).collect(),
            command
                .get_envs()
                .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
                .collect(),
        );
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        eprintln!(
            "[peers] {name} started, pid {}, log {}",
            child.id(),
            log.display()
        );
        Ok(Self {
            name,
            child,
            log,
            spec,
            restart_always: false,
            restarts: 0,
        })
    }

    /// Restarts the process whenever it is found exited, as the kubelet restarts a
    /// Deployment's Pod, instead of failing the bench.
    pub fn restart_always(mut self) -> Self {
        self.restart_always = true;
        self
    }

    /// Starts the process again, appending to its log.
    fn restart(&mut self) -> Result {
        let (program, args, envs) = &self.spec;
        let mut command = Command::new(program);
        command.args(args);
        for (k, v) in envs {
            match v {
                Some(v) => command.env(k, v),
                None => command.env_remove(k),
            };
        }
        let file = std::fs::OpenOptions::new().append(true).open(&self.log)?;
        self.child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .map_err(|e| format!("cannot restart {}: {e}", self.name))?;
        self.restarts += 1;
        eprintln!(
            "[peers] {} exited and was restarted (restart {}), pid {}",
            self.name,
            self.restarts,
            self.child.id()
        );
        Ok(())
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error quoting the log's tail if the process has exited (a restart instead, for a
    /// process started with [`Server::restart_always`]).
    pub fn check_running(&mut self) -> Result {
        if let Some(status) = self.child.try_wait()? {
            if self.restart_always {
                return self.restart();
            }
            return Err(format!(
                "{} exited ({status}); last lines of {}:\n{}",
                self.name,
                self.log.display(),
                tail(&self.log, 30)
            )
            .into());
        }
        Ok(())
    }

    /// Waits until `ready` answers true (polled every 100 ms), failing if the process exits.
    pub async fn wait_until<F, Fut>(&mut self, what: &str, within: Duration, ready: F) -> Result
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let since = Instant::now();
        loop {
            self.check_running()?;
            if ready().await {
                eprintln!(
                    "[peers] {}: {what} after {:.1?}",
                    self.name,
                    since.elapsed()
                );
                return Ok(());
            }
            if since.elapsed() > within {
                return Err(format!(
                    "{}: not {what} after {within:?}; last lines of {}:\n{}",
                    self.name,
                    self.log.display(),
                    tail(&self.log, 30)
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `/proc/PID/status` figures, in KiB.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Memory {
    pub rss_kib: u64,
    pub anon_kib: u64,
    pub file_kib: u64,
    pub hwm_kib: u64,
}

impl Memory {
    pub fn of(pid: u32) -> Result<Self> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
        let field = |name: &str| -> Result<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| format!("no {name} in /proc/{pid}/status").into())
        };
        Ok(Self {
            rss_kib: field("VmRSS:")?,
            anon_kib: field("RssAnon:")?,
            file_kib: field("RssFile:")?,
            hwm_kib: field("VmHWM:")?,
        })
    }

    /// The sample with the largest RSS of `samples` taken one a second.
    pub async fn max_of(pid: u32, samples: usize) -> Result<Self> {
        let mut max = Self::default();
        for i in 0..samples {
            let now = Self::of(pid)?;
            if now.rss_kib >= max.rss_kib {
                max = Self {
                    hwm_kib: now.hwm_kib.max(max.hwm_kib),
                    ..now
                };
            }
            if i + 1 < samples {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        Ok(max)
    }

    pub fn rss_mib(&self) -> f64 {
        self.rss_kib as f64 / 1024.0
    }

    pub fn describe(&self) -> String {
        format!(
            "{:.1} MiB (anon {:.1} + file {:.1}; VmHWM {:.1})",
            self.rss_mib(),
            self.anon_kib as f64 / 1024.0,
            self.file_kib as f64 / 1024.0,
            self.hwm_kib as f64 / 1024.0
        )
    }
}

/// The last `lines` lines of a log.
pub fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}
