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
