//! Workload clusters for the fleet tests (docs/fleet.md): each one more kube-apiserver on the
//! management control plane's etcd under an `--etcd-prefix` of its own, so that it is a
//! cluster apart (its own namespaces, Secrets, ServiceAccounts) for the price of one process;
//! and what Cluster API keeps in the management cluster for it: the kubeconfig Secret
//! (`<cluster>-kubeconfig`, key `value`, label `cluster.x-k8s.io/cluster-name`) and a `Cluster`
//! of the CRD in `tests/data/capi/` (generated from the `sigs.k8s.io/cluster-api/api` module,
//! kept in step by `tests/data/capi/generate --check`).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use base64::Engine;
use k8s_openapi::{
    ByteString, api::core::v1::Secret,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
    config::{KubeConfigOptions, Kubeconfig},
};

use super::{
    Result,
    control_plane::{
        ControlPlane, Launch, free_ports, insecure_http, random_token, restart_apiserver,
        wait_for_apiserver,
    },
    process::Process,
};

/// The label Cluster API puts on a cluster's Secrets.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// One workload kube-apiserver. Dropping it stops the process; its data stays in etcd.
pub struct WorkloadCluster {
    /// The cluster's name.
    pub name: String,
    /// `https://127.0.0.1:PORT`.
    pub server: String,
    /// The client configuration of its `admin`.
    pub admin_config: kube::Config,
    ca_pem: String,
    admin_token: String,
    other_token: String,
    launch: Launch,
    apiserver: Option<Process>,
}

impl ControlPlane {
    /// Starts a workload cluster `name`: a kube-apiserver on this control plane's etcd under
    /// the prefix `/workload-<name>`, files in `dir/<name>`. No controller-manager runs there:
    /// the tests create the ServiceAccounts they need.
    pub async fn start_workload(&self, dir: &Path, name: &str) -> Result<WorkloadCluster> {
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir)?;
        let [port] = free_ports()?;
        let (admin_token, other_token) = (random_token()?, random_token()?);
        let tokens = dir.join("tokens.csv");
        std::fs::write(
            &tokens,
            format!(
                "{admin_token},admin,admin,\"system:masters\"\n\
                 {other_token},admin-2,admin-2,\"system:masters\"\n"
            ),
        )?;
        let sa_key = rcgen::KeyPair::generate()?;
        let (sa_private, sa_public) = (dir.join("sa.key"), dir.join("sa.pub"));
        std::fs::write(&sa_private, sa_key.serialize_pem())?;
        std::fs::write(&sa_public, sa_key.public_key_pem())?;
        let cert_dir = dir.join("apiserver-certs");
        let server = format!("https://127.0.0.1:{port}");
        let mut launch = Launch {
            name: "kube-apiserver",
            program: self.bin.join("kube-apiserver"),
            args: vec![
                format!("--etcd-servers={}", self.etcd_url),
                format!("--etcd-prefix=/workload-{name}"),
                "--bind-address=127.0.0.1".to_owned(),
                "--advertise-address=127.0.0.1".to_owned(),
                format!("--secure-port={port}"),
                format!("--cert-dir={}", cert_dir.display()),
                format!("--token-auth-file={}", tokens.display()),
                "--authorization-mode=RBAC".to_owned(),
                "--enable-admission-plugins=NamespaceLifecycle".to_owned(),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
                format!("--service-account-key-file={}", sa_public.display()),
                format!(
                    "--service-account-signing-key-file={}",
                    sa_private.display()
                ),
                "--service-cluster-ip-range=10.0.1.0/24".to_owned(),
                "--endpoint-reconciler-type=none".to_owned(),
            ],
            log: dir.join("kube-apiserver.log"),
            starts: 0,
        };
        let mut apiserver = launch.spawn()?;
        wait_for_apiserver(&mut apiserver, &insecure_http()?, &server, &admin_token).await?;
        let ca_pem = std::fs::read_to_string(cert_dir.join("apiserver.crt"))?;
        let mut cluster = WorkloadCluster {
            name: name.to_owned(),
            server,
            admin_config: kube::Config::new("http://unused".parse()?),
            ca_pem,
            admin_token,
            other_token,
            launch,
            apiserver: Some(apiserver),
        };
        cluster.admin_config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::from_yaml(&cluster.kubeconfig())?,
            &KubeConfigOptions::default(),
        )
        .await?;
        Ok(cluster)
    }
}

impl WorkloadCluster {
    /// A kubeconfig of its `admin`, credentials inline (what Cluster API writes).
    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_with(&self.admin_token)
    }

    /// The same for a second user (`admin-2`, also `system:masters`): a rotated kubeconfig.
    pub fn rotated_kubeconfig(&self) -> String {
        self.kubeconfig_with(&self.other_token)
    }

    /// A kubeconfig whose token the apiserver does not know.
    pub fn bad_kubeconfig(&self) -> String {
        self.kubeconfig_with("not-a-known-token")
    }

    /// Its admin's kubeconfig, skipping TLS verification instead of naming the CA
    /// (`insecure-skip-tls-verify: true`): refused without `--fleet-allow-insecure`.
    pub fn insecure_kubeconfig(&self) -> String {
        self.kubeconfig()
            .lines()
            .map(|line| {
                if line.trim_start().starts_with("certificate-authority-data:") {
                    "    insecure-skip-tls-verify: true"
                } else {
                    line
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Its admin's kubeconfig with a plain `http://` server (the same port): refused without
    /// `--fleet-allow-insecure`.
    pub fn plain_http_kubeconfig(&self) -> String {
        self.kubeconfig()
            .replace("server: https://", "server: http://")
    }

    fn kubeconfig_with(&self, token: &str) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
             users:\n- name: {name}-admin\n  user:\n    token: {token}\n\
             contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}-admin\n\
             current-context: {name}\n",
            name = self.name,
            server = self.server,
        )
    }

    /// A client of its `admin` (build one per test: a client is bound to its runtime).
    pub fn client(&self) -> Result<Client> {
        Ok(Client::try_from(self.admin_config.clone())?)
    }

    /// Stops its kube-apiserver (SIGKILL: an outage, not a drain).
    pub fn stop(&mut self) {
        if let Some(mut apiserver) = self.apiserver.take() {
            apiserver.kill();
        }
    }

    /// Starts its kube-apiserver again, same port and data, and waits until it is ready.
    pub async fn start(&mut self) -> Result<()> {
        restart_apiserver(
            &mut self.apiserver,
            &mut self.launch,
            &self.server,
            &self.admin_token,
        )
        .await
    }

    /// Its process id, while it runs (for memory figures).
    pub fn pid(&self) -> Option<u32> {
        self.apiserver.as_ref().map(Process::pid)
    }
}

/// Writes (creates or replaces) the kubeconfig Secret of `cluster` in `namespace` of the
/// management cluster, as Cluster API does, with `labels` besides CAPI's own.
pub async fn write_kubeconfig_secret(
    management: &Client,
    namespace: &str,
    cluster: &str,
    kubeconfig: &str,
    labels: &[(&str, &str)],
) -> Result<Secret> {
    let mut all: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    all.insert(CLUSTER_NAME_LABEL.to_owned(), cluster.to_owned());
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{cluster}-kubeconfig")),
            namespace: Some(namespace.to_owned()),
            labels: Some(all),
            ..Default::default()
        },
        type_: Some("cluster.x-k8s.io/secret".to_owned()),
        data: Some(BTreeMap::from([(
            "value".to_owned(),
            ByteString(kubeconfig.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    };
    let api: Api<Secret> = Api::namespaced(management.clone(), namespace);
    Ok(api
        .patch(
            &format!("{cluster}-kubeconfig"),
            &PatchParams::apply("e2e-capi").force(),
            &Patch::Apply(&secret),
        )
        .await?)
}

/// The Cluster API `Cluster` CRD the fleet tests install.
pub fn capi_cluster_crd_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/capi/cluster.x-k8s.io_clusters.yaml")
}

/// Installs Cluster API's `Cluster` CRD (idempotent) and waits until it is served.
pub async fn install_capi_crd(management: &Client) -> Result<()> {
    let path = capi_cluster_crd_path();
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let api: Api<CustomResourceDefinition> = Api::all(management.clone());
    api.patch(
        "clusters.cluster.x-k8s.io",
        &PatchParams::apply("e2e-capi").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    super::wait_for(
        "the Cluster API Cluster CRD to be established",
        Duration::from_secs(30),
        || async {
            let crd = api.get("clusters.cluster.x-k8s.io").await?;
            let established = crd.status.and_then(|s| s.conditions).is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            if established {
                Ok(())
            } else {
                Err("not established yet".into())
            }
        },
    )
    .await
}

/// A hostile "workload cluster" (docs/fleet.md, "Who can enrol a cluster"): a plain `http://`
/// listener that answers every request `403 Forbidden` with `body`, as an internal service
/// behind a kubeconfig's `server:` would. Runs until the test's runtime ends.
pub struct RefusingServer {
    /// `http://127.0.0.1:PORT`.
    pub server: String,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl RefusingServer {
    /// Starts it on a free port.
    pub async fn start(body: &str) -> Result<Self> {
        use std::sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        };
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let server = format!("http://{}", listener.local_addr()?);
        let requests = Arc::new(AtomicUsize::new(0));
        let answer = format!(
            "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let counted = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let answer = answer.clone();
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65_536 {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    counted.fetch_add(1, Ordering::Relaxed);
                    let _ = stream.write_all(answer.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Ok(Self { server, requests })
    }

    /// Requests answered so far.
    pub fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A kubeconfig of a cluster `name` at this server, a token inline.
    pub fn kubeconfig(&self, name: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n\
             users:\n- name: {name}-admin\n  user:\n    token: hostile-cluster-token\n\
             contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}-admin\n\
             current-context: {name}\n",
            server = self.server,
        )
    }
}

/// A hostile "workload cluster" that never finishes a list: a plain `http://` listener that
/// answers `/version` as a kube-apiserver does and every other request with an empty page
/// of a list holding a `continue` token, so a client that follows the tokens lists forever.
/// It counts, per path, the pages asked for in a row after a first one.
pub struct PagingServer {
    /// `http://127.0.0.1:PORT`.
    pub server: String,
    runs: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, (usize, usize)>>>,
}

impl PagingServer {
    /// Starts it on a free port.
    pub async fn start() -> Result<Self> {
        use std::sync::{Arc, Mutex};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let server = format!("http://{}", listener.local_addr()?);
        let runs: Arc<Mutex<std::collections::BTreeMap<String, (usize, usize)>>> = Arc::default();
        let counted = runs.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65_536 {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head);
                    let target = head.split(' ').nth(1).unwrap_or("/").to_owned();
                    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
                    let body = if path == "/version" {
                        r#"{"major":"1","minor":"34","gitVersion":"v1.34.0","platform":"linux/amd64"}"#
                            .to_owned()
                    } else {
                        let next = query.split('&').any(|p| p.starts_with("continue="));
                        if let Ok(mut runs) = counted.lock() {
                            let (run, longest) = runs.entry(path.to_owned()).or_default();
                            *run = if next { *run + 1 } else { 0 };
                            *longest = (*longest).max(*run);
                        }
                        r#"{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":"1","continue":"more"},"items":[]}"#
                            .to_owned()
                    };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Ok(Self { server, runs })
    }

    /// The most pages asked for in a row after a first one, of any list, and the path.
    pub fn longest_run(&self) -> (usize, String) {
        self.runs
            .lock()
            .map(|runs| {
                runs.iter()
                    .map(|(path, (_, longest))| (*longest, path.clone()))
                    .max()
                    .unwrap_or_default()
            })
            .unwrap_or_default()
    }

    /// A kubeconfig of a cluster `name` at this server, a token inline.
    pub fn kubeconfig(&self, name: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n\
             users:\n- name: {name}-admin\n  user:\n    token: hostile-cluster-token\n\
             contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}-admin\n\
             current-context: {name}\n",
            server = self.server,
        )
    }
}
