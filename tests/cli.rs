//! `cheiron mutate` and `cheiron crds` as a user runs them: the real binary, the bundled
//! examples, one-line errors and exit codes.

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
    let pod: Value = serde_yaml::from_str(stdout(&out).trim_start_matches("---\n"))?;
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
fn mutate_json_reads_standard_input_and_lists_several_documents() -> TestResult {
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
    assert_eq!(kinds, ["Pod", "ServiceAccount"]);
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
    assert_one_line_error(&out, "does/not/exist.yaml");
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
            "examples/cluster/namespaces.yaml",
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
    let names: Vec<String> = serde_yaml::Deserializer::from_str(&stdout(&out))
        .map(|d| {
            serde::Deserialize::deserialize(d)
                .map(|v: Value| v["metadata"]["name"].as_str().unwrap_or("").to_owned())
        })
        .collect::<Result<_, _>>()?;
    assert_eq!(
        names,
        [
            "imagepullsecretmanagers.cheiron.anny.co",
            "clusterimagepullsecretmanagers.cheiron.anny.co"
        ]
    );
    Ok(())
}
