//! Installing cheiron: the plain manifests of `webhook-config/` and the Helm chart of
//! `charts/cheiron/`.
//!
//! - `drift`: the committed files are what the program generates.
//! - `chart`: `helm lint --strict` passes, `helm template` renders every certificate option
//!   and both deployment modes, and what the chart renders is what the plain manifests hold
//!   (webhook registration, RBAC, Deployments, NetworkPolicies), so the two cannot drift apart;
//!   invalid values are refused.
//! - `cluster`: on a real kube-apiserver (the e2e harness, its own control plane for this
//!   binary), both apply cleanly in a server-side dry run and their Pods meet the restricted
//!   Pod Security Standard.
//! - `rbac`: SubjectAccessReviews show each ServiceAccount (webhook, controller, combined,
//!   certificates) can make every call its code makes and nothing broader.
//! - `under_rbac`: `cheiron webhook`, `cheiron controller` and `cheiron run` do their job under
//!   exactly that RBAC.
//! - `upgrade`: `helm upgrade` from the previous chart (CRDs in `crds/`) adopts the CRDs as
//!   docs/install.md says, a later upgrade changes them, and uninstalling keeps them.
//!
//! Tests that need helm get it from `scripts/helm` (`harness::tools::helm`) and fail, with a message saying how to
//! provide it, when it cannot.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use cheiron_harness::{self as harness, Result};
use serde_json::Value;

/// The cheiron the `cluster` tests start their cluster with.
const CHEIRON: harness::Cheiron = harness::cheiron!();

/// Release name and namespace the chart is rendered with: the names of the plain manifests.
const RELEASE: &str = "cheiron";
const NAMESPACE: &str = "cheiron-system";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every document of a YAML stream, nulls (empty documents) left out.
fn documents(text: &[u8]) -> Result<Vec<Value>> {
    Ok(serde_saphyr::from_slice_multiple(text)?)
}

/// The committed plain manifests (everything but the CRDs), as a user applies them.
fn plain_objects() -> Result<Vec<Value>> {
    let mut objects = Vec::new();
    for file in ["install.yaml", "webhook-certs.yaml"] {
        let path = repo().join("webhook-config").join(file);
        objects.extend(documents(
            &std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?,
        )?);
    }
    Ok(objects)
}

/// The plain manifests of the combined mode (`cheiron run` under one ServiceAccount), as
/// `cheiron::install` renders them: only the split default is committed.
fn combined_objects() -> Result<Vec<Value>> {
    let install = cheiron::install::Install::default();
    Ok([
        install.server_objects_for(cheiron::install::DeploymentMode::Combined)?,
        install.certificate_objects()?,
    ]
    .concat())
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .ok_or_else(|| format!("no {kind} {name} among {}", describe(objects)).into())
}

fn describe(objects: &[Value]) -> String {
    let names: Vec<String> = objects
        .iter()
        .map(|o| format!("{}/{}", o["kind"], o["metadata"]["name"]).replace('"', ""))
        .collect();
    names.join(", ")
}

/// Runs helm with `args`, returning its output whatever its exit status.
fn run_helm(args: &[&str]) -> Result<Output> {
    Ok(Command::new(harness::tools::helm()?)
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()?)
}

/// `helm template` of the chart as release [`RELEASE`] in [`NAMESPACE`] with `--set` values:
/// what `helm install` creates (`helm test`'s objects, which exist only while it runs, left
/// out: [`render_with_tests`]).
fn render(values: &[&str]) -> Result<Vec<Value>> {
    render_release(RELEASE, values)
}

/// `helm template` of the chart as release `release` in [`NAMESPACE`] with `--set` values.
fn render_release(release: &str, values: &[&str]) -> Result<Vec<Value>> {
    render_args(release, values, &template_args_of(release, values))
}

/// [`render_release`] with the objects of `helm test`.
fn render_with_tests(release: &str, values: &[&str]) -> Result<Vec<Value>> {
    let mut args = template_args_of(release, values);
    args.retain(|a| *a != "--skip-tests");
    render_args(release, values, &args)
}

fn render_args(release: &str, values: &[&str], args: &[&str]) -> Result<Vec<Value>> {
    let output = run_helm(args)?;
    if !output.status.success() {
        return Err(format!(
            "helm template {release} {values:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    documents(&output.stdout)
}

fn template_args<'a>(values: &[&'a str]) -> Vec<&'a str> {
    template_args_of(RELEASE, values)
}

fn template_args_of<'a>(release: &'a str, values: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "template",
        release,
        "charts/cheiron",
        "--namespace",
        NAMESPACE,
        "--skip-tests",
    ];
    for value in values {
        args.extend(["--set", value]);
    }
    args
}

/// Values that switch on every optional part: cert-manager certificates and a ServiceMonitor.
const CERT_MANAGER_AND_MONITORING: [&str; 2] = [
    "certificates.source=cert-manager",
    "serviceMonitor.enabled=true",
];

/// The API groups whose CRDs (cert-manager, Prometheus Operator) the test cluster lacks:
/// their objects are checked as rendered only.
const FOREIGN_GROUPS: [&str; 2] = ["cert-manager.io/", "monitoring.coreos.com/"];

fn is_foreign(object: &Value) -> bool {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    FOREIGN_GROUPS.iter().any(|g| api_version.starts_with(g))
}

mod drift;

mod chart;

mod cluster;

mod rbac;

mod under_rbac;

/// The chart's opt-in PrometheusRule: `promtool` accepts it and its unit tests
/// (`tests/alerts/rules_test.yaml`) pass, and every metric its expressions use is one a
/// running cheiron exports.
mod alerts;

mod node_agent;

/// The krew manifest of `kubectl cheiron` (`scripts/krew-manifest`).
mod krew;

/// Names that stay valid and unique for the longest release name Helm allows.
mod names;

mod values;

mod webhook_network;

/// `helm upgrade` from the chart with `crds/` to templated CRDs, and across a CRD change.
mod upgrade;

/// The chart's ServiceMonitor: HTTPS with the serving certificate's CA and a bearer token when
/// metrics auth is on, relabelings and honorLabels; the monitoring values' schema.
mod monitoring;

/// The chart's Grafana dashboard: its panels, every metric it queries exported by a running
/// cheiron, and its opt-in ConfigMap for Grafana's sidecar.
mod dashboard;
