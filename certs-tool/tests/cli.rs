//! The `cheiron-certs` binary as users and hook Jobs run it: what it writes, what it prints,
//! and that every failure is one line on stderr with a non-zero exit. (Against a real
//! kube-apiserver: `tests/certs.rs` in the root crate, which owns the cluster harness.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{os::unix::fs::PermissionsExt, path::Path, process::Command};

fn cheiron_certs(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cheiron-certs"));
    command.args(args);
    for variable in [
        "CHEIRON_SERVICE",
        "CHEIRON_NAMESPACE",
        "CHEIRON_DNS",
        "CHEIRON_IP",
        "CHEIRON_OUT",
        "CHEIRON_SECRET_NAME",
        "CHEIRON_WEBHOOK_NAME",
        "KUBERNETES_SERVICE_HOST",
        "KUBERNETES_SERVICE_PORT",
    ] {
        command.env_remove(variable);
    }
    command
}

/// Runs it, expects failure, and returns stderr, asserting it is one line.
fn fails_with_one_line(command: &mut Command) -> String {
    let output = command.output().unwrap();
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("cheiron-certs: "), "{stderr}");
    stderr
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn generate_writes_ca_certificate_and_a_private_key_only_the_owner_can_read() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("tls");
    let output = cheiron_certs(&[
        "generate",
        "--service",
        "cheiron",
        "--namespace",
        "cheiron-system",
        "--dns",
        "webhook.example.com",
        "--ip",
        "127.0.0.1",
        "--out",
        out.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        stdout.starts_with("wrote ca.crt, tls.crt and tls.key to "),
        "{stdout}"
    );

    let mode = |file: &str| {
        std::fs::metadata(out.join(file))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("tls.key"), 0o600);
    assert_eq!(mode("tls.crt"), 0o644);
    let leaf =
        cheiron_certs::pki::CertificateInfo::first_from_pem(&read(&out.join("tls.crt"))).unwrap();
    let ca =
        cheiron_certs::pki::CertificateInfo::first_from_pem(&read(&out.join("ca.crt"))).unwrap();
    assert!(leaf.is_signed_by(&ca));
    cheiron_certs::pki::key_matches(&leaf, &read(&out.join("tls.key"))).unwrap();
    let sans: Vec<String> = leaf.sans.iter().map(ToString::to_string).collect();
    for name in [
        "cheiron",
        "cheiron.cheiron-system",
        "cheiron.cheiron-system.svc",
        "cheiron.cheiron-system.svc.cluster.local",
        "webhook.example.com",
        "127.0.0.1",
    ] {
        assert!(sans.iter().any(|s| s == name), "{name} missing in {sans:?}");
    }
}

#[test]
fn invalid_service_name_fails_with_one_line_naming_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let stderr = fails_with_one_line(&mut cheiron_certs(&[
        "generate",
        "--service",
        "Not_A_Service",
        "--namespace",
        "ns",
        "--out",
        tmp.path().to_str().unwrap(),
    ]));
    assert!(
        stderr.contains("invalid --service \"Not_A_Service\""),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn unwritable_output_directory_fails_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let blocker = tmp.path().join("file");
    std::fs::write(&blocker, "").unwrap();
    let stderr = fails_with_one_line(&mut cheiron_certs(&[
        "generate",
        "--service",
        "cheiron",
        "--namespace",
        "ns",
        "--out",
        blocker.join("dir").to_str().unwrap(),
    ]));
    assert!(stderr.contains("cannot write "), "{stderr}");
}

#[test]
fn create_and_patch_without_a_cluster_fail_with_one_line_saying_how_to_fix_it() {
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = tmp.path().join("missing-kubeconfig");
    for args in [
        &[
            "create",
            "--service",
            "cheiron",
            "--namespace",
            "ns",
            "--secret-name",
            "cheiron-tls",
        ][..],
        &[
            "patch",
            "--webhook-name",
            "cheiron",
            "--secret-name",
            "cheiron-tls",
            "--namespace",
            "ns",
        ][..],
    ] {
        let stderr = fails_with_one_line(
            cheiron_certs(args)
                .env("KUBECONFIG", &kubeconfig)
                .env("HOME", tmp.path()),
        );
        assert!(
            stderr.contains("cannot reach the cluster (set KUBECONFIG or run in a Pod"),
            "{stderr}"
        );
    }
}

#[test]
fn settings_can_come_from_cheiron_environment_variables() {
    let tmp = tempfile::tempdir().unwrap();
    let output = cheiron_certs(&["generate"])
        .env("CHEIRON_SERVICE", "cheiron")
        .env("CHEIRON_NAMESPACE", "cheiron-system")
        .env("CHEIRON_IP", "127.0.0.1,::1")
        .env("CHEIRON_OUT", tmp.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let leaf =
        cheiron_certs::pki::CertificateInfo::first_from_pem(&read(&tmp.path().join("tls.crt")))
            .unwrap();
    assert_eq!(leaf.sans.len(), 6, "{:?}", leaf.sans);
}
