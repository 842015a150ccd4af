//! `cheiron dry-run` against the live apiserver and the registered webhook: the Pod comes back
//! with the pull secret a mode Pod manager selects it for, nothing is created, and `--expect`
//! fails with a reason when the webhook does not add the secret.

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, api::ListParams};

use crate::{
    CHEIRON,
    harness::{Result, Scenario},
};

/// Runs the real `cheiron dry-run` with the cluster's admin kubeconfig.
async fn dry_run(s: &Scenario, args: &[&str]) -> Result<std::process::Output> {
    let kubeconfig = s.cluster()?.admin_kubeconfig().to_owned();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    Ok(tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_cheiron"))
            .arg("dry-run")
            .args(&args)
            .env("KUBECONFIG", kubeconfig)
            .env("CHEIRON_LOG", "error")
            .env_remove("CHEIRON_NAMESPACE")
            .output()
    })
    .await??)
}

#[tokio::test]
async fn dry_run_pod_gets_the_selected_pull_secret_and_expect_fails_without_it() -> Result {
    let s = Scenario::new(CHEIRON, "dry-run").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    s.default_service_account(&ns).await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: web-pull
  namespace: {ns}
spec:
  mode: Pod
  podSelector: {{matchLabels: {{app: web}}}}
  secrets:
    - existingSecretRef:
        name: web-pull
"
    ))
    .await?;

    // Selected: the webhook adds the secret (asked again until its cache has the manager).
    let out = dry_run(
        &s,
        &[
            "-n",
            &ns,
            "-l",
            "app=web",
            "--expect",
            "web-pull",
            "--timeout",
            "60",
            "-o",
            "json",
        ],
    )
    .await?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(json["namespace"], ns.as_str());
    assert_eq!(json["imagePullSecrets"], serde_json::json!(["web-pull"]));
    assert!(
        json["pod"]
            .as_str()
            .is_some_and(|n| n.starts_with("cheiron-dry-run-")),
        "{json}"
    );
    // A dry run: nothing was stored.
    let pods: Api<Pod> = Api::namespaced(s.client().clone(), &ns);
    assert!(pods.list(&ListParams::default()).await?.items.is_empty());

    // Not selected (no label): no secret, and --expect says so and why it may be.
    let out = dry_run(&s, &["-n", &ns, "--expect", "web-pull"]).await?;
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout)?;
    assert!(
        stdout.starts_with(&format!("Pod {ns}/cheiron-dry-run-"))
            && stdout.contains(
                "(server-side dry run: nothing was created)\n  imagePullSecrets: (none)\n"
            ),
        "{stdout}"
    );
    let stderr = String::from_utf8(out.stderr)?;
    assert!(
        stderr.starts_with(&format!(
            "cheiron: the dry-run Pod in namespace {ns} did not get pull secret(s) web-pull (it got none): \
             is cheiron's webhook registered, does a manager select this Pod, and can the apiserver \
             reach the webhook?"
        )),
        "{stderr}"
    );
    Ok(())
}
