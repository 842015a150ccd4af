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
        vec![
            "serviceAccount.create=false",
            "serviceAccount.names.webhook=platform-webhook",
            "serviceAccount.names.controller=platform-controller",
        ],
        NARROWED_WEBHOOK.to_vec(),
        super::values::COMPONENT_VALUES.to_vec(),
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
    let selector = &find(&rendered, "MutatingWebhookConfiguration", "cheiron")?["webhooks"][0]["namespaceSelector"]
        ["matchExpressions"];
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

/// The values that narrow what the apiserver sends: an objectSelector and two CEL conditions.
pub(crate) const NARROWED_WEBHOOK: [&str; 6] = [
    "webhook.objectSelector.matchExpressions[0].key=cheiron\\.example/skip",
    "webhook.objectSelector.matchExpressions[0].operator=DoesNotExist",
    "webhook.matchConditions[0].name=not-a-job",
    "webhook.matchConditions[0].expression=!has(object.metadata.labels) || !('batch.kubernetes.io/job-name' in object.metadata.labels)",
    "webhook.matchConditions[1].name=not-system",
    "webhook.matchConditions[1].expression=!has(object.metadata.name) || !object.metadata.name.startsWith('system-')",
];

#[test]
fn object_selector_and_match_conditions_narrow_the_registration_after_the_built_in_ones() -> Result
{
    let rendered = render(&NARROWED_WEBHOOK)?;
    let webhook = &find(&rendered, "MutatingWebhookConfiguration", "cheiron")?["webhooks"][0];
    assert_eq!(
        webhook["objectSelector"],
        serde_json::json!({"matchExpressions": [{"key": "cheiron.example/skip", "operator": "DoesNotExist"}]})
    );
    let built = serde_json::to_value(Install::default().webhook_registration().configuration())?;
    let mut conditions = built["webhooks"][0]["matchConditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(conditions.len(), 2, "the built-in ones: {conditions:?}");
    conditions.extend([
        serde_json::json!({"name": "not-a-job", "expression": "!has(object.metadata.labels) || !('batch.kubernetes.io/job-name' in object.metadata.labels)"}),
        serde_json::json!({"name": "not-system", "expression": "!has(object.metadata.name) || !object.metadata.name.startsWith('system-')"}),
    ]);
    assert_eq!(webhook["matchConditions"], Value::Array(conditions));

    // Unset, neither is rendered: the chart's defaults are `cheiron manifests`' (compared in
    // chart_webhooks_are_what_webhook_registration_builds).
    let default = render(&[])?;
    let webhook = &find(&default, "MutatingWebhookConfiguration", "cheiron")?["webhooks"][0];
    assert!(webhook.get("objectSelector").is_none(), "{webhook}");
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
        assert_eq!(plain.len(), 12, "{mode}: {plain:#?}");
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
            // The admin port serves HTTPS with the mounted serving certificate, probed so.
            let (p, c) = (
                find(&plain, "Deployment", &name)?,
                find(&chart, "Deployment", &name)?,
            );
            assert_eq!(
                p["spec"]["template"]["spec"], c["spec"]["template"]["spec"],
                "{mode}: the chart's Pod spec of {name} with metrics.auth=kubernetes has \
                 drifted from src/install/workload.rs"
            );
        }
        for name in ["cheiron-metrics-auth", "cheiron-metrics-reader"] {
            find(&chart, "ClusterRole", name)?;
        }
    }
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
                .any(|o| o["kind"] == "Role" && o["metadata"]["name"] == "cheiron-leader-election"),
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

/// Every ServiceAccount a binding, a Pod or the node agents' admission policy names, by the
/// object that names it.
fn service_account_uses(objects: &[Value]) -> Vec<(String, String)> {
    let mut uses = Vec::new();
    for object in objects {
        let what = format!("{}/{}", object["kind"], object["metadata"]["name"]).replace('"', "");
        for subject in object["subjects"].as_array().into_iter().flatten() {
            if subject["kind"] == "ServiceAccount" {
                let name = subject["name"].as_str().unwrap_or_default();
                uses.push((what.clone(), name.to_owned()));
            }
        }
        if let Some(name) = object["spec"]["template"]["spec"]["serviceAccountName"].as_str() {
            uses.push((what.clone(), name.to_owned()));
        }
        for condition in object["spec"]["matchConditions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let expression = condition["expression"].as_str().unwrap_or_default();
            if let Some(user) = expression.split("system:serviceaccount:").nth(1) {
                let name = user
                    .trim_end_matches('\'')
                    .rsplit(':')
                    .next()
                    .unwrap_or_default();
                uses.push((what.clone(), name.to_owned()));
            }
        }
    }
    uses.sort();
    uses
}

#[test]
fn service_account_create_false_renders_none_and_binds_each_identity_to_the_name_given() -> Result {
    let options = [
        "node.enabled=true",
        "metrics.auth=kubernetes",
        "fleet.enabled=true",
    ];
    let given = [
        ("webhook", "cheiron-webhook", "platform-webhook"),
        ("controller", "cheiron-controller", "platform-controller"),
        ("certificates", "cheiron-certs", "platform-certs"),
        ("nodeAgent", "cheiron-node-agent", "platform-node"),
    ];
    let mut values: Vec<String> = vec!["serviceAccount.create=false".to_owned()];
    values.extend(
        given
            .iter()
            .map(|(identity, _, name)| format!("serviceAccount.names.{identity}={name}")),
    );
    values.extend(options.iter().map(|o| (*o).to_owned()));
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let existing = render(&values)?;
    assert!(
        named(&existing, "ServiceAccount").is_empty(),
        "{}",
        describe(&existing)
    );
    // Everything that names an identity names the one given in its place, and nothing else
    // changes: the same bindings, Pods and policy as with the ServiceAccounts the chart creates.
    let created = render(&options)?;
    let renamed: Vec<(String, String)> = service_account_uses(&created)
        .into_iter()
        .map(|(what, name)| {
            let name = given
                .iter()
                .find(|(_, default, _)| *default == name)
                .map_or(name, |(_, _, given)| (*given).to_owned());
            (what, name)
        })
        .collect();
    assert_eq!(service_account_uses(&existing), renamed);
    assert!(renamed.len() >= 12, "{renamed:?}");
    assert_eq!(
        named(&created, "ServiceAccount"),
        [
            "cheiron-certs",
            "cheiron-controller",
            "cheiron-node-agent",
            "cheiron-webhook"
        ]
    );

    // Combined: the one account is serviceAccount.name.
    let combined = render(&[
        "deployment=combined",
        "serviceAccount.create=false",
        "serviceAccount.name=platform",
    ])?;
    assert_eq!(named(&combined, "ServiceAccount"), Vec::<String>::new());
    let uses = service_account_uses(&combined);
    assert!(
        uses.iter()
            .all(|(_, name)| name == "platform" || name == "cheiron-certs"),
        "{uses:?}"
    );
    assert!(uses.iter().any(|(what, _)| what == "Deployment/cheiron"));
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
fn network_policies_open_the_webhook_port_to_all_and_the_admin_port_to_the_namespace() -> Result {
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

/// The chart's CRDs are templates (Helm upgrades templates, never `crds/`), with exactly the
/// content `cheiron crds` prints; `crds.keep` keeps them on uninstall, `crds.install=false`
/// leaves them out.
#[test]
fn crds_are_templates_with_the_generated_content_kept_on_uninstall_unless_asked() -> Result {
    assert!(
        !repo().join("charts/cheiron/crds").exists(),
        "charts/cheiron/crds/ is installed by Helm once and never upgraded: the CRDs belong in \
         files/crds.yaml, rendered by templates/crds.yaml"
    );
    let generated = documents(cheiron::api::crds_yaml()?.as_bytes())?;
    let rendered_crds = |values: &[&str]| -> Result<Vec<Value>> {
        Ok(render(values)?
            .into_iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
            .collect())
    };

    let crds = rendered_crds(&["commonLabels.team=platform"])?;
    assert_eq!(crds.len(), generated.len());
    for (rendered, generated) in crds.iter().zip(&generated) {
        let name = &generated["metadata"]["name"];
        let metadata = &rendered["metadata"];
        assert_eq!(&metadata["name"], name);
        assert_eq!(metadata["annotations"]["helm.sh/resource-policy"], "keep");
        assert_eq!(metadata["labels"]["app.kubernetes.io/managed-by"], "Helm");
        assert_eq!(metadata["labels"]["app.kubernetes.io/component"], "crds");
        assert_eq!(metadata["labels"]["team"], "platform");
        let mut content = rendered.clone();
        content["metadata"] = serde_json::json!({"name": name});
        assert!(
            &content == generated,
            "the chart's {name} is not what `cheiron crds` prints"
        );
    }

    for crd in rendered_crds(&["crds.keep=false"])? {
        assert!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"].is_null(),
            "{}",
            crd["metadata"]
        );
    }
    assert!(rendered_crds(&["crds.install=false"])?.is_empty());
    Ok(())
}

/// `helm test`: a Pod of cheiron's image runs `cheiron dry-run` against a mode Pod manager of
/// its own in a namespace the webhook serves, with the right to create Pods there only; every
/// object but the finished Pod (kept for `helm test --logs`) is deleted once the test
/// succeeds. (It runs for real on the node layer: tests/node_in_cluster.)
#[test]
fn helm_test_checks_a_dry_run_pod_in_a_served_namespace_with_objects_that_exist_only_for_it()
-> Result {
    let hooks = |objects: Vec<Value>| -> Vec<Value> {
        objects
            .into_iter()
            .filter(|o| o["metadata"]["annotations"]["helm.sh/hook"] == "test")
            .collect()
    };
    assert!(hooks(render(&[])?).is_empty(), "--skip-tests renders none");
    let objects = hooks(render_with_tests(RELEASE, &["tests.namespace=team-a"])?);
    assert_eq!(
        describe(&objects),
        "ServiceAccount/cheiron-test, Role/cheiron-test, RoleBinding/cheiron-test, \
         Pod/cheiron-test, ImagePullSecretManager/cheiron-test"
    );
    for object in &objects {
        let policy = object["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
            .as_str()
            .unwrap_or_default();
        // The finished Pod stays for `helm test --logs` (until the next test); what grants
        // rights or selects Pods goes once the test succeeds.
        let expected = if object["kind"] == "Pod" {
            "before-hook-creation"
        } else {
            "before-hook-creation,hook-succeeded"
        };
        assert_eq!(policy, expected, "{object}");
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let expected = match object["kind"].as_str() {
            Some("ServiceAccount" | "Pod") => NAMESPACE,
            _ => "team-a",
        };
        assert_eq!(namespace, expected, "{object}");
    }
    let role = find(&objects, "Role", "cheiron-test")?;
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}])
    );
    let manager = find(&objects, "ImagePullSecretManager", "cheiron-test")?;
    assert_eq!(manager["spec"]["mode"], "Pod");
    assert_eq!(
        manager["spec"]["podSelector"]["matchLabels"]["cheiron.anny.co/helm-test"],
        RELEASE
    );
    let pod = find(&objects, "Pod", "cheiron-test")?;
    assert_eq!(pod["spec"]["serviceAccountName"], "cheiron-test");
    assert_eq!(
        pod["spec"]["containers"][0]["command"],
        serde_json::json!(["cheiron"])
    );
    assert_eq!(
        pod["spec"]["containers"][0]["args"],
        serde_json::json!([
            "dry-run",
            "--namespace=team-a",
            "--label=cheiron.anny.co/helm-test=cheiron",
            "--expect=cheiron-test",
            "--timeout=60",
        ])
    );
    // Default: `default`; but not when the release itself is there (never sent to the
    // webhook), and not when switched off.
    let pod = find(
        &hooks(render_with_tests(RELEASE, &[])?),
        "Pod",
        "cheiron-test",
    )?
    .clone();
    assert_eq!(
        pod["spec"]["containers"][0]["args"][1],
        "--namespace=default"
    );
    let output = run_helm(&[
        "template",
        RELEASE,
        "charts/cheiron",
        "--namespace",
        "default",
    ])?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(hooks(documents(&output.stdout)?).is_empty());
    assert!(hooks(render_with_tests(RELEASE, &["tests.enabled=false"])?).is_empty());
    Ok(())
}

/// `helm show readme` prints charts/cheiron/README.md, and its values table names every
/// top-level value of values.yaml (a value added without a word there fails here).
#[test]
fn helm_show_readme_prints_the_chart_readme_naming_every_top_level_value() -> Result {
    let readme = std::fs::read_to_string(repo().join("charts/cheiron/README.md"))?;
    let output = run_helm(&["show", "readme", "charts/cheiron"])?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let shown = String::from_utf8_lossy(&output.stdout);
    assert_eq!(shown.trim_end(), readme.trim_end());
    assert!(readme.contains("helm install"), "a quick install");
    assert!(readme.contains("docs/image.md"), "how to build the image");

    let values: Value =
        serde_saphyr::from_slice(&std::fs::read(repo().join("charts/cheiron/values.yaml"))?)?;
    let keys: Vec<&String> = values
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    assert!(keys.len() > 30, "{keys:?}");
    let missing: Vec<&&String> = keys
        .iter()
        .filter(|key| {
            !readme.contains(&format!("`{key}`")) && !readme.contains(&format!("`{key}."))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "charts/cheiron/README.md does not mention {missing:?}"
    );
    Ok(())
}

#[test]
fn registry_checks_take_only_the_flags_that_differ_and_a_ca_bundle_becomes_a_mounted_config_map()
-> Result {
    let default = render(&[])?;
    let controller = args(&default, "cheiron-controller")?;
    assert!(
        !controller
            .iter()
            .any(|a| a.contains("registry") || a.contains("verify")),
        "no registry-check flag by default: {controller:?}"
    );
    assert!(
        find(&default, "ConfigMap", "cheiron-registry-ca").is_err(),
        "no CA ConfigMap by default"
    );

    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----";
    let values = [
        "registryChecks.all=true",
        "registryChecks.intervalSeconds=600",
        "registryChecks.concurrency=8",
        "registryChecks.timeoutSeconds=5",
        "registryChecks.hosts={*.example.com,ghcr.io}",
    ];
    let ca = format!("registryChecks.caBundle={pem}");
    let objects = render(
        &values
            .iter()
            .copied()
            .chain([ca.as_str()])
            .collect::<Vec<_>>(),
    )?;
    let controller = args(&objects, "cheiron-controller")?;
    for flag in [
        "--verify-registries",
        "--registry-check-interval=600",
        "--registry-check-concurrency=8",
        "--registry-check-timeout=5",
        "--registry-check-hosts=*.example.com",
        "--registry-check-hosts=ghcr.io",
        "--registry-ca-file=/etc/cheiron/registry-ca/ca.crt",
    ] {
        assert!(controller.contains(&flag), "{flag} missing: {controller:?}");
    }
    let webhook = args(&objects, "cheiron-webhook")?;
    assert!(
        !webhook.iter().any(|a| a.contains("registry")),
        "the webhook takes no registry-check flag: {webhook:?}"
    );
    let config_map = find(&objects, "ConfigMap", "cheiron-registry-ca")?;
    assert!(
        config_map["data"]["ca.crt"]
            .as_str()
            .is_some_and(|c| c.contains("BEGIN CERTIFICATE")),
        "{config_map}"
    );
    let pod = &find(&objects, "Deployment", "cheiron-controller")?["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == "registry-ca")
            .map(|v| v["configMap"]["name"].clone()),
        Some(serde_json::json!("cheiron-registry-ca"))
    );
    assert!(
        pod["containers"][0]["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["name"] == "registry-ca" && m["mountPath"] == "/etc/cheiron/registry-ca"),
        "{pod}"
    );

    // Combined, `cheiron run` takes them.
    let combined = render(&["deployment=combined", "registryChecks.all=true"])?;
    assert!(args(&combined, "cheiron")?.contains(&"--verify-registries"));

    // Bad input is refused with a message, nothing rendered.
    for (value, message) in [
        ("registryChecks.caBundle=not a certificate", "not PEM"),
        ("registryChecks.intervalSeconds=5", "intervalSeconds"),
        ("registryChecks.concurrency=0", "concurrency"),
    ] {
        let err = render(&[value]).err().ok_or(format!("{value} rendered"))?;
        assert!(err.to_string().contains(message), "{value}: {err}");
    }
    Ok(())
}
