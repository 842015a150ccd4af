//! `cheiron mutate` and `cheiron crds` as a user runs them: the real binary, the bundled
//! examples, one-line errors and exit codes.

#[path = "support/crdless_cluster.rs"]
mod crdless_cluster;

use std::{
    io::Write,
    path::PathBuf,
    process::{Command, Output, Stdio},
};

use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cheiron(args: &[&str], stdin: Option<&str>) -> Result<Output, std::io::Error> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cheiron"))
        .args(args)
        .current_dir(root())
        .env_remove("CHEIRON_FROM")
        .env_remove("CHEIRON_NAMESPACE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut pipe) = child.stdin.take() {
        pipe.write_all(stdin.unwrap_or("").as_bytes())?;
    }
    child.wait_with_output()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn mutate_yaml_adds_the_merged_secret_to_the_example_pod_after_its_own() -> TestResult {
    let out = cheiron(
        &[
            "mutate",
            "--from",
            "examples/cluster",
            "examples/workloads/pod.yaml",
        ],
        None,
    )?;
    assert!(out.status.success(), "{}", stderr(&out));
    let pod: Value = serde_saphyr::from_str(stdout(&out).trim_start_matches("---\n"))?;
    assert_eq!(
        pod["spec"]["imagePullSecrets"],
        serde_json::json!([{"name": "team-own-secret"}, {"name": "cluster-pull-secret"}])
    );
    assert_eq!(
        pod["metadata"]["annotations"]["cheiron.anny.co/reconcile-with"],
        "cluster-pull-secret"
    );
    assert_eq!(pod["metadata"]["generateName"], "web-7d4b9c-");
    Ok(())
}

#[test]
fn mutate_patch_prints_one_json_patch_per_document() -> TestResult {
    let out = cheiron(
        &[
            "mutate",
            "--from",
            "examples/cluster",
            "-o",
            "patch",
            "examples/workloads/serviceaccount.yaml",
        ],
        None,
    )?;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1);
    let patch: Value = serde_json::from_str(lines[0])?;
    assert_eq!(patch[0]["op"], "add");
    assert_eq!(patch[0]["path"], "/imagePullSecrets");
    let names: Vec<&str> = patch[0]["value"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["name"].as_str()).collect())
        .unwrap_or_default();
    // The namespaced manager's three entries, then the cluster manager's two.
    assert_eq!(
        names,
        [
            "docker-hub",
            "github-container-registry",
            "gitlab-registry",
            "company-registry",
            "mirror-pull"
        ]
    );
    Ok(())
}

#[test]
fn mutate_json_reads_standard_input_and_lists_every_document_in_order() -> TestResult {
    let pod = std::fs::read_to_string(root().join("examples/workloads/pod.yaml"))?;
    let sa = std::fs::read_to_string(root().join("examples/workloads/serviceaccount.yaml"))?;
    let input =
        format!("{pod}---\n{sa}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\n");
    let out = cheiron(
        &["mutate", "--from", "examples/cluster", "-o", "json", "-"],
        Some(&input),
    )?;
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Value = serde_json::from_str(&stdout(&out))?;
    assert_eq!(list["kind"], "List");
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .map(|a| a.iter().filter_map(|i| i["kind"].as_str()).collect())
        .unwrap_or_default();
    // The ConfigMap passes through, unchanged.
    assert_eq!(kinds, ["Pod", "ServiceAccount", "ConfigMap"]);
    assert_eq!(
        list["items"][2],
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    );
    Ok(())
}

/// `cheiron mutate … | kubectl apply -f -` loses nothing: the YAML stream holds every object
/// of the input in its order, the ones cheiron does not change as they were.
#[test]
fn mutate_yaml_passes_through_the_objects_it_does_not_change() -> TestResult {
    let pod = std::fs::read_to_string(root().join("examples/workloads/pod.yaml"))?;
    let input = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: team-a}}\n---\n{pod}---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d, namespace: team-a}}\n\
         spec: {{replicas: 2}}\n"
    );
    let out = cheiron(&["mutate", "--from", "examples/cluster", "-"], Some(&input))?;
    assert!(out.status.success(), "{}", stderr(&out));
    let documents: Vec<Value> = stdout(&out)
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(serde_saphyr::from_str)
        .collect::<Result<_, _>>()?;
    let kinds: Vec<&str> = documents
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["Namespace", "Pod", "Deployment"]);
    assert_eq!(
        documents[2],
        serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "team-a"},
            "spec": {"replicas": 2}
        })
    );
    assert!(
        documents[1]["spec"]["imagePullSecrets"].is_array(),
        "the Pod is mutated"
    );
    Ok(())
}

#[test]
fn mutate_skips_objects_in_opted_out_namespaces() -> TestResult {
    let input =
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: default, namespace: legacy}\n";
    let out = cheiron(
        &["mutate", "--from", "examples/cluster", "-o", "patch", "-"],
        Some(input),
    )?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "[]");
    Ok(())
}

fn assert_one_line_error(out: &Output, needle: &str) {
    assert!(!out.status.success(), "expected failure");
    let err = stderr(out);
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err:?}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    assert!(
        stdout(out).is_empty(),
        "printed despite the error: {}",
        stdout(out)
    );
}

#[test]
fn mutate_fails_in_one_line_on_a_missing_file() -> TestResult {
    let out = cheiron(
        &[
            "mutate",
            "--from",
            "does/not/exist.yaml",
            "examples/workloads/pod.yaml",
        ],
        None,
    )?;
    assert_eq!(
        stderr(&out),
        "cheiron: does/not/exist.yaml: No such file or directory (os error 2)\n",
        "the cause is said once"
    );
    assert_one_line_error(&out, "does/not/exist.yaml");
    Ok(())
}

/// Runs `cheiron` with `KUBECONFIG` set and no in-cluster environment.
fn cheiron_with_kubeconfig(args: &[&str], kubeconfig: &std::path::Path) -> std::io::Result<Output> {
    Command::new(env!("CARGO_BIN_EXE_cheiron"))
        .args(args)
        .current_dir(root())
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("CHEIRON_FROM")
        // Errors only: the test compares the whole of stderr.
        .env("CHEIRON_LOG", "error")
        .stdin(Stdio::null())
        .output()
}

/// The chart's init container: installs the kubelet's plugin and its configuration, then
/// exits without a cluster (the agent then mounts the plugin's directory read-only).
#[test]
fn node_agent_install_only_installs_the_plugin_and_exits_without_a_cluster() -> TestResult {
    let dir = tempfile::tempdir()?;
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin)?;
    let config = dir.path().join("credential-provider-config.yaml");
    let credentials = dir.path().join("credentials.json");
    let out = cheiron_with_kubeconfig(
        &[
            "node-agent",
            "--install-only",
            "--node-name",
            "n1",
            "--credentials-file",
            &credentials.display().to_string(),
            "--install-bin-dir",
            &bin.display().to_string(),
            "--install-provider-config",
            &config.display().to_string(),
        ],
        std::path::Path::new("/nonexistent/kubeconfig"),
    )?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(bin.join("cheiron").is_file());
    assert!(std::fs::read_to_string(&config)?.contains("credential-provider"));
    assert!(!credentials.exists(), "no credentials without the agent");
    Ok(())
}

#[test]
fn controller_without_a_kubeconfig_fails_in_one_line_saying_so_once() -> TestResult {
    let out = cheiron_with_kubeconfig(
        &["controller", "--admin-listen", "127.0.0.1:0"],
        std::path::Path::new("/nonexistent/kubeconfig"),
    )?;
    assert_eq!(
        stderr(&out),
        "cheiron: cannot reach the cluster (set KUBECONFIG or --kubeconfig, or run in a Pod): \
         failed to infer \
         config: in-cluster: (failed to read an incluster environment variable: environment \
         variable not found), kubeconfig: (failed to read kubeconfig from \
         '\"/nonexistent/kubeconfig\"': No such file or directory (os error 2))\n"
    );
    assert_one_line_error(&out, "cannot reach the cluster");
    Ok(())
}

#[test]
fn webhook_and_controller_on_a_cluster_without_the_crds_say_how_to_install_them() -> TestResult {
    let dir = tempfile::tempdir()?;
    let kubeconfig = crdless_cluster::kubeconfig(dir.path(), 8)?;
    let expected = "cheiron: the cluster does not serve ImagePullSecretManager \
                    (cheiron.anny.co/v1alpha1): install the CRDs first, e.g. \
                    `cheiron crds | kubectl apply -f -`\n";
    let controller = cheiron_with_kubeconfig(
        &[
            "controller",
            "--no-leader-election",
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &kubeconfig,
    )?;
    assert_eq!(stderr(&controller), expected);
    let webhook = cheiron_with_kubeconfig(
        &[
            "webhook",
            "--self-signed",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &kubeconfig,
    )?;
    assert_eq!(stderr(&webhook), expected);
    Ok(())
}

#[test]
fn mutate_warns_once_about_an_inline_registry_key_the_kubelet_would_never_match() -> TestResult {
    let dir = tempfile::tempdir()?;
    let manager = dir.path().join("manager.yaml");
    // The first key matches no image; the second is written with its slash, so it is fine.
    std::fs::write(
        &manager,
        "apiVersion: cheiron.anny.co/v1alpha1\nkind: ImagePullSecretManager\n\
         metadata: {name: odd, namespace: team}\nspec:\n  secrets:\n\
         \x20 - {name: odd, registry: \"oci://registry.example.com\", username: u, password: hunter2}\n\
         \x20 - {name: hub, registry: \"https://index.docker.io/v1\", username: u, password: hunter2}\n",
    )?;
    let from = manager.to_string_lossy().into_owned();
    let out = cheiron(
        &["mutate", "--from", &from, "-o", "patch", "-"],
        Some("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: default, namespace: team}\n"),
    )?;
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("UnusableRegistryKey"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains(
            "ImagePullSecretManager team/odd: UnusableRegistryKey: spec.secrets[0] (Secret odd): \
             registry key \"oci://registry.example.com\" is unusable: "
        ),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    // The patch is made all the same.
    assert!(stdout(&out).contains("\"odd\""), "{}", stdout(&out));
    Ok(())
}

#[test]
fn a_yaml_error_in_a_manager_does_not_print_the_password() -> TestResult {
    let dir = tempfile::tempdir()?;
    let manager = dir.path().join("manager.yaml");
    // An unquoted numeric password is a YAML integer, not the string the field wants.
    std::fs::write(
        &manager,
        "apiVersion: cheiron.anny.co/v1alpha1\nkind: ClusterImagePullSecretManager\n\
         metadata: {name: company}\nspec:\n  secrets:\n  - name: hub\n    registry: docker.io\n\
         \x20   username: alice\n    password: 918273645\n",
    )?;
    let from = manager.to_string_lossy().into_owned();
    let out = cheiron(
        &["mutate", "--from", &from, "examples/workloads/pod.yaml"],
        None,
    )?;
    assert_one_line_error(
        &out,
        r#"manager.yaml: document 1: spec.secrets[0].password: Invalid value: "integer": expected a string"#,
    );
    assert!(!stderr(&out).contains("918273645"), "{}", stderr(&out));
    Ok(())
}

/// `cheiron mutate --from DIR` with `manager.yaml` holding a ClusterImagePullSecretManager
/// whose spec is `spec`; the outcome.
fn mutate_with_cluster_manager(spec: &str) -> Result<Output, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let manager = dir.path().join("manager.yaml");
    std::fs::write(
        &manager,
        format!(
            "apiVersion: cheiron.anny.co/v1alpha1\nkind: ClusterImagePullSecretManager\n\
             metadata: {{name: company}}\nspec:\n{spec}"
        ),
    )?;
    let from = manager.to_string_lossy().into_owned();
    Ok(cheiron(
        &["mutate", "--from", &from, "examples/workloads/pod.yaml"],
        None,
    )?)
}

#[test]
fn a_value_a_field_does_not_allow_is_named_with_the_field_and_the_values_it_allows() -> TestResult {
    let out = mutate_with_cluster_manager(
        "  mode: pod\n  secrets:\n  - name: hub\n    registry: docker.io\n    username: alice\n    password: hunter2\n",
    )?;
    assert_one_line_error(
        &out,
        r#"manager.yaml: document 1: spec.mode: Unsupported value: "pod": supported values: "ServiceAccount", "Pod", "Node""#,
    );
    assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));
    Ok(())
}

#[test]
fn a_misspelt_field_is_reported_as_the_required_one_it_leaves_out() -> TestResult {
    let out = mutate_with_cluster_manager("  secret:\n  - name: hub\n")?;
    assert_one_line_error(
        &out,
        "manager.yaml: document 1: spec.secrets: Required value",
    );
    Ok(())
}

#[test]
fn mutate_fails_in_one_line_when_from_holds_something_else_than_managers() -> TestResult {
    let out = cheiron(
        &[
            "mutate",
            "--from",
            "examples/workloads",
            "examples/workloads/pod.yaml",
        ],
        None,
    )?;
    assert_one_line_error(&out, "is a Pod (v1), not an ImagePullSecretManager");
    Ok(())
}

#[test]
fn mutate_fails_in_one_line_on_an_invalid_manager() -> TestResult {
    let out = cheiron(
        &[
            "mutate",
            "--from",
            "tests/data/invalid-managers/duplicate-target-names.yaml",
            "examples/workloads/pod.yaml",
        ],
        None,
    )?;
    assert_one_line_error(&out, "target Secret names must be unique");
    Ok(())
}

#[test]
fn mutate_fails_when_the_input_has_no_pod_or_service_account() -> TestResult {
    let out = cheiron(
        &[
            "mutate",
            "--from",
            "examples/cluster",
            "examples/cluster/00-namespaces.yaml",
        ],
        None,
    )?;
    assert_one_line_error(&out, "no Pod or ServiceAccount documents");
    Ok(())
}

#[test]
fn crds_prints_both_definitions_as_generated() -> TestResult {
    let out = cheiron(&["crds"], None)?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), cheiron::api::crds_yaml()?);
    let names: Vec<String> = serde_saphyr::from_multiple::<Value>(&stdout(&out))?
        .iter()
        .map(|v| v["metadata"]["name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "imagepullsecretmanagers.cheiron.anny.co",
            "clusterimagepullsecretmanagers.cheiron.anny.co"
        ]
    );
    Ok(())
}

#[test]
fn manifests_render_the_split_install_by_default_and_cheiron_run_on_request() -> TestResult {
    let deployments = |yaml: &str| -> Vec<String> {
        yaml.split("\n---")
            .filter(|doc| doc.contains("\nkind: Deployment"))
            .filter_map(|doc| {
                doc.lines()
                    .skip_while(|l| !l.starts_with("metadata:"))
                    .find_map(|l| l.trim().strip_prefix("name: ").map(str::to_owned))
            })
            .collect()
    };
    let split = cheiron(&["manifests"], None)?;
    assert!(split.status.success(), "{}", stderr(&split));
    assert_eq!(
        deployments(&stdout(&split)),
        ["cheiron-webhook", "cheiron-controller"]
    );
    let combined = cheiron(&["manifests", "--deployment", "combined"], None)?;
    assert!(combined.status.success(), "{}", stderr(&combined));
    let text = stdout(&combined);
    assert_eq!(deployments(&text), ["cheiron"]);
    assert!(
        text.contains("- run"),
        "the one Deployment runs `cheiron run`"
    );
    let bogus = cheiron(&["manifests", "--deployment", "bogus"], None)?;
    assert!(!bogus.status.success());
    assert!(stderr(&bogus).contains("is not a deployment mode (split or combined)"));
    Ok(())
}

/// Runs `cheiron` with `KUBECONFIG` set, no in-cluster environment and the default log level
/// (`info`): what an operator sees.
fn cheiron_at_info(args: &[&str], kubeconfig: &std::path::Path) -> std::io::Result<Output> {
    Command::new(env!("CARGO_BIN_EXE_cheiron"))
        .args(args)
        .current_dir(root())
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("CHEIRON_LOG")
        .env_remove("CHEIRON_LOG_FORMAT")
        .stdin(Stdio::null())
        .output()
}

#[test]
fn node_agent_fails_in_exactly_one_line_when_it_cannot_install_the_plugin() -> TestResult {
    let dir = tempfile::tempdir()?;
    let kubeconfig = crdless_cluster::kubeconfig(dir.path(), 8)?;
    let state = dir.path().join("state");
    let credentials = state.join("credentials.json");
    let provider_config = dir.path().join("credential-providers.yaml");
    std::fs::write(&provider_config, "apiVersion: kubelet.config.k8s.io/v1\n")?;
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let bin_dir = dir.path().join("missing/bin");
    let args = |bin_dir: &str| {
        [
            "node-agent",
            "--node-name",
            "n1",
            "--admin-listen",
            "127.0.0.1:0",
            "--credentials-file",
            &path(&credentials),
            "--install-provider-config",
            &path(&provider_config),
            "--install-bin-dir",
            bin_dir,
        ]
        .map(str::to_owned)
    };
    // An operator's provider configuration: refused, in one line, no INFO line before it.
    let refused = cheiron_at_info(
        &args(&path(&bin_dir)).each_ref().map(String::as_str),
        &kubeconfig,
    )?;
    assert_eq!(
        stderr(&refused),
        format!(
            "cheiron: {} exists and was not written by cheiron; refusing to overwrite it (name \
             another --install-provider-config, or merge the provider into it yourself: \
             docs/node.md)\n",
            provider_config.display()
        )
    );
    assert!(!bin_dir.exists(), "a refusal changed nothing");
    // A bin dir that cannot be created (its parent is a file): one line saying what to do.
    std::fs::remove_file(&provider_config)?;
    let file = dir.path().join("a-file");
    std::fs::write(&file, "")?;
    let blocked = file.join("bin");
    let out = cheiron_at_info(
        &args(&path(&blocked)).each_ref().map(String::as_str),
        &kubeconfig,
    )?;
    assert_eq!(
        stderr(&out),
        format!(
            "cheiron: cannot create --install-bin-dir {} (create it, or name a writable \
             directory): Not a directory (os error 20)\n",
            blocked.display()
        )
    );
    Ok(())
}

#[test]
fn credential_provider_fails_in_exactly_one_line_without_quoting_the_request() -> TestResult {
    let dir = tempfile::tempdir()?;
    let credentials = dir.path().join("credentials.json");
    let file = credentials.to_string_lossy().into_owned();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cheiron"))
        .args(["credential-provider", "--credentials-file", &file])
        .env_remove("CHEIRON_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut pipe) = child.stdin.take() {
        pipe.write_all(br#"{"serviceAccountToken": "eyJ-S3CRET-TOKEN"#)?;
    }
    let out = child.wait_with_output()?;
    assert_eq!(
        stderr(&out),
        "cheiron: credential-provider request: not JSON (line 1, column 41)\n"
    );
    assert!(!stderr(&out).contains("S3CRET"));
    assert_one_line_error(&out, "not JSON");
    Ok(())
}

/// At the default log level, a start-up failure of the long-running commands is still exactly
/// one line: no INFO line comes before it.
#[test]
fn controller_and_webhook_start_up_failures_are_one_line_at_the_default_log_level() -> TestResult {
    let dir = tempfile::tempdir()?;
    let kubeconfig = crdless_cluster::kubeconfig(dir.path(), 8)?;
    let controller = cheiron_at_info(
        &["controller", "--admin-listen", "127.0.0.1:0"],
        &kubeconfig,
    )?;
    assert_eq!(
        stderr(&controller),
        "cheiron: the cluster does not serve ImagePullSecretManager \
         (cheiron.anny.co/v1alpha1): install the CRDs first, e.g. \
         `cheiron crds | kubectl apply -f -`\n"
    );
    let missing = dir.path().join("no-such-dir");
    let webhook = cheiron_at_info(
        &[
            "webhook",
            "--from",
            "examples/cluster",
            "--tls-cert-dir",
            &missing.to_string_lossy(),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &kubeconfig,
    )?;
    assert_one_line_error(&webhook, &missing.to_string_lossy());
    // Something else listening on the port: one line too.
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = taken.local_addr()?.to_string();
    let self_signed = cheiron_at_info(
        &[
            "webhook",
            "--from",
            "examples/cluster",
            "--self-signed",
            "--listen",
            &port,
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &kubeconfig,
    )?;
    assert_one_line_error(&self_signed, &port);
    Ok(())
}

/// A stand-in for a cluster serving cheiron's CRDs to an identity that may not list Secrets
/// (the split install's webhook): empty lists, and a SelfSubjectAccessReview denied. Serves
/// `requests` requests; returns a kubeconfig for it, written in `dir`.
fn secretless_cluster(dir: &std::path::Path, requests: usize) -> std::io::Result<PathBuf> {
    use std::io::{BufRead, BufReader, Read};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(requests).flatten() {
            let mut reader = BufReader::new(&stream);
            let (mut line, mut first, mut length) = (String::new(), String::new(), 0usize);
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                if first.is_empty() {
                    first = line.clone();
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let answer = if first.contains("selfsubjectaccessreviews") {
                r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","metadata":{},"spec":{},"status":{"allowed":false}}"#
            } else {
                r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadataList","metadata":{"resourceVersion":"1"},"items":[]}"#
            };
            let _ = (&stream).write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                )
                .as_bytes(),
            );
        }
    });
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: c, cluster: {{server: \"http://127.0.0.1:{port}\"}}}}]\n\
             users: [{{name: u, user: {{}}}}]\n\
             contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n"
        ),
    )?;
    Ok(kubeconfig)
}

/// `cheiron run` (webhook and controller in one process) whose webhook port is taken fails in
/// exactly one line too: the addresses are bound before the controller and the source start.
#[test]
fn cheiron_run_whose_port_is_taken_fails_in_one_line() -> TestResult {
    let dir = tempfile::tempdir()?;
    let kubeconfig = secretless_cluster(dir.path(), 16)?;
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = taken.local_addr()?.to_string();
    let run = cheiron_at_info(
        &[
            "run",
            "--self-signed",
            "--listen",
            &port,
            "--admin-listen",
            "127.0.0.1:0",
            "--no-leader-election",
        ],
        &kubeconfig,
    )?;
    assert_one_line_error(&run, &port);
    Ok(())
}

/// In cluster mode, an identity that may not list Secrets is worth an INFO line on a
/// successful start; a webhook whose port is taken fails in exactly one line all the same:
/// the addresses are bound before the cluster source starts.
#[test]
fn a_cluster_mode_webhook_whose_port_is_taken_fails_in_one_line() -> TestResult {
    let dir = tempfile::tempdir()?;
    let kubeconfig = secretless_cluster(dir.path(), 16)?;
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = taken.local_addr()?.to_string();
    let webhook = cheiron_at_info(
        &[
            "webhook",
            "--self-signed",
            "--listen",
            &port,
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &kubeconfig,
    )?;
    assert_one_line_error(&webhook, &port);
    assert!(
        !stderr(&webhook).contains("may not list Secrets"),
        "{}",
        stderr(&webhook)
    );
    Ok(())
}

#[test]
fn cargo_install_gives_the_cheiron_binary_and_not_the_tests_fake_plugin() -> TestResult {
    // `cargo install --path .` builds the binaries whose required features are on by default.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()?;
    assert!(out.status.success(), "{}", stderr(&out));
    let metadata: Value = serde_json::from_slice(&out.stdout)?;
    let package = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "cheiron")
        .ok_or("no package cheiron")?;
    let default: Vec<&str> = package["features"]["default"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let installed: Vec<&str> = package["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bin"))
        })
        .filter(|t| {
            t["required-features"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .all(|f| default.contains(&f))
        })
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(installed, ["cheiron"]);
    Ok(())
}

/// The commit `cheiron` was built from, as build.rs reads it (`git rev-parse --short=12 HEAD`),
/// or `unknown` outside a git checkout.
fn built_commit() -> String {
    Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[test]
fn version_and_dash_dash_version_name_the_cargo_version_and_the_git_commit() -> TestResult {
    let line = format!(
        "cheiron {} (commit {})",
        env!("CARGO_PKG_VERSION"),
        built_commit()
    );
    for args in [&["--version"][..], &["version"]] {
        let out = cheiron(args, None)?;
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_eq!(stdout(&out).trim_end(), line, "{args:?}");
    }
    let out = cheiron(&["version", "-o", "json"], None)?;
    assert!(out.status.success(), "{}", stderr(&out));
    let json: Value = serde_json::from_str(&stdout(&out))?;
    assert_eq!(
        json,
        serde_json::json!({"version": env!("CARGO_PKG_VERSION"), "commit": built_commit()})
    );
    Ok(())
}

#[test]
fn completion_prints_a_script_for_each_shell_naming_the_subcommands() -> TestResult {
    for (shell, marker) in [
        ("bash", "_cheiron()"),
        ("zsh", "#compdef cheiron"),
        ("fish", "complete -c cheiron"),
    ] {
        let out = cheiron(&["completion", shell], None)?;
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for word in ["mutate", "explain", "audit", "node-agent", "kubeconfig"] {
            assert!(script.contains(word), "{shell}: {word} is not completed");
        }
    }
    let out = cheiron(&["completion", "tcsh"], None)?;
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
    assert!(
        stderr(&out).contains("invalid value 'tcsh'"),
        "{}",
        stderr(&out)
    );
    Ok(())
}

/// `cheiron crds | head`: the reader goes away before cheiron writes. No "Broken pipe" error,
/// the status of a process SIGPIPE ended (141), as kubectl and other Unix tools end.
#[test]
fn output_into_a_closed_pipe_ends_quietly_with_the_sigpipe_status() -> TestResult {
    for args in [
        &["crds"][..],
        &[
            "mutate",
            "--from",
            "examples/cluster",
            "examples/workloads/pod.yaml",
        ],
        &["completion", "bash"],
        &["version"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cheiron"))
            .args(args)
            .current_dir(root())
            .env_remove("CHEIRON_FROM")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        // Closed before cheiron can write: its first write fails with EPIPE.
        drop(child.stdout.take());
        let out = child.wait_with_output()?;
        assert_eq!(stderr(&out), "", "{args:?}");
        assert_eq!(out.status.code(), Some(141), "{args:?}");
    }
    Ok(())
}

/// kubectl's `--kubeconfig` and `--context`: they win over `KUBECONFIG` and the file's current
/// context. Here `KUBECONFIG` names no file and the current context a closed port, so only
/// both flags reach the cluster (the stand-in without the CRDs, whose answer proves it).
#[test]
fn kubeconfig_and_context_flags_choose_the_cluster() -> TestResult {
    let dir = tempfile::tempdir()?;
    let kubeconfig = crdless_cluster::kubeconfig(dir.path(), 4)?;
    let text = std::fs::read_to_string(&kubeconfig)?
        .replace("current-context: c", "current-context: closed")
        .replace(
            "clusters: [",
            "clusters: [{name: closed, cluster: {server: \"http://127.0.0.1:9\"}}, ",
        )
        .replace(
            "contexts: [",
            "contexts: [{name: closed, context: {cluster: closed, user: u}}, ",
        );
    std::fs::write(&kubeconfig, text)?;
    let path = kubeconfig.display().to_string();
    let controller = |extra: &[&str]| {
        let mut args = vec![
            "controller",
            "--no-leader-election",
            "--admin-listen",
            "127.0.0.1:0",
        ];
        args.extend_from_slice(extra);
        cheiron_with_kubeconfig(&args, std::path::Path::new("/nonexistent/kubeconfig"))
    };
    let out = controller(&["--kubeconfig", &path, "--context", "c"])?;
    assert_eq!(
        stderr(&out),
        "cheiron: the cluster does not serve ImagePullSecretManager \
         (cheiron.anny.co/v1alpha1): install the CRDs first, e.g. \
         `cheiron crds | kubectl apply -f -`\n"
    );
    // Global flags: before the subcommand too.
    let out = cheiron_with_kubeconfig(
        &["--kubeconfig", &path, "--context", "missing", "audit", "-A"],
        std::path::Path::new("/nonexistent/kubeconfig"),
    )?;
    assert_one_line_error(&out, "missing");
    assert!(
        stderr(&out).contains(&format!("--kubeconfig {path}")),
        "{}",
        stderr(&out)
    );
    let out = controller(&["--kubeconfig", "/nonexistent/other"])?;
    assert_one_line_error(&out, "cannot read --kubeconfig /nonexistent/other");
    Ok(())
}

#[test]
fn dry_run_refuses_a_label_without_a_value_and_an_unreadable_kubeconfig_before_any_request()
-> TestResult {
    let out = cheiron(&["dry-run", "-l", "app"], None)?;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: invalid value 'app' for '--label <KEY=VALUE>': \"app\" is not KEY=VALUE\n\n\
         For more information, try '--help'.\n"
    );
    let out = cheiron(
        &[
            "dry-run",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--expect",
            "x",
        ],
        None,
    )?;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).starts_with("cheiron: cannot read --kubeconfig /nonexistent/kubeconfig: "),
        "{}",
        stderr(&out)
    );
    Ok(())
}
