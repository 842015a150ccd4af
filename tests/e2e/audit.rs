//! `cheiron audit` against the live apiserver: a Pod created before its manager existed is a
//! finding (exit 1) with its reason and fix; a Pod admitted after is not; a clean namespace
//! exits 0.

use kube::ResourceExt;

use crate::{
    CHEIRON,
    harness::{Result, Scenario, pod},
};

async fn audit(s: &Scenario, args: &[&str]) -> Result<std::process::Output> {
    let kubeconfig = s.cluster()?.admin_kubeconfig().to_owned();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    Ok(tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_cheiron"))
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

#[tokio::test]
async fn audit_finds_the_pod_admitted_before_its_manager_and_exits_1() -> Result {
    let s = Scenario::new(CHEIRON, "audit-live").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    s.default_service_account(&ns).await?;
    let clean = audit(&s, &["-n", &ns]).await?;
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    let early = s.create_pod(&ns, &pod("early-", &[], &[], &[])).await?;
    // Creation timestamps have a one-second resolution.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: pods
  namespace: {ns}
spec:
  mode: Pod
  secrets:
    - existingSecretRef:
        name: late-pull
"
    ))
    .await?;
    s.until_new_pod_gets(&ns, &[], &["late-pull"]).await?;

    let out = audit(&s, &["-n", &ns, "-o", "json"]).await?;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let findings = json.as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = findings.iter().filter_map(|f| f["name"].as_str()).collect();
    // Pods admitted after the manager (the probes above) got their Secret: not findings.
    assert_eq!(names, [early.name_any().as_str()]);
    let finding = &findings[0];
    assert_eq!(finding["why"], "admittedBeforeManager");
    assert_eq!(finding["missing"], serde_json::json!(["late-pull"]));
    assert_eq!(
        finding["fix"],
        format!(
            "kubectl delete pod {} -n {ns}, then create it again",
            early.name_any()
        )
    );
    Ok(())
}
