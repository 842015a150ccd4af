//! One call of a credential-provider plugin, as the kubelet makes it
//! (`pkg/credentialprovider/plugin/plugin.go`, `execPlugin`): the binary `<bin dir>/<name>`
//! with the provider's `args`, never through a shell, a `CredentialProviderRequest` on stdin,
//! a `CredentialProviderResponse` of the same apiVersion on stdout. Unlike the kubelet, the
//! plugin gets only the environment its provider names (the kubelet adds its own), and its run
//! is bounded: [`ExecLimits::timeout`] (the plugin runs in a process group of its own, and the
//! whole group is killed, so a child it forked cannot outlive it), [`ExecLimits::max_output`]
//! bytes of stdout and of stderr. Errors never quote stdout (it may hold a credential) nor
//! stderr (errors reach statuses and Events a tenant reads): the last line of stderr goes to
//! the controller's log only.

use std::{
    collections::BTreeMap, os::unix::process::ExitStatusExt, path::Path, process::Stdio,
    time::Duration,
};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::{config::Provider, duration};

/// How long a plugin may run (the kubelet's catch-all is one minute).
pub const DEFAULT_PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);
/// Most bytes read from a plugin's stdout, and from its stderr.
pub const DEFAULT_MAX_PLUGIN_OUTPUT: usize = 1024 * 1024;
/// Longest stderr excerpt put in the controller's log.
const STDERR_EXCERPT: usize = 240;

/// Bounds of one plugin run.
#[derive(Clone, Copy, Debug)]
pub struct ExecLimits {
    /// Killed after this long.
    pub timeout: Duration,
    /// Most bytes of stdout, and of stderr.
    pub max_output: usize,
}

impl Default for ExecLimits {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_PLUGIN_TIMEOUT,
            max_output: DEFAULT_MAX_PLUGIN_OUTPUT,
        }
    }
}

/// What the plugin is asked.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// The image, as the manager names it.
    pub image: String,
    /// A service-account token (KEP-4412).
    pub service_account_token: Option<String>,
    /// The ServiceAccount's annotations the provider asked for.
    pub service_account_annotations: BTreeMap<String, String>,
}

/// The kubelet's `CredentialProviderRequest` (`k8s.io/kubelet/pkg/apis/credentialprovider/v1`)
/// on the wire: what cheiron sends a plugin, and what `cheiron credential-provider` reads.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireRequest {
    pub api_version: String,
    pub kind: String,
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_token: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub service_account_annotations: BTreeMap<String, String>,
}

/// The kubelet's `CredentialProviderResponse` on the wire: what a plugin answers cheiron, and
/// what `cheiron credential-provider` answers the kubelet. Decoded strictly, as the kubelet does.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WireResponse {
    pub api_version: String,
    pub kind: String,
    pub cache_key_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_duration: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub auth: BTreeMap<String, AuthConfig>,
}

/// One credential of a [`WireResponse`].
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub password: String,
}

/// One registry credential of a response.
#[derive(Clone, PartialEq, Eq)]
pub struct Auth {
    /// The pattern (a kubelet registry key, globs allowed) the credential serves.
    pub pattern: String,
    /// User name.
    pub username: String,
    /// Password or token.
    pub password: String,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Auth({}, <redacted>)", self.pattern)
    }
}

/// A plugin's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// `Image`, `Registry` or `Global`.
    pub cache_key_type: String,
    /// How long the credential lives: the response's `cacheDuration`, else `None` (the
    /// provider's `defaultCacheDuration` applies).
    pub cache_duration: Option<Duration>,
    /// The credentials, by pattern.
    pub auth: Vec<Auth>,
}

/// Why a plugin call failed. Never holds stdout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// It could not be started.
    #[error("plugin {name} could not be started: {message}")]
    Spawn {
        /// Provider name.
        name: String,
        /// The OS error.
        message: String,
    },
    /// It ran longer than the timeout and was killed.
    #[error("plugin {name} did not answer within {timeout:?} and was killed")]
    Timeout {
        /// Provider name.
        name: String,
        /// The limit.
        timeout: Duration,
    },
    /// It printed more than the limit.
    #[error("plugin {name} printed more than {limit} bytes on {stream}; its output was discarded")]
    TooMuchOutput {
        /// Provider name.
        name: String,
        /// `stdout` or `stderr`.
        stream: &'static str,
        /// The limit.
        limit: usize,
    },
    /// It exited unsuccessfully. Its stderr is in the controller's log, never here: this
    /// message reaches statuses and Events that tenants read.
    #[error("plugin {name} {status}; its stderr is in the controller's log")]
    Failed {
        /// Provider name.
        name: String,
        /// `exited with status N` or `was killed by signal N`.
        status: String,
    },
    /// Its stdout is not a usable response; says where, never what.
    #[error(
        "plugin {name} answered with something that is not a CredentialProviderResponse: {problem}"
    )]
    BadResponse {
        /// Provider name.
        name: String,
        /// What is wrong (structure only).
        problem: String,
    },
}

/// Runs `provider`'s plugin from `bin_dir` once for `request`.
pub async fn call(
    provider: &Provider,
    bin_dir: &Path,
    request: &Request,
    limits: ExecLimits,
) -> Result<Response, ExecError> {
    let name = provider.name.clone();
    let body = serde_json::to_vec(&WireRequest {
        api_version: provider.api_version.clone(),
        kind: "CredentialProviderRequest".to_owned(),
        image: request.image.clone(),
        service_account_token: request.service_account_token.clone(),
        service_account_annotations: request.service_account_annotations.clone(),
    })
    .map_err(|e| ExecError::Spawn {
        name: name.clone(),
        message: format!("encoding the request: {e}"),
    })?;
    let mut group = spawn(provider, bin_dir)?;
    let child = &mut group.0;
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let run = async {
        let feed = async {
            if let Some(mut stdin) = stdin {
                // A plugin that does not read its request is its own business.
                let _ = stdin.write_all(&body).await;
                let _ = stdin.shutdown().await;
            }
        };
        let (_, out, err) = tokio::join!(
            feed,
            read_bounded(stdout, limits.max_output),
            read_bounded(stderr, limits.max_output)
        );
        let status = child.wait().await;
        (status, out, err)
    };
    let (status, out, err) = match tokio::time::timeout(limits.timeout, run).await {
        Ok(done) => done,
        Err(_) => {
            // The plugin and everything it forked; then reap the plugin now rather than later.
            group.kill();
            let _ = group.0.wait().await;
            return Err(ExecError::Timeout {
                name,
                timeout: limits.timeout,
            });
        }
    };
    let too_much = |stream| ExecError::TooMuchOutput {
        name: name.clone(),
        stream,
        limit: limits.max_output,
    };
    let out = out.ok_or_else(|| too_much("stdout"))?;
    let err = err.ok_or_else(|| too_much("stderr"))?;
    let status = status.map_err(|e| ExecError::Spawn {
        name: name.clone(),
        message: e.to_string(),
    })?;
    let stderr = stderr_excerpt(&err);
    if !status.success() {
        let status = describe(status);
        tracing::warn!(provider = %name, stderr = %stderr, "credential provider plugin {status}");
        return Err(ExecError::Failed { name, status });
    }
    parse_response(&name, &provider.api_version, &out).inspect_err(|_| {
        if !stderr.is_empty() {
            tracing::warn!(provider = %name, stderr = %stderr, "credential provider plugin answered badly");
        }
    })
}

/// Starts `provider`'s plugin from `bin_dir` with its arguments and only its own environment,
/// in a process group of its own, its three streams piped.
fn spawn(provider: &Provider, bin_dir: &Path) -> Result<ProcessGroup, ExecError> {
    let mut command = tokio::process::Command::new(bin_dir.join(&provider.name));
    command
        .args(&provider.args)
        .env_clear()
        .envs(provider.env.iter().map(|v| (&v.name, &v.value)))
        .current_dir(bin_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, killed whole: children it forks go with it.
        .process_group(0)
        .kill_on_drop(true);
    let child = command.spawn().map_err(|e| ExecError::Spawn {
        name: provider.name.clone(),
        message: e.to_string(),
    })?;
    Ok(ProcessGroup(child))
}

/// `exited with status N` or `was killed by signal N`.
fn describe(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "failed".to_owned(),
    }
}

/// A running plugin, the leader of its own process group. The group is killed when the call
/// times out or is dropped (its refresh stopped) before the plugin was reaped: while the
/// leader is unreaped its id cannot be reused, so the signal reaches only its group.
struct ProcessGroup(tokio::process::Child);

impl ProcessGroup {
    fn kill(&mut self) {
        let Some(pid) = self.0.id().and_then(|id| i32::try_from(id).ok()) else {
            return; // reaped already
        };
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            // ESRCH: the whole group is gone already.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads at most `limit` bytes; `None` when there was more (the rest is drained so the
/// plugin is not blocked on a full pipe, and discarded).
async fn read_bounded(stream: Option<impl AsyncRead + Unpin>, limit: usize) -> Option<Vec<u8>> {
    let Some(mut stream) = stream else {
        return Some(Vec::new());
    };
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut over = false;
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) if over || out.len() + n > limit => {
                over = true;
                out.clear();
            }
            Ok(n) => out.extend_from_slice(&chunk[..n]),
        }
    }
    (!over).then_some(out)
}

/// The last non-empty line of stderr, printable characters only, bounded, for the log.
fn stderr_excerpt(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let Some(line) = text.lines().rev().map(str::trim).find(|l| !l.is_empty()) else {
        return String::new();
    };
    let mut clean: String = line
        .chars()
        .filter(|c| !c.is_control())
        .take(STDERR_EXCERPT)
        .collect();
    if line.chars().count() > STDERR_EXCERPT {
        clean.push('…');
    }
    clean
}

/// Reads a response as the kubelet does: apiVersion first (must be the provider's), then the
/// kind, then a strict decode; a valid `cacheKeyType`.
pub fn parse_response(name: &str, api_version: &str, out: &[u8]) -> Result<Response, ExecError> {
    let bad = |problem: String| ExecError::BadResponse {
        name: name.to_owned(),
        problem,
    };
    // Untyped first: serde_json's syntax errors carry positions, never content.
    let value: serde_json::Value = serde_json::from_slice(out).map_err(|e| {
        bad(format!(
            "not JSON (line {}, column {})",
            e.line(),
            e.column()
        ))
    })?;
    let got = value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    if got != api_version {
        let shown = if super::config::PROVIDER_API_VERSIONS.contains(&got) {
            got
        } else {
            "another"
        };
        return Err(bad(format!(
            "apiVersion is {shown}, expected {api_version}"
        )));
    }
    if value.get("kind").and_then(|v| v.as_str()) != Some("CredentialProviderResponse") {
        return Err(bad("kind is not CredentialProviderResponse".to_owned()));
    }
    // The decode error is not shown: it may quote a credential (the kubelet does the same).
    let wire: WireResponse = serde_json::from_value(value)
        .map_err(|_| bad("fields do not decode as a CredentialProviderResponse".to_owned()))?;
    let _ = (&wire.api_version, &wire.kind);
    if !matches!(
        wire.cache_key_type.as_str(),
        "Image" | "Registry" | "Global"
    ) {
        return Err(bad(
            "cacheKeyType is not Image, Registry or Global".to_owned()
        ));
    }
    let cache_duration = wire
        .cache_duration
        .as_deref()
        .map(duration::parse)
        .transpose()
        .map_err(|e| bad(format!("cacheDuration is {e}")))?;
    Ok(Response {
        cache_key_type: wire.cache_key_type,
        cache_duration,
        auth: wire
            .auth
            .into_iter()
            .map(|(pattern, a)| Auth {
                pattern,
                username: a.username,
                password: a.password,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "credentialprovider.kubelet.k8s.io/v1";

    #[test]
    fn a_response_is_read_as_the_kubelet_reads_it() -> Result<(), ExecError> {
        let ok = br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"6s","auth":{"*.example.com":{"username":"u","password":"p"}}}"#;
        let r = parse_response("fake", V1, ok)?;
        assert_eq!(r.cache_duration, Some(Duration::from_secs(6)));
        assert_eq!(r.auth.len(), 1);
        assert_eq!(r.auth[0].pattern, "*.example.com");
        Ok(())
    }

    #[test]
    fn bad_responses_are_refused_without_quoting_them() {
        let secret = "s3cr3t-value";
        let cases = [
            format!("garbage {secret}"),
            format!(
                r#"{{"apiVersion":"{secret}","kind":"CredentialProviderResponse","cacheKeyType":"Image"}}"#
            ),
            format!(r#"{{"apiVersion":"{V1}","kind":"Other","cacheKeyType":"Image"}}"#),
            format!(
                r#"{{"apiVersion":"{V1}","kind":"CredentialProviderResponse","cacheKeyType":"Image","auth":{{"r":{{"username":1,"password":"{secret}"}}}}}}"#
            ),
            format!(
                r#"{{"apiVersion":"{V1}","kind":"CredentialProviderResponse","cacheKeyType":"{secret}"}}"#
            ),
            format!(
                r#"{{"apiVersion":"{V1}","kind":"CredentialProviderResponse","cacheKeyType":"Image","extra":"{secret}"}}"#
            ),
            format!(
                r#"{{"apiVersion":"{V1}","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"{secret}"}}"#
            ),
        ];
        for case in cases {
            match parse_response("fake", V1, case.as_bytes()) {
                Ok(_) => panic!("accepted: {case}"),
                Err(e) => assert!(!e.to_string().contains(secret), "{e}"),
            }
        }
    }

    /// A provider whose plugin is the script `body`, in a fresh directory.
    fn script(name: &str, body: &str) -> Result<(Provider, std::path::PathBuf), std::io::Error> {
        let dir = std::env::temp_dir().join(format!("cheiron-exec-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        crate::install_test_plugin(&dir.join(name), &format!("#!/bin/sh\n{body}\n"))?;
        let provider = Provider {
            name: name.to_owned(),
            match_images: Vec::new(),
            default_cache_duration: Duration::from_secs(60),
            api_version: V1.to_owned(),
            args: vec!["--flag".to_owned()],
            env: vec![super::super::config::EnvVar {
                name: "ONLY".to_owned(),
                value: "this".to_owned(),
            }],
            token_attributes: None,
            allowed_namespaces: Vec::new(),
        };
        Ok((provider, dir))
    }

    fn request() -> Request {
        Request {
            image: "fake.example.com/app".to_owned(),
            ..Request::default()
        }
    }

    #[tokio::test]
    async fn a_plugin_gets_the_request_its_args_and_only_its_env()
    -> Result<(), Box<dyn std::error::Error>> {
        // Echoes what it got as the password: request on stdin, args, environment.
        let (provider, dir) = script(
            "echo",
            r#"req=$(cat); env=$(env | cut -d= -f1 | grep -v '^PWD$' | sort | tr '\n' ,)
printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","auth":{"fake.example.com":{"username":"%s","password":"%s"}}}' "$1|$env" "$(echo "$req" | tr -d '"')""#,
        )?;
        let response = call(&provider, &dir, &request(), ExecLimits::default()).await?;
        let auth = response.auth.first().ok_or("one credential")?;
        assert_eq!(auth.username, "--flag|ONLY,");
        assert!(
            auth.password.contains("kind:CredentialProviderRequest"),
            "{}",
            auth.password
        );
        assert!(
            auth.password.contains("image:fake.example.com/app"),
            "{}",
            auth.password
        );
        assert_eq!(response.cache_duration, None);
        std::fs::remove_dir_all(dir)?;
        Ok(())
    }

    #[tokio::test]
    async fn a_hanging_plugin_is_killed_at_the_timeout() -> Result<(), Box<dyn std::error::Error>> {
        let (provider, dir) = script("hang", "exec sleep 30")?;
        let limits = ExecLimits {
            timeout: Duration::from_millis(300),
            ..ExecLimits::default()
        };
        let started = std::time::Instant::now();
        let error = call(&provider, &dir, &request(), limits).await.err();
        assert!(
            matches!(error, Some(ExecError::Timeout { .. })),
            "{error:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        std::fs::remove_dir_all(dir)?;
        Ok(())
    }

    #[tokio::test]
    async fn output_past_the_limit_fails_the_call() -> Result<(), Box<dyn std::error::Error>> {
        let (provider, dir) = script(
            "flood",
            "head -c 100000 /dev/zero; head -c 10 /dev/zero >&2",
        )?;
        let limits = ExecLimits {
            max_output: 1000,
            ..ExecLimits::default()
        };
        let error = call(&provider, &dir, &request(), limits)
            .await
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some("plugin flood printed more than 1000 bytes on stdout; its output was discarded")
        );
        std::fs::remove_dir_all(dir)?;
        Ok(())
    }

    #[tokio::test]
    async fn a_failing_plugins_stderr_stays_out_of_the_error()
    -> Result<(), Box<dyn std::error::Error>> {
        // The error reaches statuses and Events a tenant reads; stderr goes to the log only.
        let (provider, dir) = script(
            "fails",
            "echo noise >&2; echo 'STDERR-CANARY no credentials found' >&2; exit 3",
        )?;
        let error = call(&provider, &dir, &request(), ExecLimits::default())
            .await
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some("plugin fails exited with status 3; its stderr is in the controller's log")
        );
        std::fs::remove_dir_all(dir)?;
        Ok(())
    }

    /// True while `pid` runs (a zombie awaiting its reaper counts as gone).
    fn alive(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
    }

    #[tokio::test]
    async fn a_timed_out_plugins_forked_children_are_killed_with_it()
    -> Result<(), Box<dyn std::error::Error>> {
        // The plugin forks a child that would outlive it (and keeps its stdout open), writes
        // the child's pid, and hangs.
        let (provider, dir) = script("forks", "sleep 300 &\necho $! > child.pid\nwait")?;
        let limits = ExecLimits {
            timeout: Duration::from_millis(500),
            ..ExecLimits::default()
        };
        let error = call(&provider, &dir, &request(), limits).await.err();
        assert!(
            matches!(error, Some(ExecError::Timeout { .. })),
            "{error:?}"
        );
        let pid = std::fs::read_to_string(dir.join("child.pid"))?;
        let pid = pid.trim();
        assert!(!pid.is_empty(), "the plugin forked its child");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let survived = alive(pid);
        if survived {
            let _ = std::process::Command::new("kill")
                .args(["-9", pid])
                .status();
        }
        assert!(!survived, "the plugin's child {pid} outlived the timeout");
        std::fs::remove_dir_all(dir)?;
        Ok(())
    }

    #[test]
    fn stderr_is_shown_as_one_bounded_printable_line() {
        assert_eq!(stderr_excerpt(b""), "");
        assert_eq!(
            stderr_excerpt(b"first\nno credentials\x1b[31m\n\n"),
            "no credentials[31m"
        );
        let long = "x".repeat(1000);
        assert_eq!(
            stderr_excerpt(long.as_bytes()).chars().count(),
            STDERR_EXCERPT + 1
        );
    }
}
