//! cheiron installed in-cluster, as an operator installs it: `helm install charts/cheiron --wait`
//! on a one-node cluster with a real kubelet, with the image `scripts/image` builds pushed to
//! the private registry and pulled with the chart's `imagePullSecrets`. The webhook, the
//! controller and the node agent (the chart's DaemonSet) run as Pods; the apiserver calls the
//! webhook through its Service; every cheiron Pod reaches the apiserver through the
//! `kubernetes` Service. Then plain Pods pull the private image with what the in-cluster
//! cheiron gave them: in mode Pod through the webhook, and in mode Node through the node
//! agent's credential-provider plugin.
//!
//! A test binary of its own, with a node of its own ([`NodeCluster::start_in_cluster`]: no
//! cheiron on the host; kube-scheduler, and the controllers a Deployment, a DaemonSet and the
//! chart's hook Jobs need). Needs root, like `tests/node` (see tests/node/README.md), and the
//! image archive (`CHEIRON_IMAGE_ARCHIVE`, or built by `scripts/image` on first use).

use std::time::Duration;

use cheiron_harness as harness;
use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    core::v1::{Namespace, Pod, Secret},
};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use tokio::sync::OnceCell;

use harness::{
    Result, SETTLE, Scenario,
    node::{NodeCluster, PLUGIN_CACHE_DURATION, POD_SETTLES, PodOutcome},
    wait_for,
};

/// The cheiron these tests start their cluster with.
const CHEIRON: harness::Cheiron = harness::cheiron!();

/// The release, its namespace, and the node agents' namespace.
const RELEASE: &str = "cheiron";
const NAMESPACE: &str = "cheiron";
const NODE_NAMESPACE: &str = "cheiron-node";
/// The Secret the chart's `imagePullSecrets` names, in both namespaces.
const IMAGE_PULL_SECRET: &str = "cheiron-image-pull";
/// How long `helm install --wait` may take: two image pulls, the certificate Jobs, three
/// workloads becoming ready on a loaded 2-core machine.
const INSTALL_TIMEOUT: &str = "8m";

/// The node cluster with cheiron installed by its chart.
struct Installed {
    node: &'static NodeCluster,
}

async fn installed() -> Result<&'static Installed> {
    static INSTALLED: OnceCell<Result<Installed, String>> = OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async { install().await.map_err(|e| e.to_string()) })
        .await
        .as_ref()
        .map_err(|e| format!("cheiron was not installed in-cluster: {e}").into())
}

/// Pushes cheiron's image, creates the two namespaces with the pull Secret, and installs the
/// chart with the node agent, pointed at the paths the kubelet was started with.
async fn install() -> Result<Installed> {
    let node = NodeCluster::start_in_cluster(CHEIRON)?;
    // Shown only when a test fails.
    eprintln!("node cluster files and logs: {}", node.dir.display());
    let client = Client::try_from(node.admin_config())?;
    let archive = harness::tools::image_archive()?;
    let image =
        node.registry
            .push_archive(&archive, "cheiron/cheiron", env!("CARGO_PKG_VERSION"))?;
    let (repository, tag) = image.rsplit_once(':').ok_or("no tag in the reference")?;

    let puller = "cheiron-image-puller";
    let password = node.registry.set_user(puller)?;
    for (ns, labels) in [
        (NAMESPACE, serde_json::json!({})),
        // The chart's node namespace must allow privileged Pods (host paths, root).
        (
            NODE_NAMESPACE,
            serde_json::json!({ "pod-security.kubernetes.io/enforce": "privileged" }),
        ),
    ] {
        let namespace: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": { "name": ns, "labels": labels },
        }))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await?;
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": { "name": IMAGE_PULL_SECRET },
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {
                ".dockerconfigjson": node.registry.docker_config_json(puller, &password)
            },
        }))?;
        Api::<Secret>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &secret)
            .await?;
    }

    let state_dir = node
        .node_credentials
        .parent()
        .ok_or("the credentials file has no directory")?;
    let values = [
        format!("image.repository={repository}"),
        format!("image.tag={tag}"),
        format!("imagePullSecrets[0].name={IMAGE_PULL_SECRET}"),
        // One replica each: both Deployments still run, on a 2-core machine.
        "replicaCount=1".to_owned(),
        "controller.replicaCount=1".to_owned(),
        "node.enabled=true".to_owned(),
        format!("node.namespace={NODE_NAMESPACE}"),
        "node.createNamespace=false".to_owned(),
        format!("node.stateDir={}", state_dir.display()),
        "node.credentialProvider.install=true".to_owned(),
        format!(
            "node.credentialProvider.binDir={}",
            node.plugin_bin_dir.display()
        ),
        format!(
            "node.credentialProvider.providerConfig={}",
            node.plugin_config.display()
        ),
        format!(
            "node.credentialProvider.extraMatchImages[0]={}",
            node.node_mode_host
        ),
        format!("node.cacheDuration={}s", PLUGIN_CACHE_DURATION.as_secs()),
        "node.resync=5s".to_owned(),
    ];
    let chart = harness::tools::repo()?.join("charts/cheiron");
    let mut helm = std::process::Command::new(harness::tools::helm()?);
    helm.args(["install", RELEASE])
        .arg(&chart)
        .args([
            "--namespace",
            NAMESPACE,
            "--wait",
            "--timeout",
            INSTALL_TIMEOUT,
        ])
        .arg("--kubeconfig")
        .arg(node.admin_kubeconfig());
    for value in &values {
        helm.args(["--set", value]);
    }
    let output = tokio::task::spawn_blocking(move || helm.output()).await??;
    if !output.status.success() {
        return Err(format!(
            "helm install failed ({}): {}{}\n(the kubelet's and the scheduler's logs are in {})",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            node.dir.display()
        )
        .into());
    }
    Ok(Installed { node })
}

/// A plain Pod of `image`: no pull secret, no node name (the scheduler places it).
async fn run_plain_pod(
    node: &NodeCluster,
    client: &Client,
    ns: &str,
    name: &str,
    image: &str,
) -> Result<PodOutcome> {
    let mut pod = node.pod(name, image, &[])?;
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = None;
    }
    node.run_pod(client, ns, &pod).await
}

/// `helm install --wait` returned: the webhook's and the controller's Deployments and the node
/// agents' DaemonSet are ready, running the image from the private registry.
#[tokio::test(flavor = "multi_thread")]
async fn helm_install_wait_brings_up_both_deployments_and_the_node_agent_from_the_private_registry()
-> Result {
    let installed = installed().await?;
    let client = Client::try_from(installed.node.admin_config())?;
    let release = ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}"));
    let deployments = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .list(&release)
        .await?;
    let mut names: Vec<String> = Vec::new();
    for deployment in &deployments {
        let name = deployment.metadata.name.clone().unwrap_or_default();
        let status = deployment.status.clone().unwrap_or_default();
        let image = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .map(|s| s.containers[0].image.clone().unwrap_or_default())
            .unwrap_or_default();
        assert!(
            image.starts_with(&installed.node.registry.host),
            "Deployment {name} runs {image}, not the pushed image"
        );
        assert!(
            status.ready_replicas.unwrap_or(0) >= 1,
            "Deployment {name} is not ready: {status:?}"
        );
        names.push(name);
    }
    names.sort();
    assert_eq!(
        names,
        [
            format!("{RELEASE}-controller"),
            format!("{RELEASE}-webhook")
        ],
        "the split install's two Deployments"
    );
    // helm's --wait counts a DaemonSet ready once no more than its maxUnavailable (1) of its
    // Pods are unready: on a one-node cluster, at once. So this waits for the agent itself.
    let agents = Api::<DaemonSet>::namespaced(client.clone(), NODE_NAMESPACE);
    let waited = wait_for(
        "the node agent to be ready on the node",
        POD_SETTLES,
        || async {
            let list = agents.list(&release).await?;
            let [agent] = list.items.as_slice() else {
                return Err(format!("{} DaemonSets of the node agent", list.items.len()).into());
            };
            let status = agent.status.clone().unwrap_or_default();
            if (status.desired_number_scheduled, status.number_ready) == (1, 1) {
                Ok(())
            } else {
                Err(format!("{status:?}").into())
            }
        },
    )
    .await;
    if let Err(e) = waited {
        return Err(format!("{e}\n{}", pods_in(&client, NODE_NAMESPACE).await?).into());
    }
    Ok(())
}

/// The Pods of `ns` and their containers' states, for a failure message.
async fn pods_in(client: &Client, ns: &str) -> Result<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?;
    Ok(pods
        .iter()
        .map(|pod| {
            let status = pod.status.clone().unwrap_or_default();
            format!(
                "Pod {ns}/{}: {:?} {:?} {:?}",
                pod.metadata.name.as_deref().unwrap_or_default(),
                status.phase,
                status.init_container_statuses,
                status.container_statuses
            )
        })
        .collect::<Vec<_>>()
        .join("\n"))
}

/// Mode Pod through the in-cluster webhook: a plain Pod in a new namespace gets the manager's
/// Secret (which the in-cluster controller wrote there) from the webhook, which the apiserver
/// reaches through its Service, and the kubelet pulls the private image with it.
#[tokio::test(flavor = "multi_thread")]
async fn a_plain_pod_in_a_new_namespace_pulls_through_the_in_cluster_webhook() -> Result {
    let installed = installed().await?;
    let node = installed.node;
    let s = Scenario::with_client(Client::try_from(node.admin_config())?, "in-cluster-pod");
    let source_ns = s.create_namespace(&[], &[]).await?;
    let user = s.unique_name("user");
    let password = node.registry.set_user(&user)?;
    s.password_secret(&source_ns, "registry-password", &password)
        .await?;
    let target_label = "e2e.cheiron.anny.co/target";
    s.apply_cluster_manager(
        &s.unique_name("manager"),
        &format!(
            "  mode: Pod
  namespaceSelector:
    matchLabels:
      {target_label}: {id}
  secrets:
    - name: in-cluster-registry
      registry: {registry}
      username: {user}
      passwordSecretRef: {{name: registry-password, key: password, namespace: {source_ns}}}
",
            id = s.id(),
            registry = node.registry.host,
        ),
    )
    .await?;
    let ns = s.create_namespace(&[(target_label, s.id())], &[]).await?;
    let secrets = Api::<Secret>::namespaced(s.client().clone(), &ns);
    wait_for(
        format_args!("the in-cluster controller to write {ns}/in-cluster-registry"),
        SETTLE,
        || async {
            secrets
                .get_opt("in-cluster-registry")
                .await?
                .map(|_| ())
                .ok_or_else(|| "not yet".into())
        },
    )
    .await?;
    match run_plain_pod(node, s.client(), &ns, "plain", &node.image).await? {
        PodOutcome::Running => {}
        PodOutcome::PullFailed(message) => {
            return Err(format!("the plain Pod should run, but its pull failed: {message}").into());
        }
    }
    let pod = Api::<Pod>::namespaced(s.client().clone(), &ns)
        .get("plain")
        .await?;
    let spec = pod.spec.unwrap_or_default();
    let named: Vec<String> = spec
        .image_pull_secrets
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(
        named,
        ["in-cluster-registry"],
        "the in-cluster webhook put the manager's Secret into the Pod"
    );
    assert!(
        spec.node_name.is_some(),
        "the scheduler placed the Pod on the node"
    );
    Ok(())
}

/// Mode Node through the chart's DaemonSet: its init container installed the plugin where the
/// kubelet runs it, and the agent writes the node's credentials file from what the in-cluster
/// controller hands it. A plain Pod in a namespace no manager targets is refused before the
/// manager exists and runs after, naming no pull secret.
#[tokio::test(flavor = "multi_thread")]
async fn the_charts_node_agent_lets_a_plain_pod_in_an_untargeted_namespace_pull() -> Result {
    let installed = installed().await?;
    let node = installed.node;
    let s = Scenario::with_client(Client::try_from(node.admin_config())?, "in-cluster-node");
    let image = node
        .image
        .replacen(&node.registry.host, &node.node_mode_host, 1);
    let ns = s.create_namespace(&[], &[]).await?;
    // The ServiceAccount admission plugin refuses a Pod until kcm has made `default`.
    s.default_service_account(&ns).await?;
    match run_plain_pod(node, s.client(), &ns, "before", &image).await? {
        PodOutcome::PullFailed(message) if message.contains("401 Unauthorized") => {}
        other => return Err(format!("before the manager: {other:?}").into()),
    }

    let manager = node
        .apply_node_manager(&s, "node-manager", &node.node_mode_host)
        .await?;
    let user = manager.user;
    wait_for(
        "the node agent's credentials file to hold the user",
        SETTLE,
        || async {
            let file: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&node.node_credentials)?)?;
            let held = file["auths"][&node.node_mode_host]["username"].as_str();
            if held == Some(user.as_str()) {
                Ok(())
            } else {
                Err(format!("it holds {held:?}").into())
            }
        },
    )
    .await?;
    // Past the plugin's cached answer of the refused pull (docs/node.md).
    tokio::time::sleep(PLUGIN_CACHE_DURATION + Duration::from_millis(500)).await;
    match run_plain_pod(node, s.client(), &ns, "after", &image).await? {
        PodOutcome::Running => {}
        PodOutcome::PullFailed(message) => {
            return Err(format!(
                "the plain Pod should run on the node's credential, but its pull failed: {message}"
            )
            .into());
        }
    }
    Ok(())
}

/// `helm test`: the chart's test Pod, scheduled on the node with the pushed image, runs
/// `cheiron dry-run`, and its dry-run Pod in `default` gets the test manager's pull secret
/// from the in-cluster webhook; the test's objects are gone afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn helm_test_gets_a_dry_run_pod_its_pull_secret_from_the_in_cluster_webhook() -> Result {
    let installed = installed().await?;
    let mut helm = std::process::Command::new(harness::tools::helm()?);
    // No --logs: this apiserver cannot reach the kubelet's log endpoint (the log is read
    // from the node's files below).
    helm.args(["test", RELEASE, "--namespace", NAMESPACE])
        .args(["--timeout", "4m"])
        .arg("--kubeconfig")
        .arg(installed.node.admin_kubeconfig());
    let output = tokio::task::spawn_blocking(move || helm.output()).await??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "helm test failed ({}): {stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let test = format!("{RELEASE}-test");
    assert!(stdout.contains("Phase:          Succeeded"), "{stdout}");
    // The test Pod's log (what --logs prints): the dry-run Pod got the secret.
    let log = installed.node.container_log(NAMESPACE, &test, "dry-run")?;
    assert!(log.contains(&format!("imagePullSecrets: {test}")), "{log}");
    let client = Client::try_from(installed.node.admin_config())?;
    let managers = Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "cheiron.anny.co",
            "v1alpha1",
            "ImagePullSecretManager",
        )),
    );
    wait_for("helm test's manager to be deleted", POD_SETTLES, || async {
        match managers.get_opt(&test).await? {
            None => Ok(()),
            Some(_) => Err("still there".into()),
        }
    })
    .await?;
    assert!(
        Api::<Pod>::namespaced(client, "default")
            .list(&ListParams::default())
            .await?
            .items
            .is_empty(),
        "the dry run created a Pod in default"
    );
    Ok(())
}
