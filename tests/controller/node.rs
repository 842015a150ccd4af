//! Mode Node against the real kube-apiserver: fake Node objects (no kubelet runs here), two
//! `cheiron node-agent` processes with temporary directories standing in for their hosts'
//! paths, and the shared controller running. Selecting, rotating, deselecting and deleting a
//! manager change exactly the right node's files; the kubelet's config.json is given back
//! byte for byte; the controller writes no copy for a Node manager, only its node credentials
//! in the node namespace (the agents read nothing else); the credential-provider plugin
//! answers the kubelet's request from the file the agent wrote.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use kube::{
    Api,
    api::{DeleteParams, ObjectMeta, PostParams},
};
use serde_json::{Value, json};

use cheiron::node::bundle::{BUNDLE_TYPE, bundle_name};

use crate::{
    CHEIRON,
    dockerconfig::{dockerconfigjson_secret, registry_entry},
    harness::{Result, controller::CheironProcess},
    scenario::{ControllerScenario, ManagerRef},
};

/// The shared controller's node namespace (`--node-namespace` defaults to its client's
/// namespace), where the agents the tests start read (`--pod-namespace`, the same default).
const NODE_NAMESPACE: &str = "default";

/// A kubelet config.json another tool wrote: odd layout, a Docker Hub entry that conflicts
/// with the manager's, and a member cheiron never writes.
const FOREIGN_CONFIG_JSON: &str = "{\n\t\"auths\" : {\"https://index.docker.io/v1/\":{\"auth\":\"Zm9yZWlnbjpodWI=\"},\n  \"quay.io\": { \"auth\": \"Zm9yZWlnbjpxdWF5\" }},\n\t\"credsStore\": \"kubelet\"\n}\n";

struct FakeNode {
    name: String,
    dir: tempfile::TempDir,
}

impl FakeNode {
    fn credentials(&self) -> PathBuf {
        self.dir.path().join("credentials.json")
    }

    fn config_json(&self) -> PathBuf {
        self.dir.path().join("config.json")
    }

    /// The credentials file as `{key: [username, password]}`, `None` when absent.
    fn logins(&self) -> Result<Option<Value>> {
        read_logins(&self.credentials())
    }
}

fn read_logins(path: &Path) -> Result<Option<Value>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let file: Value = serde_json::from_slice(&bytes)?;
    let mut out = serde_json::Map::new();
    for (key, entry) in file["auths"].as_object().cloned().unwrap_or_default() {
        out.insert(key, json!([entry["username"], entry["password"]]));
    }
    Ok(Some(Value::Object(out)))
}

async fn create_node(s: &ControllerScenario, name: &str, pool: &str) -> Result<FakeNode> {
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                [
                    ("pool".to_owned(), pool.to_owned()),
                    ("e2e.cheiron.anny.co/scenario".to_owned(), s.id().to_owned()),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        ..Node::default()
    };
    Api::<Node>::all(s.client().clone())
        .create(&PostParams::default(), &node)
        .await
        .map_err(|e| format!("cannot create Node {name}: {e}"))?;
    Ok(FakeNode {
        name: name.to_owned(),
        dir: tempfile::tempdir()?,
    })
}

fn agent(node: &FakeNode, merge: bool) -> Result<CheironProcess> {
    agent_with_resync(node, merge, "1s")
}

fn agent_with_resync(node: &FakeNode, merge: bool, resync: &str) -> Result<CheironProcess> {
    let credentials = node.credentials().display().to_string();
    let config = node.config_json().display().to_string();
    let mut args = vec![
        "--node-name",
        &node.name,
        "--credentials-file",
        &credentials,
        "--resync",
        resync,
    ];
    if merge {
        args.extend(["--kubelet-config-json", &config]);
    }
    CheironProcess::node_agent(&format!("node-agent-{}", node.name), &args)
}

fn manager_yaml(name: &str, scenario: &str, pool: &str, sources: &str) -> String {
    format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {name}
spec:
  mode: Node
  nodeSelector:
    matchLabels:
      pool: {pool}
      e2e.cheiron.anny.co/scenario: {scenario}
  secrets:
    - existingSecretRef:
        name: node-pull
        namespace: {sources}
"
    )
}

fn pull_secret(user: &str) -> k8s_openapi::api::core::v1::Secret {
    dockerconfigjson_secret(
        "node-pull",
        &json!({
            "registry.example.com": registry_entry(user, &format!("{user}-password"), None),
            "docker.io": registry_entry(user, &format!("{user}-hub"), None),
        }),
    )
}

/// A namespace holding the source `node-pull` (user `first`), and a pool label value of its
/// own for the scenario's Nodes.
async fn source_and_pool(s: &ControllerScenario) -> Result<(String, String)> {
    let sources = s.create_namespace(&[], &[]).await?;
    s.create_secret(&sources, &pull_secret("first")).await?;
    Ok((sources, s.unique_name("pool")))
}

/// Applies a mode Node manager of a fresh name selecting `pool`, its source in `sources`.
async fn node_manager(s: &ControllerScenario, pool: &str, sources: &str) -> Result<ManagerRef> {
    s.apply(&manager_yaml(
        &s.unique_name("nodes"),
        s.id(),
        pool,
        sources,
    ))
    .await
}

/// Waits until `node`'s credentials file holds `expected` (`None`: until it is gone).
async fn until_logins(
    s: &ControllerScenario,
    node: &FakeNode,
    what: impl std::fmt::Display,
    expected: Option<Value>,
) -> Result<()> {
    let expected = &expected;
    s.eventually(what, || async move {
        match node.logins()? {
            l if l == *expected => Ok(()),
            other => Err(format!("{other:?}").into()),
        }
    })
    .await
}

fn expected_logins(user: &str) -> Value {
    json!({
        "registry.example.com": [user, format!("{user}-password")],
        "docker.io": [user, format!("{user}-hub")],
    })
}

/// `cheiron credential-provider` run as the kubelet runs it, on `request`.
fn plugin(credentials: &Path, request: &str) -> Result<Value> {
    let mut child = Command::new(CHEIRON.binary)
        .args(["credential-provider", "--credentials-file"])
        .arg(credentials)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(request.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(format!(
            "credential-provider failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

#[tokio::test]
async fn node_agents_follow_selection_rotation_deselection_and_deletion() -> Result {
    let s = ControllerScenario::new("node").await?;
    let sources = s.create_namespace(&[], &[]).await?;
    // A namespace a namespace-scoped manager without selector would reach.
    let bystander = s.create_target_namespace(&[], &[]).await?;
    s.create_secret(&sources, &pull_secret("first")).await?;
    let gpu = create_node(&s, &s.unique_name("gpu"), "gpu").await?;
    let cpu = create_node(&s, &s.unique_name("cpu"), "cpu").await?;
    std::fs::write(gpu.config_json(), FOREIGN_CONFIG_JSON)?;
    let _gpu_agent = agent(&gpu, true)?;
    let _cpu_agent = agent(&cpu, false)?;

    // Select the gpu node.
    let name = s.unique_name("nodes");
    let manager = s
        .apply(&manager_yaml(&name, s.id(), "gpu", &sources))
        .await?;
    s.eventually(
        "the gpu node's credentials file and config.json",
        || async {
            let merged = std::fs::read_to_string(gpu.config_json())?;
            match gpu.logins()? {
                Some(l)
                    if l == expected_logins("first") && merged.contains("registry.example.com") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}").into()),
            }
        },
    )
    .await?;
    assert_eq!(cpu.logins()?, None, "an unselected node gets nothing");
    let mode = std::fs::metadata(gpu.credentials())?.permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    // config.json: the foreign entries as they were, cheiron's registry added, the foreign
    // Docker Hub entry kept over cheiron's.
    let merged = std::fs::read_to_string(gpu.config_json())?;
    assert!(
        merged.contains(r#""https://index.docker.io/v1/": {"auth":"Zm9yZWlnbjpodWI="}"#)
            && merged.contains(r#""quay.io": { "auth": "Zm9yZWlnbjpxdWF5" }"#)
            && merged.contains(r#""credsStore": "kubelet""#),
        "{merged}"
    );
    let auths: Value = serde_json::from_str::<Value>(&merged)?["auths"].clone();
    assert_eq!(
        auths["registry.example.com"]["username"], "first",
        "{merged}"
    );
    assert!(auths.get("docker.io").is_none(), "{merged}");
    // Synced, listed for its conflict: the only node listed while every node is synced.
    let status = s
        .until_status(&manager, "the gpu node's entry", |st| {
            st.nodes_selected == Some(1)
                && st.nodes_synced == Some(1)
                && st.nodes.len() == 1
                && st.nodes[0].name == gpu.name
                && st.nodes[0].synced
        })
        .await?;
    let entry = &status.nodes[0];
    assert_eq!(
        entry.conflicts,
        ["docker.io (kept the existing https://index.docker.io/v1/)"]
    );
    assert!(
        s.copies_of(&manager).await?.is_empty(),
        "the controller writes no copy for a Node manager"
    );
    assert_eq!(s.secret(&bystander, "node-pull").await?.map(|_| ()), None);
    // Its node credentials, in the node namespace (the shared controller's: its client's
    // default), which is all the agents read; never a pull secret a Pod could name.
    let bundle = s
        .secret(NODE_NAMESPACE, &bundle_name(&name))
        .await?
        .ok_or("no node credentials in the node namespace")?;
    assert_eq!(bundle.type_.as_deref(), Some(BUNDLE_TYPE));

    // The plugin answers the kubelet's requests from the gpu node's file.
    let request = |image: &str| {
        format!(
            r#"{{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"{image}"}}"#
        )
    };
    let answer = plugin(&gpu.credentials(), &request("registry.example.com/app"))?;
    assert_eq!(
        answer["auth"]["registry.example.com"],
        json!({"username": "first", "password": "first-password"})
    );
    let answer = plugin(&gpu.credentials(), &request("nginx"))?;
    assert_eq!(
        answer["auth"]["docker.io"],
        json!({"username": "first", "password": "first-hub"})
    );
    let answer = plugin(&cpu.credentials(), &request("registry.example.com/app"))?;
    assert_eq!(answer.get("auth"), None, "{answer}");

    // Rotate the source: the gpu node follows, the cpu node still has nothing.
    s.replace_secret_data(&sources, "node-pull", &pull_secret("second"))
        .await?;
    // The agent writes the credentials file, then config.json: wait for both.
    s.eventually("the rotated credentials on the gpu node", || async {
        let merged: Value = serde_json::from_str(&std::fs::read_to_string(gpu.config_json())?)?;
        let user = &merged["auths"]["registry.example.com"]["username"];
        match gpu.logins()? {
            Some(l) if l == expected_logins("second") && user == "second" => Ok(()),
            other => Err(format!("{other:?}, config.json user {user}").into()),
        }
    })
    .await?;
    assert_eq!(cpu.logins()?, None);

    // Deselect the gpu node, select the cpu node.
    s.apply(&manager_yaml(&name, s.id(), "cpu", &sources))
        .await?;
    s.eventually("the credentials move to the cpu node", || async {
        let restored = std::fs::read_to_string(gpu.config_json())? == FOREIGN_CONFIG_JSON;
        match (gpu.logins()?, cpu.logins()?) {
            (None, Some(l)) if l == expected_logins("second") && restored => Ok(()),
            other => Err(format!("{other:?}, config.json restored: {restored}").into()),
        }
    })
    .await?;
    assert_eq!(
        std::fs::read_to_string(gpu.config_json())?,
        FOREIGN_CONFIG_JSON,
        "the kubelet's config.json is given back byte for byte"
    );
    s.until_status(&manager, "the cpu node counted, nothing listed", |st| {
        st.nodes_selected == Some(1) && st.nodes_synced == Some(1) && st.nodes.is_empty()
    })
    .await?;

    // Delete the manager: nothing is left on either node.
    let object = s.manager(&manager).await?.ok_or("manager gone early")?;
    s.delete_manager(&object).await?;
    s.eventually("no credentials on any node", || async {
        match (gpu.logins()?, cpu.logins()?) {
            (None, None) => Ok(()),
            other => Err(format!("{other:?}").into()),
        }
    })
    .await?;
    assert_eq!(
        std::fs::read_to_string(gpu.config_json())?,
        FOREIGN_CONFIG_JSON
    );
    let leftovers: Vec<String> = std::fs::read_dir(gpu.dir.path())?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()?;
    assert_eq!(
        leftovers,
        ["config.json"],
        "no state or temporary file is left"
    );
    s.eventually("the node credentials gone with the manager", || async {
        match s.secret(NODE_NAMESPACE, &bundle_name(&name)).await? {
            None => Ok(()),
            Some(_) => Err("still there".into()),
        }
    })
    .await?;

    delete_nodes(&s, &[&gpu, &cpu]).await
}

/// Deletes the fake Nodes and their agents' report Leases.
async fn delete_nodes(s: &ControllerScenario, nodes: &[&FakeNode]) -> Result {
    let api = Api::<Node>::all(s.client().clone());
    let leases = Api::<Lease>::default_namespaced(s.client().clone());
    for node in nodes {
        api.delete(&node.name, &DeleteParams::default()).await?;
        // The controller may remove a gone node's report first: a 404 is the wanted end.
        let lease = format!("cheiron-node-{}", node.name);
        match leases.delete(&lease, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(format!("deleting {lease}: {e}").into()),
        }
    }
    Ok(())
}

/// The node counts and the bounded list of nodes, as the controller sums up the agents'
/// report Leases: three Nodes selected, two with an agent.
#[tokio::test]
async fn status_counts_selected_and_synced_nodes_and_lists_the_failing() -> Result {
    let s = ControllerScenario::new("node-status").await?;
    let (sources, pool) = source_and_pool(&s).await?;
    let a = create_node(&s, &s.unique_name("a"), &pool).await?;
    let b = create_node(&s, &s.unique_name("b"), &pool).await?;
    let without_agent = create_node(&s, &s.unique_name("c"), &pool).await?;
    let _a_agent = agent(&a, false)?;
    let b_agent = agent(&b, true)?;
    let manager = node_manager(&s, &pool, &sources).await?;

    let status = s
        .until_status(&manager, "3 selected, 2 synced", |st| {
            st.nodes_selected == Some(3) && st.nodes_synced == Some(2)
        })
        .await?;
    assert_eq!(status.node_summary.as_deref(), Some("2/3"));
    assert_eq!(status.nodes.len(), 1, "{:?}", status.nodes);
    assert_eq!(status.nodes[0].name, without_agent.name);
    assert!(!status.nodes[0].synced);
    assert_eq!(
        status.nodes[0].message.as_deref(),
        Some("no report from a cheiron node-agent on this node")
    );
    assert_eq!(status.nodes_omitted, None);

    // Node b's config.json turns unreadable: b fails, and is listed with why.
    std::fs::write(b.config_json(), "not json")?;
    let status = s
        .until_status(&manager, "b failing", |st| {
            st.nodes_synced == Some(1) && st.nodes.iter().any(|n| n.name == b.name)
        })
        .await?;
    let listed: Vec<&str> = status.nodes.iter().map(|n| n.name.as_str()).collect();
    let mut expected = vec![b.name.as_str(), without_agent.name.as_str()];
    expected.sort_unstable();
    assert_eq!(listed, expected);
    let entry = status.nodes.iter().find(|n| n.name == b.name).ok_or("b")?;
    assert!(!entry.synced);
    let message = entry.message.as_deref().unwrap_or_default();
    assert!(message.contains("config.json"), "{message}");
    let metrics = b_agent.metrics().await?;
    assert!(
        metric(&metrics, "cheiron_node_sync_total{result=\"failed\"}") >= 1.0,
        "{metrics}"
    );
    assert!(!message.contains("first-password"), "{message}");

    // Repaired: back to two of three.
    std::fs::remove_file(b.config_json())?;
    s.until_status(&manager, "b synced again", |st| {
        st.nodes_synced == Some(2) && st.nodes.len() == 1
    })
    .await?;

    // Rotated: both nodes apply it and count as synced again.
    s.replace_secret_data(&sources, "node-pull", &pull_secret("second"))
        .await?;
    s.eventually("the rotation on a and b", || async {
        match (a.logins()?, b.logins()?) {
            (Some(x), Some(y)) if x == expected_logins("second") && y == x => Ok(()),
            other => Err(format!("{other:?}").into()),
        }
    })
    .await?;
    s.until_status(&manager, "a and b synced after the rotation", |st| {
        st.nodes_synced == Some(2) && st.nodes.len() == 1
    })
    .await?;

    // The source goes: the nodes keep the credentials they have, and say why they are not
    // synced.
    s.delete_secret(&sources, "node-pull").await?;
    let status = s
        .until_status(&manager, "a and b not synced, naming the source", |st| {
            st.nodes_synced == Some(0)
                && st.nodes.iter().any(|n| {
                    n.name == a.name
                        && n.message
                            .as_deref()
                            .is_some_and(|m| m.contains("node-pull"))
                })
        })
        .await?;
    assert_eq!(a.logins()?, Some(expected_logins("second")));
    assert_eq!(b.logins()?, Some(expected_logins("second")));
    for entry in &status.nodes {
        let message = entry.message.as_deref().unwrap_or_default();
        assert!(!message.contains("second-password"), "{message}");
    }

    let object = s.manager(&manager).await?.ok_or("manager gone early")?;
    s.delete_manager(&object).await?;
    delete_nodes(&s, &[&a, &b, &without_agent]).await
}

/// A rotation reaches the node's file through the watches (the controller's on the source, the
/// agent's on its node credentials) within the test's wait, while the agent's `--resync` is an
/// hour (and a status write, such as the controller's node summary changing, does not wake it).
#[tokio::test]
async fn a_rotated_source_reaches_the_node_through_the_watch_long_before_the_resync() -> Result {
    let s = ControllerScenario::new("node-watch").await?;
    let (sources, pool) = source_and_pool(&s).await?;
    let node = create_node(&s, &s.unique_name("w"), &pool).await?;
    let agent = agent_with_resync(&node, false, "1h")?;
    let manager = node_manager(&s, &pool, &sources).await?;
    until_logins(
        &s,
        &node,
        "the first credentials on the node",
        Some(expected_logins("first")),
    )
    .await?;
    s.until_status(&manager, "the node synced", |st| st.nodes_synced == Some(1))
        .await?;
    // The agent's /metrics: one manager, a synced pass, when.
    let metrics = agent.metrics().await?;
    assert!(metrics.contains("cheiron_node_managers 1\n"), "{metrics}");
    assert!(
        metric(&metrics, "cheiron_node_sync_total{result=\"synced\"}") >= 1.0,
        "{metrics}"
    );
    assert!(
        metric(&metrics, "cheiron_node_last_synced_timestamp_seconds") > 1.7e9,
        "{metrics}"
    );

    for user in ["second", "third"] {
        s.replace_secret_data(&sources, "node-pull", &pull_secret(user))
            .await?;
        until_logins(
            &s,
            &node,
            format!("the {user} credentials on the node"),
            Some(expected_logins(user)),
        )
        .await?;
    }
    s.until_status(&manager, "the node synced after the rotations", |st| {
        st.nodes_synced == Some(1)
    })
    .await?;

    let object = s.manager(&manager).await?.ok_or("manager gone early")?;
    s.delete_manager(&object).await?;
    until_logins(&s, &node, "no credentials on the node", None).await?;
    s.eventually("no manager in the agent's metrics", || async {
        let metrics = agent.metrics().await?;
        if metrics.contains("cheiron_node_managers 0\n") {
            Ok(())
        } else {
            Err(metrics.into())
        }
    })
    .await?;
    delete_nodes(&s, &[&node]).await
}

/// The value of the sample `name` (with its labels) in a Prometheus text, 0 without it.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.split(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Applies `object` (server-side, as the test's admin).
async fn apply_object(client: &kube::Client, object: &Value) -> Result {
    crate::harness::apply_object(client, object, "cheiron-e2e", true).await
}

/// `cheiron manifests --node --metrics-auth kubernetes --namespace OWN --node-namespace NODES`
/// as the cluster's admin applies it: the agent's objects (not its DaemonSet: the test runs
/// the agent), and the ClusterRole its metrics-auth binding names. Cluster-scoped names get
/// `suffix` (tests share the cluster). Returns the cluster-scoped objects, to delete.
async fn install_node_agent(
    client: &kube::Client,
    own: &str,
    nodes: &str,
    suffix: &str,
) -> Result<Vec<Value>> {
    use cheiron::install::{DeploymentMode, Install, METRICS_AUTH, MetricsAuth, NodeAgentSetup};

    let install = Install {
        namespace: own.to_owned(),
        metrics_auth: MetricsAuth::Kubernetes,
        node_agent: Some(NodeAgentSetup {
            namespace: Some(nodes.to_owned()),
        }),
        ..Install::default()
    };
    let unique = |name: &Value| json!(format!("{}-{suffix}", name.as_str().unwrap_or_default()));
    let mut cluster_scoped = Vec::new();
    for mut object in install.server_objects_for(DeploymentMode::Split)? {
        let component = &object["metadata"]["labels"]["app.kubernetes.io/component"];
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let metrics_auth = kind == "ClusterRole" && object["metadata"]["name"] == METRICS_AUTH;
        if (component != "node-agent" && !metrics_auth) || kind == "DaemonSet" {
            continue;
        }
        if object["metadata"]["namespace"].is_null() && kind != "Namespace" {
            object["metadata"]["name"] = unique(&object["metadata"]["name"]);
            if kind == "ClusterRoleBinding" {
                object["roleRef"]["name"] = unique(&object["roleRef"]["name"]);
            }
            if kind == "ValidatingAdmissionPolicyBinding" {
                object["spec"]["policyName"] = unique(&object["spec"]["policyName"]);
            }
            cluster_scoped.push(object.clone());
        }
        apply_object(client, &object).await?;
    }
    Ok(cluster_scoped)
}

/// A token of the agent's ServiceAccount bound to a Pod on `node`, as the kubelet gives the
/// agent's Pod: it carries the node's name (`authentication.kubernetes.io/node-name`).
async fn agent_token(client: &kube::Client, nodes: &str, node: &str) -> Result<String> {
    use k8s_openapi::api::{
        authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec},
        core::v1::{Pod, ServiceAccount},
    };
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("agent-{node}")},
        "spec": {
            "nodeName": node,
            "serviceAccountName": cheiron::install::NODE_AGENT,
            "containers": [{"name": "node-agent", "image": "cheiron"}],
        },
    }))?;
    let pod = Api::<Pod>::namespaced(client.clone(), nodes)
        .create(&PostParams::default(), &pod)
        .await?;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(client.clone(), nodes)
        .create_token_request(
            cheiron::install::NODE_AGENT,
            &PostParams::default(),
            &request,
        )
        .await?;
    Ok(token.status.ok_or("no token")?.token)
}

/// The shared cluster's kubeconfig, its user replaced by `token`.
fn kubeconfig_with_token(token: &str) -> Result<kube::config::Kubeconfig> {
    let host = crate::harness::controller::Host::shared()?;
    let admin = kube::config::Kubeconfig::read_from(&host.kubeconfig)?;
    let mut value = serde_json::to_value(&admin)?;
    for user in value["users"].as_array_mut().into_iter().flatten() {
        user["user"] = json!({"token": token});
    }
    Ok(serde_json::from_value(value)?)
}

fn is_forbidden<T: std::fmt::Debug>(result: &std::result::Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(e)) if e.code == 403)
}

/// The agent under exactly the objects `cheiron manifests --node` gives it, with a token bound
/// to a Pod on its node as in a cluster, and a controller whose node namespace is the agent's.
/// It works: it reads the node credentials the controller hands it in the node namespace, a
/// rotation arrives through its watch, and it writes its report Lease. A compromised node
/// cannot do more with that token: no manager (a cluster manager may hold an inline password)
/// and no source Secret; no Secret of cheiron's namespace (the webhook CA's key); no Lease in
/// cheiron's namespace (the controller's leader Lease); no other node's report (the admission
/// policy), not even its own Lease held by another node; and its `/metrics` refuses an
/// unauthenticated scrape and a token without the right.
#[tokio::test]
async fn a_node_agent_can_read_and_write_only_what_its_node_needs() -> Result {
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    use kube::api::{DynamicObject, ListParams, Patch, PatchParams};

    let s = ControllerScenario::without_shared_controller("node-rbac").await?;
    let client = s.client().clone();
    let own = s.create_namespace(&[], &[]).await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let nodes = s.unique_name("nodes");
    let suffix = s.unique_name("rbac");
    let cluster_scoped = install_node_agent(&client, &own, &nodes, &suffix).await?;
    let controller = CheironProcess::controller(
        &s.unique_name("node-controller"),
        &[
            "--no-leader-election",
            "--resync",
            "15",
            "--node-namespace",
            &nodes,
        ],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, crate::harness::controller::READY_WITHIN)
        .await?;

    // What a node must never reach: cheiron's CA key and leader Lease, the managers' sources,
    // the managers themselves.
    let mut ca = pull_secret("ca");
    ca.metadata.name = Some("cheiron-tls-ca".to_owned());
    s.create_secret(&own, &ca).await?;
    let leader: Lease = serde_json::from_value(json!({
        "metadata": {"name": "cheiron-controller"},
        "spec": {"holderIdentity": "controller-0", "leaseDurationSeconds": 15},
    }))?;
    Api::<Lease>::namespaced(client.clone(), &own)
        .create(&PostParams::default(), &leader)
        .await?;
    s.create_secret(&sources, &pull_secret("first")).await?;

    let pool = s.unique_name("pool");
    let node = create_node(&s, &s.unique_name("r"), &pool).await?;
    let neighbour = create_node(&s, &s.unique_name("n"), &pool).await?;
    let token = agent_token(&client, &nodes, &node.name).await?;
    let kubeconfig = kubeconfig_with_token(&token)?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("agent.kubeconfig");
    std::fs::write(&path, serde_json::to_string(&kubeconfig)?)?;
    let as_agent = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?,
    )?;

    let secrets = Api::<Secret>::namespaced(as_agent.clone(), &own);
    let read = secrets.get("cheiron-tls-ca").await;
    assert!(is_forbidden(&read), "cheiron's CA key: {read:?}");
    let listed = secrets.list(&ListParams::default()).await;
    assert!(is_forbidden(&listed), "cheiron's Secrets: {listed:?}");
    let read = Api::<Secret>::namespaced(as_agent.clone(), &sources)
        .get("node-pull")
        .await;
    assert!(is_forbidden(&read), "a manager's source: {read:?}");
    let managers = Api::<cheiron::api::ClusterImagePullSecretManager>::all(as_agent.clone())
        .list(&ListParams::default())
        .await;
    assert!(
        is_forbidden(&managers),
        "the cluster managers (inline passwords): {managers:?}"
    );
    let leases = Api::<Lease>::namespaced(as_agent.clone(), &own);
    let read = leases.get("cheiron-controller").await;
    assert!(is_forbidden(&read), "the leader Lease: {read:?}");
    let taken = leases
        .patch(
            "cheiron-controller",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "node"}})),
        )
        .await;
    assert!(is_forbidden(&taken), "taking the leader Lease: {taken:?}");

    let host = crate::harness::controller::Host::shared()?;
    let credentials = node.credentials().display().to_string();
    let agent = CheironProcess::node_agent_on(
        &crate::harness::controller::Host {
            kubeconfig: path.clone(),
            ..host.clone()
        },
        &format!("node-agent-{}", node.name),
        &[
            "--node-name",
            &node.name,
            "--credentials-file",
            &credentials,
            "--pod-namespace",
            &nodes,
            "--metrics-auth",
            "kubernetes",
            "--resync",
            "1h",
        ],
    )?;
    let manager = node_manager(&s, &pool, &sources).await?;
    until_logins(
        &s,
        &node,
        "the credentials on the node",
        Some(expected_logins("first")),
    )
    .await?;
    // The watch is allowed: a rotation arrives long before the hour's resync.
    s.replace_secret_data(&sources, "node-pull", &pull_secret("second"))
        .await?;
    until_logins(
        &s,
        &node,
        "the rotation on the node",
        Some(expected_logins("second")),
    )
    .await?;
    let lease = Api::<Lease>::namespaced(client.clone(), &nodes)
        .get(&format!("cheiron-node-{}", node.name))
        .await?;
    let report = lease
        .metadata
        .annotations
        .unwrap_or_default()
        .remove("node.cheiron.anny.co/report")
        .ok_or("no report")?;
    assert!(report.contains("\"synced\":true"), "{report}");

    // Another node's report, and its own Lease held by another node: refused.
    let report_of = |name: String, holder: &str| -> Result<Value> {
        Ok(json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "labels": {"node.cheiron.anny.co/report": "v1"},
                "annotations": {"node.cheiron.anny.co/report": format!("{{\"node\":\"{holder}\",\"managers\":[]}}")},
            },
            "spec": {"holderIdentity": holder},
        }))
    };
    let reports = Api::<DynamicObject>::namespaced_with(
        as_agent.clone(),
        &nodes,
        &kube::api::ApiResource::erase::<Lease>(&()),
    );
    let refused = |written: &kube::Result<DynamicObject>| matches!(written, Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("only its own node's report"));
    // The apiserver compiles a new policy in the background (a refresh every second, later on a
    // loaded machine): wait, with a dry run that writes nothing, until it is in force.
    let neighbours = format!("cheiron-node-{}", neighbour.name);
    let probe: DynamicObject =
        serde_json::from_value(report_of(neighbours.clone(), &neighbour.name)?)?;
    s.eventually("the report policy to be in force", || async {
        let written = reports
            .patch(
                &neighbours,
                &PatchParams::apply("forger").force().dry_run(),
                &Patch::Apply(&probe),
            )
            .await;
        if refused(&written) {
            Ok(())
        } else {
            Err(format!("not refused yet: {written:?}").into())
        }
    })
    .await?;
    for (name, holder) in [
        (
            format!("cheiron-node-{}", neighbour.name),
            neighbour.name.as_str(),
        ),
        (
            format!("cheiron-node-{}", node.name),
            neighbour.name.as_str(),
        ),
    ] {
        let forged: DynamicObject = serde_json::from_value(report_of(name.clone(), holder)?)?;
        let written = reports
            .patch(
                &name,
                &PatchParams::apply("forger").force(),
                &Patch::Apply(&forged),
            )
            .await;
        assert!(refused(&written), "{name} held by {holder}: {written:?}");
    }

    // /metrics: no token, 401; a token without the right to read it, 403.
    assert_eq!(agent.admin_status("/metrics").await, Some(401));
    let with_token = reqwest::Client::new()
        .get(format!("http://{}/metrics", agent.admin()))
        .bearer_auth(&token)
        .send()
        .await?;
    assert_eq!(with_token.status().as_u16(), 403);

    let object = s.manager(&manager).await?.ok_or("manager gone early")?;
    s.delete_manager(&object).await?;
    drop(agent);
    drop(controller);
    for object in cluster_scoped.iter().rev() {
        let object: DynamicObject = serde_json::from_value(object.clone())?;
        let gvk = kube::api::GroupVersionKind::try_from(&object.types.clone().unwrap_or_default())?;
        let (resource, _) = kube::discovery::pinned_kind(&client, &gvk).await?;
        Api::<DynamicObject>::all_with(client.clone(), &resource)
            .delete(
                &object.metadata.name.unwrap_or_default(),
                &DeleteParams::default(),
            )
            .await?;
    }
    Api::<Namespace>::all(client.clone())
        .delete(&nodes, &DeleteParams::default())
        .await?;
    delete_nodes(&s, &[&node, &neighbour]).await
}

/// Another tool changes an entry cheiron merged into the kubelet's config.json, then the
/// manager goes: the agent leaves the entry (it still holds cheiron's credential, but is no
/// longer cheiron's to remove), and the controller announces it with a Warning Event on the
/// Node, naming the registry and never the value.
#[tokio::test]
async fn a_config_json_leftover_is_announced_on_the_node() -> Result {
    use k8s_openapi::api::events::v1::Event;
    use kube::api::ListParams;

    let s = ControllerScenario::new("node-leftover").await?;
    let (sources, pool) = source_and_pool(&s).await?;
    let node = create_node(&s, &s.unique_name("l"), &pool).await?;
    std::fs::write(node.config_json(), FOREIGN_CONFIG_JSON)?;
    let _agent = agent(&node, true)?;
    let manager = node_manager(&s, &pool, &sources).await?;
    s.eventually("cheiron's entry in config.json", || async {
        let merged = std::fs::read_to_string(node.config_json())?;
        if merged.contains("first-password") {
            Ok(())
        } else {
            Err(merged.into())
        }
    })
    .await?;
    // Another tool adds a member to cheiron's entry.
    let mut merged: Value = serde_json::from_str(&std::fs::read_to_string(node.config_json())?)?;
    merged["auths"]["registry.example.com"]["email"] = json!("ops@example.com");
    std::fs::write(node.config_json(), serde_json::to_string_pretty(&merged)?)?;

    let object = s.manager(&manager).await?.ok_or("manager gone early")?;
    s.delete_manager(&object).await?;
    let events = Api::<Event>::namespaced(s.client().clone(), NODE_NAMESPACE);
    let event = s
        .eventually("a ConfigJsonLeftover Event on the Node", || async {
            events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("ConfigJsonLeftover")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                            == Some(node.name.as_str())
                })
                .ok_or_else(|| "no Event yet".into())
        })
        .await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.unwrap_or_default();
    assert!(note.contains("registry.example.com"), "{note}");
    assert!(!note.contains("first-password"), "{note}");
    let left = std::fs::read_to_string(node.config_json())?;
    assert!(
        left.contains("first-password"),
        "the leftover stays: {left}"
    );
    delete_nodes(&s, &[&node]).await
}
