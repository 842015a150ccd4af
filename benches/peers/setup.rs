//! The cluster and the servers: one control plane from the e2e harness, one namespace per
//! configuration, every webhook registered at once (each selecting only its namespace), and
//! Kyverno run out of cluster with its CRDs from its own module.

use std::{
    collections::BTreeMap,
    net::TcpStream,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use cheiron::install::{WebhookClient, WebhookRegistration};
use cheiron_harness::{self as harness, ControlPlane, WebhookCertificates, free_ports};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::{
    ByteString,
    api::{
        admissionregistration::v1::MutatingWebhookConfiguration,
        core::v1::{Namespace, Pod, Secret, ServiceAccount},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::LabelSelector,
};
use kube::{
    Api, Client, ResourceExt,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
        PostParams,
    },
    core::ObjectMeta,
    runtime::wait::{await_condition, conditions::is_crd_established},
};
use serde_json::{Value, json};

use cheiron_harness::Result;

use crate::{
    args::Args,
    servers::{Memory, Server},
};

/// Label selecting a configuration's namespace.
pub const TARGET: &str = "peers.cheiron.anny.co/target";
/// Label on every namespace Kyverno's webhooks see (its Pod namespace and the namespaces its
/// generate policy fills).
pub const KYVERNO_SEES: &str = "peers.cheiron.anny.co/kyverno";
/// Label on the namespaces a controller fills: `cheiron` or `kyverno`.
pub const GENERATE: &str = "peers.cheiron.anny.co/generate";
/// The pull Secret every Pod gets.
pub const PULL_SECRET: &str = "regcred";
/// Namespace of the controller phase's sources.
pub const SOURCES: &str = "peers-sources";
const FIELD_MANAGER: &str = "cheiron-peers-bench";
const KYVERNO_NAMESPACE: &str = "kyverno";
const READY_WITHIN: Duration = Duration::from_secs(180);
/// Kyverno's lease timing. Its default retry period (2 s) gives a 10 s renew deadline, and
/// on these 2 shared cores, with its client-side rate limiter queueing requests during the
/// throughput phase, its admission controller missed it, lost the lease and exited, as it
/// does by design (in a cluster the kubelet restarts it). 10 s (a 50 s deadline) keeps it
/// serving through the run; it changes nothing on the admission path.
const KYVERNO_LEADER_ELECTION: &str = "--leaderElectionRetryPeriod=10s";

/// One configuration of the latency phase.
#[derive(Clone, Debug)]
pub struct Config {
    pub name: &'static str,
    pub namespace: String,
    /// Whether its Pods must come back with [`PULL_SECRET`] (or a cheiron copy).
    pub mutates: bool,
}

pub struct Bench {
    pub dir: PathBuf,
    pub control_plane: ControlPlane,
    pub client: Client,
    pub first_build_seconds: Option<u64>,
    pub configs: Vec<Config>,
    /// `(name, https URL of /mutate)` of each server h2load can drive.
    pub endpoints: Vec<(&'static str, String)>,
    /// Every process measured, with its memory at start.
    pub servers: Vec<Server>,
    pub peers: PathBuf,
    pub kyverno: bool,
    /// `http://ADDR/metrics` of the cheiron webhook's admin port.
    pub cheiron_metrics: Option<String>,
}

impl Bench {
    pub async fn start(args: &Args) -> Result<Self> {
        let kyverno = args.runs("kyverno");
        let needs_peers = kyverno || args.runs("go");
        let (peers, first_build_seconds) = if needs_peers {
            build_peers()?
        } else {
            (PathBuf::new(), None)
        };

        let dir = harness::run_dir(harness::cheiron!())?;
        eprintln!("[peers] starting the control plane in {}", dir.display());
        let control_plane = ControlPlane::start(&dir).await?;
        let client = Client::try_from(control_plane.admin_config.clone())?;
        harness::install_crds(harness::cheiron!(), &client).await?;
        let certs = WebhookCertificates::generate(&dir.join("webhook-tls"))?;

        let mut configs = vec![Config {
            name: "none",
            namespace: "peers-none".into(),
            mutates: false,
        }];
        for (name, mutates) in [
            ("floor", false),
            ("floor-patch", true),
            ("cheiron", true),
            ("go", true),
            ("kyverno", true),
        ] {
            if args.runs(name) {
                configs.push(Config {
                    name,
                    namespace: format!("peers-{name}"),
                    mutates,
                });
            }
        }
        // Kyverno keeps clones in step through its admission webhook: it sees the source's
        // UPDATE and queues the sync. Its webhooks only select namespaces with `KYVERNO_SEES`,
        // so the sources' namespace carries it too (without it a rotation never reaches the
        // clones, as the first runs of this bench showed).
        let sources_labels: &[(&str, &str)] = if kyverno {
            &[(KYVERNO_SEES, "true")]
        } else {
            &[]
        };
        create_namespace(&client, SOURCES, sources_labels).await?;
        for c in &configs {
            let mut labels = vec![(TARGET, c.name)];
            if c.name == "kyverno" {
                labels.push((KYVERNO_SEES, "true"));
            }
            create_namespace(&client, &c.namespace, &labels).await?;
            create_pull_secret(&client, &c.namespace, PULL_SECRET, "v1").await?;
        }
        for c in &configs {
            wait_for_default_service_account(&client, &c.namespace).await?;
        }

        let mut bench = Self {
            dir,
            control_plane,
            client,
            first_build_seconds,
            configs,
            endpoints: Vec::new(),
            servers: Vec::new(),
            peers,
            kyverno,
            cheiron_metrics: None,
        };
        bench.start_floor("floor", None, &certs).await?;
        bench
            .start_floor("floor-patch", Some(PULL_SECRET), &certs)
            .await?;
        bench.start_cheiron(&certs).await?;
        if args.runs("go") {
            bench.start_go(&certs).await?;
        }
        if kyverno {
            bench.start_kyverno().await?;
        }
        for c in bench.configs.clone() {
            bench.canary(&c).await?;
        }
        Ok(bench)
    }

    fn kubeconfig(&self) -> &Path {
        &self.control_plane.admin_kubeconfig
    }

    async fn register(&self, name: &str, url: &str, certs: &WebhookCertificates) -> Result {
        let mut registration = WebhookRegistration::new(
            format!("peers-{name}"),
            WebhookClient::Url(url.to_owned()),
            "cheiron-system",
        );
        registration.ca_bundle = Some(certs.ca_pem.clone().into_bytes());
        let mut configuration = registration.configuration();
        for hook in configuration.webhooks.iter_mut().flatten() {
            let selector = hook
                .namespace_selector
                .get_or_insert_with(LabelSelector::default);
            selector.match_labels = Some(BTreeMap::from([(TARGET.to_owned(), name.to_owned())]));
        }
        harness::register(&self.client, &configuration).await
    }

    /// A floor server (`floor.rs`), patching with `pull_secret` when given.
    async fn start_floor(
        &mut self,
        name: &'static str,
        pull_secret: Option<&str>,
        certs: &WebhookCertificates,
    ) -> Result {
        if !self.configs.iter().any(|c| c.name == name) {
            return Ok(());
        }
        let [port] = free_ports()?;
        let addr = format!("127.0.0.1:{port}");
        let mut command = Command::new(std::env::current_exe()?);
        command.arg("--serve-floor").arg(&addr).arg(&certs.dir);
        command.args(pull_secret);
        let mut server = Server::spawn(name, &self.dir, &mut command)?;
        server
            .wait_until("listening", READY_WITHIN, || async {
                TcpStream::connect(&addr).is_ok()
            })
            .await?;
        let url = format!("https://{addr}/mutate");
        self.register(name, &url, certs).await?;
        self.endpoints.push((name, url));
        self.servers.push(server);
        Ok(())
    }

    async fn start_cheiron(&mut self, certs: &WebhookCertificates) -> Result {
        let [port, admin, controller_admin] = free_ports()?;
        let addr = format!("127.0.0.1:{port}");
        let admin = format!("127.0.0.1:{admin}");
        let mut webhook = Server::spawn(
            "cheiron-webhook",
            &self.dir,
            Command::new(env!("CARGO_BIN_EXE_cheiron"))
                .args([
                    "webhook",
                    "--listen",
                    &addr,
                    "--admin-listen",
                    &admin,
                    "--shutdown-delay",
                    "0",
                ])
                .arg("--tls-cert-dir")
                .arg(&certs.dir)
                .env("KUBECONFIG", self.kubeconfig())
                .env("CHEIRON_LOG", "info")
                .env("NO_COLOR", "1")
                .env_remove("CHEIRON_FROM")
                .env_remove("CHEIRON_SELF_SIGNED"),
        )?;
        let ready = format!("http://{admin}/readyz");
        webhook
            .wait_until("ready", READY_WITHIN, || http_ok(&ready))
            .await?;
        self.cheiron_metrics = Some(format!("http://{admin}/metrics"));
        let controller_admin = format!("127.0.0.1:{controller_admin}");
        let mut controller = Server::spawn(
            "cheiron-controller",
            &self.dir,
            Command::new(env!("CARGO_BIN_EXE_cheiron"))
                .args([
                    "controller",
                    "--no-leader-election",
                    "--admin-listen",
                    &controller_admin,
                ])
                .env("KUBECONFIG", self.kubeconfig())
                .env("CHEIRON_LOG", "info")
                .env("NO_COLOR", "1")
                .env("CHEIRON_POD_NAME", "peers-controller")
                .env_remove("CHEIRON_FROM")
                .env_remove("CHEIRON_SELF_SIGNED"),
        )?;
        let ready = format!("http://{controller_admin}/readyz");
        controller
            .wait_until("ready", READY_WITHIN, || http_ok(&ready))
            .await?;
        if self.configs.iter().any(|c| c.name == "cheiron") {
            apply_yaml(
                &self.client,
                &format!(
                    "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: pods
  namespace: peers-cheiron
spec:
  mode: Pod
  secrets:
    - existingSecretRef:
        name: {PULL_SECRET}
"
                ),
            )
            .await?;
            let url = format!("https://{addr}/mutate");
            self.register("cheiron", &url, certs).await?;
            self.endpoints.push(("cheiron", url));
        }
        self.servers.push(webhook);
        self.servers.push(controller);
        Ok(())
    }

    async fn start_go(&mut self, certs: &WebhookCertificates) -> Result {
        let [port] = free_ports()?;
        let addr = format!("127.0.0.1:{port}");
        let mut server = Server::spawn(
            "go",
            &self.dir,
            Command::new(self.peers.join("baseline"))
                .args(["--port", &port.to_string(), "--secret", PULL_SECRET])
                .arg("--cert-dir")
                .arg(&certs.dir),
        )?;
        server
            .wait_until("listening", READY_WITHIN, || async {
                TcpStream::connect(&addr).is_ok()
            })
            .await?;
        let url = format!("https://{addr}/mutate");
        self.register("go", &url, certs).await?;
        self.endpoints.push(("go", url));
        self.servers.push(server);
        Ok(())
    }

    /// Kyverno's CRDs, namespace, ConfigMap (its webhooks see only namespaces labelled
    /// [`KYVERNO_SEES`]), identities, the admission and background controllers, and the two
    /// sample policies.
    async fn start_kyverno(&mut self) -> Result {
        install_kyverno_crds(&self.client, &self.peers.join("crds")).await?;
        create_namespace(&self.client, KYVERNO_NAMESPACE, &[]).await?;
        apply_yaml(
            &self.client,
            &format!(
                r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: kyverno
  namespace: {KYVERNO_NAMESPACE}
data:
  webhooks: '{{"namespaceSelector":{{"matchLabels":{{"{KYVERNO_SEES}":"true"}}}}}}'
"#
            ),
        )
        .await?;
        apply_yaml(
            &self.client,
            &format!(
                r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: kyverno
  namespace: {KYVERNO_NAMESPACE}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: kyverno}}}}
  template:
    metadata: {{labels: {{app: kyverno}}}}
    spec:
      containers: [{{name: kyverno, image: kyverno/kyverno}}]
"#
            ),
        )
        .await?;
        // Its own identities, as in a real install: requests of its controllers are told
        // apart from users' (and its webhooks skip the background controller's writes).
        let admission_kubeconfig = self
            .service_account_kubeconfig("kyverno-admission-controller")
            .await?;
        let background_kubeconfig = self
            .service_account_kubeconfig("kyverno-background-controller")
            .await?;
        let [
            port,
            metrics,
            background_metrics,
            runtime_metrics,
            background_runtime_metrics,
        ] = free_ports()?;
        let env = |c: &mut Command| {
            c.env("KYVERNO_NAMESPACE", KYVERNO_NAMESPACE)
                .env("KYVERNO_DEPLOYMENT", "kyverno")
                .env("KYVERNO_SVC", "kyverno-svc")
                .env("KYVERNO_POD_NAME", "kyverno-peers")
                .env(
                    "KYVERNO_SERVICEACCOUNT_NAME",
                    "kyverno-admission-controller",
                )
                .env("INIT_CONFIG", "kyverno")
                .env("METRICS_CONFIG", "kyverno-metrics");
        };
        let mut admission = Command::new(self.peers.join("kyverno"));
        env(&mut admission);
        admission
            .arg(format!("--kubeconfig={}", admission_kubeconfig.display()))
            .arg(format!("--serverIP=127.0.0.1:{port}"))
            .arg("--webhookServerHost=127.0.0.1")
            .arg(format!("--webhookServerPort={port}"))
            .arg(format!("--metricsPort={metrics}"))
            .arg(format!("--controllerRuntimeMetricsAddress=127.0.0.1:{runtime_metrics}"))
            .arg("--caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca")
            .arg("--tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair")
            .arg("--backgroundServiceAccountName=system:serviceaccount:kyverno:kyverno-background-controller")
            .arg("--reportsServiceAccountName=system:serviceaccount:kyverno:kyverno-reports-controller")
            .arg(KYVERNO_LEADER_ELECTION)
            .arg("--disableLogColor");
        // Kyverno's processes exit when they lose their lease; a cluster restarts them.
        let admission = Server::spawn("kyverno", &self.dir, &mut admission)?.restart_always();
        let mut background = Command::new(self.peers.join("background-controller"));
        env(&mut background);
        background
            .env(
                "KYVERNO_SERVICEACCOUNT_NAME",
                "kyverno-background-controller",
            )
            .arg(format!("--kubeconfig={}", background_kubeconfig.display()))
            .arg(format!("--metricsPort={background_metrics}"))
            .arg(format!(
                "--controllerRuntimeMetricsAddress=127.0.0.1:{background_runtime_metrics}"
            ))
            .arg(KYVERNO_LEADER_ELECTION)
            .arg("--disableLogColor");
        let background =
            Server::spawn("kyverno-background", &self.dir, &mut background)?.restart_always();
        self.servers.push(admission);
        self.servers.push(background);

        apply_yaml(
            &self.client,
            r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: add-imagepullsecrets
  annotations:
    policies.kyverno.io/title: Add imagePullSecrets
spec:
  rules:
  - name: add-imagepullsecret
    match:
      any:
      - resources:
          kinds:
          - Pod
    mutate:
      patchStrategicMerge:
        spec:
          containers:
          - <(image): "registry.example.com/*"
          imagePullSecrets:
          - name: regcred
"#,
        )
        .await?;
        create_pull_secret(&self.client, SOURCES, "pull-kyverno", "v1").await?;
        apply_yaml(
            &self.client,
            &format!(
                r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: sync-secrets
  annotations:
    policies.kyverno.io/title: Sync Secrets
spec:
  rules:
  - name: sync-image-pull-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              {GENERATE}: kyverno
    generate:
      apiVersion: v1
      kind: Secret
      name: {PULL_SECRET}
      namespace: "{{{{request.object.metadata.name}}}}"
      synchronize: true
      clone:
        namespace: {SOURCES}
        name: pull-kyverno
"#
            ),
        )
        .await?;
        // Its webhook configuration, once it has written it, names its endpoint.
        let configs: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let mut url = None;
        for _ in 0..1200 {
            for s in self
                .servers
                .iter_mut()
                .filter(|s| s.name.starts_with("kyverno"))
            {
                s.check_running()?;
            }
            if let Ok(Some(c)) = configs
                .get_opt("kyverno-resource-mutating-webhook-cfg")
                .await
            {
                url = c
                    .webhooks
                    .iter()
                    .flatten()
                    .filter(|h| {
                        h.rules.iter().flatten().any(|r| {
                            r.resources
                                .iter()
                                .flatten()
                                .any(|res| res == "pods" || res == "*")
                        })
                    })
                    .find_map(|h| h.client_config.url.clone());
                if url.is_some() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let url = url.ok_or("Kyverno wrote no mutating webhook for Pods within 120 s")?;
        eprintln!("[peers] kyverno: resource mutating webhook at {url}");
        self.endpoints.push(("kyverno", url));
        Ok(())
    }

    /// A kubeconfig for ServiceAccount `kyverno/NAME`, bound to cluster-admin, with a token
    /// from the TokenRequest API.
    async fn service_account_kubeconfig(&self, name: &str) -> Result<PathBuf> {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), KYVERNO_NAMESPACE);
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        accounts.create(&PostParams::default(), &account).await?;
        apply_yaml(
            &self.client,
            &format!(
                "
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: peers-{name}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}
subjects: [{{kind: ServiceAccount, name: {name}, namespace: {KYVERNO_NAMESPACE}}}]
"
            ),
        )
        .await?;
        let request = k8s_openapi::api::authentication::v1::TokenRequest {
            spec: k8s_openapi::api::authentication::v1::TokenRequestSpec {
                audiences: vec![],
                expiration_seconds: Some(24 * 3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let token = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await?
            .status
            .ok_or("TokenRequest without status")?
            .token;
        let admin = std::fs::read_to_string(self.kubeconfig())?;
        let text: String = admin
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("token:") {
                    format!("    token: {token}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        let path = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// Creates Pods in the configuration's namespace until admission does what it should.
    async fn canary(&self, config: &Config) -> Result {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &config.namespace);
        let pod = crate::fixture::pod()?;
        for _ in 0..600 {
            match pods.create(&PostParams::default(), &pod).await {
                Ok(created) => {
                    let got = crate::fixture::mutated(&created);
                    let _ = pods
                        .delete(&created.name_any(), &DeleteParams::default())
                        .await;
                    if got == config.mutates {
                        eprintln!(
                            "[peers] {}: a canary Pod was admitted as expected",
                            config.name
                        );
                        return Ok(());
                    }
                }
                Err(e) => eprintln!("[peers] {}: canary Pod refused: {e}", config.name),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!("{}: Pods not admitted as expected after 120 s", config.name).into())
    }

    /// Memory of every process, now (max of 5 samples).
    pub async fn memory_now(&mut self) -> Result<Value> {
        let mut out = serde_json::Map::new();
        for s in &mut self.servers {
            s.check_running()?;
            let m = Memory::max_of(s.pid(), 5).await?;
            eprintln!("[peers] memory {}: {}", s.name, m.describe());
            out.insert(s.name.to_owned(), serde_json::to_value(m)?);
        }
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let count = namespaces
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
        out.insert("namespaces".into(), json!(count));
        Ok(Value::Object(out))
    }

    /// Creates unlabelled namespaces until there are `total`, then lets caches settle.
    pub async fn top_up_namespaces(&self, total: usize) -> Result {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let existing = namespaces
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
        let missing = total.saturating_sub(existing);
        eprintln!("[peers] memory: {existing} namespaces, creating {missing}");
        stream::iter(0..missing)
            .map(|i| {
                let client = self.client.clone();
                async move { create_namespace(&client, &format!("peers-m-{i}"), &[]).await }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<_>>()
            .await?;
        eprintln!("[peers] memory: letting caches settle for 15 s");
        tokio::time::sleep(Duration::from_secs(15)).await;
        Ok(())
    }
}

/// Runs `benches/peers/build`: the directory of Kyverno and the Go baseline, and how long the
/// first build took.
fn build_peers() -> Result<(PathBuf, Option<u64>)> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/peers/build");
    eprintln!("[peers] {script} (builds Kyverno and the Go baseline on first use)");
    let output = Command::new(script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {script}: {e}"))?;
    if !output.status.success() {
        return Err(format!("{script} failed ({})", output.status).into());
    }
    let dir = PathBuf::from(String::from_utf8(output.stdout)?.trim());
    let seconds = std::fs::read_to_string(dir.join("build-seconds"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    Ok((dir, seconds))
}

/// `(sum, count)` of the histogram `name` with label `resource="pods"` in the Prometheus text
/// exposition at `url`.
pub async fn histogram_sum_count(url: &str, name: &str) -> Result<(f64, f64)> {
    let text = reqwest::get(url).await?.error_for_status()?.text().await?;
    let series = |suffix: &str| -> Result<f64> {
        let prefix = format!("{name}_{suffix}{{");
        text.lines()
            .find(|l| l.starts_with(&prefix) && l.contains(r#"resource="pods""#))
            .and_then(|l| l.rsplit(' ').next())
            .ok_or_else(|| format!("{url} has no {name}_{suffix} for pods"))?
            .parse()
            .map_err(Into::into)
    };
    Ok((series("sum")?, series("count")?))
}

async fn http_ok(url: &str) -> bool {
    let Ok(http) = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
    else {
        return false;
    };
    http.get(url)
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

pub async fn create_namespace(client: &Client, name: &str, labels: &[(&str, &str)]) -> Result {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .map_err(|e| format!("cannot create namespace {name}: {e}"))?;
    Ok(())
}

/// A `kubernetes.io/dockerconfigjson` Secret whose password is `version`.
pub fn pull_secret(name: &str, version: &str) -> Secret {
    let config =
        json!({"auths": {"registry.example.com": {"username": "peers", "password": version}}});
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".to_owned()),
        data: Some(BTreeMap::from([(
            ".dockerconfigjson".to_owned(),
            ByteString(config.to_string().into_bytes()),
        )])),
        ..Secret::default()
    }
}

pub async fn create_pull_secret(client: &Client, ns: &str, name: &str, version: &str) -> Result {
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pull_secret(name, version))
        .await
        .map_err(|e| format!("cannot create Secret {ns}/{name}: {e}"))?;
    Ok(())
}

async fn wait_for_default_service_account(client: &Client, ns: &str) -> Result {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    for _ in 0..300 {
        if accounts.get_opt("default").await?.is_some() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("no ServiceAccount {ns}/default after 30 s").into())
}

/// Server-side applies one YAML object of any kind.
pub async fn apply_yaml(client: &Client, yaml: &str) -> Result {
    let value: Value = serde_saphyr::from_str(yaml)?;
    let object: DynamicObject = serde_json::from_value(value)?;
    let types = object
        .types
        .clone()
        .ok_or("object without apiVersion/kind")?;
    let (group, version) = match types.api_version.split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), types.api_version.clone()),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, &types.kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match (capabilities.scope, object.namespace()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), &ns, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    };
    let name = object.name_any();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .map_err(|e| format!("cannot apply {} {name}: {e}", types.kind))?;
    Ok(())
}

async fn install_kyverno_crds(client: &Client, dir: &Path) -> Result {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    let mut files = Vec::new();
    for group in std::fs::read_dir(dir)? {
        for file in std::fs::read_dir(group?.path())? {
            files.push(file?.path());
        }
    }
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
    {
        let text = std::fs::read(file)?;
        for crd in serde_saphyr::from_slice_multiple::<CustomResourceDefinition>(&text)
            .map_err(|e| format!("{}: {e}", file.display()))?
        {
            let name = crd.name_any();
            api.patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&crd),
            )
            .await
            .map_err(|e| format!("cannot apply CRD {name}: {e}"))?;
            names.push(name);
        }
    }
    for name in &names {
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(api.clone(), name, is_crd_established()),
        )
        .await
        .map_err(|_| format!("CRD {name} not Established after 60 s"))??;
    }
    eprintln!("[peers] kyverno: {} CRDs installed", names.len());
    let _ = ApiResource::erase::<Secret>(&());
    Ok(())
}

/// Nearest-rank quantile (0..=1) of sorted samples, in milliseconds.
pub fn quantile_ms(sorted: &[std::time::Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64) * q).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1].as_secs_f64() * 1000.0
}
