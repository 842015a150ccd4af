//! `helm upgrade` across a change of the CRDs, on a real kube-apiserver of its own (the test
//! changes cluster-wide CRDs, which the other tests of this binary use).
//!
//! The previous chart is the one of [`PREVIOUS_CHART_COMMIT`], the last with a `crds/`
//! directory (Helm installed its CRDs once and never upgraded them), taken from the
//! repository's history with `git archive`. The steps are those docs/install.md ("CRDs") gives.

use std::{path::Path, time::Duration};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};

use super::*;
use harness::{ControlPlane, run_dir};

/// The last commit whose chart installs the CRDs from `crds/`.
const PREVIOUS_CHART_COMMIT: &str = "23976a5f55733228ff7e59427dcb26d9b6667778";

const RELEASE: &str = "cheiron-upgrade";
const NAMESPACE: &str = "cheiron-upgrade";

const CRDS: [&str; 2] = [
    "imagepullsecretmanagers.cheiron.anny.co",
    "clusterimagepullsecretmanagers.cheiron.anny.co",
];

/// Values every chart version of the test accepts. No hook Job (no node runs one here: the
/// certificate is "brought"), and a webhook that selects no namespace, so that the release
/// changes nothing but its own objects.
const VALUES: [&str; 5] = [
    "certificates.source=secret",
    "certificates.secretName=upgrade-tls",
    "certificates.caBundle=Zm9v",
    "webhook.namespaceSelector.matchExpressions[0].key=cheiron.anny.co/upgrade-test",
    "webhook.namespaceSelector.matchExpressions[0].operator=Exists",
];

/// The printer column the "next" chart adds to both CRDs: the change the upgrade must carry.
const ADDED_COLUMN: &str = "UpgradeTest";

/// Runs `helm <verb> RELEASE <chart>` against `kubeconfig` with [`VALUES`] and `extra`.
fn helm(kubeconfig: &Path, verb: &str, chart: Option<&Path>, extra: &[&str]) -> Result<Output> {
    let mut command = Command::new(harness::tools::helm()?);
    command.args([verb, RELEASE]);
    if let Some(chart) = chart {
        command.arg(chart);
        for value in VALUES {
            command.args(["--set", value]);
        }
    }
    command
        .args(["--namespace", NAMESPACE])
        .args(extra)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdin(Stdio::null());
    Ok(command.output()?)
}

fn succeeded(what: &str, output: &Output) -> Result<()> {
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
        .into())
    }
}

/// The chart of [`PREVIOUS_CHART_COMMIT`], extracted under `dir`.
fn previous_chart(dir: &Path) -> Result<PathBuf> {
    let archive = dir.join("previous-chart.tar");
    let output = Command::new("git")
        .arg("-C")
        .arg(repo())
        .args(["archive", "--format=tar", "--output"])
        .arg(&archive)
        .args([PREVIOUS_CHART_COMMIT, "charts/cheiron"])
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "this test installs the chart of commit {PREVIOUS_CHART_COMMIT} from the repository's \
             history, and `git archive` could not read it: {}\nRun it in a git clone with that \
             history (in a shallow clone: git fetch --unshallow).",
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    let output = Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(dir)
        .output()?;
    succeeded("tar -xf previous-chart.tar", &output)?;
    let chart = dir.join("charts/cheiron");
    assert!(
        chart.join("crds/crds.yaml").is_file(),
        "the chart of {PREVIOUS_CHART_COMMIT} should have its CRDs in crds/"
    );
    Ok(chart)
}

/// A copy of this chart whose CRDs both gain the printer column [`ADDED_COLUMN`].
fn next_chart(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir.join("next"))?;
    let chart = dir.join("next/cheiron");
    let output = Command::new("cp")
        .arg("-r")
        .arg(repo().join("charts/cheiron"))
        .arg(&chart)
        .output()?;
    succeeded("cp -r charts/cheiron", &output)?;
    let path = chart.join("files/crds.yaml");
    let mut text = String::new();
    for mut crd in documents(&std::fs::read(&path)?)? {
        let versions = crd["spec"]["versions"]
            .as_array_mut()
            .ok_or("a CRD without spec.versions")?;
        for version in versions {
            let columns = version
                .as_object_mut()
                .ok_or("a CRD version that is not an object")?
                .entry("additionalPrinterColumns")
                .or_insert_with(|| Value::Array(Vec::new()));
            columns
                .as_array_mut()
                .ok_or("additionalPrinterColumns is not a list")?
                .push(serde_json::json!({
                    "name": ADDED_COLUMN,
                    "type": "integer",
                    "jsonPath": ".metadata.generation",
                }));
        }
        // JSON is YAML: one document each.
        text.push_str("---\n");
        text.push_str(&serde_json::to_string_pretty(&crd)?);
        text.push('\n');
    }
    std::fs::write(&path, text)?;
    Ok(chart)
}

fn has_added_column(crd: &CustomResourceDefinition) -> bool {
    crd.spec.versions.iter().all(|v| {
        v.additional_printer_columns
            .iter()
            .flatten()
            .any(|c| c.name == ADDED_COLUMN)
    })
}

/// Whether `crd` carries the ownership Helm checks before it takes over an object.
fn owned_by_release(crd: &CustomResourceDefinition) -> bool {
    let labels = crd.metadata.labels.clone().unwrap_or_default();
    let annotations = crd.metadata.annotations.clone().unwrap_or_default();
    labels
        .get("app.kubernetes.io/managed-by")
        .map(String::as_str)
        == Some("Helm")
        && annotations
            .get("meta.helm.sh/release-name")
            .map(String::as_str)
            == Some(RELEASE)
        && annotations
            .get("meta.helm.sh/release-namespace")
            .map(String::as_str)
            == Some(NAMESPACE)
}

fn managers(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cheiron.anny.co", "v1alpha1", "ImagePullSecretManager");
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

#[tokio::test]
async fn helm_upgrade_from_the_crds_directory_chart_adopts_then_upgrades_the_crds_and_keeps_them()
-> Result {
    let dir = run_dir(CHEIRON)?;
    eprintln!("files and logs in {}", dir.display());
    let control_plane = ControlPlane::start(&dir).await?;
    let kubeconfig = control_plane.admin_kubeconfig.clone();
    let client = Client::try_from(control_plane.admin_config.clone())?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let previous = previous_chart(&dir)?;
    let current = repo().join("charts/cheiron");
    let next = next_chart(&dir)?;

    // 1. The previous chart: Helm installs crds/ itself, without its ownership metadata.
    let output = helm(
        &kubeconfig,
        "install",
        Some(&previous),
        &["--create-namespace"],
    )?;
    succeeded("helm install (previous chart)", &output)?;
    for name in CRDS {
        let crd = crds.get(name).await?;
        assert!(!owned_by_release(&crd), "{name}: {:?}", crd.metadata);
    }
    // A manager that must outlive every step.
    super::cluster::until(
        "the ImagePullSecretManager kind to be served",
        Duration::from_secs(30),
        || async {
            harness::apply_object(
                &client,
                &serde_json::json!({
                    "apiVersion": "cheiron.anny.co/v1alpha1",
                    "kind": "ImagePullSecretManager",
                    "metadata": {"name": "survivor", "namespace": "default"},
                    "spec": {"secrets": [{"existingSecretRef": {"name": "registry"}}]},
                }),
                "cheiron-upgrade-test",
                true,
            )
            .await
            .ok()
        },
    )
    .await?;

    // 2. This chart: the CRDs are templates now, and Helm refuses to take over objects it
    // did not create, naming the CRD (docs/install.md quotes this error).
    let output = helm(&kubeconfig, "upgrade", Some(&current), &[])?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success()
            && stderr.contains("exists and cannot be imported into the current release")
            && stderr.contains("CustomResourceDefinition"),
        "helm upgrade without adoption: {}{stderr}",
        String::from_utf8_lossy(&output.stdout)
    );

    // 3. The documented one-time step: --take-ownership.
    let output = helm(
        &kubeconfig,
        "upgrade",
        Some(&current),
        &["--take-ownership"],
    )?;
    succeeded("helm upgrade --take-ownership", &output)?;
    for name in CRDS {
        let crd = crds.get(name).await?;
        assert!(owned_by_release(&crd), "{name}: {:?}", crd.metadata);
        assert_eq!(
            crd.annotations().get("helm.sh/resource-policy"),
            Some(&"keep".to_owned()),
            "{name}"
        );
        assert!(!has_added_column(&crd), "{name}");
    }

    // 4. The next upgrade changes the CRDs, with no step of the user's.
    let output = helm(&kubeconfig, "upgrade", Some(&next), &[])?;
    succeeded("helm upgrade (a chart with changed CRDs)", &output)?;
    for name in CRDS {
        let crd = crds.get(name).await?;
        assert!(
            has_added_column(&crd),
            "{name} after the upgrade: {:?}",
            crd.spec.versions
        );
    }
    managers(&client).get("survivor").await?;

    // 5. Uninstalled, the CRDs and so the manager stay (crds.keep).
    let output = helm(&kubeconfig, "uninstall", None, &["--wait"])?;
    succeeded("helm uninstall", &output)?;
    for name in CRDS {
        crds.get(name).await?;
    }
    managers(&client).get("survivor").await?;
    let webhooks: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        Api::all(client.clone());
    assert!(
        webhooks.get_opt(RELEASE).await?.is_none(),
        "helm uninstall left the release's webhook configuration"
    );

    // 6. With crds.keep=false, the release owns the CRDs outright (Helm adopts them again:
    // they carry its ownership) and uninstalling deletes them, and the manager with them.
    let output = helm(
        &kubeconfig,
        "install",
        Some(&current),
        &["--set", "crds.keep=false"],
    )?;
    succeeded("helm install --set crds.keep=false", &output)?;
    let output = helm(&kubeconfig, "uninstall", None, &["--wait"])?;
    succeeded("helm uninstall (crds.keep=false)", &output)?;
    for name in CRDS {
        super::cluster::until(
            &format!("{name} to be deleted"),
            Duration::from_secs(60),
            || async { crds.get_opt(name).await.ok().filter(Option::is_none) },
        )
        .await?;
    }
    drop(control_plane);
    Ok(())
}
