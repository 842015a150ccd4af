//! What cheiron's tests share, a crate of its own that the test binaries and the cluster
//! benchmark use as a library. Mostly the end-to-end harness: one real control plane per test
//! binary (etcd, kube-apiserver, kube-controller-manager from `tests/k8s/assets`), the CRDs from
//! `cheiron crds`, and one shared `cheiron webhook` in cluster mode registered through
//! [`cheiron::install::WebhookRegistration`], all started lazily by the first test.
//!
//! Tests get a [`Scenario`] (`Scenario::new(CHEIRON, "slug")`, with `CHEIRON` the test crate's
//! [`cheiron!`]), work only in namespaces it creates (or in cluster-scoped objects it names
//! uniquely, scoped to its namespaces), and so run in parallel. Processes are stopped by a
//! watchdog when the binary exits; files and logs of the last run stay in
//! `target/tmp/cheiron-e2e/` (a failing test prints the path).
//!
//! The controller tests (`tests/controller/`) use [`controller`] on top: `cheiron controller` /
//! `cheiron run` processes and a shared controller.
//!
//! The fault tests (`tests/reliability/`) start a [`ControlPlane`] per test, whose etcd and
//! apiserver they stop and start again, with webhook replicas behind a [`service_proxy`],
//! Pod-create [`load`] through the apiserver, and a [`partition`] between a process and its
//! apiserver.
//!
//! The webhook tests, in process (`tests/admission_router.rs`) and over TLS
//! (`tests/webhook_tls.rs`), share [`review`] and [`source`]: the AdmissionReview fixtures of
//! `tests/data/` and the managers and namespaces they are judged against.

mod cluster;
mod control_plane;
pub mod controller;
pub mod kubectl;
pub mod load;
pub mod node;
mod objects;
pub mod partition;
mod process;
pub mod review;
mod scenario;
pub mod service_proxy;
pub mod source;
pub mod stats;
mod tokens;
pub mod tools;
mod wait;
pub mod watches;
mod webhook;
pub mod workload;

pub use cluster::{Cluster, run_dir};
pub use control_plane::{
    ControlPlane, ControlPlaneOptions, LIMITED_USER, WEBHOOK_USER, apiserver_log_lines, free_ports,
};
pub use objects::{Admitted, apply_object, grant_cluster_role, pod, service_account};
pub use process::{control_plane_pid, cpu_seconds, rss_bytes};
pub use scenario::{SCENARIO_LABEL, SETTLE, Scenario};
pub use tokens::{service_account_token, write_token_kubeconfig};
pub use wait::wait_for;
pub use webhook::{WebhookCertificates, WebhookProcess, admin_get, install_crds, register};

/// The cheiron under test, as cargo describes it to the integration tests and benchmarks of the
/// `cheiron` package only (not to this crate, which is why the test crate passes it in). Each
/// test binary builds it once with [`cheiron!`].
#[derive(Clone, Copy, Debug)]
pub struct Cheiron {
    /// `CARGO_BIN_EXE_cheiron`: the binary every cheiron process of the cluster runs.
    pub binary: &'static str,
    /// `CARGO_TARGET_TMPDIR`: runs keep their files and logs in `cheiron-e2e/` below it.
    pub target_tmpdir: &'static str,
    /// `CARGO_BIN_EXE_cheiron-fake-credential-provider`: the fake kubelet credential-provider
    /// plugin (tests/support/fake_credential_provider.rs).
    pub fake_credential_provider: &'static str,
}

impl Cheiron {
    /// `cheiron audit ARGS...` as the user of `kubeconfig`, with no namespace or output format
    /// from the environment; its exit status and output.
    pub async fn audit(
        &self,
        kubeconfig: &std::path::Path,
        args: &[&str],
    ) -> Result<std::process::Output> {
        let (binary, kubeconfig) = (self.binary, kubeconfig.to_owned());
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        Ok(tokio::task::spawn_blocking(move || {
            std::process::Command::new(binary)
                .arg("audit")
                .args(&args)
                .env("KUBECONFIG", kubeconfig)
                .env("CHEIRON_LOG", "error")
                .env_remove("CHEIRON_NAMESPACE")
                .env_remove("CHEIRON_OUTPUT")
                .output()
        })
        .await??)
    }

    /// `cheiron audit -n NS -o json`: its exit code and the findings.
    pub async fn audit_json(
        &self,
        kubeconfig: &std::path::Path,
        namespace: &str,
    ) -> Result<(Option<i32>, Vec<serde_json::Value>)> {
        let out = self
            .audit(kubeconfig, &["-n", namespace, "-o", "json"])
            .await?;
        let findings: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "audit printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        Ok((
            out.status.code(),
            findings.as_array().cloned().unwrap_or_default(),
        ))
    }
}

/// The [`Cheiron`] of the test crate this expands in:
/// `const CHEIRON: cheiron_harness::Cheiron = cheiron_harness::cheiron!();`
#[macro_export]
macro_rules! cheiron {
    () => {
        $crate::Cheiron {
            binary: env!("CARGO_BIN_EXE_cheiron"),
            target_tmpdir: env!("CARGO_TARGET_TMPDIR"),
            fake_credential_provider: env!("CARGO_BIN_EXE_cheiron-fake-credential-provider"),
        }
    };
}

/// Any failure of the harness or a test. Its `Debug` (what the test runner prints for a test
/// that returns `Err`) is its message, so multi-line messages with log tails stay readable.
pub struct Error(Box<dyn std::error::Error + Send + Sync>);

impl<E: Into<Box<dyn std::error::Error + Send + Sync>>> From<E> for Error {
    fn from(error: E) -> Self {
        Self(error.into())
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

/// `Result` with [`Error`]; `Result` alone is what a test returns.
pub type Result<T = (), E = Error> = std::result::Result<T, E>;
