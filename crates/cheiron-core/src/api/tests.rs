//! The CRDs as generated, and the Rust twin of their validation rules.

use std::path::Path;

use super::*;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The expected message of a fixture under `tests/data/invalid-managers/`, from its
/// `# expect:` first line.
fn expectation(text: &str) -> Option<&str> {
    text.lines().next()?.strip_prefix("# expect: ")
}

fn validate_document(text: &str) -> Result<(), InvalidSpec> {
    match serde_saphyr::from_str::<ImagePullSecretManager>(text) {
        Ok(m) if text.contains("kind: ImagePullSecretManager") => validate_namespaced(&m.spec),
        _ => match serde_saphyr::from_str::<ClusterImagePullSecretManager>(text) {
            Ok(m) => validate_cluster(&m.spec),
            Err(e) => Err(InvalidSpec(vec![format!("does not parse: {e}")])),
        },
    }
}

#[test]
fn every_invalid_fixture_is_rejected_with_its_message() -> TestResult {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/invalid-managers");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        let expected =
            expectation(&text).ok_or(format!("{}: no `# expect:` line", path.display()))?;
        let message = match validate_document(&text) {
            Ok(()) => return Err(format!("{} was accepted", path.display()).into()),
            Err(e) => e.to_string(),
        };
        assert!(
            message.contains(expected),
            "{}: {message:?} lacks {expected:?}",
            path.display()
        );
        seen += 1;
    }
    assert!(seen >= 10, "only {seen} fixtures");
    Ok(())
}

#[test]
fn original_cheiron_manifest_is_accepted_unchanged() -> TestResult {
    // The example from the original Cheiron README, placeholders filled in.
    let text = r#"
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: my-registry
spec:
  mode: ServiceAccount # or Pod
  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1
      username: my-docker-username
      password: my-docker-password
      email: me@example.com
    - name: github-container-registry
      registry: ghcr.io
      username: my-github-username
      password: my-github-access-token
      email: me@example.com
    - existingSecretRef:
        name: gitlab-registry
    - existingSecretRef:
        name: my-registry
"#;
    let m: ImagePullSecretManager = serde_saphyr::from_str(text)?;
    validate_namespaced(&m.spec)?;
    assert_eq!(m.spec.mode, Mode::ServiceAccount);
    let targets: Vec<_> = m
        .spec
        .secrets
        .iter()
        .filter_map(PullSecretEntry::target_name)
        .collect();
    assert_eq!(
        targets,
        [
            "docker-hub",
            "github-container-registry",
            "gitlab-registry",
            "my-registry"
        ]
    );
    Ok(())
}

#[test]
fn mode_defaults_to_service_account() -> TestResult {
    let m: ImagePullSecretManager = serde_saphyr::from_str(
        "apiVersion: cheiron.anny.co/v1alpha1\nkind: ImagePullSecretManager\nmetadata: {name: x}\nspec:\n  secrets: [{existingSecretRef: {name: a}}]\n",
    )?;
    assert_eq!(m.spec.mode, Mode::ServiceAccount);
    Ok(())
}

#[test]
fn crds_carry_names_scopes_printer_columns_status_and_cel_rules() -> TestResult {
    let [namespaced, cluster]: [_; 2] = crds().try_into().map_err(|_| "two CRDs")?;
    assert_eq!(
        namespaced.metadata.name.as_deref(),
        Some("imagepullsecretmanagers.cheiron.anny.co")
    );
    assert_eq!(namespaced.spec.scope, "Namespaced");
    assert_eq!(
        namespaced.spec.names.short_names,
        Some(vec!["ipsm".to_owned()])
    );
    assert_eq!(
        cluster.metadata.name.as_deref(),
        Some("clusterimagepullsecretmanagers.cheiron.anny.co")
    );
    assert_eq!(cluster.spec.scope, "Cluster");
    assert_eq!(
        cluster.spec.names.short_names,
        Some(vec!["cipsm".to_owned()])
    );
    for (crd, expected) in [
        (&namespaced, &["Mode", "Ready", "Namespaces", "Age"][..]),
        // Only a cluster manager can be in mode Node.
        (
            &cluster,
            &["Mode", "Ready", "Namespaces", "Nodes", "Age"][..],
        ),
    ] {
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, VERSION);
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, expected);
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let schema = serde_json::to_string(&version.schema)?;
        for message in [
            rules::ENTRY_EXCLUSIVE,
            rules::UNIQUE_TARGET_NAMES,
            rules::SECRETS_NOT_EMPTY,
        ] {
            assert!(
                schema.contains(message),
                "{} lacks {message:?}",
                crd.spec.names.kind
            );
        }
    }
    let namespaced_schema = serde_json::to_string(&namespaced.spec.versions[0].schema)?;
    assert!(namespaced_schema.contains(rules::REFERENCES_OWN_NAMESPACE));
    assert!(!namespaced_schema.contains("namespaceSelector"));
    let cluster_schema = serde_json::to_string(&cluster.spec.versions[0].schema)?;
    assert!(cluster_schema.contains(rules::REFERENCES_NEED_NAMESPACE));
    assert!(cluster_schema.contains("excludeNamespaces"));
    Ok(())
}

#[test]
fn managed_secrets_are_selected_by_the_managed_by_label() {
    assert_eq!(
        label::managed_by_selector(),
        "app.kubernetes.io/managed-by=cheiron"
    );
}

#[test]
fn debug_of_a_manager_never_shows_an_inline_password() -> TestResult {
    let manager: ImagePullSecretManager = serde_saphyr::from_str(
        "apiVersion: cheiron.anny.co/v1alpha1\nkind: ImagePullSecretManager\n\
         metadata: {name: m, namespace: team}\n\
         spec:\n  secrets:\n  - {name: hub, registry: docker.io, username: alice, password: s3cr3t-918273645}\n",
    )?;
    let debug = format!("{manager:?}");
    assert!(!debug.contains("s3cr3t"), "{debug}");
    assert!(debug.contains("<redacted>"), "{debug}");
    assert!(debug.contains("alice"), "the rest is still shown: {debug}");
    Ok(())
}
