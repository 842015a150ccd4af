//! One test's view of the shared cluster: its own client, its own uniquely named namespaces,
//! and helpers that read like the intent of the test.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use cheiron::api::{ClusterImagePullSecretManager, ImagePullSecretManager};
use k8s_openapi::{
    ByteString,
    api::core::v1::{Namespace, Pod, Secret, ServiceAccount},
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams},
    core::ObjectMeta,
};

use super::{
    Admitted, Cheiron, Result,
    cluster::{self, Cluster},
    control_plane::ControlPlaneOptions,
    objects::{pod, service_account, string_map},
    wait::wait_for,
    webhook::{FIELD_MANAGER, WebhookProcess},
};

/// Label on every namespace a scenario creates; its value is [`Scenario::id`].
pub const SCENARIO_LABEL: &str = "e2e.cheiron.anny.co/scenario";

/// How long the webhook may take to see a new manager or namespace, and kcm to create a
/// namespace's `default` ServiceAccount. "Within seconds", with headroom for a loaded machine.
pub const SETTLE: Duration = Duration::from_secs(20);

static SCENARIOS: AtomicUsize = AtomicUsize::new(0);

/// A test's handle on the cluster.
pub struct Scenario {
    client: Client,
    id: String,
    namespaces: AtomicUsize,
}

impl Scenario {
    /// Starts the cluster running `cheiron` (the test crate's [`crate::cheiron!`]) if this is
    /// the first test to need it (blocking until it is up), and returns a handle with a fresh
    /// client. `name` is a short slug of the test.
    pub async fn new(cheiron: Cheiron, name: &str) -> Result<Self> {
        Self::new_with(cheiron, name, ControlPlaneOptions::default()).await
    }

    /// [`Scenario::new`] on a cluster whose control plane is started with `options` (refused
    /// when this process's cluster was started with others).
    pub async fn new_with(
        cheiron: Cheiron,
        name: &str,
        options: ControlPlaneOptions,
    ) -> Result<Self> {
        let cluster = cluster::start_with(cheiron, options)?;
        // Captured by the test harness and shown only when the test fails.
        eprintln!("cluster files and logs: {}", cluster.dir.display());
        Ok(Self::with_client(
            Client::try_from(cluster.admin_config())?,
            name,
        ))
    }

    /// A scenario on the cluster `client` talks to (a test with a control plane of its own).
    pub fn with_client(client: Client, name: &str) -> Self {
        let n = SCENARIOS.fetch_add(1, Ordering::Relaxed);
        Self {
            client,
            id: format!("e2e-{name}-{n}"),
            namespaces: AtomicUsize::new(0),
        }
    }

    /// The shared cluster (started by [`Scenario::new`]).
    pub fn cluster(&self) -> Result<&'static Cluster> {
        cluster::started()
    }

    /// An admin client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Unique in this cluster; usable as a name prefix and as a label value.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A unique name for a cluster-scoped object of this scenario.
    pub fn unique_name(&self, what: &str) -> String {
        format!("{}-{what}", self.id)
    }

    /// Creates a namespace with a unique name, labelled [`SCENARIO_LABEL`]`=`[`Scenario::id`]
    /// plus `labels`, and returns its name.
    pub async fn create_namespace(
        &self,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> Result<String> {
        let name = format!(
            "{}-{}",
            self.id,
            self.namespaces.fetch_add(1, Ordering::Relaxed)
        );
        let mut all_labels = vec![(SCENARIO_LABEL, self.id.as_str())];
        all_labels.extend_from_slice(labels);
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: string_map(&all_labels),
                annotations: string_map(annotations),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(|e| format!("cannot create namespace {name}: {e}"))?;
        Ok(name)
    }

    /// Server-side applies the ClusterImagePullSecretManager `name` whose spec is `spec` (YAML,
    /// indented by two spaces).
    pub async fn apply_cluster_manager(&self, name: &str, spec: &str) -> Result<DynamicObject> {
        self.apply_manager(&format!(
            "apiVersion: cheiron.anny.co/v1alpha1\nkind: ClusterImagePullSecretManager\nmetadata:\n  name: {name}\nspec:\n{spec}"
        ))
        .await
    }

    /// Server-side applies a manager of either kind, written as YAML (a namespaced one must
    /// name its namespace). Applying it again with a changed spec updates it.
    pub async fn apply_manager(&self, yaml: &str) -> Result<DynamicObject> {
        let manager: DynamicObject = serde_saphyr::from_str(yaml)?;
        let (api, name) = self.manager_api(&manager)?;
        let applied = api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&manager),
            )
            .await
            .map_err(|e| format!("cannot apply manager {name}: {e}"))?;
        Ok(applied)
    }

    /// Applies the `ImagePullSecretManager` `pods` in `ns`: mode `Pod`, copying the existing
    /// Secret `secret` of that namespace into every Pod. Many tests need exactly this one.
    pub async fn apply_pod_mode_manager(&self, ns: &str, secret: &str) -> Result<DynamicObject> {
        self.apply_copying_manager(ns, "pods", "Pod", secret).await
    }

    /// Applies the `ImagePullSecretManager` `name` in `ns` of `mode` (`Pod` or
    /// `ServiceAccount`) with one entry: the existing Secret `secret` of that namespace.
    pub async fn apply_copying_manager(
        &self,
        ns: &str,
        name: &str,
        mode: &str,
        secret: &str,
    ) -> Result<DynamicObject> {
        self.apply_manager(&format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: {name}
  namespace: {ns}
spec:
  mode: {mode}
  secrets:
    - existingSecretRef:
        name: {secret}
"
        ))
        .await
    }

    /// Creates a manager of either kind as is (POST); the inner result is the API's answer.
    pub async fn create_manager(
        &self,
        manager: &DynamicObject,
    ) -> Result<kube::Result<DynamicObject>> {
        let (api, _) = self.manager_api(manager)?;
        Ok(api.create(&PostParams::default(), manager).await)
    }

    /// Creates or replaces an Opaque Secret `name` in `ns` with `password` under key `password`.
    pub async fn password_secret(&self, ns: &str, name: &str, password: &str) -> Result {
        let api = Api::<Secret>::namespaced(self.client.clone(), ns);
        let mut secret = Secret {
            metadata: kube::core::ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            data: Some(
                [(
                    "password".to_owned(),
                    ByteString(password.as_bytes().to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        match api.get_opt(name).await? {
            None => {
                api.create(&PostParams::default(), &secret).await?;
            }
            Some(existing) => {
                secret.metadata.resource_version = existing.metadata.resource_version;
                api.replace(name, &PostParams::default(), &secret).await?;
            }
        }
        Ok(())
    }

    /// Deletes a manager of either kind.
    pub async fn delete_manager(&self, manager: &DynamicObject) -> Result<()> {
        let (api, name) = self.manager_api(manager)?;
        api.delete(&name, &Default::default()).await?;
        Ok(())
    }

    fn manager_api(&self, manager: &DynamicObject) -> Result<(Api<DynamicObject>, String)> {
        let kind = manager
            .types
            .as_ref()
            .map(|t| t.kind.as_str())
            .unwrap_or_default();
        let name = manager.name_any();
        let api = match (kind, manager.namespace()) {
            ("ImagePullSecretManager", Some(ns)) => Api::namespaced_with(
                self.client.clone(),
                &ns,
                &ApiResource::erase::<ImagePullSecretManager>(&()),
            ),
            ("ClusterImagePullSecretManager", _) => Api::all_with(
                self.client.clone(),
                &ApiResource::erase::<ClusterImagePullSecretManager>(&()),
            ),
            _ => {
                return Err(format!(
                    "{kind} {name}: not a manager, or a namespaced one without namespace"
                )
                .into());
            }
        };
        Ok((api, name))
    }

    /// Creates a ServiceAccount and returns it as stored.
    pub async fn create_service_account(
        &self,
        ns: &str,
        sa: &ServiceAccount,
    ) -> Result<ServiceAccount> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        let created = api.create(&PostParams::default(), sa).await?;
        Ok(api.get(&created.name_any()).await?)
    }

    /// Merge-patches a ServiceAccount (an UPDATE as far as admission is concerned) and
    /// returns it as stored.
    pub async fn update_service_account(
        &self,
        ns: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> Result<ServiceAccount> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(api.get(name).await?)
    }

    /// Creates a Pod (usually with only `generateName`) and returns it as stored.
    pub async fn create_pod(&self, ns: &str, pod: &Pod) -> Result<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let created = api.create(&PostParams::default(), pod).await?;
        Ok(api.get(&created.name_any()).await?)
    }

    /// Waits until kube-controller-manager has created the namespace's `default` ServiceAccount
    /// (Pods cannot be created before) and returns it.
    pub async fn default_service_account(&self, ns: &str) -> Result<ServiceAccount> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        wait_for(format!("ServiceAccount {ns}/default"), SETTLE, || async {
            api.get_opt("default")
                .await?
                .ok_or_else(|| "not created yet".into())
        })
        .await
    }

    /// Waits until a ServiceAccount `name` created in `ns` comes out of admission with exactly
    /// `expected` (dry run, nothing stored), i.e. until the webhook has seen the namespace and
    /// the managers. Tests call this before creating the objects they assert on.
    pub async fn until_new_service_account_gets(
        &self,
        ns: &str,
        name: &str,
        expected: &[&str],
    ) -> Result<()> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        let probe = service_account(name, &[], &[]);
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        wait_for(
            format!("a new ServiceAccount {ns}/{name} to get {expected:?}"),
            SETTLE,
            || async {
                let admitted = api.create(&dry_run, &probe).await?;
                check_names(&admitted, expected)
            },
        )
        .await
    }

    /// Waits until a Pod with `labels` and no pull secrets of its own created in `ns` comes out
    /// of admission with exactly `expected` (dry run, nothing stored).
    pub async fn until_new_pod_gets(
        &self,
        ns: &str,
        labels: &[(&str, &str)],
        expected: &[&str],
    ) -> Result<()> {
        self.default_service_account(ns).await?;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let probe = pod("probe-", labels, &[], &[]);
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        wait_for(
            format!("a new Pod labelled {labels:?} in {ns} to get {expected:?}"),
            SETTLE,
            || async {
                let admitted = api.create(&dry_run, &probe).await?;
                check_names(&admitted, expected)
            },
        )
        .await
    }

    /// Starts a second `cheiron webhook` (not registered with the apiserver) as the group-less
    /// user of [`Cluster::limited_kubeconfig`]. It is stopped when dropped.
    pub fn start_webhook_as_limited_user(&self) -> Result<WebhookProcess> {
        let cluster = cluster::started()?;
        WebhookProcess::start(
            cluster.cheiron(),
            "cheiron webhook (limited user)",
            cluster.limited_kubeconfig(),
            cluster.webhook_tls_dir(),
            &cluster.dir.join(format!("cheiron-webhook-{}.log", self.id)),
        )
    }
}

fn check_names(admitted: &impl Admitted, expected: &[&str]) -> Result<()> {
    let names = admitted.pull_secret_names();
    if names == expected {
        Ok(())
    } else {
        Err(format!("imagePullSecrets {names:?}").into())
    }
}
