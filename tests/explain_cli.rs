//! `cheiron explain` as a user runs it: offline goldens (text and JSON), the kubectl plugin
//! name, and the one-line errors for no kubeconfig and a cluster without the CRDs.
//! Regenerate the goldens with `CHEIRON_UPDATE_GOLDENS=1 cargo test --test explain_cli`.

#[path = "support/crdless_cluster.rs"]
mod crdless_cluster;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(program: &Path, args: &[&str], kubeconfig: Option<&Path>) -> std::io::Result<Output> {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(root())
        .env_remove("CHEIRON_FROM")
        .env_remove("CHEIRON_NAMESPACE")
        .env_remove("CHEIRON_OUTPUT")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("CHEIRON_LOG", "error")
        .env(
            "KUBECONFIG",
            kubeconfig.unwrap_or(Path::new("/nonexistent/kubeconfig")),
        )
        .stdin(Stdio::null());
    command.output()
}

fn cheiron() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cheiron"))
}

/// Compares `actual` with the golden file, or rewrites it with `CHEIRON_UPDATE_GOLDENS=1`.
fn golden(name: &str, actual: &str) -> TestResult {
    let path = root().join("tests/data/explain").join(name);
    if std::env::var_os("CHEIRON_UPDATE_GOLDENS").is_some() {
        std::fs::write(&path, actual)?;
    }
    let expected = std::fs::read_to_string(&path)?;
    assert_eq!(actual, expected, "{} differs", path.display());
    Ok(())
}

const FROM: [&str; 4] = [
    "explain",
    "--from",
    "tests/data/explain/managers.yaml",
    "tests/data/explain/objects.yaml",
];

#[test]
fn explain_offline_prints_every_verdict_in_words_as_the_golden_says() -> TestResult {
    let out = run(&cheiron(), &FROM, None)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    golden("objects.txt", &String::from_utf8(out.stdout)?)
}

#[test]
fn explain_offline_json_is_the_golden_and_parses() -> TestResult {
    let mut args = FROM.to_vec();
    args.extend(["-o", "json"]);
    let out = run(&cheiron(), &args, None)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?;
    let value: serde_json::Value = serde_json::from_str(&text)?;
    assert_eq!(
        value[0]["outcome"]["missing"],
        serde_json::json!(["quay-pull"])
    );
    golden("objects.json", &text)
}

#[test]
fn the_same_binary_named_kubectl_cheiron_answers_as_a_kubectl_plugin() -> TestResult {
    let dir = tempfile::tempdir()?;
    let plugin = dir.path().join("kubectl-cheiron");
    std::os::unix::fs::symlink(cheiron(), &plugin)?;
    let out = run(&plugin, &FROM, None)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    golden("objects.txt", &String::from_utf8(out.stdout)?)?;
    let help = run(&plugin, &["explain", "--help"], None)?;
    assert!(
        String::from_utf8(help.stdout)?.contains("Usage: kubectl cheiron explain"),
        "help names the plugin"
    );
    Ok(())
}

#[test]
fn explain_without_a_kubeconfig_fails_in_one_line_pointing_at_from() -> TestResult {
    let out = run(&cheiron(), &["explain", "pod", "web"], None)?;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr)?;
    assert!(
        err.starts_with(
            "cheiron: cannot reach the cluster (set KUBECONFIG or --kubeconfig, run in a Pod, or use --from): "
        ),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    Ok(())
}

#[test]
fn explain_of_a_kind_it_does_not_know_says_what_it_takes() -> TestResult {
    let out = run(&cheiron(), &["explain", "deployment", "web"], None)?;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr)?,
        "cheiron: cannot explain a deployment: give pod NAME or serviceaccount NAME\n"
    );
    Ok(())
}

#[test]
fn explain_on_a_cluster_without_the_crds_says_how_to_install_them() -> TestResult {
    let dir = tempfile::tempdir()?;
    let kubeconfig = crdless_cluster::kubeconfig(dir.path(), 4)?;
    let out = run(&cheiron(), &["explain", "pod", "web"], Some(&kubeconfig))?;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr)?,
        "cheiron: the cluster does not serve ImagePullSecretManager (cheiron.anny.co/v1alpha1): \
         install the CRDs first, e.g. `cheiron crds | kubectl apply -f -`\n"
    );
    Ok(())
}

#[test]
fn audit_without_a_kubeconfig_fails_in_one_line_with_exit_code_2() -> TestResult {
    let out = run(&cheiron(), &["audit", "-A"], None)?;
    assert_eq!(
        out.status.code(),
        Some(2),
        "2 is an error, 1 means findings"
    );
    let err = String::from_utf8(out.stderr)?;
    assert!(
        err.starts_with(
            "cheiron: cannot reach the cluster (set KUBECONFIG or --kubeconfig, or run in a Pod): "
        ),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    Ok(())
}

#[test]
fn audit_on_a_cluster_without_the_crds_says_how_to_install_them_with_exit_code_2() -> TestResult {
    let dir = tempfile::tempdir()?;
    let kubeconfig = crdless_cluster::kubeconfig(dir.path(), 4)?;
    let out = run(&cheiron(), &["audit", "-A"], Some(&kubeconfig))?;
    assert_eq!(
        out.status.code(),
        Some(2),
        "2 is an error, 1 means findings"
    );
    assert_eq!(
        String::from_utf8(out.stderr)?,
        "cheiron: the cluster does not serve ImagePullSecretManager (cheiron.anny.co/v1alpha1): \
         install the CRDs first, e.g. `cheiron crds | kubectl apply -f -`\n"
    );
    assert!(out.stdout.is_empty(), "no report on an error");
    Ok(())
}
