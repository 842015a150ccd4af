//! Installing cheiron: the plain manifests of `webhook-config/` and the Helm chart of
//! `charts/cheiron/`.
//!
//! - `drift`: the committed files are what the program generates.
//! - `chart`: `helm lint --strict` passes, `helm template` renders every certificate option
//!   and both deployment modes, and what the chart renders is what the plain manifests hold
//!   (webhook registration, RBAC, Deployments, NetworkPolicies), so the two cannot drift apart;
//!   invalid values are refused.
//! - `cluster`: on a real kube-apiserver (the e2e harness, its own control plane for this
//!   binary), both apply cleanly in a server-side dry run, their Pods meet the restricted Pod
//!   Security Standard, SubjectAccessReviews show each ServiceAccount (webhook, controller,
//!   combined, certificates) can make every call its code makes and nothing broader, and
//!   `cheiron webhook`, `cheiron controller` and `cheiron run` do their job under exactly that
//!   RBAC.
//!
//! Tests that need helm get it from `scripts/helm` and fail, with a message saying how to
//! provide it, when it cannot.

use std::{
    io::{BufRead, BufReader, Read, Write},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::OnceLock,
};

use cheiron_harness::{self as harness, Result};
use serde_json::Value;

/// The cheiron the `cluster` tests start their cluster with.
const CHEIRON: harness::Cheiron = harness::cheiron!();

/// Release name and namespace the chart is rendered with: the names of the plain manifests.
const RELEASE: &str = "cheiron";
const NAMESPACE: &str = "cheiron-system";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every document of a YAML stream, nulls (empty documents) left out.
fn documents(text: &[u8]) -> Result<Vec<Value>> {
    Ok(serde_saphyr::from_slice_multiple(text)?)
}

/// The committed plain manifests (everything but the CRDs), as a user applies them.
fn plain_objects() -> Result<Vec<Value>> {
    let mut objects = Vec::new();
    for file in ["install.yaml", "webhook-certs.yaml"] {
        let path = repo().join("webhook-config").join(file);
        objects.extend(documents(
            &std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?,
        )?);
    }
    Ok(objects)
}

/// The plain manifests of the combined mode (`cheiron run` under one ServiceAccount), as
/// `cheiron::install` renders them: only the split default is committed.
fn combined_objects() -> Result<Vec<Value>> {
    let install = cheiron::install::Install::default();
    Ok([
        install.server_objects_for(cheiron::install::DeploymentMode::Combined)?,
        install.certificate_objects()?,
    ]
    .concat())
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .ok_or_else(|| format!("no {kind} {name} among {}", describe(objects)).into())
}

fn describe(objects: &[Value]) -> String {
    let names: Vec<String> = objects
        .iter()
        .map(|o| format!("{}/{}", o["kind"], o["metadata"]["name"]).replace('"', ""))
        .collect();
    names.join(", ")
}

/// The path of a helm v3 executable from `scripts/helm` (built once from the Go module proxy
/// and cached outside the repo). Its progress goes straight to stderr: a first build takes
/// minutes.
fn helm() -> Result<PathBuf> {
    static HELM: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = HELM.get_or_init(|| {
        let script = repo().join("scripts/helm");
        let mut child = Command::new(&script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let mut progress = Vec::new();
        if let Some(stderr) = child.stderr.take() {
            for line in BufReader::new(stderr).lines().map_while(std::result::Result::ok) {
                let _ = writeln!(std::io::stderr(), "{line}");
                progress.push(line);
            }
        }
        let mut stdout = String::new();
        if let Some(mut out) = child.stdout.take() {
            out.read_to_string(&mut stdout).map_err(|e| e.to_string())?;
        }
        let status = child.wait().map_err(|e| e.to_string())?;
        let path = PathBuf::from(stdout.trim());
        if !status.success() || stdout.trim().is_empty() {
            return Err(format!(
                "these tests need helm v3, and {} could not provide it ({status}):\n{}\n\
                 Install Go >= 1.26 (scripts/helm then builds helm from the Go module proxy once \
                 and caches it in ~/.cache/cheiron/helm/) or set CHEIRON_HELM to a helm v3 executable.",
                script.display(),
                progress.join("\n")
            ));
        }
        Ok(path)
    });
    found.clone().map_err(Into::into)
}

/// Runs helm with `args`, returning its output whatever its exit status.
fn run_helm(args: &[&str]) -> Result<Output> {
    Ok(Command::new(helm()?)
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()?)
}

/// `helm template` of the chart as release [`RELEASE`] in [`NAMESPACE`] with `--set` values.
fn render(values: &[&str]) -> Result<Vec<Value>> {
    let output = run_helm(&template_args(values))?;
    if !output.status.success() {
        return Err(format!(
            "helm template {values:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    documents(&output.stdout)
}

fn template_args<'a>(values: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "template",
        RELEASE,
        "charts/cheiron",
        "--namespace",
        NAMESPACE,
    ];
    for value in values {
        args.extend(["--set", value]);
    }
    args
}

/// Values that switch on every optional part: cert-manager certificates and a ServiceMonitor.
const CERT_MANAGER_AND_MONITORING: [&str; 2] = [
    "certificates.source=cert-manager",
    "serviceMonitor.enabled=true",
];

/// The API groups whose CRDs (cert-manager, Prometheus Operator) the test cluster lacks:
/// their objects are checked as rendered only.
const FOREIGN_GROUPS: [&str; 2] = ["cert-manager.io/", "monitoring.coreos.com/"];

fn is_foreign(object: &Value) -> bool {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    FOREIGN_GROUPS.iter().any(|g| api_version.starts_with(g))
}

mod drift {
    //! The committed generated files are what the program generates.

    use cheiron::install::Install;

    use super::*;

    #[test]
    fn webhook_config_is_what_cheiron_manifests_generates() -> Result {
        let dir = repo().join("webhook-config");
        let files = Install::default().files()?;
        let mut stale = Vec::new();
        for file in &files {
            let committed = std::fs::read_to_string(dir.join(file.name)).unwrap_or_default();
            if committed != file.contents {
                stale.push(file.name);
            }
        }
        let generated: Vec<&str> = files.iter().map(|f| f.name).collect();
        let mut strays = Vec::new();
        for entry in std::fs::read_dir(&dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if !generated.contains(&name.as_str()) {
                strays.push(name);
            }
        }
        assert!(
            stale.is_empty() && strays.is_empty(),
            "webhook-config/ has drifted from the generator (stale or missing: {stale:?}; \
             not generated: {strays:?}). Regenerate with `cargo run -- manifests --out webhook-config` \
             and commit the result; never edit these files by hand."
        );
        Ok(())
    }

    #[test]
    fn chart_crds_are_what_cheiron_crds_prints() -> Result {
        let path = repo().join("charts/cheiron/crds/crds.yaml");
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == cheiron::api::crds_yaml()?,
            "{} has drifted from the CRD types. Regenerate with \
             `cargo run -- crds > charts/cheiron/crds/crds.yaml`.",
            path.display()
        );
        Ok(())
    }

    #[test]
    fn chart_and_app_versions_are_the_crate_version() -> Result {
        let chart: Value =
            serde_saphyr::from_slice(&std::fs::read(repo().join("charts/cheiron/Chart.yaml"))?)?;
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(
            chart["version"], version,
            "charts/cheiron/Chart.yaml version"
        );
        assert_eq!(
            chart["appVersion"], version,
            "charts/cheiron/Chart.yaml appVersion"
        );
        Ok(())
    }
}

mod chart {
    //! The chart as helm sees it, and as the plain manifests define it.

    use cheiron::install::{FailurePolicy, Install};

    use super::*;

    #[test]
    fn helm_lint_strict_passes_for_every_certificate_source_and_deployment_mode() -> Result {
        for values in [
            vec![],
            CERT_MANAGER_AND_MONITORING.to_vec(),
            vec![
                "certificates.source=cert-manager",
                "certificates.certManager.issuerRef.kind=ClusterIssuer",
                "certificates.certManager.issuerRef.name=company-ca",
            ],
            vec![
                "certificates.source=secret",
                "certificates.secretName=my-tls",
                "certificates.caBundle=Zm9v",
            ],
            vec!["leaderElection.enabled=false", "controller.replicaCount=1"],
            vec!["deployment=combined"],
            vec![
                "deployment=combined",
                "leaderElection.enabled=false",
                "replicaCount=1",
            ],
            vec!["networkPolicy.enabled=false"],
            vec![
                "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/28",
                "networkPolicy.adminFrom=null",
            ],
            vec!["metrics.auth=kubernetes", "serviceMonitor.enabled=true"],
            vec!["metrics.auth=kubernetes", "deployment=combined"],
            vec![
                "credentialProviders.enabled=true",
                "credentialProviders.pluginsImage=registry.example.com/plugins:1",
                "credentialProviders.pluginsCommand={cp,/ecr-credential-provider,/plugins/}",
                "credentialProviders.serviceAccountTokens.serviceAccounts={ecr-puller}",
                "credentialProviders.serviceAccountTokens.namespaces={team-a}",
            ],
        ] {
            let mut args = vec!["lint", "--strict", "charts/cheiron"];
            for value in &values {
                args.extend(["--set", value]);
            }
            let output = run_helm(&args)?;
            assert!(
                output.status.success(),
                "helm lint --strict {values:?} failed:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }

    /// The arguments of the first container of Deployment `name`.
    fn args<'a>(objects: &'a [Value], name: &str) -> Result<Vec<&'a str>> {
        Ok(
            find(objects, "Deployment", name)?["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect(),
        )
    }

    #[test]
    fn default_values_render_the_webhook_and_the_controller_apart_with_hook_jobs_for_the_certificate()
    -> Result {
        let objects = render(&[])?;
        for (name, command, service_account) in [
            ("cheiron-webhook", "webhook", "cheiron-webhook"),
            ("cheiron-controller", "controller", "cheiron-controller"),
        ] {
            let deployment = find(&objects, "Deployment", name)?;
            assert_eq!(deployment["spec"]["replicas"], 2, "{name}");
            let pod = &deployment["spec"]["template"]["spec"];
            let container = &pod["containers"][0];
            assert_eq!(container["args"][0], command, "{name}");
            assert_eq!(pod["serviceAccountName"], service_account, "{name}");
            assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
            assert_eq!(pod["securityContext"]["runAsUser"], 65532);
            assert_eq!(
                pod["securityContext"]["seccompProfile"]["type"],
                "RuntimeDefault"
            );
            assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
            assert_eq!(
                container["securityContext"]["capabilities"]["drop"],
                serde_json::json!(["ALL"])
            );
            assert_eq!(
                container["image"],
                format!("ghcr.io/anny-co/cheiron:{}", env!("CARGO_PKG_VERSION"))
            );
            assert_eq!(
                container["env"],
                serde_json::json!([
                    {"name": "CHEIRON_POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                    {"name": "CHEIRON_POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
                ]),
                "{name}"
            );
            assert_eq!(
                pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
                    [0]["podAffinityTerm"]["topologyKey"],
                "kubernetes.io/hostname"
            );
            find(&objects, "PodDisruptionBudget", name)?;
            find(&objects, "NetworkPolicy", name)?;
            find(&objects, "ServiceAccount", service_account)?;
        }
        let controller =
            &find(&objects, "Deployment", "cheiron-controller")?["spec"]["template"]["spec"];
        assert!(controller["volumes"].is_null(), "no serving certificate");
        assert!(
            !args(&objects, "cheiron-controller")?
                .iter()
                .any(|a| a.starts_with("--tls-cert-dir") || a.starts_with("--listen")),
            "the controller serves no webhook"
        );
        assert!(
            args(&objects, "cheiron-controller")?.contains(&"--leader-election"),
            "two controller replicas: one leads, one stands by"
        );
        assert!(
            !objects
                .iter()
                .any(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "cheiron"),
            "no `cheiron run` by default"
        );
        find(&objects, "Service", "cheiron")?;
        find(&objects, "Service", "cheiron-controller")?;
        find(&objects, "Role", "cheiron-leader-election")?;

        let create = find(&objects, "Job", "cheiron-certs-create")?;
        let patch = find(&objects, "Job", "cheiron-certs-patch")?;
        assert_eq!(
            create["metadata"]["annotations"]["helm.sh/hook"],
            "pre-install,pre-upgrade"
        );
        assert_eq!(
            patch["metadata"]["annotations"]["helm.sh/hook"],
            "post-install,post-upgrade"
        );
        for (kind, name) in [
            ("ServiceAccount", "cheiron-certs"),
            ("Role", "cheiron-certs"),
            ("RoleBinding", "cheiron-certs"),
            ("ClusterRole", "cheiron-certs"),
            ("ClusterRoleBinding", "cheiron-certs"),
        ] {
            let hook = &find(&objects, kind, name)?["metadata"]["annotations"];
            assert_eq!(
                hook["helm.sh/hook"], "pre-install,pre-upgrade,post-install,post-upgrade",
                "{kind} {name} must exist whenever a certificate hook Job runs"
            );
            assert_eq!(
                hook["helm.sh/hook-weight"], "-10",
                "{kind} {name} before the Jobs"
            );
        }
        assert!(!objects.iter().any(is_foreign), "{}", describe(&objects));
        let registration = find(&objects, "MutatingWebhookConfiguration", "cheiron")?;
        assert!(registration["metadata"]["annotations"].is_null());
        Ok(())
    }

    #[test]
    fn cert_manager_values_render_a_ca_a_serving_certificate_and_ca_injection() -> Result {
        let objects = render(&CERT_MANAGER_AND_MONITORING)?;
        assert!(
            !objects.iter().any(|o| o["kind"] == "Job"),
            "no hook Jobs: {}",
            describe(&objects)
        );
        let serving = find(&objects, "Certificate", "cheiron-serving")?;
        assert_eq!(serving["spec"]["secretName"], "cheiron-tls");
        assert_eq!(
            serving["spec"]["dnsNames"][0],
            format!("cheiron.{NAMESPACE}.svc"),
            "the name the apiserver verifies"
        );
        assert_eq!(serving["spec"]["issuerRef"]["name"], "cheiron-ca");
        assert_eq!(
            find(&objects, "Certificate", "cheiron-ca")?["spec"]["isCA"],
            true
        );
        find(&objects, "Issuer", "cheiron-selfsigned")?;
        assert_eq!(
            find(&objects, "Issuer", "cheiron-ca")?["spec"]["ca"]["secretName"],
            "cheiron-ca"
        );
        let registration = find(&objects, "MutatingWebhookConfiguration", "cheiron")?;
        assert_eq!(
            registration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{NAMESPACE}/cheiron-serving")
        );
        let monitor = find(&objects, "ServiceMonitor", "cheiron")?;
        assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
        assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
        let service = find(&objects, "Service", "cheiron")?;
        for (key, value) in monitor["spec"]["selector"]["matchLabels"]
            .as_object()
            .into_iter()
            .flatten()
        {
            assert_eq!(
                &service["metadata"]["labels"][key], value,
                "the ServiceMonitor selects the Service"
            );
        }
        assert!(
            service["spec"]["ports"]
                .as_array()
                .is_some_and(|ports| ports.iter().any(|p| p["name"] == "metrics")),
            "{service}"
        );

        let own_issuer = render(&[
            "certificates.source=cert-manager",
            "certificates.certManager.issuerRef.kind=ClusterIssuer",
            "certificates.certManager.issuerRef.name=company-ca",
        ])?;
        assert!(!own_issuer.iter().any(|o| o["kind"] == "Issuer"));
        let serving = find(&own_issuer, "Certificate", "cheiron-serving")?;
        assert_eq!(
            serving["spec"]["issuerRef"],
            serde_json::json!({"kind": "ClusterIssuer", "name": "company-ca"})
        );
        Ok(())
    }

    #[test]
    fn bring_your_own_certificate_uses_its_secret_and_ca_bundle() -> Result {
        let objects = render(&[
            "certificates.source=secret",
            "certificates.secretName=my-tls",
            "certificates.caBundle=Zm9v",
        ])?;
        assert!(!objects.iter().any(|o| o["kind"] == "Job" || is_foreign(o)));
        let registration = find(&objects, "MutatingWebhookConfiguration", "cheiron")?;
        assert_eq!(
            registration["webhooks"][0]["clientConfig"]["caBundle"],
            "Zm9v"
        );
        let deployment = find(&objects, "Deployment", "cheiron-webhook")?;
        assert_eq!(
            deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
            "my-tls"
        );
        Ok(())
    }

    fn without_client_config(webhook: &Value) -> Value {
        let mut webhook = webhook.clone();
        if let Some(fields) = webhook.as_object_mut() {
            fields.remove("clientConfig");
        }
        webhook
    }

    #[test]
    fn chart_webhooks_are_what_webhook_registration_builds() -> Result {
        let install = Install::default();
        let rendered = render(&[])?;
        let chart = &find(&rendered, "MutatingWebhookConfiguration", "cheiron")?["webhooks"];
        let built = serde_json::to_value(install.webhook_registration().configuration())?;
        assert_eq!(chart.as_array().map(Vec::len), Some(1));
        assert_eq!(
            without_client_config(&chart[0]),
            without_client_config(&built["webhooks"][0]),
            "charts/cheiron/templates/mutatingwebhookconfiguration.yaml has drifted from \
             cheiron::install::WebhookRegistration (docs/design.md §5 defaults)"
        );
        assert_eq!(
            chart[0]["clientConfig"],
            built["webhooks"][0]["clientConfig"]
        );

        let mut strict = install.webhook_registration();
        strict.failure_policy = FailurePolicy::Fail;
        strict.timeout_seconds = 10;
        let built = serde_json::to_value(strict.configuration())?;
        let rendered = render(&["webhook.failurePolicy=Fail", "webhook.timeoutSeconds=10"])?;
        let chart = &find(&rendered, "MutatingWebhookConfiguration", "cheiron")?["webhooks"][0];
        assert_eq!(
            without_client_config(chart),
            without_client_config(&built["webhooks"][0])
        );
        Ok(())
    }

    #[test]
    fn extra_namespace_exclusions_add_to_the_default_ones() -> Result {
        let rendered = render(&[
            "webhook.namespaceSelector.excludeNamespaces={scratch,ci}",
            "webhook.namespaceSelector.matchExpressions[0].key=tier",
            "webhook.namespaceSelector.matchExpressions[0].operator=NotIn",
            "webhook.namespaceSelector.matchExpressions[0].values={sandbox}",
        ])?;
        let selector = &find(&rendered, "MutatingWebhookConfiguration", "cheiron")?["webhooks"][0]
            ["namespaceSelector"]["matchExpressions"];
        assert_eq!(
            selector[0]["values"],
            serde_json::json!(["kube-system", NAMESPACE, "scratch", "ci"])
        );
        assert_eq!(selector[1]["key"], "cheiron.anny.co/ignore");
        assert_eq!(
            selector[2],
            serde_json::json!({"key": "tier", "operator": "NotIn", "values": ["sandbox"]})
        );
        Ok(())
    }

    /// Every Role and ClusterRole (and binding) of both, by kind and namespace/name.
    pub(crate) fn access(objects: &[Value]) -> Vec<(String, String, Value)> {
        let mut out: Vec<(String, String, Value)> = objects
            .iter()
            .filter(|o| {
                ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"]
                    .contains(&o["kind"].as_str().unwrap_or_default())
            })
            .map(|o| {
                let what = if o["rules"].is_null() {
                    serde_json::json!({"roleRef": o["roleRef"], "subjects": o["subjects"]})
                } else {
                    o["rules"].clone()
                };
                (
                    o["kind"].as_str().unwrap_or_default().to_owned(),
                    format!(
                        "{}/{}",
                        o["metadata"]["namespace"].as_str().unwrap_or_default(),
                        o["metadata"]["name"].as_str().unwrap_or_default()
                    ),
                    what,
                )
            })
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    #[test]
    fn chart_rbac_is_the_plain_manifests_rbac_in_both_modes() -> Result {
        for (mode, plain, values) in [
            ("split", plain_objects()?, vec![]),
            ("combined", combined_objects()?, vec!["deployment=combined"]),
        ] {
            let plain = access(&plain);
            let chart = access(&render(&values)?);
            assert_eq!(plain.len(), 10, "{mode}: {plain:#?}");
            for (p, c) in plain.iter().zip(&chart) {
                assert_eq!(
                    p, c,
                    "{mode}: charts/cheiron/templates/{{rbac,certs-jobs}}.yaml has drifted from \
                     src/install/ (webhook-config/)"
                );
            }
            assert_eq!(plain.len(), chart.len(), "{mode}: {chart:#?}");
        }
        Ok(())
    }

    #[test]
    fn metrics_auth_renders_the_plain_manifests_rbac_and_flag_in_both_modes() -> Result {
        use cheiron::install::{DeploymentMode, MetricsAuth};

        let install = Install {
            metrics_auth: MetricsAuth::Kubernetes,
            ..Install::default()
        };
        for (mode, values) in [
            (DeploymentMode::Split, vec!["metrics.auth=kubernetes"]),
            (
                DeploymentMode::Combined,
                vec!["metrics.auth=kubernetes", "deployment=combined"],
            ),
        ] {
            let plain = [
                install.server_objects_for(mode)?,
                install.certificate_objects()?,
            ]
            .concat();
            let chart = render(&values)?;
            assert_eq!(
                access(&plain),
                access(&chart),
                "{mode}: charts/cheiron/templates/rbac.yaml has drifted from src/install/"
            );
            for name in named(&plain, "Deployment") {
                let (p, c) = (args(&plain, &name)?, args(&chart, &name)?);
                assert!(
                    p.contains(&"--metrics-auth=kubernetes"),
                    "{mode}: {name}: {p:?}"
                );
                assert_eq!(p, c, "{mode}: {name}");
            }
            for name in ["cheiron-metrics-auth", "cheiron-metrics-reader"] {
                find(&chart, "ClusterRole", name)?;
            }
        }
        let monitor = render(&["metrics.auth=kubernetes", "serviceMonitor.enabled=true"])?;
        let endpoint = &find(&monitor, "ServiceMonitor", "cheiron")?["spec"]["endpoints"][0];
        assert_eq!(
            endpoint["bearerTokenFile"],
            "/var/run/secrets/kubernetes.io/serviceaccount/token"
        );
        let open = render(&["serviceMonitor.enabled=true"])?;
        let endpoint = &find(&open, "ServiceMonitor", "cheiron")?["spec"]["endpoints"][0];
        assert!(endpoint["bearerTokenFile"].is_null(), "{endpoint}");
        Ok(())
    }

    /// The chart's values and the `cheiron manifests` setup of one credential-provider
    /// installation: the ECR example of docs/credential-providers.md, its plugin from an init
    /// container, one ServiceAccount's tokens in cheiron's namespace and a tenant namespace's.
    pub(crate) const ECR_CONFIG: &str = "apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: ecr-credential-provider
    matchImages: [\"*.dkr.ecr.*.amazonaws.com\", \"*.dkr.ecr.*.amazonaws.com.cn\"]
    defaultCacheDuration: 12h
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    args: [get-credentials]
    env:
      - {name: AWS_REGION, value: eu-west-1}
";

    pub(crate) fn credential_provider_setup(
        token_namespace: &str,
    ) -> cheiron::install::CredentialProviderSetup {
        cheiron::install::CredentialProviderSetup {
            config: ECR_CONFIG.to_owned(),
            plugins_image: Some("registry.example.com/ecr-credential-provider:v1".to_owned()),
            plugins_command: ["cp", "/ecr-credential-provider", "/plugins/"]
                .map(str::to_owned)
                .to_vec(),
            token_service_accounts: vec!["ecr-puller".to_owned()],
            token_namespaces: vec![token_namespace.to_owned()],
        }
    }

    /// `helm template` with the values of [`credential_provider_setup`] and `--set` values.
    fn render_credential_providers(token_namespace: &str, values: &[&str]) -> Result<Vec<Value>> {
        let config: Value = serde_saphyr::from_str(ECR_CONFIG)?;
        let file = tempfile::NamedTempFile::new()?;
        std::fs::write(
            file.path(),
            serde_json::json!({"credentialProviders": {
                "enabled": true,
                "config": config,
                "pluginsImage": "registry.example.com/ecr-credential-provider:v1",
                "pluginsCommand": ["cp", "/ecr-credential-provider", "/plugins/"],
                "serviceAccountTokens": {
                    "serviceAccounts": ["ecr-puller"],
                    "namespaces": [token_namespace],
                },
            }})
            .to_string(),
        )?;
        let path = file.path().display().to_string();
        let mut args = template_args(values);
        args.extend(["-f", &path]);
        let output = run_helm(&args)?;
        if !output.status.success() {
            return Err(format!(
                "helm template with credentialProviders failed: {}",
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
        documents(&output.stdout)
    }

    #[test]
    fn credential_provider_values_render_what_the_manifests_flags_do_in_both_modes() -> Result {
        use cheiron::install::DeploymentMode;

        let install = Install {
            credential_providers: Some(credential_provider_setup("team-a")),
            ..Install::default()
        };
        for (mode, values) in [
            (DeploymentMode::Split, vec![]),
            (DeploymentMode::Combined, vec!["deployment=combined"]),
        ] {
            let plain = [
                install.server_objects_for(mode)?,
                install.certificate_objects()?,
            ]
            .concat();
            let chart = render_credential_providers("team-a", &values)?;
            let (p, c) = (access(&plain), access(&chart));
            assert_eq!(
                p, c,
                "{mode}: charts/cheiron/templates/credential-providers.yaml has drifted from \
                 src/install/"
            );
            for namespace in [NAMESPACE, "team-a"] {
                assert!(
                    p.iter().any(|(kind, name, _)| kind == "Role"
                        && *name == format!("{namespace}/cheiron-credential-provider-tokens")),
                    "{mode}: {p:#?}"
                );
            }
            let config = |objects: &[Value]| -> Result<Value> {
                let map = find(objects, "ConfigMap", "cheiron-credential-providers")?;
                let text = map["data"]["config.yaml"].as_str().unwrap_or_default();
                Ok(serde_saphyr::from_str(text)?)
            };
            assert_eq!(config(&plain)?, config(&chart)?, "{mode}");
            for name in named(&plain, "Deployment") {
                let (p, c) = (
                    find(&plain, "Deployment", &name)?,
                    find(&chart, "Deployment", &name)?,
                );
                assert_eq!(
                    p["spec"]["template"]["spec"], c["spec"]["template"]["spec"],
                    "{mode}: the chart's Pod spec of {name} has drifted from src/install/"
                );
                let pod = p["spec"]["template"]["spec"].to_string();
                let runs_controller = name != "cheiron-webhook";
                assert_eq!(
                    pod.contains("--credential-provider-bin-dir=/plugins"),
                    runs_controller,
                    "{mode}: {name}"
                );
                assert_eq!(
                    pod.contains("registry.example.com/ecr-credential-provider:v1"),
                    runs_controller,
                    "{mode}: {name}"
                );
            }
        }
        // Without token lists, no token rights at all.
        let bare = render(&["credentialProviders.enabled=true"])?;
        assert!(
            !bare
                .iter()
                .any(|o| o["metadata"]["name"] == "cheiron-credential-provider-tokens"),
            "token rights are opt-in"
        );
        Ok(())
    }

    /// Kind and name of every object of `kind` in `objects`, sorted.
    pub(crate) fn named(objects: &[Value], kind: &str) -> Vec<String> {
        let mut names: Vec<String> = objects
            .iter()
            .filter(|o| o["kind"] == kind)
            .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn chart_runs_cheiron_exactly_like_the_plain_manifests_in_both_modes() -> Result {
        for (mode, plain, values) in [
            ("split", plain_objects()?, vec![]),
            ("combined", combined_objects()?, vec!["deployment=combined"]),
        ] {
            let chart = render(&values)?;
            for kind in [
                "ServiceAccount",
                "Deployment",
                "Service",
                "PodDisruptionBudget",
                "NetworkPolicy",
            ] {
                let names = named(&plain, kind);
                assert!(!names.is_empty(), "{mode}: no {kind}");
                assert_eq!(names, named(&chart, kind), "{mode}: {kind}");
                for name in &names {
                    let (p, c) = (find(&plain, kind, name)?, find(&chart, kind, name)?);
                    if kind == "Deployment" {
                        for part in ["replicas", "strategy"] {
                            assert_eq!(p["spec"][part], c["spec"][part], "{mode}: {name} {part}");
                        }
                        assert_eq!(
                            p["spec"]["template"]["spec"], c["spec"]["template"]["spec"],
                            "{mode}: the chart's Pod spec of {name} has drifted from \
                             src/install/workload.rs"
                        );
                    } else {
                        assert_eq!(p["spec"], c["spec"], "{mode}: {kind} {name}");
                    }
                }
            }
        }
        let plain = plain_objects()?;
        let chart = render(&[])?;
        // One Job with `create` as init container in the plain manifests, two hook Jobs in
        // the chart: the same commands, as the same hardened user.
        let job = &find(&plain, "Job", "cheiron-certs")?["spec"]["template"]["spec"];
        for (step, plain_container) in [
            ("create", &job["initContainers"][0]),
            ("patch", &job["containers"][0]),
        ] {
            let hook =
                &find(&chart, "Job", &format!("cheiron-certs-{step}"))?["spec"]["template"]["spec"];
            assert_eq!(&hook["containers"][0], plain_container, "{step}");
            for field in ["securityContext", "serviceAccountName", "restartPolicy"] {
                assert_eq!(hook[field], job[field], "{step}: {field}");
            }
        }
        Ok(())
    }

    #[test]
    fn leader_election_off_runs_one_controller_without_a_lease() -> Result {
        for (values, controller) in [
            (
                vec!["leaderElection.enabled=false", "controller.replicaCount=1"],
                "cheiron-controller",
            ),
            (
                vec![
                    "deployment=combined",
                    "leaderElection.enabled=false",
                    "replicaCount=1",
                ],
                "cheiron",
            ),
        ] {
            let objects = render(&values)?;
            let args = args(&objects, controller)?;
            assert!(
                args.contains(&"--no-leader-election"),
                "{values:?}: {args:?}"
            );
            assert!(!args.contains(&"--leader-election"), "{values:?}: {args:?}");
            assert!(
                !objects
                    .iter()
                    .any(|o| o["kind"] == "Role"
                        && o["metadata"]["name"] == "cheiron-leader-election"),
                "{values:?}"
            );
        }
        let split = render(&["leaderElection.enabled=false", "controller.replicaCount=1"])?;
        let webhook = args(&split, "cheiron-webhook")?;
        assert!(
            !webhook.iter().any(|a| a.contains("leader-election")),
            "the webhook takes no controller flags: {webhook:?}"
        );
        Ok(())
    }

    #[test]
    fn fleet_is_off_by_default_and_when_on_reads_cluster_api_clusters_only_where_asked_or_in_its_own_namespace()
    -> Result {
        let is_fleet_rbac = |o: &Value| {
            o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-fleet"))
        };
        let default = render(&[])?;
        assert!(!default.iter().any(is_fleet_rbac), "fleet RBAC by default");
        let controller = args(&default, "cheiron-controller")?;
        assert!(
            !controller.iter().any(|a| a.contains("fleet")),
            "{controller:?}"
        );

        let objects = render(&["fleet.enabled=true", "fleet.namespaces={capi-a,capi-b}"])?;
        let controller = args(&objects, "cheiron-controller")?;
        for flag in [
            "--fleet",
            "--fleet-namespace=capi-a",
            "--fleet-namespace=capi-b",
        ] {
            assert!(controller.contains(&flag), "{flag} missing: {controller:?}");
        }
        let webhook = args(&objects, "cheiron-webhook")?;
        assert!(!webhook.iter().any(|a| a.contains("fleet")), "{webhook:?}");
        let roles: Vec<(&str, &str, &Value)> = objects
            .iter()
            .filter(|o| is_fleet_rbac(o))
            .filter_map(|o| {
                Some((
                    o["kind"].as_str()?,
                    o["metadata"]["namespace"].as_str().unwrap_or(""),
                    o,
                ))
            })
            .collect();
        let mut kinds: Vec<(&str, &str)> = roles.iter().map(|(k, ns, _)| (*k, *ns)).collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [
                ("ClusterRole", ""),
                ("ClusterRoleBinding", ""),
                ("Role", "capi-a"),
                ("Role", "capi-b"),
                ("RoleBinding", "capi-a"),
                ("RoleBinding", "capi-b")
            ]
        );
        let crd = serde_json::json!({"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "resourceNames": ["clusters.cluster.x-k8s.io"], "verbs": ["get", "list", "watch"]});
        let clusters = serde_json::json!({"apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters"], "verbs": ["list", "watch"]});
        for (kind, _, role) in &roles {
            match *kind {
                // Cluster-wide, only Cluster API's CRD, by name.
                "ClusterRole" => assert_eq!(role["rules"], serde_json::json!([crd])),
                "Role" => assert_eq!(role["rules"], serde_json::json!([clusters])),
                _ => {}
            }
        }
        // No namespace named: the release namespace, never every namespace (docs/fleet.md,
        // "Who can enrol a cluster").
        let own = render(&["fleet.enabled=true"])?;
        let mut kinds: Vec<(&str, &str)> = own
            .iter()
            .filter(|o| is_fleet_rbac(o))
            .filter_map(|o| {
                Some((
                    o["kind"].as_str()?,
                    o["metadata"]["namespace"].as_str().unwrap_or(""),
                ))
            })
            .collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [
                ("ClusterRole", ""),
                ("ClusterRoleBinding", ""),
                ("Role", NAMESPACE),
                ("RoleBinding", NAMESPACE)
            ]
        );
        assert_eq!(
            find(&own, "ClusterRole", "cheiron-fleet")?["rules"],
            serde_json::json!([crd])
        );
        let controller = args(&own, "cheiron-controller")?;
        let flag = format!("--fleet-namespace={NAMESPACE}");
        assert!(controller.contains(&flag.as_str()), "{controller:?}");
        Ok(())
    }

    #[test]
    fn fleet_values_render_what_cheiron_manifests_fleet_does_in_both_modes() -> Result {
        use cheiron::install::{DeploymentMode, FleetSetup};

        for (namespaces, set) in [
            (vec![], vec!["fleet.enabled=true"]),
            (
                vec!["capi-a".to_owned(), "capi-b".to_owned()],
                vec!["fleet.enabled=true", "fleet.namespaces={capi-a,capi-b}"],
            ),
        ] {
            let install = Install {
                fleet: Some(FleetSetup {
                    namespaces: namespaces.clone(),
                }),
                ..Install::default()
            };
            for (mode, extra) in [
                (DeploymentMode::Split, None),
                (DeploymentMode::Combined, Some("deployment=combined")),
            ] {
                let plain = [
                    install.server_objects_for(mode)?,
                    install.certificate_objects()?,
                ]
                .concat();
                let mut values = set.clone();
                values.extend(extra);
                let chart = render(&values)?;
                assert_eq!(
                    access(&plain),
                    access(&chart),
                    "{mode} {namespaces:?}: charts/cheiron/templates/rbac.yaml (fleet) has \
                     drifted from src/install/"
                );
                for name in named(&plain, "Deployment") {
                    let (p, c) = (args(&plain, &name)?, args(&chart, &name)?);
                    assert_eq!(p, c, "{mode}: {name}");
                    assert_eq!(
                        p.contains(&"--fleet"),
                        name != "cheiron-webhook",
                        "{mode}: {name}: {p:?}"
                    );
                }
            }
        }
        // Without --fleet the plain manifests hold nothing of it (webhook-config/ is checked
        // against `cheiron manifests` by webhook_config_is_what_cheiron_manifests_generates).
        let plain = plain_objects()?;
        assert!(
            !plain
                .iter()
                .any(|o| o["metadata"]["name"] == "cheiron-fleet"),
            "fleet RBAC by default"
        );
        for name in named(&plain, "Deployment") {
            assert!(!args(&plain, &name)?.iter().any(|a| a.contains("fleet")));
        }
        Ok(())
    }

    #[test]
    fn split_gives_each_identity_only_its_own_roles_and_names_them_after_the_base_name() -> Result {
        let objects = render(&["serviceAccount.name=pull"])?;
        assert_eq!(
            named(&objects, "ServiceAccount"),
            ["cheiron-certs", "pull-controller", "pull-webhook"]
        );
        for (binding, kind, subject) in [
            ("cheiron-webhook", "ClusterRoleBinding", "pull-webhook"),
            (
                "cheiron-controller",
                "ClusterRoleBinding",
                "pull-controller",
            ),
            ("cheiron-leader-election", "RoleBinding", "pull-controller"),
        ] {
            assert_eq!(
                find(&objects, kind, binding)?["subjects"],
                serde_json::json!([{"kind": "ServiceAccount", "name": subject, "namespace": NAMESPACE}]),
                "{binding}"
            );
        }
        for (deployment, service_account) in [
            ("cheiron-webhook", "pull-webhook"),
            ("cheiron-controller", "pull-controller"),
        ] {
            assert_eq!(
                find(&objects, "Deployment", deployment)?["spec"]["template"]["spec"]["serviceAccountName"],
                service_account
            );
        }
        let webhook_rules = &find(&objects, "ClusterRole", "cheiron-webhook")?["rules"];
        assert!(
            !webhook_rules.to_string().contains("secrets"),
            "the webhook reads no Secret: {webhook_rules}"
        );
        let combined = render(&["serviceAccount.name=pull", "deployment=combined"])?;
        assert_eq!(
            named(&combined, "ServiceAccount"),
            ["cheiron-certs", "pull"]
        );
        Ok(())
    }

    /// The ingress rules of NetworkPolicy `name`, as (ports, from) pairs.
    fn ingress(objects: &[Value], name: &str) -> Result<Vec<(Value, Value)>> {
        Ok(find(objects, "NetworkPolicy", name)?["spec"]["ingress"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|rule| (rule["ports"].clone(), rule["from"].clone()))
            .collect())
    }

    #[test]
    fn network_policies_open_the_webhook_port_to_all_and_the_admin_port_to_the_namespace() -> Result
    {
        let port = |n: u16| serde_json::json!([{"port": n, "protocol": "TCP"}]);
        let namespace = serde_json::json!([{"podSelector": {}}]);
        let objects = render(&[])?;
        assert_eq!(
            ingress(&objects, "cheiron-webhook")?,
            [(port(8443), Value::Null), (port(8080), namespace.clone())],
            "the webhook port from anywhere: the apiserver's address differs by distribution"
        );
        assert_eq!(
            ingress(&objects, "cheiron-controller")?,
            [(port(8080), namespace.clone())]
        );
        for name in ["cheiron-webhook", "cheiron-controller"] {
            let policy = find(&objects, "NetworkPolicy", name)?;
            assert_eq!(
                policy["spec"]["policyTypes"],
                serde_json::json!(["Ingress"])
            );
            let selector = &policy["spec"]["podSelector"]["matchLabels"];
            assert_eq!(
                selector,
                &find(&objects, "Deployment", name)?["spec"]["selector"]["matchLabels"],
                "{name} selects its Deployment's Pods"
            );
        }
        let combined = render(&["deployment=combined"])?;
        assert_eq!(
            ingress(&combined, "cheiron")?,
            [(port(8443), Value::Null), (port(8080), namespace)]
        );

        let restricted = render(&[
            "networkPolicy.webhookFrom[0].ipBlock.cidr=172.16.0.0/28",
            "networkPolicy.adminFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring",
        ])?;
        assert_eq!(
            ingress(&restricted, "cheiron-webhook")?,
            [
                (
                    port(8443),
                    serde_json::json!([{"ipBlock": {"cidr": "172.16.0.0/28"}}])
                ),
                (
                    port(8080),
                    serde_json::json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}])
                ),
            ]
        );
        let closed = render(&["networkPolicy.adminFrom=null"])?;
        assert_eq!(
            ingress(&closed, "cheiron-controller")?,
            [],
            "an empty adminFrom admits no one, not everyone"
        );
        let off = render(&["networkPolicy.enabled=false"])?;
        assert!(named(&off, "NetworkPolicy").is_empty());
        Ok(())
    }

    #[test]
    fn invalid_values_are_refused_with_a_reason() -> Result {
        for (values, expected) in [
            (vec!["replicaCount=0"], "replicaCount"),
            (vec!["webhook.failurePolicy=Sometimes"], "failurePolicy"),
            (vec!["webhook.timeoutSeconds=31"], "timeoutSeconds"),
            (vec!["certificates.source=vault"], "source"),
            (vec!["logging.format=xml"], "format"),
            (
                vec!["securityContext.readOnlyRootFilesystem=false"],
                "readOnlyRootFilesystem",
            ),
            (
                vec!["podSecurityContext.runAsNonRoot=false"],
                "runAsNonRoot",
            ),
            (vec!["replicas=3"], "replicas"),
            (vec!["extraArgs={run}"], "extraArgs"),
            (
                vec!["leaderElection.enabled=false"],
                "set controller.replicaCount to 1",
            ),
            (
                vec!["deployment=combined", "leaderElection.enabled=false"],
                "set replicaCount to 1",
            ),
            (vec!["deployment=both"], "deployment"),
            (vec!["metrics.auth=basic"], "auth"),
            (vec!["controller.replicaCount=0"], "replicaCount"),
            (vec!["controller.extraArgs={resync}"], "extraArgs"),
            (vec!["networkPolicy.webhookFrom[0].ports=8443"], "ports"),
            (
                vec![
                    "networkPolicy.adminFrom[0].ipBlock.cidr=10.0.0.0/8",
                    "networkPolicy.adminFrom[0].podSelector.matchLabels.a=b",
                ],
                "adminFrom",
            ),
            (
                vec!["terminationGracePeriodSeconds=5"],
                "longer than shutdownDelaySeconds",
            ),
            (
                vec!["certificates.source=secret"],
                "needs certificates.secretName",
            ),
            (
                vec![
                    "credentialProviders.enabled=true",
                    "credentialProviders.pluginsImage=registry.example.com/p:1",
                ],
                "pluginsImage and pluginsCommand go together",
            ),
            (
                vec![
                    "credentialProviders.enabled=true",
                    "credentialProviders.serviceAccountTokens.namespaces={Team_A}",
                ],
                "namespaces",
            ),
            (
                vec![
                    "credentialProviders.enabled=true",
                    "credentialProviders.serviceAccountTokens.everywhere=true",
                ],
                "everywhere",
            ),
            (
                vec!["node.enabled=true", "node.secretNamespaces={platform}"],
                "node.secretNamespaces and node.secretNames are gone",
            ),
            (
                vec!["node.enabled=true", "node.secretNames={registry-pull}"],
                "the agents read no source Secret",
            ),
        ] {
            let output = run_helm(&template_args(&values))?;
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!output.status.success(), "{values:?} rendered");
            assert!(stderr.contains(expected), "{values:?}: {stderr}");
        }
        Ok(())
    }
}

mod cluster {
    //! Against the real kube-apiserver of the e2e harness.

    use std::time::{Duration, Instant};

    use base64::Engine;
    use k8s_openapi::api::{
        authentication::v1::{TokenRequest, TokenRequestSpec},
        authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
        coordination::v1::Lease,
        core::v1::{Namespace, Pod, Secret, ServiceAccount},
        events::v1::Event,
    };
    use kube::{
        Api, Client, ResourceExt,
        api::{
            DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
            PostParams,
        },
        discovery::{Scope, pinned_kind},
    };
    use tokio::sync::OnceCell;

    use super::*;
    use harness::{Scenario, wait_for};

    const FIELD_MANAGER: &str = "cheiron-install-test";

    /// [`wait_for`] with a check that answers `None` for "not yet".
    async fn until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        wait_for(what, timeout, || {
            let next = check();
            async move { next.await.ok_or_else(|| "not yet".into()) }
        })
        .await
    }

    /// Server-side applies `object`, as a dry run unless `persist`.
    async fn apply(client: &Client, object: &Value, persist: bool) -> Result<()> {
        let object: DynamicObject = serde_json::from_value(object.clone())?;
        let types = object.types.clone().unwrap_or_default();
        let gvk = GroupVersionKind::try_from(&types)?;
        let (resource, capabilities) = pinned_kind(client, &gvk)
            .await
            .map_err(|e| format!("{} {}: not served: {e}", types.kind, object.name_any()))?;
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                object.metadata.namespace.as_deref().unwrap_or("default"),
                &resource,
            ),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        let mut params = PatchParams::apply(FIELD_MANAGER).force();
        if !persist {
            params = params.dry_run();
        }
        api.patch(&object.name_any(), &params, &Patch::Apply(&object))
            .await
            .map_err(|e| format!("{} {}: {e}", types.kind, object.name_any()))?;
        Ok(())
    }

    /// Applies every object as a server-side dry run; all failures in one message.
    async fn dry_run_all(client: &Client, what: &str, objects: &[Value]) -> Result<usize> {
        let mut failures = Vec::new();
        for object in objects {
            if let Err(e) = apply(client, object, false).await {
                failures.push(e.to_string());
            }
        }
        if failures.is_empty() {
            Ok(objects.len())
        } else {
            Err(format!(
                "{what}: the apiserver refused:\n  {}",
                failures.join("\n  ")
            )
            .into())
        }
    }

    /// The combined mode's identity: ServiceAccount `cheiron` and its bindings, renamed
    /// `<name>-combined` so that they hold in the same cluster as the split bindings of the
    /// same roles (a real cluster has one mode, and one name for each binding).
    fn combined_identity() -> Result<Vec<Value>> {
        let mut out = Vec::new();
        for mut object in combined_objects()? {
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            let is_binding = kind == "ClusterRoleBinding" || kind == "RoleBinding";
            let is_identity = kind == "ServiceAccount" && object["metadata"]["name"] == "cheiron";
            if is_binding && object["subjects"][0]["name"] == "cheiron" {
                let name = format!(
                    "{}-combined",
                    object["metadata"]["name"].as_str().unwrap_or_default()
                );
                object["metadata"]["name"] = Value::String(name);
                out.push(object);
            } else if is_identity {
                out.push(object);
            }
        }
        Ok(out)
    }

    /// Once per binary: cheiron's namespace, ServiceAccounts and RBAC from the plain manifests
    /// (split), and the combined mode's identity, applied for real (Deployments, Services, Job
    /// and webhook configuration stay dry-run only), and the authorizer seen to use them.
    async fn installed(client: &Client) -> Result<()> {
        static INSTALLED: OnceCell<Result<(), String>> = OnceCell::const_new();
        INSTALLED
            .get_or_init(|| async {
                let persisted = [
                    "Namespace",
                    "ServiceAccount",
                    "ClusterRole",
                    "ClusterRoleBinding",
                    "Role",
                    "RoleBinding",
                ];
                let mut objects = plain_objects().map_err(|e| e.to_string())?;
                objects.extend(combined_identity().map_err(|e| e.to_string())?);
                for object in objects
                    .iter()
                    .filter(|o| persisted.contains(&o["kind"].as_str().unwrap_or_default()))
                {
                    apply(client, object, true)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                for (user, probe) in [
                    (CHEIRON_USER, ("list", "", "secrets", "", "", "probe")),
                    (CONTROLLER_USER, ("list", "", "secrets", "", "", "probe")),
                    (
                        WEBHOOK_USER,
                        ("get", "", "namespaces", "", "probe", "probe"),
                    ),
                ] {
                    until(
                        &format!("the authorizer to see the RBAC of {user}"),
                        Duration::from_secs(20),
                        || async { allowed(client, user, &probe).await.ok().filter(|a| *a) },
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                }
                Ok(())
            })
            .await
            .clone()
            .map_err(Into::into)
    }

    #[tokio::test]
    async fn plain_manifests_apply_cleanly_in_a_server_side_dry_run() -> Result {
        let s = Scenario::new(CHEIRON, "install-plain").await?;
        installed(s.client()).await?;
        let crds = documents(&std::fs::read(repo().join("webhook-config/crds.yaml"))?)?;
        let objects = plain_objects()?;
        let combined = combined_objects()?;
        // `cheiron manifests --node`: the node agent's objects.
        let node: Vec<Value> = cheiron::install::Install {
            node_agent: Some(cheiron::install::NodeAgentSetup::default()),
            ..cheiron::install::Install::default()
        }
        .server_objects_for(cheiron::install::DeploymentMode::Split)?
        .into_iter()
        .filter(|o| o["metadata"]["labels"]["app.kubernetes.io/component"] == "node-agent")
        .collect();
        // Namespace, ServiceAccount, 2 ClusterRole(Binding)s, report Role(Binding), the
        // admission policy and its binding, Secret Role(Binding), DaemonSet, NetworkPolicy.
        assert_eq!(node.len(), 12, "{}", describe(&node));
        // Its namespaced objects' dry run needs the node namespace.
        for namespace in node.iter().filter(|o| o["kind"] == "Namespace") {
            apply(s.client(), namespace, true).await?;
        }
        let applied = dry_run_all(s.client(), "webhook-config/crds.yaml", &crds).await?
            + dry_run_all(s.client(), "webhook-config/", &objects).await?
            + dry_run_all(s.client(), "cheiron manifests, combined", &combined).await?
            + dry_run_all(s.client(), "cheiron manifests --node", &node).await?;
        assert_eq!(
            applied,
            crds.len() + objects.len() + combined.len() + node.len()
        );
        assert!(applied >= 40, "{}", describe(&objects));
        Ok(())
    }

    #[tokio::test]
    async fn rendered_chart_applies_cleanly_in_a_server_side_dry_run() -> Result {
        let s = Scenario::new(CHEIRON, "install-chart").await?;
        installed(s.client()).await?;
        let crds = documents(&std::fs::read(
            repo().join("charts/cheiron/crds/crds.yaml"),
        )?)?;
        dry_run_all(s.client(), "charts/cheiron/crds/", &crds).await?;
        for values in [
            vec![],
            vec![
                "certificates.source=secret",
                "certificates.secretName=my-tls",
                "certificates.caBundle=Zm9v",
            ],
            CERT_MANAGER_AND_MONITORING.to_vec(),
            vec!["deployment=combined"],
            vec![
                "networkPolicy.webhookFrom[0].ipBlock.cidr=172.16.0.0/28",
                "networkPolicy.webhookFrom[1].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=kube-system",
                "networkPolicy.webhookFrom[1].podSelector.matchLabels.app=konnectivity-agent",
                "networkPolicy.adminFrom=null",
            ],
        ] {
            let objects = render(&values)?;
            let (foreign, own): (Vec<Value>, Vec<Value>) =
                objects.into_iter().partition(is_foreign);
            // cert-manager's and the Prometheus Operator's kinds are checked as rendered only
            // (their CRDs are not in the test cluster); everything else must be accepted.
            if values.is_empty() {
                assert!(foreign.is_empty());
            }
            dry_run_all(s.client(), &format!("helm template {values:?}"), &own).await?;
        }
        Ok(())
    }

    /// A Pod with the template's metadata and spec.
    fn pod_of(template: &Value, name: &str) -> Result<Pod> {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": template["metadata"],
            "spec": template["spec"],
        }))?;
        pod.metadata.name = Some(name.to_owned());
        pod.metadata.namespace = Some(NAMESPACE.to_owned());
        Ok(pod)
    }

    #[tokio::test]
    async fn every_pod_meets_the_restricted_pod_security_standard() -> Result {
        let s = Scenario::new(CHEIRON, "install-pss").await?;
        installed(s.client()).await?;
        let namespace = Api::<Namespace>::all(s.client().clone())
            .get(NAMESPACE)
            .await?;
        assert_eq!(
            namespace
                .labels()
                .get("pod-security.kubernetes.io/enforce")
                .map(String::as_str),
            Some("restricted")
        );
        let pods: Api<Pod> = Api::namespaced(s.client().clone(), NAMESPACE);
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };

        // The check has teeth: a Pod that may run as root is refused here.
        let careless = pod_of(
            &serde_json::json!({"spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
            "careless",
        )?;
        let refused = pods.create(&dry_run, &careless).await;
        assert!(
            matches!(&refused, Err(kube::Error::Api(e)) if e.message.contains("violates PodSecurity")),
            "{refused:?}"
        );

        // Every Pod template of both installs, in both modes.
        let mut templates = Vec::new();
        for (install, objects) in [
            ("plain", plain_objects()?),
            ("plain combined", combined_objects()?),
            ("chart", render(&[])?),
            ("chart combined", render(&["deployment=combined"])?),
        ] {
            for object in &objects {
                if object["kind"] == "Deployment" || object["kind"] == "Job" {
                    let what = format!(
                        "{install} {} {}",
                        object["kind"].as_str().unwrap_or_default(),
                        object["metadata"]["name"].as_str().unwrap_or_default()
                    );
                    templates.push((what, object["spec"]["template"].clone()));
                }
            }
        }
        // Deployments and Jobs: plain 2 + 1, plain combined 1 + 1, chart 2 + 2 (hooks), chart
        // combined 1 + 2.
        assert_eq!(templates.len(), 12, "{templates:#?}");
        for (what, template) in &templates {
            let pod = pod_of(template, "cheiron-pss")?;
            pods.create(&dry_run, &pod)
                .await
                .map_err(|e| format!("{what}: {e}"))?;
        }
        Ok(())
    }

    /// The node agent runs as root with host paths: cheiron's namespace (Pod Security
    /// `restricted`) refuses its Pod, the node namespace `cheiron manifests --node` renders
    /// (`privileged`) admits it, server-side.
    #[tokio::test]
    async fn the_node_agents_pod_is_admitted_in_the_node_namespace_only() -> Result {
        use cheiron::install::{DeploymentMode, Install, NodeAgentSetup};

        let s = Scenario::new(CHEIRON, "install-node-pss").await?;
        installed(s.client()).await?;
        let node_namespace = s.unique_name("node");
        let objects = Install {
            node_agent: Some(NodeAgentSetup {
                namespace: Some(node_namespace.clone()),
            }),
            ..Install::default()
        }
        .server_objects_for(DeploymentMode::Split)?;
        let rendered = |kind: &str| {
            objects
                .iter()
                .find(|o| {
                    o["kind"] == kind
                        && o["metadata"]["labels"]["app.kubernetes.io/component"] == "node-agent"
                })
                .ok_or(format!("no node agent {kind}"))
        };
        for kind in ["Namespace", "ServiceAccount"] {
            apply(s.client(), rendered(kind)?, true).await?;
        }
        let template = &rendered("DaemonSet")?["spec"]["template"];
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let mut pod = pod_of(template, "node-agent-pss")?;
        pod.metadata.namespace = Some(node_namespace.clone());
        let admitted = Api::<Pod>::namespaced(s.client().clone(), &node_namespace)
            .create(&dry_run, &pod)
            .await;
        let mut restricted = pod_of(template, "node-agent-pss")?;
        if let Some(spec) = restricted.spec.as_mut() {
            // An identity that exists there: only Pod Security may refuse it.
            spec.service_account_name = Some("cheiron-controller".to_owned());
        }
        let refused = Api::<Pod>::namespaced(s.client().clone(), NAMESPACE)
            .create(&dry_run, &restricted)
            .await;
        Api::<Namespace>::all(s.client().clone())
            .delete(&node_namespace, &Default::default())
            .await?;
        admitted.map_err(|e| format!("the node namespace refused the agent's Pod: {e}"))?;
        assert!(
            matches!(&refused, Err(kube::Error::Api(e)) if e.message.contains("violates PodSecurity")),
            "{refused:?}"
        );
        Ok(())
    }

    /// The combined mode's identity (`cheiron run`).
    const CHEIRON_USER: &str = "system:serviceaccount:cheiron-system:cheiron";
    /// The split mode's identities.
    const WEBHOOK_USER: &str = "system:serviceaccount:cheiron-system:cheiron-webhook";
    const CONTROLLER_USER: &str = "system:serviceaccount:cheiron-system:cheiron-controller";
    const CERTS_USER: &str = "system:serviceaccount:cheiron-system:cheiron-certs";

    /// One access check: verb, API group, resource (`resource/subresource`), namespace ("" for
    /// all namespaces or a cluster-scoped resource), object name ("" for any), and why.
    type Row = (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    );

    const G: &str = "cheiron.anny.co";
    const IPSM: &str = "imagepullsecretmanagers";
    const CIPSM: &str = "clusterimagepullsecretmanagers";
    const EVENTS: &str = "events.k8s.io";
    const LEASES: &str = "coordination.k8s.io";
    const RBAC: &str = "rbac.authorization.k8s.io";
    const ADMISSION: &str = "admissionregistration.k8s.io";
    const MWC: &str = "mutatingwebhookconfigurations";
    const NS: &str = NAMESPACE;
    const LEASE: &str = "cheiron-controller";

    /// Every call the webhook makes (src/source/cluster.rs).
    #[rustfmt::skip]
    const WEBHOOK_NEEDS: &[Row] = &[
        ("list",   G,  IPSM,         "", "", "managers reflector (and the CRD probe)"),
        ("watch",  G,  IPSM,         "", "", "managers reflector"),
        ("list",   G,  CIPSM,        "", "", "cluster managers reflector"),
        ("watch",  G,  CIPSM,        "", "", "cluster managers reflector"),
        ("list",   "", "namespaces", "", "", "namespaces (metadata)"),
        ("watch",  "", "namespaces", "", "", "namespaces (metadata)"),
        ("get",    "", "namespaces", "", "team-a", "a namespace its cache has not seen yet"),
    ];

    /// What the webhook's identity must not do, though the controller's may: read any Secret,
    /// or write anything.
    #[rustfmt::skip]
    const WEBHOOK_MUST_NOT: &[Row] = &[
        ("list",   "", "secrets", "",       "",               "no Secret access at all"),
        ("watch",  "", "secrets", "",       "",               "no Secret access at all"),
        ("get",    "", "secrets", "team-b", "registry-token", "no Secret access at all"),
        ("list",   "", "secrets", "team-b", "",               "no Secret access at all"),
        ("get",    "", "secrets", NS,       "cheiron-tls",    "its certificate is a mounted volume"),
        ("create", "", "secrets", "team-a", "",               "writes nothing"),
        ("update", "", "secrets", "team-a", "docker-hub",     "writes nothing"),
        ("delete", "", "secrets", "team-a", "docker-hub",     "writes nothing"),
        ("list",   "", "serviceaccounts", "", "",                "ServiceAccounts are the controller's"),
        ("list",   "", "pods", "", "",                           "Pods are the controller's"),
        ("get",    "", "serviceaccounts", "team-a", "default",   "ServiceAccounts are the controller's"),
        ("patch",  "", "serviceaccounts", "team-a", "default",   "writes nothing"),
        ("patch",  G,  IPSM,  "team-a", "m", "writes nothing"),
        ("patch",  G,  CIPSM, "",       "m", "writes nothing"),
        ("patch",  G,  "imagepullsecretmanagers/status",        "team-a", "m", "writes nothing"),
        ("patch",  G,  "clusterimagepullsecretmanagers/status", "",       "m", "writes nothing"),
        ("create", EVENTS, "events", "team-a", "",  "writes nothing"),
        ("patch",  EVENTS, "events", "team-a", "e", "writes nothing"),
        ("create", LEASES, "leases", NS, "",    "no leader election"),
        ("get",    LEASES, "leases", NS, LEASE, "no leader election"),
        ("patch",  LEASES, "leases", NS, LEASE, "no leader election"),
    ];

    /// Every call the controller makes (src/controller/).
    #[rustfmt::skip]
    const CONTROLLER_NEEDS: &[Row] = &[
        ("list",   G,  IPSM,  "", "", "managers (and the CRD probe)"),
        ("watch",  G,  IPSM,  "", "", "managers"),
        ("list",   G,  CIPSM, "", "", "cluster managers"),
        ("watch",  G,  CIPSM, "", "", "cluster managers"),
        ("patch",  G,  IPSM,  "team-a", "m", "add/remove the finalizer"),
        ("patch",  G,  CIPSM, "",       "m", "add/remove the finalizer"),
        ("patch",  G,  "imagepullsecretmanagers/status",        "team-a", "m", "status"),
        ("patch",  G,  "clusterimagepullsecretmanagers/status", "",       "m", "status"),
        ("list",   "", "namespaces", "", "", "namespaces (metadata)"),
        ("watch",  "", "namespaces", "", "", "namespaces (metadata)"),
        ("list",   "", "pods", "", "", "Pods labelled missing-secrets (metadata)"),
        ("watch",  "", "pods", "", "", "Pods labelled missing-secrets (metadata)"),
        ("list",   "", "secrets", "", "", "cheiron's Secrets, by label"),
        ("watch",  "", "secrets", "", "", "cheiron's Secrets, by label"),
        ("get",    "", "secrets", "team-b", "registry-token", "read a source by name"),
        ("list",   "", "secrets", "team-b", "", "watch a source by field selector"),
        ("watch",  "", "secrets", "team-b", "", "watch a source by field selector"),
        ("get",    "", "secrets", "team-a", "docker-hub", "its Secret, before writing"),
        ("create", "", "secrets", "team-a", "", "materialise a Secret"),
        ("update", "", "secrets", "team-a", "docker-hub", "replace its Secret"),
        ("delete", "", "secrets", "team-a", "docker-hub", "remove its Secret"),
        ("list",   "", "serviceaccounts", "", "", "ServiceAccounts reflector"),
        ("watch",  "", "serviceaccounts", "", "", "ServiceAccounts reflector"),
        ("get",    "", "serviceaccounts", "team-a", "default", "before patching"),
        ("patch",  "", "serviceaccounts", "team-a", "default", "backfill, clean up"),
        ("create", EVENTS, "events", "team-a",  "", "Event on a manager or ServiceAccount"),
        ("create", EVENTS, "events", "default", "", "Event on a cluster manager"),
        ("create", EVENTS, "events", "team-b",  "", "Event on a Pod whose pull secret is missing"),
        ("patch",  EVENTS, "events", "team-a",  "e", "a repeated Event"),
        ("create", LEASES, "leases", NS, "",    "leader election: the first replica"),
        ("get",    LEASES, "leases", NS, LEASE, "leader election"),
        ("patch",  LEASES, "leases", NS, LEASE, "leader election: renew, take over, release"),
        ("list",   "", "nodes", "", "", "mode Node: the Nodes' labels (metadata)"),
        ("watch",  "", "nodes", "", "", "mode Node: the Nodes' labels (metadata)"),
        ("list",   LEASES, "leases", NS, "", "mode Node: the node agents' report Leases"),
        ("watch",  LEASES, "leases", NS, "", "mode Node: the node agents' report Leases"),
    ];

    /// What the controller's identity must not do, though the webhook's may.
    #[rustfmt::skip]
    const CONTROLLER_MUST_NOT: &[Row] = &[
        ("get", "", "namespaces", "", "team-a", "namespaces come from the watch"),
    ];

    /// Broader things no identity of cheiron may do.
    #[rustfmt::skip]
    const NONE_MAY: &[Row] = &[
        ("delete", "", "namespaces", "", "team-a", "namespaces are read only"),
        ("patch",  "", "namespaces", "", "team-a", "namespaces are read only"),
        ("create", "", "namespaces", "", "",       "namespaces are read only"),
        ("patch",  "apps", "deployments", NS, "cheiron", "no workloads"),
        ("create", "", "pods",      "team-a", "",  "no workloads"),
        ("create", "", "pods/exec", "team-a", "p", "no workloads"),
        ("get",    "", "pods",      "team-a", "p", "Pods come from the watch"),
        ("patch",  "", "pods",      "team-a", "p", "Pods are only read"),
        ("delete", "", "pods",      "team-a", "p", "Pods are only read"),
        ("update", "apiextensions.k8s.io", "customresourcedefinitions", "", "imagepullsecretmanagers.cheiron.anny.co", "CRDs are installed by you"),
        ("escalate", RBAC, "clusterroles", "", "cheiron-controller", "no escalation"),
        ("bind",     RBAC, "clusterroles", "", "cheiron-controller", "no escalation"),
        ("bind",     RBAC, "clusterroles", "", "cluster-admin",      "no escalation"),
        ("create",   RBAC, "rolebindings", NS, "",                   "no escalation"),
        ("impersonate", "", "users", "", "admin", "no escalation"),
        ("create", "", "serviceaccounts/token", "team-a", "default", "never mints tokens"),
        ("create", "", "serviceaccounts/token", NS, "cheiron-controller", "never mints tokens"),
        ("get",    "", "secrets/status", "team-a", "docker-hub", "no Secret subresources"),
        ("deletecollection", "", "secrets", "team-a", "", "deletes its Secrets one by one"),
        ("patch",  "", "secrets", "team-a", "docker-hub", "replaces, never patches, Secrets"),
        ("create", "", "serviceaccounts", "team-a", "",        "only patches ServiceAccounts"),
        ("update", "", "serviceaccounts", "team-a", "default", "only patches ServiceAccounts"),
        ("delete", "", "serviceaccounts", "team-a", "default", "only patches ServiceAccounts"),
        ("create", G, IPSM,  "team-a", "",  "managers are written by users"),
        ("update", G, IPSM,  "team-a", "m", "managers are only patched (finalizer)"),
        ("update", G, "imagepullsecretmanagers/finalizers", "team-a", "m", "no blockOwnerDeletion"),
        ("delete", G, CIPSM, "",       "m", "managers are written by users"),
        ("get",    G, IPSM,  "team-a", "m", "managers come from the watch"),
        ("update", G, "clusterimagepullsecretmanagers/status", "", "m", "status is only patched"),
        ("get",    "", "configmaps", "team-a", "c", "nothing else is read"),
        ("get",    "", "nodes", "", "n", "Nodes come from the watch"),
        ("patch",  "", "nodes", "", "n", "Nodes are only read"),
        ("create", "", "events", "team-a", "", "Events only through events.k8s.io"),
        ("delete", EVENTS, "events", "team-a", "e", "Events are never deleted"),
        ("patch",  LEASES, "leases", "kube-system", "kube-controller-manager", "Leases only in its namespace"),
        ("create", LEASES, "leases", "team-a", "", "Leases only in its namespace"),
        ("patch",  LEASES, "leases", NS, "someone-else", "only its own Lease"),
        ("delete", LEASES, "leases", NS, LEASE, "the Lease is released by a patch"),
        ("patch",  ADMISSION, MWC, "", "cheiron", "caBundle is cheiron-certs' job"),
    ];

    /// Every call `cheiron-certs create` and `patch` make (certs-tool/src/).
    #[rustfmt::skip]
    const CERTS_NEED: &[Row] = &[
        ("create", "", "secrets", NS, "",               "create: store the certificate or its CA"),
        ("get",    "", "secrets", NS, "cheiron-tls",    "create: keep a valid one; patch: read ca.crt"),
        ("update", "", "secrets", NS, "cheiron-tls",    "create: re-issue"),
        ("get",    "", "secrets", NS, "cheiron-tls-ca", "create: reuse the CA"),
        ("update", "", "secrets", NS, "cheiron-tls-ca", "create: a new CA"),
        ("get",    ADMISSION, MWC, "", "cheiron", "patch: read caBundle"),
        ("patch",  ADMISSION, MWC, "", "cheiron", "patch: write caBundle"),
    ];

    /// Broader things `cheiron-certs` must not be able to do.
    #[rustfmt::skip]
    const CERTS_MUST_NOT: &[Row] = &[
        ("get",    "", "secrets", NS, "other", "only its two Secrets"),
        ("list",   "", "secrets", NS, "",      "only its two Secrets"),
        ("patch",  "", "secrets", NS, "cheiron-tls", "replaces, never patches"),
        ("delete", "", "secrets", NS, "cheiron-tls", "never deletes"),
        ("get",    "", "secrets", "team-a", "cheiron-tls", "only its namespace"),
        ("create", "", "secrets", "team-a", "",            "only its namespace"),
        ("patch",  ADMISSION, MWC, "", "someone-else", "only cheiron's configuration"),
        ("update", ADMISSION, MWC, "", "cheiron",      "patches, never replaces"),
        ("create", ADMISSION, MWC, "", "",             "only cheiron's configuration"),
        ("delete", ADMISSION, MWC, "", "cheiron",      "only cheiron's configuration"),
        ("patch",  ADMISSION, "validatingwebhookconfigurations", "", "cheiron", "only the mutating one"),
        ("list",   G, IPSM, "", "", "nothing of cheiron's own"),
    ];

    /// Asks the apiserver whether `user` (a ServiceAccount, with the groups it authenticates
    /// with) may do `row`.
    async fn allowed(client: &Client, user: &str, row: &Row) -> Result<bool> {
        let (verb, group, resource, namespace, name, _) = *row;
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_owned())),
            None => (resource, None),
        };
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.to_owned()),
                groups: Some(vec![
                    "system:serviceaccounts".to_owned(),
                    format!("system:serviceaccounts:{NAMESPACE}"),
                    "system:authenticated".to_owned(),
                ]),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.to_owned()),
                    group: Some(group.to_owned()),
                    resource: Some(resource.to_owned()),
                    subresource,
                    namespace: non_empty(namespace),
                    name: non_empty(name),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }

    /// Checks every row and reports all rows whose answer is not `expected` at once.
    async fn expect(client: &Client, user: &str, expected: bool, table: &[Row]) -> Result {
        let mut wrong = Vec::new();
        for row in table {
            if allowed(client, user, row).await? != expected {
                let (verb, group, resource, namespace, name, why) = row;
                wrong.push(format!(
                    "{verb} {group}/{resource} namespace={namespace:?} name={name:?}  ({why})"
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "{user} {}:\n  {}",
            if expected {
                "cannot make calls the code needs"
            } else {
                "can do more than it needs"
            },
            wrong.join("\n  ")
        );
        Ok(())
    }

    #[tokio::test]
    async fn webhook_service_account_can_make_every_call_the_webhook_makes() -> Result {
        let s = Scenario::new(CHEIRON, "install-rbac-webhook-can").await?;
        installed(s.client()).await?;
        expect(s.client(), WEBHOOK_USER, true, WEBHOOK_NEEDS).await
    }

    #[tokio::test]
    async fn webhook_service_account_can_read_no_secret_and_write_nothing() -> Result {
        let s = Scenario::new(CHEIRON, "install-rbac-webhook-cannot").await?;
        installed(s.client()).await?;
        expect(s.client(), WEBHOOK_USER, false, WEBHOOK_MUST_NOT).await?;
        expect(s.client(), WEBHOOK_USER, false, NONE_MAY).await
    }

    #[tokio::test]
    async fn controller_service_account_can_make_every_call_the_controller_makes() -> Result {
        let s = Scenario::new(CHEIRON, "install-rbac-controller-can").await?;
        installed(s.client()).await?;
        expect(s.client(), CONTROLLER_USER, true, CONTROLLER_NEEDS).await
    }

    #[tokio::test]
    async fn controller_service_account_cannot_do_more_than_the_controller_needs() -> Result {
        let s = Scenario::new(CHEIRON, "install-rbac-controller-cannot").await?;
        installed(s.client()).await?;
        expect(s.client(), CONTROLLER_USER, false, CONTROLLER_MUST_NOT).await?;
        expect(s.client(), CONTROLLER_USER, false, NONE_MAY).await
    }

    #[tokio::test]
    async fn combined_service_account_can_make_every_call_of_webhook_and_controller() -> Result {
        let s = Scenario::new(CHEIRON, "install-rbac-can").await?;
        installed(s.client()).await?;
        expect(s.client(), CHEIRON_USER, true, WEBHOOK_NEEDS).await?;
        expect(s.client(), CHEIRON_USER, true, CONTROLLER_NEEDS).await
    }

    #[tokio::test]
    async fn combined_service_account_cannot_do_more_than_webhook_and_controller_need() -> Result {
        let s = Scenario::new(CHEIRON, "install-rbac-cannot").await?;
        installed(s.client()).await?;
        expect(s.client(), CHEIRON_USER, false, NONE_MAY).await
    }

    #[tokio::test]
    async fn certificate_job_can_write_only_its_secrets_and_webhook_configuration() -> Result {
        let s = Scenario::new(CHEIRON, "install-rbac-certs").await?;
        installed(s.client()).await?;
        expect(s.client(), CERTS_USER, true, CERTS_NEED).await?;
        expect(s.client(), CERTS_USER, false, CERTS_MUST_NOT).await
    }

    #[tokio::test]
    async fn controller_mints_tokens_only_of_the_service_accounts_and_namespaces_listed() -> Result
    {
        let s = Scenario::new(CHEIRON, "install-rbac-tokens").await?;
        installed(s.client()).await?;
        // Rows are 'static: leak the two names (once per test run).
        let tenant: &'static str = Box::leak(s.create_namespace(&[], &[]).await?.into_boxed_str());
        let other: &'static str = Box::leak(s.create_namespace(&[], &[]).await?.into_boxed_str());
        let install = cheiron::install::Install {
            credential_providers: Some(super::chart::credential_provider_setup(tenant)),
            ..cheiron::install::Install::default()
        };
        for mode in cheiron::install::DeploymentMode::ALL {
            let objects = install.server_objects_for(mode)?;
            dry_run_all(
                s.client(),
                "cheiron manifests with credential providers",
                &objects,
            )
            .await?;
        }
        let objects = install.server_objects()?;
        let tokens: Vec<&Value> = objects
            .iter()
            .filter(|o| o["metadata"]["name"] == "cheiron-credential-provider-tokens")
            .collect();
        assert_eq!(
            tokens.len(),
            4,
            "a Role and a RoleBinding in each namespace"
        );
        for object in tokens {
            apply(s.client(), object, true).await?;
        }
        let mint = |namespace: &'static str, name: &'static str| -> Row {
            (
                "create",
                "",
                "serviceaccounts/token",
                namespace,
                name,
                "a KEP-4412 provider's token",
            )
        };
        until(
            "the authorizer to see the token Roles",
            Duration::from_secs(20),
            || async {
                allowed(s.client(), CONTROLLER_USER, &mint(NS, "ecr-puller"))
                    .await
                    .ok()
                    .filter(|a| *a)
            },
        )
        .await?;
        expect(
            s.client(),
            CONTROLLER_USER,
            true,
            &[
                mint(NS, "ecr-puller"),
                mint(tenant, "default"),
                mint(tenant, "builder"),
            ],
        )
        .await?;
        expect(
            s.client(),
            CONTROLLER_USER,
            false,
            &[
                mint(NS, "cheiron-controller"),
                mint(NS, "cheiron-certs"),
                mint(NS, "cheiron-webhook"),
                mint(other, "ecr-puller"),
                mint(other, "default"),
                mint("kube-system", "ecr-puller"),
                (
                    "get",
                    "",
                    "serviceaccounts/token",
                    NS,
                    "ecr-puller",
                    "only create",
                ),
                ("create", "", "serviceaccounts", tenant, "", "only tokens"),
            ],
        )
        .await?;
        expect(
            s.client(),
            WEBHOOK_USER,
            false,
            &[mint(NS, "ecr-puller"), mint(tenant, "default")],
        )
        .await
    }

    /// A child process killed when the test ends, however it ends.
    struct Running(std::process::Child);

    impl Drop for Running {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A kubeconfig for the apiserver of `config` with a token of `service_account` in
    /// cheiron's namespace.
    async fn service_account_kubeconfig(
        client: &Client,
        config: &kube::Config,
        service_account: &str,
        path: &Path,
    ) -> Result {
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![],
                expiration_seconds: Some(3600),
                bound_object_ref: None,
            },
            ..TokenRequest::default()
        };
        let token = Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
            .create_token_request(service_account, &PostParams::default(), &request)
            .await?
            .status
            .map(|s| s.token)
            .ok_or("the TokenRequest returned no token")?;
        let engine = base64::engine::general_purpose::STANDARD;
        let mut ca = String::new();
        for der in config.root_cert.iter().flatten() {
            ca.push_str("-----BEGIN CERTIFICATE-----\n");
            let encoded = engine.encode(der);
            for line in encoded.as_bytes().chunks(64) {
                ca.push_str(&String::from_utf8_lossy(line));
                ca.push('\n');
            }
            ca.push_str("-----END CERTIFICATE-----\n");
        }
        std::fs::write(
            path,
            format!(
                "apiVersion: v1\nkind: Config\n\
                 clusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\n\
                 users:\n- name: u\n  user:\n    token: {token}\n\
                 contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
                 current-context: c\n",
                config.cluster_url,
                engine.encode(ca)
            ),
        )?;
        Ok(())
    }

    #[tokio::test]
    async fn cheiron_certs_create_and_patch_work_with_only_their_rbac() -> Result {
        use cheiron_certs::{
            CreateRequest, Created, PatchRequest, Patched, ServingNames, Validity,
        };

        let s = Scenario::new(CHEIRON, "install-certs").await?;
        installed(s.client()).await?;
        // The plain manifests' webhook configuration, for real, but selecting no namespace:
        // nothing serves it in this cluster.
        let mut registration =
            find(&plain_objects()?, "MutatingWebhookConfiguration", "cheiron")?.clone();
        registration["webhooks"][0]["namespaceSelector"] =
            serde_json::json!({"matchLabels": {"install.cheiron.anny.co/never": "true"}});
        apply(s.client(), &registration, true).await?;

        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("cheiron-certs.kubeconfig");
        service_account_kubeconfig(
            s.client(),
            &s.cluster()?.admin_config(),
            "cheiron-certs",
            &kubeconfig,
        )
        .await?;
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig)?,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        let certs = Client::try_from(config)?;

        // The plain Job's arguments, through the library `cheiron-certs` runs.
        let create = CreateRequest {
            names: ServingNames::new("cheiron", NAMESPACE, &[], &[])?,
            secret_name: "cheiron-tls".to_owned(),
            validity: Validity::default(),
        };
        let patch = PatchRequest {
            webhook_name: "cheiron".to_owned(),
            secret_name: "cheiron-tls".to_owned(),
            namespace: NAMESPACE.to_owned(),
        };
        let first = cheiron_certs::create(&certs, &create).await?;
        assert!(matches!(first, Created::Issued { .. }), "{first}");
        let second = cheiron_certs::create(&certs, &create).await?;
        assert!(matches!(second, Created::Kept { .. }), "{second}");
        let patched = cheiron_certs::patch(&certs, &patch).await?;
        assert!(matches!(patched, Patched::Updated { .. }), "{patched:?}");
        let again = cheiron_certs::patch(&certs, &patch).await?;
        assert!(matches!(again, Patched::Unchanged { .. }), "{again:?}");

        let secret = Api::<Secret>::namespaced(s.client().clone(), NAMESPACE)
            .get("cheiron-tls")
            .await?;
        assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
        let data = secret.data.unwrap_or_default();
        for key in ["tls.crt", "tls.key", "ca.crt"] {
            assert!(data.contains_key(key), "cheiron-tls lacks {key}");
        }
        let ca = String::from_utf8_lossy(&data["ca.crt"].0).into_owned();
        let ca_body = ca.lines().nth(1).unwrap_or_default();
        let stored =
            Api::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>::all(
                s.client().clone(),
            )
            .get("cheiron")
            .await?;
        let bundle = stored
            .webhooks
            .unwrap_or_default()
            .first()
            .and_then(|w| w.client_config.ca_bundle.clone())
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default();
        assert!(
            !ca_body.is_empty() && bundle.contains(ca_body),
            "caBundle does not hold ca.crt:\n{bundle}"
        );
        Ok(())
    }

    /// Held by a test while its process may hold the controller's Lease: the generated Role
    /// allows one Lease name only, so two controllers under test would take turns, and one test
    /// could pass on the other's work.
    static LEASE_HOLDER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
        let (_cheiron, log) =
            start_as(&s, dir.path(), "cheiron", "install-run", &args, admin).await?;
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
        // release of its own (the plain manifests' objects exist in this cluster).
        let s = Scenario::new(CHEIRON, "install-notes").await?;
        let kubeconfig = s.cluster()?.dir.join("admin.kubeconfig");
        if !kubeconfig.is_file() {
            return Err(format!("no admin kubeconfig at {}", kubeconfig.display()).into());
        }
        let dir = tempfile::tempdir()?;
        let output = Command::new(helm()?)
            .args([
                "install",
                "notes",
                "charts/cheiron",
                "--namespace",
                "notes",
                "--dry-run=client",
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
        ] {
            assert!(
                notes.contains(needle),
                "NOTES.txt lacks {needle:?}:\n{notes}"
            );
        }
        Ok(())
    }
}

/// The chart's opt-in PrometheusRule: `promtool` accepts it and its unit tests
/// (`tests/alerts/rules_test.yaml`) pass, and every metric its expressions use is one a
/// running cheiron exports.
mod alerts {
    use std::{collections::BTreeSet, time::Duration};

    use super::*;

    /// `promtool` from `CHEIRON_PROMTOOL` or the PATH (Debian's `prometheus` package, which
    /// `.ci/run` installs), or an error saying how to get it.
    fn promtool() -> Result<PathBuf> {
        let path = std::env::var_os("CHEIRON_PROMTOOL")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("promtool"));
        match Command::new(&path).arg("--version").output() {
            Ok(out) if out.status.success() => Ok(path),
            _ => Err(format!(
                "these tests need promtool ({} did not run): install Debian's prometheus \
                 package (`apt-get install --no-install-recommends prometheus`, as .ci/run does) \
                 or set CHEIRON_PROMTOOL to a promtool executable",
                path.display()
            )
            .into()),
        }
    }

    /// The rule groups the chart renders with the alerts switched on.
    fn rendered_groups() -> Result<Value> {
        let objects = render(&["prometheusRule.enabled=true"])?;
        let rule = find(&objects, "PrometheusRule", RELEASE)?;
        Ok(serde_json::json!({ "groups": rule["spec"]["groups"] }))
    }

    fn run(command: &mut Command) -> Result<String> {
        let out = command.output()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            return Err(format!("{command:?} failed:\n{text}").into());
        }
        Ok(text)
    }

    #[test]
    fn the_rendered_rules_pass_promtool_check_and_their_unit_tests() -> Result {
        let promtool = promtool()?;
        let dir = tempfile::tempdir()?;
        // JSON is YAML: promtool reads the rendered groups as they are.
        std::fs::write(
            dir.path().join("rules.yaml"),
            serde_json::to_vec(&rendered_groups()?)?,
        )?;
        std::fs::copy(
            repo().join("tests/alerts/rules_test.yaml"),
            dir.path().join("rules_test.yaml"),
        )?;
        let checked = run(Command::new(&promtool)
            .args(["check", "rules", "rules.yaml"])
            .current_dir(dir.path()))?;
        assert!(checked.contains("SUCCESS: 9 rules found"), "{checked}");
        let tested = run(Command::new(&promtool)
            .args(["test", "rules", "rules_test.yaml"])
            .current_dir(dir.path()))?;
        assert!(tested.contains("SUCCESS"), "{tested}");
        Ok(())
    }

    /// The `cheiron_…` names an expression uses.
    fn metric_names(groups: &Value) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for rule in groups["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        {
            let expr = rule["expr"].as_str().unwrap_or_default();
            for (start, _) in expr.match_indices("cheiron_") {
                let name: String = expr[start..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                names.insert(name);
            }
        }
        names
    }

    #[tokio::test]
    async fn every_metric_the_alerts_use_is_one_a_running_cheiron_exports() -> Result {
        let used = metric_names(&rendered_groups()?);
        assert!(
            used.len() >= 8,
            "too few metrics found in the rules: {used:?}"
        );

        // A webhook serving the bundled example managers; one review and one garbage body,
        // so the admission series exist as they do in any cluster.
        let dir = tempfile::tempdir()?;
        let certificates = harness::WebhookCertificates::generate(&dir.path().join("tls"))?;
        let from = repo().join("examples/cluster");
        let from = from.to_str().ok_or("non-UTF-8 repository path")?;
        let mut webhook = harness::WebhookProcess::start_with_args(
            CHEIRON,
            "alerts-webhook",
            &dir.path().join("no-kubeconfig"),
            &certificates.dir,
            &dir.path().join("webhook.log"),
            &["--from", from],
        )?;
        webhook
            .wait_for_admin_status("/readyz", 200, Duration::from_secs(30))
            .await?;
        let https = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(
                certificates.ca_pem.as_bytes(),
            )?)
            .build()?;
        let answered = https
            .post(webhook.url())
            .json(&harness::review::pod_review())
            .send()
            .await?;
        assert_eq!(answered.status(), 200);
        let refused = https
            .post(webhook.url())
            .header("content-type", "application/json")
            .body("not a review")
            .send()
            .await?;
        assert_eq!(refused.status(), 400);

        let scrape = reqwest::get(format!("http://{}/metrics", webhook.admin_address()))
            .await?
            .text()
            .await?;
        let exported: BTreeSet<String> = scrape
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .map(str::to_owned)
            .collect();
        let missing: Vec<&String> = used.difference(&exported).collect();
        assert!(
            missing.is_empty(),
            "the alert rules use metrics cheiron does not export: {missing:?}\nexported: {exported:?}"
        );
        Ok(())
    }
}

mod node_agent {
    //! The chart's opt-in node agent (docs/node.md): nothing by default; when enabled, a
    //! DaemonSet with the agent's flags and host paths, and RBAC that reads Secrets only in the
    //! node namespace (the node credentials the controller writes there).

    use super::*;

    const NAME: &str = "cheiron-node-agent";
    /// The node namespace of a release in [`NAMESPACE`].
    const NODE_NAMESPACE: &str = "cheiron-system-node";

    /// `cheiron manifests --node` renders what the chart's `node.enabled=true` does: the same
    /// RBAC, object for object, and the same DaemonSet, in both deployment modes; without
    /// `--node`, nothing of the agent (the committed webhook-config/ is checked for that by the
    /// drift tests).
    #[test]
    fn manifests_node_renders_the_charts_node_agent_in_both_modes() -> Result {
        use cheiron::install::{DeploymentMode, Install, NodeAgentSetup};

        use super::chart::{access, named};

        use cheiron::install::MetricsAuth;

        for (metrics_auth, values) in [
            (MetricsAuth::None, vec!["node.enabled=true"]),
            (
                MetricsAuth::Kubernetes,
                vec!["node.enabled=true", "metrics.auth=kubernetes"],
            ),
        ] {
            let install = Install {
                metrics_auth,
                node_agent: Some(NodeAgentSetup { namespace: None }),
                ..Install::default()
            };
            for (mode, extra) in [
                (DeploymentMode::Split, None),
                (DeploymentMode::Combined, Some("deployment=combined")),
            ] {
                let plain = [
                    install.server_objects_for(mode)?,
                    install.certificate_objects()?,
                ]
                .concat();
                let values: Vec<&str> = values.iter().copied().chain(extra).collect();
                let chart = render(&values)?;
                let (p, c) = (access(&plain), access(&chart));
                assert_eq!(
                    p, c,
                    "{mode} {values:?}: charts/cheiron/templates/node-agent.yaml has drifted \
                     from src/install/node_agent.rs"
                );
                assert!(
                    p.iter().any(|(kind, name, _)| kind == "RoleBinding"
                        && name.ends_with("/cheiron-node-agent-report")),
                    "{p:#?}"
                );
                assert_eq!(
                    named(&plain, "ServiceAccount"),
                    named(&chart, "ServiceAccount")
                );
                let (pd, cd) = (
                    find(&plain, "DaemonSet", NAME)?,
                    find(&chart, "DaemonSet", NAME)?,
                );
                for part in ["selector", "updateStrategy"] {
                    assert_eq!(pd["spec"][part], cd["spec"][part], "{mode}: {part}");
                }
                assert_eq!(
                    pd["spec"]["template"]["spec"], cd["spec"]["template"]["spec"],
                    "{mode}: the chart's node agent Pod spec has drifted from \
                     src/install/node_agent.rs"
                );
                assert_eq!(pd["metadata"]["namespace"], NODE_NAMESPACE, "{mode}");
                assert_eq!(cd["metadata"]["namespace"], NODE_NAMESPACE, "{mode}");
                // The policy holding each agent to its own report, its NetworkPolicy, its
                // namespace's Pod Security level, and the controller's --node-namespace.
                for (kind, name) in [
                    ("ValidatingAdmissionPolicy", "cheiron-node-agent-report"),
                    (
                        "ValidatingAdmissionPolicyBinding",
                        "cheiron-node-agent-report",
                    ),
                    ("NetworkPolicy", NAME),
                ] {
                    let (p, c) = (find(&plain, kind, name)?, find(&chart, kind, name)?);
                    assert_eq!(p["spec"], c["spec"], "{mode}: {kind} {name}");
                    assert_eq!(p["metadata"]["namespace"], c["metadata"]["namespace"]);
                }
                let (pn, cn) = (
                    find(&plain, "Namespace", NODE_NAMESPACE)?,
                    find(&chart, "Namespace", NODE_NAMESPACE)?,
                );
                for level in ["enforce", "audit", "warn"] {
                    let key = format!("pod-security.kubernetes.io/{level}");
                    assert_eq!(pn["metadata"]["labels"][&key], "privileged");
                    assert_eq!(cn["metadata"]["labels"][&key], "privileged");
                }
                for name in named(&plain, "Deployment") {
                    let (p, c) = (
                        find(&plain, "Deployment", &name)?,
                        find(&chart, "Deployment", &name)?,
                    );
                    let args = &p["spec"]["template"]["spec"]["containers"][0]["args"];
                    assert_eq!(
                        args, &c["spec"]["template"]["spec"]["containers"][0]["args"],
                        "{mode}: {name}"
                    );
                    let runs_controller = args
                        .as_array()
                        .is_some_and(|a| a.iter().any(|x| x == "controller" || x == "run"));
                    if runs_controller {
                        let expected = format!("--node-namespace={NODE_NAMESPACE}");
                        assert!(
                            args.as_array()
                                .is_some_and(|a| a.iter().any(|x| *x == *expected)),
                            "{mode}: {args}"
                        );
                    }
                }
                let namespaces: Vec<&str> = plain
                    .iter()
                    .filter(|o| o["kind"] == "Role" && o["metadata"]["name"] == NAME)
                    .filter_map(|o| o["metadata"]["namespace"].as_str())
                    .collect();
                assert_eq!(namespaces, [NODE_NAMESPACE], "{mode}");
            }
        }
        let plain = plain_objects()?;
        assert!(
            !plain.iter().any(|o| o["metadata"]["name"] == NAME
                || o["metadata"]["name"] == "cheiron-node-agent-report"),
            "the default plain manifests hold no node agent"
        );
        Ok(())
    }

    #[test]
    fn the_node_agent_is_off_by_default() -> Result {
        let objects = render(&[])?;
        let named: Vec<String> = objects
            .iter()
            .filter(|o| o["metadata"]["name"] == NAME)
            .map(|o| o["kind"].to_string())
            .collect();
        assert!(named.is_empty(), "{named:?}");
        Ok(())
    }

    #[test]
    fn enabled_it_runs_everywhere_with_its_paths_and_reads_only_its_node_namespace() -> Result {
        let objects = render(&[
            "node.enabled=true",
            "node.kubeletConfigJson=/var/lib/kubelet/config.json",
            "node.credentialProvider.install=true",
        ])?;
        let daemon_set = find(&objects, "DaemonSet", NAME)?;
        let pod = &daemon_set["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let args: Vec<&str> = container["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(args[0], "node-agent");
        for expected in [
            "--credentials-file=/var/lib/cheiron/credentials.json",
            "--kubelet-config-json=/var/lib/kubelet/config.json",
        ] {
            assert!(args.contains(&expected), "{expected} not in {args:?}");
        }
        // The plugin the kubelet runs as root: installed by the init container, which then
        // exits; the agent mounts its directory read-only (over the writable state directory).
        assert!(!args.iter().any(|a| a.starts_with("--install")), "{args:?}");
        let init = &pod["initContainers"][0];
        let init_args: Vec<&str> = init["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for expected in [
            "node-agent",
            "--install-only",
            "--install-bin-dir=/var/lib/cheiron/bin",
            "--install-provider-config=/var/lib/cheiron/credential-provider-config.yaml",
        ] {
            assert!(
                init_args.contains(&expected),
                "{expected} not in {init_args:?}"
            );
        }
        let plugin_mounts: Vec<&Value> = container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["mountPath"] == "/var/lib/cheiron/bin")
            .collect();
        assert_eq!(plugin_mounts.len(), 1, "{}", container["volumeMounts"]);
        assert_eq!(plugin_mounts[0]["readOnly"], true);
        assert_eq!(
            container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
            "spec.nodeName"
        );
        assert_eq!(
            container["ports"][0]["containerPort"], 8080,
            "the agent's /metrics"
        );
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(
            container["securityContext"]["capabilities"]["drop"][0],
            "ALL"
        );
        // Host paths: the state directory and the kubelet's, each once, nothing else.
        let host_paths: Vec<&str> = pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["hostPath"]["path"].as_str())
            .collect();
        assert_eq!(
            host_paths,
            [
                "/var/lib/cheiron",
                "/var/lib/kubelet",
                "/var/lib/cheiron/bin",
                "/var/lib/cheiron"
            ]
        );
        assert_eq!(pod["tolerations"][0]["operator"], "Exists");

        // Secrets: read only, in the node namespace only (the node credentials).
        let secret_rules: Vec<(&str, &Value)> = objects
            .iter()
            .filter(|o| matches!(o["kind"].as_str(), Some("Role" | "ClusterRole")))
            .filter(|o| o["metadata"]["name"] == NAME)
            .flat_map(|o| {
                let namespace = o["metadata"]["namespace"].as_str().unwrap_or("<cluster>");
                o["rules"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|r| {
                        r["resources"]
                            .as_array()
                            .is_some_and(|rs| rs.iter().any(|x| x == "secrets"))
                    })
                    .map(move |r| (namespace, &r["verbs"]))
            })
            .collect();
        assert_eq!(
            secret_rules,
            [(NODE_NAMESPACE, &serde_json::json!(["get", "list", "watch"]))]
        );
        let binding = find(&objects, "RoleBinding", NAME)?;
        assert_eq!(binding["metadata"]["namespace"], NODE_NAMESPACE);
        assert_eq!(binding["subjects"][0]["name"], NAME);

        // Its report Lease in the node namespace; no write on any manager; nothing of the agent
        // in the release namespace (its CA key, the controller's leader Lease).
        let report = find(&objects, "Role", &format!("{NAME}-report"))?;
        assert_eq!(report["metadata"]["namespace"], NODE_NAMESPACE);
        let in_release: Vec<String> = objects
            .iter()
            .filter(|o| o["metadata"]["labels"]["app.kubernetes.io/component"] == "node-agent")
            .filter(|o| o["metadata"]["namespace"] == NAMESPACE)
            .map(|o| format!("{} {}", o["kind"], o["metadata"]["name"]))
            .collect();
        assert!(in_release.is_empty(), "{in_release:?}");
        assert_eq!(
            report["rules"],
            serde_json::json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "patch"]}])
        );
        let cluster = find(&objects, "ClusterRole", NAME)?;
        let writes: Vec<&Value> = cluster["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r["verbs"].as_array().into_iter().flatten())
            .filter(|v| !matches!(v.as_str(), Some("get" | "list" | "watch")))
            .collect();
        assert!(
            writes.is_empty(),
            "the agent writes no cluster-wide object: {writes:?}"
        );
        // It reads no manager: a cluster manager may hold an inline password.
        let cluster_resources: Vec<&Value> = cluster["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r["resources"].as_array().into_iter().flatten())
            .collect();
        assert_eq!(cluster_resources, [&serde_json::json!("nodes")]);
        assert_eq!(
            container["env"][1]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.namespace"
        );
        Ok(())
    }
}
