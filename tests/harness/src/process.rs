//! Child processes of the test cluster. Each writes to its own log file; a watchdog stops them
//! when the test binary ends, however it ends (normal exit, panic, SIGKILL), because the
//! statics that own them are never dropped.

use std::{
    fs::File,
    io::Write,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    sync::{Mutex, OnceLock},
    time::{Duration, Instant},
};

use super::Result;

/// How many log lines an error message quotes.
const LOG_TAIL_LINES: usize = 40;

/// A process of the test cluster, stopped on drop and by the watchdog.
#[derive(Debug)]
pub struct Process {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `command` with stdout and stderr going to `log`, and hands its pid to the watchdog.
    pub fn spawn(name: &str, command: &mut Command, log: &Path) -> Result<Self> {
        let file =
            File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        let mut child = command.spawn().map_err(|e| {
            format!(
                "cannot start {name} ({}): {e}",
                command.get_program().to_string_lossy()
            )
        })?;
        if let Err(e) = watchdog_send(&format!("+{}", child.id())) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        Ok(Self {
            name: name.to_owned(),
            child,
            log: log.to_owned(),
        })
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// An error if the process has exited, quoting its log.
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(self
                .failure(&format!("{} exited ({status})", self.name))
                .into()),
        }
    }

    /// `what` followed by the tail of the log and its location.
    pub fn failure(&self, what: &str) -> String {
        format!(
            "{what}\n--- last {LOG_TAIL_LINES} lines of {} ---\n{}",
            self.log.display(),
            log_tail(&self.log, LOG_TAIL_LINES)
        )
    }

    /// The process id (for `/proc/PID/status`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a node failure or the OOM killer would, and waits for the exit. Idempotent.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            let _ = watchdog_send(&format!("-{}", self.child.id()));
            return Some(status);
        }
        let _ = self.child.kill();
        let status = self.child.wait().ok();
        let _ = watchdog_send(&format!("-{}", self.child.id()));
        status
    }

    /// Sends SIGTERM and returns at once (for tests that keep working while it shuts down).
    pub fn terminate(&self) {
        // std only sends SIGKILL; kill(1) sends SIGTERM without unsafe code.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// The exit status if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM, then SIGKILL after `grace`. Idempotent.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            let _ = watchdog_send(&format!("-{}", self.child.id()));
            return Some(status);
        }
        self.terminate();
        let deadline = Instant::now() + grace;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
            }
        };
        let _ = watchdog_send(&format!("-{}", self.child.id()));
        status
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// Has `dir` (bulky scratch data such as etcd's) deleted once the processes are killed at exit.
pub fn discard_at_exit(dir: &Path) -> Result<()> {
    watchdog_send(&format!("={}", dir.display()))
}

/// Resident set size of process `pid` in bytes, from `/proc/PID/status` (`VmRSS`).
pub fn rss_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

/// CPU seconds (user + system) process `pid` has used so far.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("cannot read /proc/{pid}/stat: {e}"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or("odd /proc/PID/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64> {
        Ok(fields
            .get(i)
            .ok_or("short /proc/PID/stat")?
            .parse::<f64>()?)
    };
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// The pid of the control plane's `binary` (`kube-apiserver`, `etcd`) of this run: its command
/// line names a file in the run directory.
pub fn control_plane_pid(dir: &Path, binary: &str) -> Option<u32> {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let program = args.first()?;
            (program.ends_with(&format!("/{binary}")) && args.iter().any(|a| a.contains(&dir)))
                .then_some(pid)
        })
}

/// The last `lines` lines of a log file (or why it cannot be read).
pub fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Kills every registered pid once this process is gone, then deletes the registered scratch
/// directories. It reads `+PID` / `-PID` / `=PATH` lines on stdin; the kernel closes our end
/// of the pipe when the test binary exits for any reason, so end-of-file is the signal. It
/// runs in its own process group, so a Ctrl-C aimed at `cargo test` does not take it down
/// before it has cleaned up.
const WATCHDOG_SCRIPT: &str = r#"
declare -A pids=()
discard=()
while IFS= read -r line; do
  case "$line" in
    +*) pids[${line#+}]=1 ;;
    -*) unset "pids[${line#-}]" ;;
    =*) discard+=("${line#=}") ;;
  esac
done
# A throwaway cluster: no need for a graceful stop, and nothing is left running once
# `cargo test` returns.
[ ${#pids[@]} -gt 0 ] && kill -KILL "${!pids[@]}" 2>/dev/null
# Wait (at most 5 s) until they are gone or zombies before deleting their files.
for _ in $(seq 100); do
  alive=
  for p in "${!pids[@]}"; do
    state=$(ps -o stat= -p "$p" 2>/dev/null) || continue
    case "$state" in Z*) ;; *) alive=1 ;; esac
  done
  [ -z "$alive" ] && break
  sleep 0.05
done
[ ${#discard[@]} -gt 0 ] && rm -rf -- "${discard[@]}"
exit 0
"#;

struct Watchdog {
    stdin: ChildStdin,
    // Kept so the handle is not dropped; the watchdog outlives us by design.
    _child: Child,
}

static WATCHDOG: OnceLock<Result<Mutex<Watchdog>, String>> = OnceLock::new();

fn watchdog_send(line: &str) -> Result<()> {
    let watchdog = WATCHDOG.get_or_init(|| {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("bash")
            .args(["-c", WATCHDOG_SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start the process watchdog (bash): {e}"))?;
        let stdin = child.stdin.take().ok_or("the watchdog has no stdin")?;
        Ok(Mutex::new(Watchdog {
            stdin,
            _child: child,
        }))
    });
    let watchdog = watchdog.as_ref().map_err(|e| e.clone())?;
    let mut watchdog = watchdog.lock().map_err(|_| "watchdog lock poisoned")?;
    writeln!(watchdog.stdin, "{line}")?;
    watchdog.stdin.flush()?;
    Ok(())
}
