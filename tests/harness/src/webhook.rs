//! `cheiron webhook` processes in cluster mode, their certificates, the CRDs they need, and
//! their registration with the apiserver.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use k8s_openapi::{
    api::admissionregistration::v1::MutatingWebhookConfiguration,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
    runtime::wait::{await_condition, conditions::is_crd_established},
};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::{
    Cheiron, Result,
    control_plane::{free_ports, wait_until},
    process::Process,
};

/// Field manager of everything the harness applies.
pub const FIELD_MANAGER: &str = "cheiron-e2e";

/// A CA and a serving certificate for IP 127.0.0.1, as `tls.crt` / `tls.key` in a directory.
pub struct WebhookCertificates {
    /// Holds `tls.crt` and `tls.key`.
    pub dir: PathBuf,
    /// The CA certificate (PEM), the `caBundle` of registrations.
    pub ca_pem: String,
}

/// A self-signed test CA named `common_name`: its certificate, and the issuer that signs with it.
pub(crate) fn test_ca(common_name: &str) -> Result<(rcgen::Certificate, Issuer<'static, KeyPair>)> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert, Issuer::new(params, key)))
}

impl WebhookCertificates {
    /// Generates both with rcgen into `dir`.
    pub fn generate(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let (ca_cert, issuer) = test_ca("cheiron e2e CA")?;

        let mut leaf_params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "cheiron e2e webhook");
        leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let leaf_key = KeyPair::generate()?;
        let leaf_cert = leaf_params.signed_by(&leaf_key, &issuer)?;

        std::fs::write(dir.join("tls.crt"), leaf_cert.pem())?;
        std::fs::write(dir.join("tls.key"), leaf_key.serialize_pem())?;
        Ok(Self {
            dir: dir.to_owned(),
            ca_pem: ca_cert.pem(),
        })
    }
}

/// A `cheiron webhook` process in cluster mode on free loopback ports. Stopped on drop.
pub struct WebhookProcess {
    process: Process,
    listen: SocketAddr,
    admin: SocketAddr,
}

impl WebhookProcess {
    /// Starts `cheiron webhook` with `KUBECONFIG=kubeconfig`, logging to `log`. Does not wait.
    pub fn start(
        cheiron: Cheiron,
        name: &str,
        kubeconfig: &Path,
        tls_dir: &Path,
        log: &Path,
    ) -> Result<Self> {
        Self::start_with_args(cheiron, name, kubeconfig, tls_dir, log, &[])
    }

    /// [`WebhookProcess::start`] with `extra` flags after the harness's own, e.g.
    /// `["--metrics-auth=kubernetes"]`.
    pub fn start_with_args(
        cheiron: Cheiron,
        name: &str,
        kubeconfig: &Path,
        tls_dir: &Path,
        log: &Path,
        extra: &[&str],
    ) -> Result<Self> {
        let [listen_port, admin_port] = free_ports()?;
        let listen = SocketAddr::from(([127, 0, 0, 1], listen_port));
        let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
        let process = Process::spawn(
            name,
            Command::new(cheiron.binary)
                .args([
                    "webhook",
                    "--listen",
                    &listen.to_string(),
                    "--admin-listen",
                    &admin.to_string(),
                ])
                .arg("--tls-cert-dir")
                .arg(tls_dir)
                .args(["--shutdown-delay", "0"])
                .args(extra)
                .env("KUBECONFIG", kubeconfig)
                .env("CHEIRON_LOG", "info,cheiron=debug")
                .env("NO_COLOR", "1")
                .env_remove("CHEIRON_FROM")
                .env_remove("CHEIRON_SELF_SIGNED"),
            log,
        )?;
        Ok(Self {
            process,
            listen,
            admin,
        })
    }

    /// `https://127.0.0.1:PORT/mutate`.
    pub fn url(&self) -> String {
        format!("https://{}/mutate", self.listen)
    }

    /// The plain-HTTP address of `/healthz`, `/readyz` and `/metrics`.
    pub fn admin_address(&self) -> SocketAddr {
        self.admin
    }

    /// The HTTP status of `GET /path` on the admin server, `None` if it does not answer.
    pub async fn admin_status(&self, path: &str) -> Option<u16> {
        admin_status(self.admin, path).await
    }

    /// Waits until `GET /path` answers `status`, failing early if the process exits.
    pub async fn wait_for_admin_status(
        &mut self,
        path: &str,
        status: u16,
        timeout: Duration,
    ) -> Result<()> {
        let what = format!("GET {path} to answer {status}");
        let admin = self.admin;
        wait_until(&mut self.process, &what, timeout, || async move {
            (admin_status(admin, path).await == Some(status)).then_some(())
        })
        .await
    }

    /// An error quoting the log if the process has exited.
    pub fn check_running(&mut self) -> Result<()> {
        self.process.check_running()
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        self.process.log()
    }

    /// SIGTERM, then SIGKILL after 10 s.
    pub fn stop(&mut self) {
        self.process.stop(Duration::from_secs(10));
    }
}

/// A fresh client per request: a `reqwest::Client` is bound to the runtime it first ran on, and
/// the shared webhook outlives the runtime that started it.
async fn admin_status(admin: SocketAddr, path: &str) -> Option<u16> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?;
    let response = http
        .get(format!("http://{admin}{path}"))
        .send()
        .await
        .ok()?;
    Some(response.status().as_u16())
}

/// Status and body of `GET <path>` on a cheiron admin port: plain HTTP, or HTTPS trusting only
/// `ca_pem` (`--admin-tls-cert-dir`), with `authorization` as the `Authorization` header.
pub async fn admin_get(
    admin: SocketAddr,
    ca_pem: Option<&str>,
    path: &str,
    authorization: Option<&str>,
) -> Result<(u16, String)> {
    let mut client = reqwest::Client::builder().timeout(Duration::from_secs(5));
    let scheme = match ca_pem {
        Some(ca_pem) => {
            client = client
                .tls_built_in_root_certs(false)
                .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes())?);
            "https"
        }
        None => "http",
    };
    let mut request = client.build()?.get(format!("{scheme}://{admin}{path}"));
    if let Some(value) = authorization {
        request = request.header(reqwest::header::AUTHORIZATION, value);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    Ok((status, response.text().await?))
}

/// Installs the CRDs printed by `cheiron crds` (server-side apply) and waits until they are
/// Established.
pub async fn install_crds(cheiron: Cheiron, client: &Client) -> Result<Vec<String>> {
    let output = Command::new(cheiron.binary).arg("crds").output()?;
    if !output.status.success() {
        return Err(format!(
            "`cheiron crds` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for crd in serde_saphyr::from_slice_multiple::<CustomResourceDefinition>(&output.stdout)? {
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
    if names.len() != 2 {
        return Err(format!(
            "`cheiron crds` printed {} CRDs, expected 2: {names:?}",
            names.len()
        )
        .into());
    }
    for name in &names {
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(api.clone(), name, is_crd_established()),
        )
        .await
        .map_err(|_| format!("CRD {name} not Established after 30 s"))??;
    }
    Ok(names)
}

/// Creates or replaces a webhook configuration (server-side apply).
pub async fn register(client: &Client, configuration: &MutatingWebhookConfiguration) -> Result<()> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let name = configuration.name_any();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(configuration),
    )
    .await
    .map_err(|e| format!("cannot register MutatingWebhookConfiguration {name}: {e}"))?;
    Ok(())
}
