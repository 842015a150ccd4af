use super::*;

/// The one endpoint of the rendered ServiceMonitor.
fn endpoint_of(objects: &[Value]) -> Result<&Value> {
    Ok(&find(objects, "ServiceMonitor", RELEASE)?["spec"]["endpoints"][0])
}

#[test]
fn with_metrics_auth_the_service_monitor_scrapes_https_with_the_serving_ca_and_a_token() -> Result {
    let objects = render(&[
        "metrics.auth=kubernetes",
        "serviceMonitor.enabled=true",
        "certificates.source=cert-manager",
    ])?;
    let endpoint = endpoint_of(&objects)?;
    assert_eq!(endpoint["scheme"], "https", "{endpoint}");
    assert!(
        endpoint["bearerTokenFile"].is_null(),
        "deprecated: {endpoint}"
    );
    assert!(
        endpoint["bearerTokenSecret"].is_null(),
        "deprecated: {endpoint}"
    );
    // The CA of the serving certificate's Secret, and a name the certificate holds.
    let tls = &endpoint["tlsConfig"];
    assert_eq!(
        tls["ca"]["secret"],
        serde_json::json!({"name": "cheiron-tls", "key": "ca.crt"})
    );
    let certificate = find(&objects, "Certificate", "cheiron-serving")?;
    assert_eq!(certificate["spec"]["secretName"], "cheiron-tls");
    let names = certificate["spec"]["dnsNames"]
        .as_array()
        .ok_or("no dnsNames")?;
    assert!(names.contains(&tls["serverName"]), "{tls} not in {names:?}");
    assert!(tls["insecureSkipVerify"].is_null(), "{tls}");

    // The token: of a ServiceAccount of its own, bound to the metrics reader only.
    assert_eq!(
        endpoint["authorization"],
        serde_json::json!({
            "type": "Bearer",
            "credentials": {"name": "cheiron-metrics-scraper", "key": "token"}
        })
    );
    let account = find(&objects, "ServiceAccount", "cheiron-metrics-scraper")?;
    assert_eq!(account["metadata"]["namespace"], NAMESPACE);
    let secret = find(&objects, "Secret", "cheiron-metrics-scraper")?;
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    assert_eq!(
        secret["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        "cheiron-metrics-scraper"
    );
    let binding = find(&objects, "ClusterRoleBinding", "cheiron-metrics-scraper")?;
    assert_eq!(binding["roleRef"]["name"], "cheiron-metrics-reader");
    find(&objects, "ClusterRole", "cheiron-metrics-reader")?;
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "cheiron-metrics-scraper", "namespace": NAMESPACE}])
    );

    // Without metrics auth: plain HTTP, no credentials, no scraper.
    let open = render(&["serviceMonitor.enabled=true"])?;
    let endpoint = endpoint_of(&open)?;
    assert_eq!(endpoint["scheme"], "http");
    for field in ["tlsConfig", "authorization", "bearerTokenFile"] {
        assert!(endpoint[field].is_null(), "{field}: {endpoint}");
    }
    assert!(find(&open, "ServiceAccount", "cheiron-metrics-scraper").is_err());
    Ok(())
}

#[test]
fn service_monitor_values_reach_the_endpoint() -> Result {
    let objects = render(&[
        "metrics.auth=kubernetes",
        "serviceMonitor.enabled=true",
        "serviceMonitor.namespace=monitoring",
        "serviceMonitor.honorLabels=true",
        "serviceMonitor.relabelings[0].sourceLabels={__meta_kubernetes_pod_node_name}",
        "serviceMonitor.relabelings[0].targetLabel=node",
        "serviceMonitor.metricRelabelings[0].action=drop",
        "serviceMonitor.metricRelabelings[0].sourceLabels={__name__}",
        "serviceMonitor.metricRelabelings[0].regex=process_virtual_memory_bytes",
        "serviceMonitor.tlsConfig.ca.secret.name=cheiron-ca",
        "serviceMonitor.tlsConfig.ca.secret.key=ca.crt",
        "serviceMonitor.tlsConfig.serverName=cheiron.cheiron-system.svc",
        "serviceMonitor.tokenSecret.name=prometheus-token",
        "serviceMonitor.tokenSecret.key=jwt",
    ])?;
    let monitor = find(&objects, "ServiceMonitor", RELEASE)?;
    assert_eq!(monitor["metadata"]["namespace"], "monitoring");
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        serde_json::json!([NAMESPACE])
    );
    let endpoint = endpoint_of(&objects)?;
    assert_eq!(endpoint["honorLabels"], true);
    assert_eq!(
        endpoint["relabelings"],
        serde_json::json!([{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}])
    );
    assert_eq!(endpoint["metricRelabelings"][0]["action"], "drop");
    assert_eq!(
        endpoint["tlsConfig"],
        serde_json::json!({
            "ca": {"secret": {"name": "cheiron-ca", "key": "ca.crt"}},
            "serverName": "cheiron.cheiron-system.svc"
        })
    );
    assert_eq!(
        endpoint["authorization"]["credentials"],
        serde_json::json!({"name": "prometheus-token", "key": "jwt"})
    );
    // A token Secret of the user's: the chart makes no scraper.
    assert!(find(&objects, "ServiceAccount", "cheiron-metrics-scraper").is_err());
    assert!(find(&objects, "ClusterRoleBinding", "cheiron-metrics-scraper").is_err());

    // Default honorLabels is false, and nothing is relabelled.
    let defaults = render(&["serviceMonitor.enabled=true"])?;
    let endpoint = endpoint_of(&defaults)?;
    assert_eq!(endpoint["honorLabels"], false);
    assert!(endpoint["relabelings"].is_null() && endpoint["metricRelabelings"].is_null());
    Ok(())
}

#[test]
fn invalid_monitoring_values_are_refused_with_a_reason() -> Result {
    for (values, expected) in [
        (
            vec![
                "metrics.auth=kubernetes",
                "serviceMonitor.enabled=true",
                "serviceMonitor.namespace=monitoring",
            ],
            "set serviceMonitor.tlsConfig",
        ),
        (vec!["serviceMonitor.relabelings[0].target=node"], "target"),
        (
            vec!["serviceMonitor.metricRelabelings[0].action=delete"],
            "action",
        ),
        (vec!["serviceMonitor.honorLabels=yes"], "honorLabels"),
        (vec!["serviceMonitor.tlsConfig.insecure=true"], "insecure"),
        (vec!["serviceMonitor.tlsConfig.ca.secret.name=ca"], "key"),
        (vec!["serviceMonitor.tokenSecret.key="], "key"),
        (
            vec!["serviceMonitor.bearerTokenFile=/token"],
            "bearerTokenFile",
        ),
        (
            vec!["prometheusRule.memoryNearLimitRatio=1.5"],
            "memoryNearLimitRatio",
        ),
        (
            vec!["prometheusRule.memoryNearLimitFor=soon"],
            "memoryNearLimitFor",
        ),
        (vec!["grafanaDashboard.sidecarLabel="], "sidecarLabel"),
        (vec!["grafanaDashboard.folder=cheiron"], "folder"),
    ] {
        let output = run_helm(&template_args(&values))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{values:?} rendered");
        assert!(stderr.contains(expected), "{values:?}: {stderr}");
    }
    Ok(())
}
