//! The node agent of the plain manifests (`cheiron manifests --node`; docs/node.md): what the
//! chart renders with `node.enabled=true` and its default `node.*` values. A DaemonSet of
//! `cheiron node-agent` on every node, its ServiceAccount, and its narrow RBAC: read Nodes and
//! the cluster managers, write its node's report Lease in cheiron's namespace, read and watch
//! Secrets by name in the namespaces named (cheiron's by default). `tests/install.rs` fails
//! when the chart and this drift apart.

use serde_json::{Value, json};

use super::{installation::Install, manifests::ManifestError, rbac, workload};

/// The agent's ServiceAccount, ClusterRole, Roles and DaemonSet.
pub const NODE_AGENT: &str = "cheiron-node-agent";
/// The Role of its report Leases.
pub const NODE_AGENT_REPORT: &str = "cheiron-node-agent-report";
/// The host directory of the credentials file and the merge state (the chart's
/// `node.stateDir`).
pub const STATE_DIR: &str = "/var/lib/cheiron";
const COMPONENT: &str = "node-agent";

/// What `--node` installs: the namespaces whose Secrets the agents may read (none: cheiron's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeAgentSetup {
    /// The chart's `node.secretNamespaces`.
    pub secret_namespaces: Vec<String>,
}

impl Install {
    /// The node agent's objects, in the chart's order.
    pub(super) fn node_agent_objects(
        &self,
        setup: &NodeAgentSetup,
    ) -> Result<Vec<Value>, ManifestError> {
        let mut objects = vec![serde_json::to_value(workload::service_account(
            self, NODE_AGENT, COMPONENT,
        ))?];
        objects.extend(self.cluster_access(
            NODE_AGENT,
            COMPONENT,
            &[NODE_AGENT],
            rbac::node_agent_rules(),
        )?);
        objects.extend(self.namespace_access(
            NODE_AGENT_REPORT,
            COMPONENT,
            NODE_AGENT,
            rbac::node_agent_report_rules(),
        )?);
        let namespaces = if setup.secret_namespaces.is_empty() {
            vec![self.namespace.clone()]
        } else {
            setup.secret_namespaces.clone()
        };
        for namespace in namespaces {
            let in_namespace = Install {
                namespace,
                ..self.clone()
            };
            let [role, mut binding] = in_namespace.namespace_access(
                NODE_AGENT,
                COMPONENT,
                NODE_AGENT,
                rbac::node_agent_secret_rules(),
            )?;
            // The subject is the agent's ServiceAccount, in cheiron's namespace.
            binding["subjects"][0]["namespace"] = json!(self.namespace);
            objects.extend([role, binding]);
        }
        objects.push(self.node_agent_daemon_set());
        Ok(objects)
    }

    fn node_agent_daemon_set(&self) -> Value {
        let field = |path: &str| json!({"valueFrom": {"fieldRef": {"fieldPath": path}}});
        let env = |name: &str, path: &str| {
            let mut var = field(path);
            var["name"] = json!(name);
            var
        };
        let probe = |path: &str, period: u32, failures: u32| {
            json!({
                "httpGet": {"path": path, "port": "admin", "scheme": "HTTP"},
                "periodSeconds": period,
                "failureThreshold": failures,
                "timeoutSeconds": 2,
            })
        };
        json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": self.meta(NODE_AGENT, COMPONENT),
            "spec": {
                "selector": {"matchLabels": self.selector(COMPONENT)},
                "updateStrategy": {"type": "RollingUpdate"},
                "template": {
                    "metadata": {"labels": self.labels(COMPONENT)},
                    "spec": {
                        "serviceAccountName": NODE_AGENT,
                        "enableServiceLinks": false,
                        // Root, to write root-owned files in the host directory; no capability.
                        "securityContext": {
                            "runAsUser": 0,
                            "runAsGroup": 0,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{
                            "name": COMPONENT,
                            "image": self.image,
                            "imagePullPolicy": "IfNotPresent",
                            "args": [
                                "node-agent",
                                "--log-format=json",
                                "--log=info",
                                format!("--credentials-file={STATE_DIR}/credentials.json"),
                                "--cache-duration=60s",
                                "--resync=60s",
                            ],
                            "env": [
                                env("CHEIRON_NODE_NAME", "spec.nodeName"),
                                env("CHEIRON_POD_NAMESPACE", "metadata.namespace"),
                            ],
                            // /healthz, /readyz and /metrics (cheiron_node_*).
                            "ports": [{"name": "admin", "containerPort": 8080, "protocol": "TCP"}],
                            "livenessProbe": probe("/healthz", 10, 3),
                            "readinessProbe": probe("/readyz", 5, 2),
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "32Mi"},
                                "limits": {"memory": "128Mi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": false,
                                "readOnlyRootFilesystem": true,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [{"name": "state", "mountPath": STATE_DIR}],
                        }],
                        "volumes": [{
                            "name": "state",
                            "hostPath": {"path": STATE_DIR, "type": "DirectoryOrCreate"},
                        }],
                    },
                },
            },
        })
    }
}
