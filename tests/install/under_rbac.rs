//! `cheiron webhook`, `cheiron controller` and `cheiron run` started as their own
//! ServiceAccounts, with exactly the RBAC an installation grants: each does its whole job.

use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{Secret, ServiceAccount},
    events::v1::Event,
};
use kube::{
    Api,
    api::{DeleteParams, DynamicObject, ListParams, PostParams},
};

use super::*;
use super::{cluster::*, rbac::*};
use harness::Scenario;

/// Held by a test while its process may hold the controller's Lease: the generated Role
/// allows one Lease name only, so two controllers under test would take turns, and one test
/// could pass on the other's work.
static LEASE_HOLDER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A child process killed when the test ends, however it ends.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `cheiron <args>` with a token of `service_account` in cheiron's namespace, as Pod
/// `pod_name`, its log in `dir`, admin server on `admin`; returned once `/readyz` answers 200.
async fn start_as(
    s: &Scenario,
    dir: &Path,
    service_account: &str,
    pod_name: &str,
    args: &[String],
    admin: u16,
) -> Result<(Running, PathBuf)> {
    let kubeconfig = dir.join(format!("{service_account}.kubeconfig"));
    service_account_kubeconfig(
        s.client(),
        &s.cluster()?.admin_config(),
        service_account,
        &kubeconfig,
    )
    .await?;
    let log_path = dir.join(format!("{pod_name}.log"));
    let log = std::fs::File::create(&log_path)?;
    let mut process = Running(
        Command::new(env!("CARGO_BIN_EXE_cheiron"))
            .args(args)
            .arg(format!("--admin-listen=127.0.0.1:{admin}"))
            .env("KUBECONFIG", &kubeconfig)
            .env("CHEIRON_POD_NAMESPACE", NAMESPACE)
            .env("CHEIRON_POD_NAME", pod_name)
            .env("CHEIRON_LOG", "info,cheiron=debug")
            .env("NO_COLOR", "1")
            .env_remove("CHEIRON_FROM")
            .env_remove("CHEIRON_TLS_CERT_DIR")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?,
    );
    let readyz = format!("http://127.0.0.1:{admin}/readyz");
    let ready = until(
        &format!("`cheiron {}` ready", args.join(" ")),
        Duration::from_secs(30),
        || async {
            reqwest::get(&readyz)
                .await
                .ok()
                .filter(|r| r.status().is_success())
        },
    )
    .await;
    if let Some(status) = process.0.try_wait()? {
        return Err(format!(
            "`cheiron {}` exited ({status}):\n{}",
            args.join(" "),
            tail(&log_path)
        )
        .into());
    }
    if let Err(e) = ready {
        return Err(format!("{e}\n--- log (tail) ---\n{}", tail(&log_path)).into());
    }
    Ok((process, log_path))
}

/// The last lines of the log at `path`.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The lines of `log` that say an API call was refused, but for `allowed_about`.
fn refusals<'a>(log: &'a str, allowed_about: Option<&str>) -> Vec<&'a str> {
    log.lines()
        .filter(|l| l.to_lowercase().contains("forbidden"))
        .filter(|l| allowed_about.is_none_or(|about| !l.contains(about)))
        .collect()
}

/// The controller's job, done by the process of `log` as Pod `pod_name`: a manager's
/// Secret materialised from its source, `default` backfilled, `Ready=True` in status, an
/// Event, the Lease held by that process, and the finalizer's clean-up, all without a
/// refused API call.
async fn controller_does_its_job(s: &Scenario, log: &Path, pod_name: &str) -> Result {
    let ns = s.create_namespace(&[], &[]).await?;
    let service_accounts: Api<ServiceAccount> = Api::namespaced(s.client().clone(), &ns);
    // kcm's `default` first, so that its pull secret can only come from the controller.
    until(
        "ServiceAccount default",
        Duration::from_secs(30),
        || async { service_accounts.get_opt("default").await.ok().flatten() },
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(s.client().clone(), &ns);
    let token: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "registry-token"},
        "stringData": {"token": "s3cr3t"},
    }))?;
    secrets.create(&PostParams::default(), &token).await?;

    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata: {{name: rbac, namespace: {ns}}}
spec:
  secrets:
    - name: pulled
      registry: registry.example
      username: bot
      passwordSecretRef: {{name: registry-token, key: token}}
"
    ))
    .await?;

    let outcome = async {
        let started = Instant::now();
        until(
            "Secret `pulled` materialised",
            Duration::from_secs(60),
            || async { secrets.get_opt("pulled").await.ok().flatten() },
        )
        .await?;
        until(
            "ServiceAccount default backfilled",
            Duration::from_secs(30),
            || async {
                let sa = service_accounts.get_opt("default").await.ok().flatten()?;
                sa.image_pull_secrets
                    .unwrap_or_default()
                    .iter()
                    .any(|r| r.name == "pulled")
                    .then_some(())
            },
        )
        .await?;
        let managers: Api<DynamicObject> = Api::namespaced_with(
            s.client().clone(),
            &ns,
            &kube::api::ApiResource::erase::<cheiron::api::ImagePullSecretManager>(&()),
        );
        until(
            "manager Ready=True in status",
            Duration::from_secs(30),
            || async {
                let m = managers.get_opt("rbac").await.ok().flatten()?;
                let conditions = m.data["status"]["conditions"].as_array()?.clone();
                conditions
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    .then_some(())
            },
        )
        .await?;
        let events: Api<Event> = Api::namespaced(s.client().clone(), &ns);
        until("an Event from cheiron", Duration::from_secs(30), || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| e.reporting_controller.as_deref() == Some("cheiron"))
                .then_some(())
        })
        .await?;
        let lease = Api::<Lease>::namespaced(s.client().clone(), NAMESPACE)
            .get("cheiron-controller")
            .await?;
        let holder = lease
            .spec
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        assert!(
            holder.starts_with(&format!("{pod_name}-")),
            "the Lease is held by {holder:?}, not by the process under test"
        );

        // Deleting the manager: the finalizer removes what cheiron wrote.
        managers.delete("rbac", &DeleteParams::default()).await?;
        until(
            "Secret `pulled` removed by the finalizer",
            Duration::from_secs(30),
            || async {
                secrets
                    .get_opt("pulled")
                    .await
                    .ok()
                    .and_then(|s| s.is_none().then_some(()))
            },
        )
        .await?;
        eprintln!(
            "{pod_name} did the controller's job in {:?}",
            started.elapsed()
        );
        Ok::<(), harness::Error>(())
    }
    .await;
    if let Err(e) = outcome {
        return Err(format!("{e}\n--- {pod_name} log (tail) ---\n{}", tail(log)).into());
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let refused = refusals(&text, None);
    assert!(
        refused.is_empty(),
        "{pod_name} was refused API calls under the generated RBAC:\n{}",
        refused.join("\n")
    );
    Ok(())
}

#[tokio::test]
async fn cheiron_run_does_its_job_with_only_the_combined_rbac() -> Result {
    let s = Scenario::new(CHEIRON, "install-run").await?;
    installed(s.client()).await?;
    let _lease = LEASE_HOLDER.lock().await;
    let dir = tempfile::tempdir()?;
    let [listen, admin] = harness::free_ports()?;
    let args = [
        "run".to_owned(),
        "--self-signed".to_owned(),
        "--leader-election".to_owned(),
        "--lease-duration=5".to_owned(),
        "--shutdown-delay=0".to_owned(),
        format!("--listen=127.0.0.1:{listen}"),
    ];
    let (_cheiron, log) = start_as(&s, dir.path(), "cheiron", "install-run", &args, admin).await?;
    controller_does_its_job(&s, &log, "install-run").await
}

#[tokio::test]
async fn cheiron_controller_does_its_job_with_only_its_own_rbac() -> Result {
    let s = Scenario::new(CHEIRON, "install-controller").await?;
    installed(s.client()).await?;
    let _lease = LEASE_HOLDER.lock().await;
    let dir = tempfile::tempdir()?;
    let [admin] = harness::free_ports()?;
    let args = [
        "controller".to_owned(),
        "--leader-election".to_owned(),
        "--lease-duration=5".to_owned(),
    ];
    let (_controller, log) = start_as(
        &s,
        dir.path(),
        "cheiron-controller",
        "install-controller",
        &args,
        admin,
    )
    .await?;
    controller_does_its_job(&s, &log, "install-controller").await
}

#[tokio::test]
async fn cheiron_webhook_becomes_ready_and_answers_with_only_its_own_rbac() -> Result {
    let s = Scenario::new(CHEIRON, "install-webhook").await?;
    installed(s.client()).await?;
    let ns = s.create_namespace(&[], &[]).await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata: {{name: webhook-rbac, namespace: {ns}}}
spec:
  mode: Pod
  secrets:
    - name: pulled
      registry: registry.example
      username: bot
      passwordSecretRef: {{name: registry-token, key: token}}
"
    ))
    .await?;
    let dir = tempfile::tempdir()?;
    let [listen, admin] = harness::free_ports()?;
    let args = [
        "webhook".to_owned(),
        "--self-signed".to_owned(),
        "--shutdown-delay=0".to_owned(),
        format!("--listen=127.0.0.1:{listen}"),
    ];
    let (_webhook, log) = start_as(
        &s,
        dir.path(),
        "cheiron-webhook",
        "install-webhook",
        &args,
        admin,
    )
    .await?;

    // A Pod review in the manager's namespace: the webhook adds the manager's Secret.
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "install-webhook",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns,
            "operation": "CREATE",
            "userInfo": {"username": "install-test"},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": ns},
                "spec": {"containers": [{"name": "c", "image": "registry.example/app"}]},
            },
        },
    });
    let https = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()?;
    let url = format!("https://127.0.0.1:{listen}/mutate");
    let answered = until(
        "the webhook to add the manager's Secret to a Pod",
        Duration::from_secs(30),
        || async {
            let response: Value = https
                .post(&url)
                .json(&review)
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let patch = response["response"]["patch"].as_str()?;
            let patch = base64::engine::general_purpose::STANDARD
                .decode(patch)
                .ok()?;
            String::from_utf8_lossy(&patch)
                .contains("pulled")
                .then_some(())
        },
    )
    .await;
    if let Err(e) = answered {
        return Err(format!("{e}\n--- cheiron webhook log (tail) ---\n{}", tail(&log)).into());
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    // Its identity may not list Secrets, and the webhook may say so; nothing else is
    // refused.
    let refused = refusals(&text, Some("secrets"));
    assert!(
        refused.is_empty(),
        "cheiron webhook was refused API calls under its generated RBAC:\n{}",
        refused.join("\n")
    );
    Ok(())
}

#[tokio::test]
async fn notes_say_how_to_check_the_installation() -> Result {
    // `helm install --dry-run=client` renders NOTES.txt, but asks a cluster for its version
    // and for objects the release would take over: the harness's admin kubeconfig, and a
    // release of its own (the plain manifests' objects exist in this cluster). The harness
    // applied the CRDs, so they are "managed elsewhere" (docs/install.md, "CRDs").
    let s = Scenario::new(CHEIRON, "install-notes").await?;
    let kubeconfig = s.cluster()?.dir.join("admin.kubeconfig");
    if !kubeconfig.is_file() {
        return Err(format!("no admin kubeconfig at {}", kubeconfig.display()).into());
    }
    let dir = tempfile::tempdir()?;
    let output = Command::new(harness::tools::helm()?)
        .args([
            "install",
            "notes",
            "charts/cheiron",
            "--namespace",
            "notes",
            "--dry-run=client",
            "--set",
            "crds.install=false",
        ])
        .current_dir(repo())
        .env("KUBECONFIG", &kubeconfig)
        .env("HELM_CACHE_HOME", dir.path().join("cache"))
        .env("HELM_CONFIG_HOME", dir.path().join("config"))
        .env("HELM_DATA_HOME", dir.path().join("data"))
        .stdin(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let notes = text.split("NOTES:").nth(1).unwrap_or_default();
    for needle in [
        "kubectl get ipsm,cipsm",
        "--dry-run=server",
        "curl -s localhost:8080/metrics",
        "rollout status deployment/notes-cheiron-webhook",
        "rollout status deployment/notes-cheiron-controller",
        "no Secret access",
        "delete every manager first",
        "helm test notes -n notes --logs",
    ] {
        assert!(
            notes.contains(needle),
            "NOTES.txt lacks {needle:?}:\n{notes}"
        );
    }
    Ok(())
}
