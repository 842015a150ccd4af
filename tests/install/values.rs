//! What the chart's values accept: a value the chart does not use, or uses otherwise, is
//! refused with a reason (the schema, or `cheiron.validate` for what a schema cannot say).

use super::*;

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
        (vec!["crds.upgrade=true"], "upgrade"),
        (vec!["crds.keep=yes"], "keep"),
        (
            vec!["tests.namespace=kube-system"],
            "tests.namespace kube-system is never sent to the webhook",
        ),
        (
            vec![
                "webhook.namespaceSelector.excludeNamespaces={sandbox}",
                "tests.namespace=sandbox",
            ],
            "tests.namespace sandbox is never sent to the webhook",
        ),
        // A parent chart's global the chart does not use is refused, not ignored.
        (
            vec!["global.imageRegistry=registry.example.com"],
            "imageRegistry",
        ),
        (vec!["global.imagePullSecrets[0].secret=shared"], "name"),
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
        (vec!["certificates.jobs.replicas=2"], "replicas"),
        (vec!["certificates.jobs.nodeSelector.pool=1"], "pool"),
        (vec!["node.podLabels.tier=1"], "tier"),
        (vec!["node.resources.request.cpu=1m"], "request"),
        (
            vec![
                "webhook.matchConditions[0].name=not-ignore-true",
                "webhook.matchConditions[0].expression=x",
            ],
            "the name not-ignore-true is taken",
        ),
        (
            vec![
                "webhook.matchConditions[0].name=a",
                "webhook.matchConditions[0].expression=x",
                "webhook.matchConditions[1].name=a",
                "webhook.matchConditions[1].expression=y",
            ],
            "the name a is taken",
        ),
        (vec!["webhook.matchConditions[0].name=a"], "expression"),
        (vec!["webhook.objectSelector.namespaces={a}"], "namespaces"),
        (
            vec![
                "serviceAccount.names.webhook=platform",
                "serviceAccount.names.controller=platform",
            ],
            "name the same ServiceAccount",
        ),
        (
            vec![
                "deployment=combined",
                "serviceAccount.names.webhook=platform",
            ],
            "combined runs under one ServiceAccount, serviceAccount.name",
        ),
        (
            vec!["serviceAccount.names.certificates=cheiron-webhook"],
            "names the webhook's ServiceAccount",
        ),
        (vec!["serviceAccount.names.operator=x"], "operator"),
        (vec!["serviceAccount.names.webhook=Platform"], "webhook"),
        // Cut to fit otherwise: `<name>-controller` within 63, the full name within 36.
        (
            vec!["serviceAccount.name=a-base-name-that-leaves-no-room-for-the-controller-suffix"],
            "52",
        ),
        (
            vec!["fullnameOverride=a-full-name-of-thirty-seven-characters"],
            "36",
        ),
        (vec!["nameOverride=Cheiron"], "nameOverride"),
        (vec!["metrics.auth=basic"], "auth"),
        (vec!["controller.replicaCount=0"], "replicaCount"),
        (vec!["image.digest=latest"], "digest"),
        (vec!["extraEnv[0].value=x"], "name"),
        (vec!["extraVolumeMounts[0].name=ca"], "mountPath"),
        (
            vec!["topologySpreadConstraints[0].maxSkew=1"],
            "topologyKey",
        ),
        (vec!["commonLabels.team=1"], "team"),
        (vec!["controller.priorityClassName=x"], "priorityClassName"),
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

#[test]
fn global_pull_secrets_reach_every_pod_before_the_charts_own_each_name_once() -> Result {
    let objects = render(&[
        "global.imagePullSecrets[0].name=shared",
        "imagePullSecrets[0].name=own",
        "imagePullSecrets[1].name=shared",
        "node.enabled=true",
    ])?;
    let mut pods = 0;
    for object in &objects {
        let spec = match object["kind"].as_str() {
            Some("Deployment" | "DaemonSet" | "Job") => &object["spec"]["template"]["spec"],
            _ => continue,
        };
        pods += 1;
        let names: Vec<&str> = spec["imagePullSecrets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["shared", "own"],
            "{} {}",
            object["kind"],
            object["metadata"]["name"]
        );
    }
    // The webhook, the controller, the two certificate Jobs and the node agent.
    assert!(pods >= 5, "{pods} Pod templates");

    let none = render(&[])?;
    assert!(
        none.iter().all(|o| o["spec"]["template"]["spec"]
            .get("imagePullSecrets")
            .is_none()),
        "no pull secrets asked, none rendered"
    );
    Ok(())
}

/// The values operators of cert-manager, Kyverno and external-secrets expect, in the objects:
/// an image digest, labels on everything, environment, volumes and mounts (a proxy, a CA
/// bundle), topology spread, and the controller's own scheduling.
pub(crate) const OPERATOR_VALUES: [&str; 16] = [
    "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "commonLabels.team=platform",
    "extraEnv[0].name=HTTPS_PROXY",
    "extraEnv[0].value=http://proxy.example:3128",
    "extraVolumes[0].name=corporate-ca",
    "extraVolumes[0].configMap.name=corporate-ca",
    "extraVolumeMounts[0].name=corporate-ca",
    "extraVolumeMounts[0].mountPath=/etc/ssl/corporate",
    "topologySpreadConstraints[0].maxSkew=1",
    "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
    "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
    "topologySpreadConstraints[0].labelSelector.matchLabels.app\\.kubernetes\\.io/name=cheiron",
    "nodeSelector.pool=general",
    "controller.nodeSelector.pool=system",
    "controller.tolerations[0].key=dedicated",
    "controller.tolerations[0].operator=Exists",
];

#[test]
fn operator_values_reach_the_objects_they_name() -> Result {
    let objects = render(&OPERATOR_VALUES)?;
    let digest = "ghcr.io/anny-co/cheiron@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    for object in &objects {
        assert_eq!(
            object["metadata"]["labels"]["team"], "platform",
            "commonLabels on {} {}",
            object["kind"], object["metadata"]["name"]
        );
        let spec = &object["spec"]["template"]["spec"];
        for container in spec["containers"].as_array().into_iter().flatten() {
            assert_eq!(container["image"], digest, "{}", object["metadata"]["name"]);
        }
    }
    for name in ["cheiron-webhook", "cheiron-controller"] {
        let deployment = find(&objects, "Deployment", name)?;
        let spec = &deployment["spec"]["template"]["spec"];
        assert_eq!(spec["topologySpreadConstraints"][0]["maxSkew"], 1, "{name}");
        let container = &spec["containers"][0];
        let env: Vec<&str> = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["name"].as_str())
            .collect();
        assert!(env.contains(&"HTTPS_PROXY"), "{name}: {env:?}");
        assert!(
            env.contains(&"CHEIRON_POD_NAME"),
            "{name}: its own env is kept"
        );
        let mounts: Vec<&str> = container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["mountPath"].as_str())
            .collect();
        assert!(mounts.contains(&"/etc/ssl/corporate"), "{name}: {mounts:?}");
        let volumes: Vec<&str> = spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["name"].as_str())
            .collect();
        assert!(volumes.contains(&"corporate-ca"), "{name}: {volumes:?}");
        assert_eq!(
            deployment["spec"]["selector"]["matchLabels"].get("team"),
            None,
            "{name}: selectors are immutable, commonLabels stay out of them"
        );
    }
    let webhook = &find(&objects, "Deployment", "cheiron-webhook")?["spec"]["template"]["spec"];
    let controller =
        &find(&objects, "Deployment", "cheiron-controller")?["spec"]["template"]["spec"];
    assert_eq!(webhook["nodeSelector"]["pool"], "general");
    assert!(webhook.get("tolerations").is_none(), "{webhook}");
    assert_eq!(controller["nodeSelector"]["pool"], "system");
    assert_eq!(controller["tolerations"][0]["key"], "dedicated");
    Ok(())
}

/// The node agent's and the certificate Jobs' own Pod values.
pub(crate) const COMPONENT_VALUES: [&str; 18] = [
    "node.enabled=true",
    "node.podAnnotations.agent=yes",
    "node.podLabels.tier=node",
    "node.priorityClassName=system-node-critical",
    "node.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=cheiron.example/pull",
    "node.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
    "podAnnotations.shared=yes",
    "nodeSelector.pool=general",
    "priorityClassName=cheiron-high",
    "certificates.jobs.resources.requests.cpu=20m",
    "certificates.jobs.resources.limits.memory=96Mi",
    "certificates.jobs.nodeSelector.pool=system",
    "certificates.jobs.tolerations[0].key=dedicated",
    "certificates.jobs.tolerations[0].operator=Exists",
    "certificates.jobs.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=kubernetes.io/os",
    "certificates.jobs.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
    "certificates.jobs.podAnnotations.job=yes",
    "certificates.jobs.priorityClassName=cheiron-install",
];

#[test]
fn the_node_agent_and_the_certificate_jobs_take_their_own_pod_values() -> Result {
    let objects = render(&COMPONENT_VALUES)?;
    let agent = &objects
        .iter()
        .find(|o| o["kind"] == "DaemonSet")
        .ok_or("no DaemonSet")?["spec"]["template"];
    assert_eq!(
        agent["metadata"]["annotations"],
        serde_json::json!({"agent": "yes"}),
        "the node's own, not the shared podAnnotations"
    );
    assert_eq!(agent["metadata"]["labels"]["tier"], "node");
    assert_eq!(agent["spec"]["priorityClassName"], "system-node-critical");
    assert_eq!(
        agent["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"][0]["key"],
        "cheiron.example/pull"
    );
    assert!(agent["spec"].get("nodeSelector").is_none(), "{agent}");
    for step in ["create", "patch"] {
        let job = &find(&objects, "Job", &format!("cheiron-certs-{step}"))?["spec"]["template"];
        let spec = &job["spec"];
        assert_eq!(
            job["metadata"]["annotations"],
            serde_json::json!({"job": "yes"})
        );
        assert_eq!(spec["priorityClassName"], "cheiron-install");
        assert_eq!(spec["nodeSelector"], serde_json::json!({"pool": "system"}));
        assert_eq!(spec["tolerations"][0]["key"], "dedicated");
        assert_eq!(
            spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                [0]["matchExpressions"][0]["key"],
            "kubernetes.io/os"
        );
        assert_eq!(
            spec["containers"][0]["resources"],
            serde_json::json!({"requests": {"cpu": "20m", "memory": "32Mi"}, "limits": {"memory": "96Mi"}}),
            "{step}: merged into the defaults, as helm does"
        );
    }

    // Unset, the Jobs take the shared values, and their resources stay the plain manifests'.
    let shared = render(&[
        "podAnnotations.shared=yes",
        "nodeSelector.pool=general",
        "priorityClassName=cheiron-high",
    ])?;
    let job = &find(&shared, "Job", "cheiron-certs-create")?["spec"]["template"];
    assert_eq!(
        job["metadata"]["annotations"],
        serde_json::json!({"shared": "yes"})
    );
    assert_eq!(job["spec"]["priorityClassName"], "cheiron-high");
    assert_eq!(
        job["spec"]["nodeSelector"],
        serde_json::json!({"pool": "general"})
    );
    assert!(
        job["spec"].get("affinity").is_none(),
        "the Deployments' affinity is theirs"
    );
    let plain = plain_objects()?;
    let plain_job = plain
        .iter()
        .find(|o| o["kind"] == "Job")
        .ok_or("no Job in webhook-config/")?;
    assert_eq!(
        job["spec"]["containers"][0]["resources"],
        plain_job["spec"]["template"]["spec"]["containers"][0]["resources"]
    );
    Ok(())
}
