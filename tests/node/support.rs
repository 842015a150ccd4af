//! What the node tests share: the cluster, a scenario on it, Secrets and the outcome checks.

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::{Api, Client, api::PostParams};

use crate::{
    CHEIRON,
    harness::{
        Result, SETTLE, Scenario,
        node::{NodeCluster, PodOutcome},
        wait_for,
    },
};

/// Label that a test's cluster managers select its target namespaces by (value: scenario id).
pub const TARGET_LABEL: &str = "e2e.cheiron.anny.co/target";

/// The node cluster and a scenario (namespaces of its own) on it.
pub struct NodeTest {
    pub node: &'static NodeCluster,
    pub scenario: Scenario,
}

impl NodeTest {
    pub async fn new(name: &str) -> Result<Self> {
        let node = NodeCluster::start(CHEIRON)?;
        // Shown only when the test fails.
        eprintln!("node cluster files and logs: {}", node.dir.display());
        let scenario = Scenario::with_client(Client::try_from(node.admin_config())?, name);
        Ok(Self { node, scenario })
    }

    pub fn client(&self) -> &Client {
        self.scenario.client()
    }

    /// A namespace that this test's cluster managers select.
    pub async fn target_namespace(&self) -> Result<String> {
        self.scenario
            .create_namespace(&[(TARGET_LABEL, self.scenario.id())], &[])
            .await
    }

    /// Creates a `kubernetes.io/dockerconfigjson` Secret `name` in `ns` for `user`.
    pub async fn docker_secret(&self, ns: &str, name: &str, user: &str, password: &str) -> Result {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": { "name": name },
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {
                ".dockerconfigjson": self.node.registry.docker_config_json(user, password)
            },
        }))?;
        Api::<Secret>::namespaced(self.client().clone(), ns)
            .create(&PostParams::default(), &secret)
            .await?;
        Ok(())
    }

    /// Waits until Secret `ns/name` exists and its `.dockerconfigjson` holds `password`'s
    /// credentials for `user` (the controller has written or updated it).
    pub async fn until_secret_holds(
        &self,
        ns: &str,
        name: &str,
        user: &str,
        password: &str,
    ) -> Result {
        let api = Api::<Secret>::namespaced(self.client().clone(), ns);
        let want = self.node.registry.docker_config_json(user, password);
        let want: serde_json::Value = serde_json::from_str(&want)?;
        let auth = want["auths"][&self.node.registry.host]["auth"].clone();
        wait_for(
            format_args!("Secret {ns}/{name} to hold the current credentials"),
            SETTLE,
            || async {
                let secret = api.get_opt(name).await?.ok_or("no such Secret")?;
                let data = secret
                    .data
                    .and_then(|mut d| d.remove(".dockerconfigjson"))
                    .ok_or("no .dockerconfigjson")?;
                let json: serde_json::Value = serde_json::from_slice(&data.0)?;
                if json["auths"][&self.node.registry.host]["auth"] == auth {
                    Ok(())
                } else {
                    Err("it holds other credentials".into())
                }
            },
        )
        .await
    }

    /// Waits until ServiceAccount `ns/default` lists `secret` in `imagePullSecrets`.
    pub async fn until_default_service_account_has(&self, ns: &str, secret: &str) -> Result {
        let api = Api::<ServiceAccount>::namespaced(self.client().clone(), ns);
        wait_for(
            format_args!("ServiceAccount {ns}/default to reference {secret}"),
            SETTLE,
            || async {
                let sa = api
                    .get_opt("default")
                    .await?
                    .ok_or("no such ServiceAccount")?;
                if sa
                    .image_pull_secrets
                    .unwrap_or_default()
                    .iter()
                    .any(|r| r.name == secret)
                {
                    Ok(())
                } else {
                    Err("not referenced yet".into())
                }
            },
        )
        .await
    }

    /// Creates a plain Pod `name` of the private image in `ns` with `pull_secrets` and returns how
    /// its pull ended.
    pub async fn run_pod(&self, ns: &str, name: &str, pull_secrets: &[&str]) -> Result<PodOutcome> {
        let pod = self.node.pod(name, &self.node.image, pull_secrets)?;
        self.node.run_pod(self.client(), ns, &pod).await
    }

    /// [`NodeTest::run_pod`], failing unless the Pod runs.
    pub async fn expect_running(&self, ns: &str, name: &str, pull_secrets: &[&str]) -> Result {
        match self.run_pod(ns, name, pull_secrets).await? {
            PodOutcome::Running => Ok(()),
            PodOutcome::PullFailed(message) => {
                Err(format!("Pod {ns}/{name} should run, but its pull failed: {message}").into())
            }
        }
    }

    /// [`NodeTest::run_pod`], failing unless the registry refused the pull (401).
    pub async fn expect_unauthorized(&self, ns: &str, name: &str, pull_secrets: &[&str]) -> Result {
        match self.run_pod(ns, name, pull_secrets).await? {
            PodOutcome::PullFailed(message) if message.contains("401 Unauthorized") => Ok(()),
            PodOutcome::PullFailed(message) => Err(format!(
                "Pod {ns}/{name}: pull failed, but not with 401 Unauthorized: {message}"
            )
            .into()),
            PodOutcome::Running => Err(format!(
                "Pod {ns}/{name} runs, but the registry should have refused its pull"
            )
            .into()),
        }
    }
}
