//! The processes a phase measures: a `cheiron` it starts itself (so it knows the pid), the
//! control plane's processes found by their command line, and what `/proc` says of them.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use cheiron_harness::{Cluster, free_ports};

use cheiron_harness::Result;

/// A `cheiron` subcommand running against the cluster as `admin`, killed on every way out.
pub struct Cheiron {
    child: Child,
    /// `http://127.0.0.1:PORT` of its admin endpoints.
    pub admin: String,
    /// Its log file.
    pub log: PathBuf,
    started: Instant,
}

impl Cheiron {
    /// Starts `cheiron SUBCOMMAND --admin-listen … ARGS…` logging to `cheiron-NAME.log` in the
    /// run directory, with `log` as `CHEIRON_LOG`.
    pub fn start(
        cluster: &Cluster,
        name: &str,
        subcommand_and_args: &[&str],
        log: &str,
    ) -> Result<Self> {
        let [admin_port] = free_ports()?;
        let admin = format!("127.0.0.1:{admin_port}");
        let (subcommand, args) = subcommand_and_args.split_first().ok_or("no subcommand")?;
        let path = cluster.dir.join(format!("cheiron-{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_cheiron"))
            .arg(subcommand)
            .args(["--admin-listen", &admin])
            .args(args)
            .env("KUBECONFIG", cluster.admin_kubeconfig())
            .env("CHEIRON_LOG", log)
            .env("NO_COLOR", "1")
            .env("CHEIRON_POD_NAME", name)
            .env_remove("CHEIRON_FROM")
            .env_remove("CHEIRON_SELF_SIGNED")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(path.with_extension("stdout.log"))?)
            .stderr(std::fs::File::create(&path)?)
            .spawn()?;
        Ok(Self {
            child,
            admin: format!("http://{admin}"),
            log: path,
            started: Instant::now(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How long since its start.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Waits until `/readyz` answers 200 (at most `within`) and returns how long after its
    /// start that was.
    pub async fn until_ready(&mut self, within: Duration) -> Result<Duration> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        let started = self.started;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(
                    format!("cheiron exited ({status}); see {}", self.log.display()).into(),
                );
            }
            let ready = http
                .get(format!("{}/readyz", self.admin))
                .send()
                .await
                .is_ok_and(|r| r.status().as_u16() == 200);
            if ready {
                return Ok(started.elapsed());
            }
            if started.elapsed() > within {
                return Err(format!(
                    "cheiron not ready after {within:?}; see {}",
                    self.log.display()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until its log holds `text` (at most `within` from its start) and returns how long
    /// after its start that was.
    pub async fn until_logged(&mut self, text: &str, within: Duration) -> Result<Duration> {
        loop {
            if std::fs::read_to_string(&self.log).is_ok_and(|log| log.contains(text)) {
                return Ok(self.started.elapsed());
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(
                    format!("cheiron exited ({status}); see {}", self.log.display()).into(),
                );
            }
            if self.started.elapsed() > within {
                return Err(format!(
                    "{text:?} not logged after {within:?}; see {}",
                    self.log.display()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The value of an unlabelled counter or gauge, or the sum of a labelled one.
    pub async fn metric(&self, name: &str) -> Result<f64> {
        let text = reqwest::get(format!("{}/metrics", self.admin))
            .await?
            .text()
            .await?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.split(['{', ' ']).next() == Some(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// Stops the process (SIGKILL: nothing of its shutdown is measured).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Cheiron {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `/proc/PID/status` figures, in KiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    pub rss: u64,
    pub hwm: u64,
    pub anon: u64,
    pub file: u64,
}

fn kib(status: &str, field: &str) -> u64 {
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| {
            l[field.len()..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The memory of process `pid` now.
pub fn memory(pid: u32) -> Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(Memory {
        rss: kib(&status, "VmRSS:"),
        hwm: kib(&status, "VmHWM:"),
        anon: kib(&status, "RssAnon:"),
        file: kib(&status, "RssFile:"),
    })
}

/// The largest of `samples` readings of `pid`'s memory, one a second.
pub async fn max_memory(pid: u32, samples: usize) -> Result<Memory> {
    let mut max = Memory::default();
    for _ in 0..samples {
        let m = memory(pid)?;
        if m.rss >= max.rss {
            max = Memory {
                hwm: max.hwm.max(m.hwm),
                ..m
            };
        }
        max.hwm = max.hwm.max(m.hwm);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(max)
}

/// KiB as MiB.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

pub use cheiron_harness::{control_plane_pid, cpu_seconds};

/// The 1-minute load average, as a note on how busy the machine was.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// CPU used by a set of processes over a stretch of time.
pub struct CpuMeter {
    pids: Vec<(String, u32, f64)>,
    started: Instant,
}

impl CpuMeter {
    /// Starts counting for `pids` (name, pid).
    pub fn start(pids: &[(&str, u32)]) -> Self {
        Self {
            pids: pids
                .iter()
                .map(|(n, p)| ((*n).to_owned(), *p, cpu_seconds(*p).unwrap_or(0.0)))
                .collect(),
            started: Instant::now(),
        }
    }

    /// CPU seconds each used since the start, and the wall time.
    pub fn read(&self) -> (Vec<(String, f64)>, f64) {
        let used = self
            .pids
            .iter()
            .map(|(n, p, before)| (n.clone(), cpu_seconds(*p).unwrap_or(*before) - before))
            .collect();
        (used, self.started.elapsed().as_secs_f64())
    }
}
