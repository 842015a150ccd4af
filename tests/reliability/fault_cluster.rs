//! A control plane of one fault test: etcd, kube-apiserver and kube-controller-manager that the
//! test may stop and start, the CRDs, a webhook CA whose serving certificate the test can
//! rotate, and helpers to build the state the faults hit. Tests take [`serial`] first: each runs
//! a whole control plane, and two at once on a small machine would measure each other.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use cheiron::{
    api::label,
    install::{FailurePolicy, WebhookClient, WebhookRegistration},
};
use k8s_openapi::{
    ByteString,
    api::core::v1::{Namespace, Secret, ServiceAccount},
};
use kube::{
    Api, Client,
    api::{ListParams, ObjectMeta, PostParams},
};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tokio::sync::{Mutex, MutexGuard};

use crate::{
    CHEIRON,
    harness::{
        Admitted, ControlPlane, ControlPlaneOptions, Result, Scenario,
        controller::{CheironProcess, Host, READY_WITHIN},
        install_crds,
        partition::Partition,
        register, run_dir, wait_for,
    },
};

static SERIAL: Mutex<()> = Mutex::const_new(());

/// One fault test at a time (see the module documentation).
pub async fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().await
}

/// The namespace label every cluster manager of these tests selects.
pub const TARGET_LABEL: &str = "reliability.cheiron.anny.co/target";

/// How long convergence may take after a fault has healed, on a loaded 2-core machine.
pub const CONVERGE: Duration = Duration::from_secs(120);

/// The running control plane of one test.
pub struct FaultCluster {
    /// Files and logs of this test.
    pub dir: PathBuf,
    /// The processes the test stops and starts.
    pub control_plane: ControlPlane,
    /// The webhook's CA and serving certificate.
    pub certificates: RotatingCertificates,
    scenario: Scenario,
}

impl FaultCluster {
    /// Starts a control plane with `options`, installs the CRDs and writes a webhook
    /// certificate. `name` is a short slug of the test.
    pub async fn start(name: &str, options: ControlPlaneOptions) -> Result<Self> {
        let dir = run_dir(CHEIRON)?;
        eprintln!("{name}: files and logs in {}", dir.display());
        let control_plane = ControlPlane::start_with(&dir, options).await?;
        let client = Client::try_from(control_plane.admin_config.clone())?;
        install_crds(CHEIRON, &client).await?;
        let certificates = RotatingCertificates::generate(&dir.join("webhook-tls"))?;
        Ok(Self {
            dir,
            control_plane,
            certificates,
            scenario: Scenario::with_client(client, name),
        })
    }

    /// An admin client, and namespace and manager helpers.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// An admin client.
    pub fn client(&self) -> &Client {
        self.scenario.client()
    }

    /// Where cheiron processes of this test run, as `admin`.
    pub fn host(&self) -> Host {
        self.host_as(&self.control_plane.admin_kubeconfig)
    }

    /// Where cheiron processes of this test run, with `kubeconfig`.
    pub fn host_as(&self, kubeconfig: &Path) -> Host {
        Host {
            binary: PathBuf::from(CHEIRON.binary),
            dir: self.dir.clone(),
            kubeconfig: kubeconfig.to_owned(),
            tls_dir: self.certificates.dir.clone(),
        }
    }

    /// A [`Partition`] in front of the apiserver, open, and an admin kubeconfig that reaches
    /// the apiserver only through it (written as `<name>.kubeconfig` in the test's directory).
    pub async fn partitioned(&self, name: &str) -> Result<(Partition, PathBuf)> {
        let server = &self.control_plane.server;
        let upstream = server
            .strip_prefix("https://")
            .ok_or_else(|| format!("apiserver address {server} is not https"))?
            .parse()?;
        let partition = Partition::start(upstream).await?;
        let kubeconfig = self.dir.join(format!("{name}.kubeconfig"));
        let admin = std::fs::read_to_string(&self.control_plane.admin_kubeconfig)?;
        let proxied = admin.replace(server, &format!("https://{}", partition.address()));
        assert_ne!(admin, proxied, "the kubeconfig names {server}");
        std::fs::write(&kubeconfig, proxied)?;
        Ok((partition, kubeconfig))
    }

    /// Registers the webhook at `https://<address>/mutate` with `failure_policy`.
    pub async fn register_webhook(
        &self,
        address: std::net::SocketAddr,
        failure_policy: FailurePolicy,
    ) -> Result<()> {
        let mut registration = WebhookRegistration::new(
            "cheiron-reliability",
            WebhookClient::Url(format!("https://{address}/mutate")),
            "cheiron-system",
        );
        registration.ca_bundle = Some(self.certificates.ca_pem.clone().into_bytes());
        registration.failure_policy = failure_policy;
        register(self.client(), &registration.configuration()).await
    }

    /// Starts a `cheiron webhook` named `name` (no shutdown delay), waits until it is ready and
    /// registers it with `failure_policy`.
    pub async fn start_registered_webhook(
        &self,
        name: &str,
        failure_policy: FailurePolicy,
    ) -> Result<CheironProcess> {
        let webhook = CheironProcess::webhook_on(&self.host(), name, &["--shutdown-delay", "0"])?;
        webhook
            .wait_for_admin_status("/readyz", 200, READY_WITHIN)
            .await?;
        self.register_webhook(
            webhook
                .listen()
                .ok_or("the webhook has no listen address")?,
            failure_policy,
        )
        .await?;
        Ok(webhook)
    }

    /// Creates `count` namespaces labelled [`TARGET_LABEL`]`=<scenario id>`, 16 at a time, and
    /// returns their names.
    pub async fn create_target_namespaces(&self, count: usize) -> Result<Vec<String>> {
        let id = self.scenario.id().to_owned();
        let mut names = Vec::with_capacity(count);
        let mut batch = tokio::task::JoinSet::new();
        for _ in 0..count {
            if batch.len() >= 16
                && let Some(created) = batch.join_next().await
            {
                names.push(created??);
            }
            let scenario = Scenario::with_client(self.client().clone(), &id);
            let id = id.clone();
            batch.spawn(async move {
                let name = scenario
                    .create_namespace(&[(TARGET_LABEL, id.as_str())], &[])
                    .await?;
                Ok::<_, crate::harness::Error>(name)
            });
        }
        while let Some(created) = batch.join_next().await {
            names.push(created??);
        }
        names.sort();
        Ok(names)
    }

    /// A ClusterImagePullSecretManager `name` over this test's target namespaces, materialising
    /// the Secret `secret` (inline credentials) and adding it to every ServiceAccount.
    pub fn service_account_manager(&self, name: &str, secret: &str, password: &str) -> String {
        format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {name}
spec:
  namespaceSelector:
    matchLabels:
      {TARGET_LABEL}: {id}
  secrets:
    - name: {secret}
      registry: registry.example.com
      username: reliability
      password: {password}
",
            id = self.scenario.id()
        )
    }

    /// Applies [`FaultCluster::service_account_manager`] `name` (Secret `secret`, password
    /// `password`) and waits (up to 60 s) until a controller has written its first Secrets;
    /// returns how many it had.
    pub async fn apply_manager_until_writing(
        &self,
        name: &str,
        secret: &str,
        password: &str,
    ) -> Result<usize> {
        self.scenario
            .apply_manager(&self.service_account_manager(name, secret, password))
            .await?;
        wait_for(
            "the controller to start writing Secrets",
            Duration::from_secs(60),
            || async {
                match self.managed_secret_count(secret).await? {
                    0 => Err("none yet".into()),
                    n => Ok(n),
                }
            },
        )
        .await
    }

    /// How many of `namespaces` hold a Secret `secret` that cheiron manages.
    pub async fn managed_secret_count(&self, secret: &str) -> Result<usize> {
        let secrets: Api<Secret> = Api::all(self.client().clone());
        let listed = secrets
            .list_metadata(
                &ListParams::default()
                    .labels(&label::managed_by_selector())
                    .fields(&format!("metadata.name={secret}")),
            )
            .await?;
        Ok(listed.items.len())
    }

    /// Waits (up to [`CONVERGE`]) until every one of `namespaces` has the Secret `secret` and
    /// every ServiceAccount in them lists it exactly once. Returns how long it took.
    pub async fn until_converged(&self, namespaces: &[String], secret: &str) -> Result<Duration> {
        let start = Instant::now();
        let secrets: Api<Secret> = Api::all(self.client().clone());
        let service_accounts: Api<ServiceAccount> = Api::all(self.client().clone());
        let id = self.scenario.id().to_owned();
        wait_for(
            format!(
                "{} namespaces to hold {secret} and every ServiceAccount to list it once",
                namespaces.len()
            ),
            CONVERGE,
            || async {
                let present = secrets
                    .list_metadata(&ListParams::default().fields(&format!("metadata.name={secret}")))
                    .await?
                    .items
                    .into_iter()
                    .filter_map(|s| s.metadata.namespace)
                    .collect::<std::collections::BTreeSet<_>>();
                let missing = namespaces.iter().filter(|n| !present.contains(*n)).count();
                let selector = format!("{TARGET_LABEL}={id}");
                let in_scope = Api::<Namespace>::all(self.client().clone())
                    .list_metadata(&ListParams::default().labels(&selector))
                    .await?
                    .items
                    .into_iter()
                    .filter_map(|n| n.metadata.name)
                    .collect::<std::collections::BTreeSet<_>>();
                let mut wrong = 0;
                let mut example = None;
                for sa in service_accounts.list(&ListParams::default()).await?.items {
                    let Some(ns) = sa.metadata.namespace.as_deref() else {
                        continue;
                    };
                    if !in_scope.contains(ns) || !namespaces.iter().any(|n| n == ns) {
                        continue;
                    }
                    let names = sa.pull_secret_names();
                    if names.iter().filter(|n| *n == secret).count() != 1 {
                        wrong += 1;
                        example.get_or_insert_with(|| {
                            format!("{ns}/{}: {names:?}", sa.metadata.name.unwrap_or_default())
                        });
                    }
                }
                if missing == 0 && wrong == 0 {
                    Ok(())
                } else {
                    Err(format!(
                        "{missing} namespaces without the Secret, {wrong} ServiceAccounts without exactly one entry (e.g. {example:?})"
                    )
                    .into())
                }
            },
        )
        .await?;
        Ok(start.elapsed())
    }
}

/// A Secret of type dockerconfigjson holding `auths` for one registry, as a user creates it.
pub fn pull_secret(name: &str, labels: &[(&str, &str)], padding: usize) -> Secret {
    let auth = "dXNlcjpwYXNz";
    let config = format!(
        r#"{{"auths":{{"registry.example.com":{{"auth":"{auth}"}}}},"padding":"{}"}}"#,
        "x".repeat(padding)
    );
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>()
            }),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".to_owned()),
        data: Some(BTreeMap::from([(
            ".dockerconfigjson".to_owned(),
            ByteString(config.into_bytes()),
        )])),
        ..Secret::default()
    }
}

/// Creates `secret` in `namespace`.
pub async fn create_secret(client: &Client, namespace: &str, secret: &Secret) -> Result<Secret> {
    Ok(Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), secret)
        .await?)
}

/// A CA and its serving certificate for 127.0.0.1 in a directory laid out like a mounted
/// Secret volume: `tls.crt -> ..data/tls.crt`, `..data -> ..<generation>/`. [`rotate`] issues
/// a new serving certificate and swaps `..data` atomically, exactly as the kubelet updates a
/// Secret volume, so the webhook never sees half a pair.
///
/// [`rotate`]: RotatingCertificates::rotate
pub struct RotatingCertificates {
    /// The directory the webhook reads (`--tls-cert-dir`).
    pub dir: PathBuf,
    /// The CA (PEM), the registration's `caBundle`.
    pub ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
    generation: u32,
    /// DER of the serving certificate written last.
    pub current_der: Vec<u8>,
}

impl RotatingCertificates {
    /// A new CA and a first serving certificate.
    pub fn generate(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "cheiron reliability CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate()?;
        let ca_pem = ca.self_signed(&ca_key)?.pem();
        let mut certificates = Self {
            dir: dir.to_owned(),
            ca_pem,
            issuer: Issuer::new(ca, ca_key),
            generation: 0,
            current_der: Vec::new(),
        };
        certificates.rotate()?;
        std::os::unix::fs::symlink("..data/tls.crt", dir.join("tls.crt"))?;
        std::os::unix::fs::symlink("..data/tls.key", dir.join("tls.key"))?;
        Ok(certificates)
    }

    /// Issues a new serving certificate (new key) and swaps it in atomically.
    pub fn rotate(&mut self) -> Result<()> {
        self.generation += 1;
        let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
        leaf.distinguished_name.push(
            DnType::CommonName,
            format!("cheiron reliability webhook {}", self.generation),
        );
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate()?;
        let certificate = leaf.signed_by(&key, &self.issuer)?;

        let generation_dir = format!("..{}", self.generation);
        let target = self.dir.join(&generation_dir);
        std::fs::create_dir(&target)?;
        std::fs::write(target.join("tls.crt"), certificate.pem())?;
        std::fs::write(target.join("tls.key"), key.serialize_pem())?;
        let staged = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&staged);
        std::os::unix::fs::symlink(&generation_dir, &staged)?;
        std::fs::rename(&staged, self.dir.join("..data"))?;
        if self.generation > 1 {
            std::fs::remove_dir_all(self.dir.join(format!("..{}", self.generation - 1)))?;
        }
        self.current_der = certificate.der().to_vec();
        Ok(())
    }
}

/// Megabytes, for figures.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
