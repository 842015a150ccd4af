//! Installing cheiron: the plain manifests of `webhook-config/` and the Helm chart of
//! `charts/cheiron/`.
//!
//! - `drift`: the committed files are what the program generates.
//! - `chart`: `helm lint --strict` passes, `helm template` renders every certificate option,
//!   and what the chart renders is what the plain manifests hold (webhook registration, RBAC,
//!   Deployment), so the two cannot drift apart; invalid values are refused.
//! - `cluster`: on a real kube-apiserver (the e2e harness, its own control plane for this
//!   binary), both apply cleanly in a server-side dry run, their Pods meet the restricted Pod
//!   Security Standard, SubjectAccessReviews show the ServiceAccounts can make every call the
//!   code makes and nothing broader, and `cheiron run` does its job under exactly that RBAC.
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
use serde::Deserialize;
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
    let mut out = Vec::new();
    for document in serde_yaml::Deserializer::from_slice(text) {
        let value = Value::deserialize(document)?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
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
            serde_yaml::from_slice(&std::fs::read(repo().join("charts/cheiron/Chart.yaml"))?)?;
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
    fn helm_lint_strict_passes_for_every_certificate_source() -> Result {
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
            vec!["leaderElection.enabled=false", "replicaCount=1"],
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

    #[test]
    fn default_values_render_cheiron_with_hook_jobs_for_its_certificate() -> Result {
        let objects = render(&[])?;
        let deployment = find(&objects, "Deployment", "cheiron")?;
        assert_eq!(deployment["spec"]["replicas"], 2);
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
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
            pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
                [0]["podAffinityTerm"]["topologyKey"],
            "kubernetes.io/hostname"
        );
        find(&objects, "PodDisruptionBudget", "cheiron")?;
        find(&objects, "Service", "cheiron")?;
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
        let deployment = find(&objects, "Deployment", "cheiron")?;
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

    /// Every Role and ClusterRole (and binding) of both, by kind and name.
    fn access(objects: &[Value]) -> Vec<(String, String, Value)> {
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
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    what,
                )
            })
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    #[test]
    fn chart_rbac_is_the_plain_manifests_rbac() -> Result {
        let plain = access(&plain_objects()?);
        let chart = access(&render(&[])?);
        assert_eq!(plain.len(), 10, "{plain:#?}");
        for (p, c) in plain.iter().zip(&chart) {
            assert_eq!(
                p, c,
                "charts/cheiron/templates/{{rbac,certs-jobs}}.yaml has drifted from \
                 src/install/rbac.rs (webhook-config/)"
            );
        }
        assert_eq!(plain.len(), chart.len(), "{chart:#?}");
        Ok(())
    }

    #[test]
    fn chart_runs_cheiron_exactly_like_the_plain_manifests() -> Result {
        let plain = plain_objects()?;
        let chart = render(&[])?;
        let plain_deployment = find(&plain, "Deployment", "cheiron")?;
        let chart_deployment = find(&chart, "Deployment", "cheiron")?;
        for part in ["replicas", "strategy"] {
            assert_eq!(
                plain_deployment["spec"][part], chart_deployment["spec"][part],
                "{part}"
            );
        }
        assert_eq!(
            plain_deployment["spec"]["template"]["spec"],
            chart_deployment["spec"]["template"]["spec"],
            "the chart's Pod spec has drifted from src/install/workload.rs"
        );
        for kind in ["Service", "PodDisruptionBudget"] {
            assert_eq!(
                find(&plain, kind, "cheiron")?["spec"],
                find(&chart, kind, "cheiron")?["spec"],
                "{kind}"
            );
        }
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
    fn leader_election_off_runs_one_replica_without_a_lease() -> Result {
        let objects = render(&["leaderElection.enabled=false", "replicaCount=1"])?;
        let args = &find(&objects, "Deployment", "cheiron")?["spec"]["template"]["spec"]["containers"]
            [0]["args"];
        let args: Vec<&str> = args
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        assert!(args.contains(&"--no-leader-election"), "{args:?}");
        assert!(!args.contains(&"--leader-election"), "{args:?}");
        assert!(
            !objects
                .iter()
                .any(|o| o["kind"] == "Role" && o["metadata"]["name"] == "cheiron-leader-election")
        );
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
                "set replicaCount to 1",
            ),
            (
                vec!["terminationGracePeriodSeconds=5"],
                "longer than shutdownDelaySeconds",
            ),
            (
                vec!["certificates.source=secret"],
                "needs certificates.secretName",
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

    /// Once per binary: cheiron's namespace, ServiceAccounts and RBAC from the plain manifests,
    /// applied for real (Deployment, Service, Job and webhook configuration stay dry-run
    /// only), and the authorizer seen to use them.
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
                let objects = plain_objects().map_err(|e| e.to_string())?;
                for object in objects
                    .iter()
                    .filter(|o| persisted.contains(&o["kind"].as_str().unwrap_or_default()))
                {
                    apply(client, object, true)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                let probe: Row = ("list", "", "secrets", "", "", "probe");
                until(
                    "the authorizer to see cheiron's RBAC",
                    Duration::from_secs(20),
                    || async {
                        allowed(client, CHEIRON_USER, &probe)
                            .await
                            .ok()
                            .filter(|a| *a)
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
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
        let applied = dry_run_all(s.client(), "webhook-config/crds.yaml", &crds).await?
            + dry_run_all(s.client(), "webhook-config/", &objects).await?;
        assert_eq!(applied, crds.len() + objects.len());
        assert!(applied >= 20, "{}", describe(&objects));
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

        let plain = plain_objects()?;
        let chart = render(&[])?;
        let templates = [
            (
                "plain Deployment",
                &find(&plain, "Deployment", "cheiron")?["spec"]["template"],
            ),
            (
                "plain Job",
                &find(&plain, "Job", "cheiron-certs")?["spec"]["template"],
            ),
            (
                "chart Deployment",
                &find(&chart, "Deployment", "cheiron")?["spec"]["template"],
            ),
            (
                "chart create Job",
                &find(&chart, "Job", "cheiron-certs-create")?["spec"]["template"],
            ),
            (
                "chart patch Job",
                &find(&chart, "Job", "cheiron-certs-patch")?["spec"]["template"],
            ),
        ];
        for (what, template) in templates {
            let pod = pod_of(template, "cheiron-pss")?;
            pods.create(&dry_run, &pod)
                .await
                .map_err(|e| format!("{what}: {e}"))?;
        }
        Ok(())
    }

    const CHEIRON_USER: &str = "system:serviceaccount:cheiron-system:cheiron";
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

    /// Every call the code makes, as `cheiron` (webhook and controller share one
    /// ServiceAccount, since `cheiron run` is both).
    #[rustfmt::skip]
    const CHEIRON_NEEDS: &[Row] = &[
        // The webhook (src/source/cluster.rs).
        ("list",   G,  IPSM,         "", "", "webhook: managers reflector (and the CRD probe)"),
        ("watch",  G,  IPSM,         "", "", "webhook: managers reflector"),
        ("list",   G,  CIPSM,        "", "", "webhook: cluster managers reflector"),
        ("watch",  G,  CIPSM,        "", "", "webhook: cluster managers reflector"),
        ("list",   "", "namespaces", "", "", "webhook + controller: namespaces (metadata)"),
        ("watch",  "", "namespaces", "", "", "webhook + controller: namespaces (metadata)"),
        ("get",    "", "namespaces", "", "team-a", "webhook: a namespace its cache has not seen yet"),
        ("list",   "", "secrets",    "", "", "webhook + controller: cheiron's Secrets, by label"),
        ("watch",  "", "secrets",    "", "", "webhook + controller: cheiron's Secrets, by label"),
        // The controller (src/controller/).
        ("patch",  G,  IPSM,  "team-a", "m", "controller: add/remove the finalizer"),
        ("patch",  G,  CIPSM, "",       "m", "controller: add/remove the finalizer"),
        ("patch",  G,  "imagepullsecretmanagers/status",        "team-a", "m", "controller: status"),
        ("patch",  G,  "clusterimagepullsecretmanagers/status", "",       "m", "controller: status"),
        ("get",    "", "secrets", "team-b", "registry-token", "controller: read a source by name"),
        ("list",   "", "secrets", "team-b", "", "controller: watch a source by field selector"),
        ("watch",  "", "secrets", "team-b", "", "controller: watch a source by field selector"),
        ("get",    "", "secrets", "team-a", "docker-hub", "controller: its Secret, before writing"),
        ("create", "", "secrets", "team-a", "", "controller: materialise a Secret"),
        ("update", "", "secrets", "team-a", "docker-hub", "controller: replace its Secret"),
        ("delete", "", "secrets", "team-a", "docker-hub", "controller: remove its Secret"),
        ("list",   "", "serviceaccounts", "", "", "controller: ServiceAccounts reflector"),
        ("watch",  "", "serviceaccounts", "", "", "controller: ServiceAccounts reflector"),
        ("get",    "", "serviceaccounts", "team-a", "default", "controller: before patching"),
        ("patch",  "", "serviceaccounts", "team-a", "default", "controller: backfill, clean up"),
        ("create", EVENTS, "events", "team-a",  "", "controller: Event on a manager or ServiceAccount"),
        ("create", EVENTS, "events", "default", "", "controller: Event on a cluster manager"),
        ("patch",  EVENTS, "events", "team-a",  "e", "controller: a repeated Event"),
        ("create", LEASES, "leases", NS, "",    "leader election: the first replica"),
        ("get",    LEASES, "leases", NS, LEASE, "leader election"),
        ("patch",  LEASES, "leases", NS, LEASE, "leader election: renew, take over, release"),
    ];

    /// Broader things `cheiron` must not be able to do.
    #[rustfmt::skip]
    const CHEIRON_MUST_NOT: &[Row] = &[
        ("delete", "", "namespaces", "", "team-a", "namespaces are read only"),
        ("patch",  "", "namespaces", "", "team-a", "namespaces are read only"),
        ("create", "", "namespaces", "", "",       "namespaces are read only"),
        ("patch",  "apps", "deployments", NS, "cheiron", "no workloads"),
        ("create", "", "pods",      "team-a", "",  "no workloads"),
        ("create", "", "pods/exec", "team-a", "p", "no workloads"),
        ("update", "apiextensions.k8s.io", "customresourcedefinitions", "", "imagepullsecretmanagers.cheiron.anny.co", "CRDs are installed by you"),
        ("escalate", RBAC, "clusterroles", "", "cheiron-controller", "no escalation"),
        ("bind",     RBAC, "clusterroles", "", "cluster-admin",      "no escalation"),
        ("create",   RBAC, "rolebindings", NS, "",                   "no escalation"),
        ("impersonate", "", "users", "", "admin", "no escalation"),
        ("create", "", "serviceaccounts/token", "team-a", "default", "never mints tokens"),
        ("get",    "", "secrets/status", "team-a", "docker-hub", "no Secret subresources"),
        ("deletecollection", "", "secrets", "team-a", "", "deletes its Secrets one by one"),
        ("patch",  "", "secrets", "team-a", "docker-hub", "replaces, never patches, Secrets"),
        ("create", "", "serviceaccounts", "team-a", "",        "only patches ServiceAccounts"),
        ("update", "", "serviceaccounts", "team-a", "default", "only patches ServiceAccounts"),
        ("delete", "", "serviceaccounts", "team-a", "default", "only patches ServiceAccounts"),
        ("create", G, IPSM,  "team-a", "",  "managers are written by users"),
        ("update", G, IPSM,  "team-a", "m", "managers are only patched (finalizer)"),
        ("delete", G, CIPSM, "",       "m", "managers are written by users"),
        ("get",    G, IPSM,  "team-a", "m", "managers come from the watch"),
        ("update", G, "clusterimagepullsecretmanagers/status", "", "m", "status is only patched"),
        ("get",    "", "configmaps", "team-a", "c", "nothing else is read"),
        ("list",   "", "nodes", "", "", "nothing else is read"),
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
    async fn cheiron_service_account_can_make_every_call_the_code_makes() -> Result {
        let s = Scenario::new(CHEIRON, "install-rbac-can").await?;
        installed(s.client()).await?;
        expect(s.client(), CHEIRON_USER, true, CHEIRON_NEEDS).await
    }

    #[tokio::test]
    async fn cheiron_service_account_cannot_do_more_than_the_code_needs() -> Result {
        let s = Scenario::new(CHEIRON, "install-rbac-cannot").await?;
        installed(s.client()).await?;
        expect(s.client(), CHEIRON_USER, false, CHEIRON_MUST_NOT).await
    }

    #[tokio::test]
    async fn certificate_job_can_write_only_its_secrets_and_webhook_configuration() -> Result {
        let s = Scenario::new(CHEIRON, "install-rbac-certs").await?;
        installed(s.client()).await?;
        expect(s.client(), CERTS_USER, true, CERTS_NEED).await?;
        expect(s.client(), CERTS_USER, false, CERTS_MUST_NOT).await
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

    #[tokio::test]
    async fn cheiron_run_does_its_job_with_only_the_generated_rbac() -> Result {
        let s = Scenario::new(CHEIRON, "install-run").await?;
        installed(s.client()).await?;
        let cluster = s.cluster()?;
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("cheiron.kubeconfig");
        service_account_kubeconfig(s.client(), &cluster.admin_config(), "cheiron", &kubeconfig)
            .await?;

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

        let [listen, admin] = harness::free_ports()?;
        let log_path = dir.path().join("cheiron-run.log");
        let log = std::fs::File::create(&log_path)?;
        let _cheiron = Running(
            Command::new(env!("CARGO_BIN_EXE_cheiron"))
                .args([
                    "run",
                    "--self-signed",
                    "--leader-election",
                    "--shutdown-delay=0",
                ])
                .arg(format!("--listen=127.0.0.1:{listen}"))
                .arg(format!("--admin-listen=127.0.0.1:{admin}"))
                .env("KUBECONFIG", &kubeconfig)
                .env("CHEIRON_POD_NAMESPACE", NAMESPACE)
                .env("CHEIRON_POD_NAME", "cheiron-install-test")
                .env("CHEIRON_LOG", "info,cheiron=debug")
                .env("NO_COLOR", "1")
                .env_remove("CHEIRON_FROM")
                .env_remove("CHEIRON_TLS_CERT_DIR")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()?,
        );
        let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

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
            assert!(lease.spec.and_then(|s| s.holder_identity).is_some());

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
            eprintln!("cheiron run did its job in {:?}", started.elapsed());
            Ok::<(), harness::Error>(())
        }
        .await;
        let text = log();
        if let Err(e) = outcome {
            return Err(format!("{e}\n--- cheiron run log ---\n{text}").into());
        }
        let forbidden: Vec<&str> = text
            .lines()
            .filter(|l| l.to_lowercase().contains("forbidden"))
            .collect();
        assert!(
            forbidden.is_empty(),
            "cheiron run was refused API calls under the generated RBAC:\n{}",
            forbidden.join("\n")
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
            "rollout status deployment/notes-cheiron",
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
