//! Mode Node against the real kube-apiserver: fake Node objects (no kubelet runs here), two
//! `cheiron node-agent` processes with temporary directories standing in for their hosts'
//! paths, and the shared controller running. Selecting, rotating, deselecting and deleting a
//! manager change exactly the right node's files; the kubelet's config.json is given back
//! byte for byte; the controller writes no Secret for a Node manager; the credential-provider
//! plugin answers the kubelet's request from the file the agent wrote.

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

use crate::{
    CHEIRON,
    dockerconfig::{dockerconfigjson_secret, registry_entry},
    harness::{Result, controller::CheironProcess},
    scenario::ControllerScenario,
};

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
        "the controller writes no Secret for a Node manager"
    );
    assert_eq!(s.secret(&bystander, "node-pull").await?.map(|_| ()), None);

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

    delete_nodes(&s, &[&gpu, &cpu]).await
}

/// Deletes the fake Nodes and their agents' report Leases.
async fn delete_nodes(s: &ControllerScenario, nodes: &[&FakeNode]) -> Result {
    let api = Api::<Node>::all(s.client().clone());
    let leases = Api::<Lease>::default_namespaced(s.client().clone());
    for node in nodes {
        api.delete(&node.name, &DeleteParams::default()).await?;
        let lease = format!("cheiron-node-{}", node.name);
        if leases.get_opt(&lease).await?.is_some() {
            leases.delete(&lease, &DeleteParams::default()).await?;
        }
    }
    Ok(())
}

/// The node counts and the bounded list of nodes, as the controller sums up the agents'
/// report Leases: three Nodes selected, two with an agent.
#[tokio::test]
async fn status_counts_selected_and_synced_nodes_and_lists_the_failing() -> Result {
    let s = ControllerScenario::new("node-status").await?;
    let sources = s.create_namespace(&[], &[]).await?;
    s.create_secret(&sources, &pull_secret("first")).await?;
    let pool = s.unique_name("pool");
    let a = create_node(&s, &s.unique_name("a"), &pool).await?;
    let b = create_node(&s, &s.unique_name("b"), &pool).await?;
    let without_agent = create_node(&s, &s.unique_name("c"), &pool).await?;
    let _a_agent = agent(&a, false)?;
    let b_agent = agent(&b, true)?;
    let manager = s
        .apply(&manager_yaml(
            &s.unique_name("nodes"),
            s.id(),
            &pool,
            &sources,
        ))
        .await?;

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

    let object = s.manager(&manager).await?.ok_or("manager gone early")?;
    s.delete_manager(&object).await?;
    delete_nodes(&s, &[&a, &b, &without_agent]).await
}

/// The agent watches each source Secret: a rotation reaches the node's file within the
/// test's wait, while the agent's `--resync` is an hour (and a status write, such as the
/// controller's node summary changing, does not wake it).
#[tokio::test]
async fn a_rotated_source_reaches_the_node_through_the_watch_long_before_the_resync() -> Result {
    let s = ControllerScenario::new("node-watch").await?;
    let sources = s.create_namespace(&[], &[]).await?;
    s.create_secret(&sources, &pull_secret("first")).await?;
    let pool = s.unique_name("pool");
    let node = create_node(&s, &s.unique_name("w"), &pool).await?;
    let agent = agent_with_resync(&node, false, "1h")?;
    let manager = s
        .apply(&manager_yaml(
            &s.unique_name("nodes"),
            s.id(),
            &pool,
            &sources,
        ))
        .await?;
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

/// The agent under exactly the RBAC `cheiron manifests --node` gives it (impersonating its
/// ServiceAccount), with its Secret Role narrowed to the one source by name (the chart's
/// `node.secretNames`): it reads and watches that Secret by its `metadata.name` field
/// selector, writes its report Lease, and cannot read another Secret of the namespace.
#[tokio::test]
async fn an_agent_works_with_only_the_manifests_rbac_narrowed_to_its_secret() -> Result {
    use cheiron::install::{DeploymentMode, Install, NodeAgentSetup};
    use k8s_openapi::api::{
        core::v1::{Secret, ServiceAccount},
        rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
    };

    let s = ControllerScenario::new("node-rbac").await?;
    let own = s.create_namespace(&[], &[]).await?;
    let sources = s.create_namespace(&[], &[]).await?;
    s.create_secret(&sources, &pull_secret("first")).await?;
    let mut other = pull_secret("other");
    other.metadata.name = Some("not-a-source".to_owned());
    s.create_secret(&sources, &other).await?;

    // `cheiron manifests --node --namespace OWN --node-secret-namespace SOURCES`, its
    // cluster-wide names made unique, the Secret Role narrowed to `node-pull`.
    let install = Install {
        namespace: own.clone(),
        node_agent: Some(NodeAgentSetup {
            secret_namespaces: vec![sources.clone()],
        }),
        ..Install::default()
    };
    let cluster_name = s.unique_name("node-agent");
    let client = s.client().clone();
    for mut object in install.server_objects_for(DeploymentMode::Split)? {
        if object["metadata"]["labels"]["app.kubernetes.io/component"] != "node-agent" {
            continue;
        }
        let pp = PostParams::default();
        match object["kind"].as_str().unwrap_or_default() {
            "ServiceAccount" => {
                let sa: ServiceAccount = serde_json::from_value(object)?;
                Api::namespaced(client.clone(), &own)
                    .create(&pp, &sa)
                    .await?;
            }
            "ClusterRole" => {
                object["metadata"]["name"] = json!(cluster_name);
                let role: ClusterRole = serde_json::from_value(object)?;
                Api::all(client.clone()).create(&pp, &role).await?;
            }
            "ClusterRoleBinding" => {
                object["metadata"]["name"] = json!(cluster_name);
                object["roleRef"]["name"] = json!(cluster_name);
                let binding: ClusterRoleBinding = serde_json::from_value(object)?;
                Api::all(client.clone()).create(&pp, &binding).await?;
            }
            "Role" => {
                if object["metadata"]["namespace"] == sources.as_str() {
                    object["rules"][0]["resourceNames"] = json!(["node-pull"]);
                }
                let role: Role = serde_json::from_value(object)?;
                let namespace = role.metadata.namespace.clone().unwrap_or_default();
                Api::namespaced(client.clone(), &namespace)
                    .create(&pp, &role)
                    .await?;
            }
            "RoleBinding" => {
                let binding: RoleBinding = serde_json::from_value(object)?;
                let namespace = binding.metadata.namespace.clone().unwrap_or_default();
                Api::namespaced(client.clone(), &namespace)
                    .create(&pp, &binding)
                    .await?;
            }
            _ => {}
        }
    }

    // A kubeconfig acting as the agent's ServiceAccount.
    let host = crate::harness::controller::Host::shared()?;
    let mut kubeconfig = kube::config::Kubeconfig::read_from(&host.kubeconfig)?;
    for user in &mut kubeconfig.auth_infos {
        if let Some(auth) = user.auth_info.as_mut() {
            auth.impersonate = Some(format!(
                "system:serviceaccount:{own}:{}",
                cheiron::install::NODE_AGENT
            ));
        }
    }
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("agent.kubeconfig");
    std::fs::write(&path, serde_json::to_string(&kubeconfig)?)?;
    let as_agent = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?,
    )?;
    let forbidden = Api::<Secret>::namespaced(as_agent.clone(), &sources)
        .get("not-a-source")
        .await;
    assert!(
        matches!(&forbidden, Err(kube::Error::Api(e)) if e.code == 403),
        "another Secret of the namespace: {forbidden:?}"
    );

    let pool = s.unique_name("pool");
    let node = create_node(&s, &s.unique_name("r"), &pool).await?;
    let credentials = node.credentials().display().to_string();
    let _agent = CheironProcess::node_agent_on(
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
            &own,
            "--resync",
            "1h",
        ],
    )?;
    let manager = s
        .apply(&manager_yaml(
            &s.unique_name("nodes"),
            s.id(),
            &pool,
            &sources,
        ))
        .await?;
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
    let lease = Api::<Lease>::namespaced(client.clone(), &own)
        .get(&format!("cheiron-node-{}", node.name))
        .await?;
    let report = lease
        .metadata
        .annotations
        .unwrap_or_default()
        .remove("node.cheiron.anny.co/report")
        .ok_or("no report")?;
    assert!(report.contains("\"synced\":true"), "{report}");

    let object = s.manager(&manager).await?.ok_or("manager gone early")?;
    s.delete_manager(&object).await?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .delete(&cluster_name, &DeleteParams::default())
        .await?;
    Api::<ClusterRole>::all(client.clone())
        .delete(&cluster_name, &DeleteParams::default())
        .await?;
    Api::<Node>::all(client)
        .delete(&node.name, &DeleteParams::default())
        .await?;
    Ok(())
}
