//! `cheiron explain` against the live apiserver: a Pod admitted before its manager existed
//! is explained as selected, its Secret as missing and not yet existing, and the text is the
//! golden (tests/data/explain/live-pod.txt, namespace written as NS).

use kube::ResourceExt;

use crate::{
    CHEIRON,
    harness::{Result, Scenario, pod},
};

/// Runs the real `cheiron explain` with the cluster's admin kubeconfig.
async fn explain(s: &Scenario, args: &[&str]) -> Result<std::process::Output> {
    let kubeconfig = s.cluster()?.admin_kubeconfig().to_owned();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    Ok(tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_cheiron"))
            .arg("explain")
            .args(&args)
            .env("KUBECONFIG", kubeconfig)
            .env("CHEIRON_LOG", "error")
            .env_remove("CHEIRON_NAMESPACE")
            .env_remove("CHEIRON_FROM")
            .env_remove("CHEIRON_OUTPUT")
            .output()
    })
    .await??)
}

#[tokio::test]
async fn explain_live_pod_admitted_before_its_manager_names_the_missing_secret() -> Result {
    let s = Scenario::new(CHEIRON, "explain-live").await?;
    let ns = s.create_namespace(&[("team", "a")], &[]).await?;
    s.default_service_account(&ns).await?;
    let early = s
        .create_pod(&ns, &pod("early-", &[("app", "web")], &["own"], &[]))
        .await?;
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
        name: late-pull
"
    ))
    .await?;
    let name = early.name_any();

    let out = explain(&s, &["pod", &name, "-n", &ns, "-o", "json"]).await?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(json["outcome"]["missing"], serde_json::json!(["late-pull"]));
    let verdicts: Vec<(&str, &str)> = json["managers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["manager"].as_str().is_some_and(|n| n.contains(&ns)))
        .map(|m| {
            (
                m["manager"].as_str().unwrap_or_default(),
                m["verdict"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    let id = format!("ImagePullSecretManager {ns}/web-pull");
    assert_eq!(verdicts, [(id.as_str(), "selected")]);
    let late = json["secrets"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["name"] == "late-pull")
        .cloned()
        .unwrap_or_default();
    // No controller runs here: the Secret does not exist yet, and it is read as metadata.
    assert_eq!(late["exists"], serde_json::json!(false));
    assert_eq!(late["managedByCheiron"], serde_json::json!(false));

    // The text, with this scenario's names replaced, is the golden. Other tests' cluster
    // managers may be live on the shared cluster: only this namespace's lines are compared.
    let out = explain(&s, &["pod", &name, "-n", &ns]).await?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?
        .replace(&name, "POD")
        .replace(&ns, "NS");
    let ours: String = text
        .lines()
        .filter(|l| !l.contains("ClusterImagePullSecretManager"))
        .map(|l| format!("{l}\n"))
        .collect();
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/explain/live-pod.txt");
    if std::env::var_os("CHEIRON_UPDATE_GOLDENS").is_some() {
        std::fs::write(&path, &ours)?;
    }
    assert_eq!(ours, std::fs::read_to_string(&path)?);

    let missing = explain(&s, &["serviceaccount", "nobody", "-n", &ns]).await?;
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(missing.stderr)?,
        format!("cheiron: ServiceAccount {ns}/nobody not found\n")
    );
    Ok(())
}
