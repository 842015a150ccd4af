use super::*;

const ECR: &str = r#"
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: ecr-credential-provider
    matchImages: ["*.dkr.ecr.*.amazonaws.com", "*.dkr.ecr.*.amazonaws.com.cn"]
    defaultCacheDuration: "12h"
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    args: [get-credentials]
    env:
      - {name: AWS_PROFILE, value: s3cr3t-profile}
    allowedNamespaces: ["team-*"]
"#;

#[test]
fn the_kubelets_ecr_example_is_read_with_cheirons_extension() -> Result<(), String> {
    let config = ProviderConfig::parse(ECR)?;
    let [p] = config.providers.as_slice() else {
        return Err(format!("{config:?}"));
    };
    assert_eq!(p.name, "ecr-credential-provider");
    assert_eq!(p.default_cache_duration, Duration::from_secs(12 * 3600));
    assert!(p.allows_namespace("team-a") && !p.allows_namespace("other"));
    let image =
        cheiron_core::registry::ImageRef::parse("123456789012.dkr.ecr.eu-west-1.amazonaws.com/app")
            .map_err(|e| e.to_string())?;
    assert!(config.provider_for(&image).is_some());
    let other =
        cheiron_core::registry::ImageRef::parse("ghcr.io/app").map_err(|e| e.to_string())?;
    assert!(config.provider_for(&other).is_none());
    assert!(
        !format!("{config:?}").contains("s3cr3t"),
        "env values are redacted"
    );
    Ok(())
}

#[test]
fn what_the_kubelet_refuses_is_refused_with_every_reason_and_no_env_value() {
    let bad = r#"
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: "a/b"
    matchImages: []
    apiVersion: credentialprovider.kubelet.k8s.io/v9
  - name: tok
    matchImages: ["x.example.com"]
    defaultCacheDuration: "-5s"
    apiVersion: credentialprovider.kubelet.k8s.io/v1beta1
    tokenAttributes: {serviceAccountTokenAudience: "", cacheType: Pod, requireServiceAccount: false, requiredServiceAccountAnnotationKeys: [a]}
  - name: tok
    matchImages: ["x.example.com:port"]
    defaultCacheDuration: 1m
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    allowedNamespaces: ["Not_A_Namespace"]
    env: [{name: "A=B", value: s3cr3t}]
"#;
    let error = ProviderConfig::parse(bad).err().unwrap_or_default();
    for expected in [
        "providers[0]: name must be a file name",
        "providers[0]: apiVersion must be one of",
        "providers[0]: matchImages: at least 1 item",
        "providers[0]: defaultCacheDuration is required",
        "providers[1]: defaultCacheDuration: not a duration",
        "providers[1]: tokenAttributes.serviceAccountTokenAudience is required",
        "providers[1]: tokenAttributes is only supported for credentialprovider.kubelet.k8s.io/v1",
        "providers[1]: tokenAttributes: requireServiceAccount cannot be false",
        "providers[1]: tokenAttributes.cacheType must be ServiceAccount or Token",
        "providers[2]: duplicate provider name \"tok\"",
        "providers[2]: matchImages: \"x.example.com:port\" is not a valid match image",
        "providers[2]: allowedNamespaces: \"Not_A_Namespace\" is not a namespace name or glob",
        "providers[2]: env: \"A=B\" is not a variable name",
    ] {
        assert!(
            error.contains(expected),
            "{expected:?} missing from: {error}"
        );
    }
    assert!(!error.contains("s3cr3t"), "{error}");
    let unknown = ECR.replace("args:", "argz:");
    let error = ProviderConfig::parse(&unknown).err().unwrap_or_default();
    assert!(
        error.contains("unknown field"),
        "strict, as the kubelet: {error}"
    );
    let typed = ECR.replace("value: s3cr3t-profile", "value: [s3cr3t-profile]");
    let error = ProviderConfig::parse(&typed).err().unwrap_or_default();
    assert!(!error.is_empty() && !error.contains("s3cr3t"), "{error}");
}

#[test]
fn a_provider_without_its_plugin_is_refused_at_load() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("cheiron-cred-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("config.yaml");
    std::fs::write(&file, ECR)?;
    let error = ProviderConfig::load(&file, &dir)
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        error.as_deref(),
        Some(
            format!(
                "credential provider ecr-credential-provider: no executable {} (put the plugin in --credential-provider-bin-dir)",
                dir.join("ecr-credential-provider").display()
            )
            .as_str()
        )
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
