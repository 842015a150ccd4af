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
