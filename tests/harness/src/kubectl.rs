//! The real `kubectl` of the control plane's version, built by `tests/k8s/assets kubectl`, for
//! the tests that must do exactly what GitOps tools and operators do: client-side apply (the
//! `last-applied-configuration` annotation and the three-way strategic merge), server-side
//! apply with a field manager, and `kubectl diff` (a server-side dry run compared with the
//! live object).

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
};

use super::{Result, cluster::started};

/// What one `kubectl` run did.
#[derive(Debug)]
pub struct KubectlOutput {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// `kubectl` as `admin` of the shared cluster.
#[derive(Clone, Debug)]
pub struct Kubectl {
    binary: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    /// `kubectl` for the shared cluster (started by a [`super::Scenario`] first), built on
    /// first use.
    pub fn shared() -> Result<Self> {
        Ok(Self {
            binary: binary()?,
            kubeconfig: started()?.admin_kubeconfig().to_owned(),
        })
    }

    /// Runs `kubectl ARGS...` with `stdin` as its standard input (`-f -` reads it).
    pub async fn run(&self, args: &[&str], stdin: &str) -> Result<KubectlOutput> {
        let binary = self.binary.clone();
        let kubeconfig = self.kubeconfig.clone();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let stdin = stdin.to_owned();
        tokio::task::spawn_blocking(move || run_blocking(&binary, &kubeconfig, &args, &stdin))
            .await
            .map_err(|e| format!("kubectl did not finish: {e}"))?
    }

    /// Runs `kubectl ARGS...` and fails unless it exits 0; returns its standard output.
    pub async fn ok(&self, args: &[&str], stdin: &str) -> Result<String> {
        let out = self.run(args, stdin).await?;
        if out.code == Some(0) {
            Ok(out.stdout)
        } else {
            Err(format!(
                "kubectl {} exited {:?}:\n{}{}",
                args.join(" "),
                out.code,
                out.stdout,
                out.stderr
            )
            .into())
        }
    }
}

fn run_blocking(
    binary: &Path,
    kubeconfig: &Path,
    args: &[String],
    stdin: &str,
) -> Result<KubectlOutput> {
    let mut child = Command::new(binary)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        // `kubectl diff` runs $KUBECTL_EXTERNAL_DIFF, else `diff -u -N`.
        .env_remove("KUBECTL_EXTERNAL_DIFF")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    Ok(KubectlOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// The path `tests/k8s/assets kubectl` prints (it honours `CHEIRON_KUBECTL`), once per binary.
fn binary() -> Result<PathBuf> {
    static BINARY: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| build().map_err(|e| e.to_string()))
        .clone()
        .map_err(Into::into)
}

fn build() -> Result<PathBuf> {
    crate::control_plane::assets_script(
        &["kubectl"],
        "the GitOps tests need kubectl",
        "Install Go (>= 1.26; kubectl is built once from the Go module proxy and cached) \
         or set CHEIRON_KUBECTL to a kubectl of the control plane's version.",
    )
}
