//! The node agent of the plain manifests (`cheiron manifests --node`; docs/node.md): what the
//! chart renders with `node.enabled=true` and its default `node.*` values. A DaemonSet of
//! `cheiron node-agent` on every node and its identity, all in a namespace of their own (the
//! node namespace, `<cheiron's namespace>-node` by default, Pod Security `privileged`: the
//! agent needs root and host paths) that holds nothing of the controller's. Its narrow RBAC:
//! read Nodes, write report Leases in the node namespace only (a ValidatingAdmissionPolicy
//! holds each agent to its own node's Lease), read and watch the Secrets of the node namespace
//! (the node credentials the controller writes there). No manager, no source Secret, and no
//! right at all in cheiron's namespace: not its CA key, not the controller's leader Lease.
//! `tests/install/` fails when the chart and this drift apart.

use serde_json::{Value, json};

use super::{
    error::ManifestError,
    installation::{ADMIN_PORT, Install, METRICS_AUTH, MetricsAuth},
    rbac,
    setup::NodeAgentSetup,
    workload,
};

/// The agent's ServiceAccount, ClusterRole, Roles and DaemonSet.
pub const NODE_AGENT: &str = "cheiron-node-agent";
/// The Role of its report Leases, and the ValidatingAdmissionPolicy (and binding) that lets
/// each agent write only its own node's.
pub const NODE_AGENT_REPORT: &str = "cheiron-node-agent-report";
/// The binding of [`METRICS_AUTH`] to the agent, with `--metrics-auth kubernetes`.
pub const NODE_AGENT_METRICS_AUTH: &str = "cheiron-node-agent-metrics-auth";
/// The host directory of the credentials file and the merge state (the chart's
/// `node.stateDir`).
pub const STATE_DIR: &str = "/var/lib/cheiron";
const COMPONENT: &str = "node-agent";

/// The CEL of [`NODE_AGENT_REPORT`]'s policy: the token is bound to a Pod on a node, the Lease
/// names that node as its holder and, unless the name is too long to be spelt out (then
/// report.rs hashes it, and the controller reads only reports whose holder is their node),
/// is `cheiron-node-<node>`.
const OWN_REPORT_ONLY: &str = "'authentication.kubernetes.io/node-name' in request.userInfo.extra \
    && size(request.userInfo.extra['authentication.kubernetes.io/node-name']) == 1 \
    && has(object.spec) && has(object.spec.holderIdentity) \
    && object.spec.holderIdentity == request.userInfo.extra['authentication.kubernetes.io/node-name'][0] \
    && (object.metadata.name == 'cheiron-node-' + request.userInfo.extra['authentication.kubernetes.io/node-name'][0] \
        || size(request.userInfo.extra['authentication.kubernetes.io/node-name'][0]) > 240)";

impl Install {
    /// The node agent's objects, in the chart's order.
    pub(super) fn node_agent_objects(
        &self,
        setup: &NodeAgentSetup,
    ) -> Result<Vec<Value>, ManifestError> {
        let node_namespace = setup.namespace_of(&self.namespace);
        // Every namespaced object of the agent, and the subject of every binding, is there.
        let node = Install {
            namespace: node_namespace.clone(),
            ..self.clone()
        };
        let mut objects = vec![
            node.node_namespace(),
            serde_json::to_value(workload::service_account(&node, NODE_AGENT, COMPONENT))?,
        ];
        objects.extend(node.cluster_access(
            NODE_AGENT,
            COMPONENT,
            &[NODE_AGENT],
            rbac::node_agent_rules(),
        )?);
        if self.metrics_auth == MetricsAuth::Kubernetes {
            objects.push(node.metrics_auth_binding());
        }
        objects.extend(node.namespace_access(
            NODE_AGENT_REPORT,
            COMPONENT,
            NODE_AGENT,
            rbac::node_agent_report_rules(),
        )?);
        objects.extend(node.own_report_only());
        objects.extend(node.namespace_access(
            NODE_AGENT,
            COMPONENT,
            NODE_AGENT,
            rbac::node_agent_secret_rules(),
        )?);
        objects.push(node.node_agent_daemon_set());
        objects.push(node.node_agent_network_policy());
        Ok(objects)
    }

    /// The node namespace: Pod Security `privileged` (the agent runs as root with host paths;
    /// `restricted` would refuse its Pods), and nothing of the controller's in it.
    fn node_namespace(&self) -> Value {
        let mut labels = json!(self.labels(COMPONENT));
        for mode in ["enforce", "audit", "warn"] {
            labels[format!("pod-security.kubernetes.io/{mode}")] = json!("privileged");
        }
        json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": self.namespace, "labels": labels},
        })
    }

    /// With `--metrics-auth kubernetes`: the agent may review the tokens of `/metrics`
    /// requests, as every other identity of cheiron.
    fn metrics_auth_binding(&self) -> Value {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": self.cluster_meta(NODE_AGENT_METRICS_AUTH, COMPONENT),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": METRICS_AUTH,
            },
            "subjects": [{"kind": "ServiceAccount", "name": NODE_AGENT, "namespace": self.namespace}],
        })
    }

    /// RBAC cannot give each Pod of a DaemonSet its own Lease: this policy does. An agent's
    /// token is bound to its Pod, so it carries the Pod's node
    /// (`authentication.kubernetes.io/node-name`); a Lease
    /// the agent creates or changes must be that node's report.
    fn own_report_only(&self) -> [Value; 2] {
        let agent = format!("system:serviceaccount:{}:{NODE_AGENT}", self.namespace);
        [
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": self.cluster_meta(NODE_AGENT_REPORT, COMPONENT),
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [{
                            "apiGroups": ["coordination.k8s.io"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["leases"],
                        }],
                    },
                    "matchConditions": [{
                        "name": "node-agent",
                        "expression": format!("request.userInfo.username == '{agent}'"),
                    }],
                    "validations": [{
                        "expression": OWN_REPORT_ONLY,
                        "message": "a cheiron node agent may write only its own node's report Lease (cheiron-node-<node>, holder <node>), with a token bound to its Pod",
                        "reason": "Forbidden",
                    }],
                },
            }),
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": self.cluster_meta(NODE_AGENT_REPORT, COMPONENT),
                "spec": {
                    "policyName": NODE_AGENT_REPORT,
                    "validationActions": ["Deny"],
                },
            }),
        ]
    }

    /// The agents' admin port (`/healthz`, `/readyz`, `/metrics`) admits Pods of the node
    /// namespace only, as the other components' admit their namespace's (kubelet probes come
    /// from the Pod's own node, always admitted).
    fn node_agent_network_policy(&self) -> Value {
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": self.meta(NODE_AGENT, COMPONENT),
            "spec": {
                "podSelector": {"matchLabels": self.selector(COMPONENT)},
                "policyTypes": ["Ingress"],
                "ingress": [{
                    "ports": [{"port": ADMIN_PORT, "protocol": "TCP"}],
                    "from": [{"podSelector": {}}],
                }],
            },
        })
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
        let mut args = vec![
            "node-agent".to_owned(),
            "--log-format=json".to_owned(),
            "--log=info".to_owned(),
            format!("--credentials-file={STATE_DIR}/credentials.json"),
            "--cache-duration=60s".to_owned(),
            "--resync=60s".to_owned(),
        ];
        if self.metrics_auth != MetricsAuth::None {
            args.push(format!("--metrics-auth={}", self.metrics_auth));
        }
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
                            "args": args,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::setup::NODE_NAMESPACE_SUFFIX;

    fn objects(install: &Install) -> Vec<Value> {
        install
            .node_agent_objects(&NodeAgentSetup::default())
            .unwrap_or_default()
    }

    #[test]
    fn the_agent_lives_in_its_own_namespace_and_has_nothing_in_cheirons() {
        let install = Install::default();
        let node = format!("{}{NODE_NAMESPACE_SUFFIX}", install.namespace);
        let all = objects(&install);
        assert_eq!(all[0]["kind"], "Namespace");
        assert_eq!(all[0]["metadata"]["name"], node.as_str());
        assert_eq!(
            all[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
            "privileged"
        );
        for object in &all {
            assert_ne!(
                object["metadata"]["namespace"],
                install.namespace.as_str(),
                "{object}"
            );
            for subject in object["subjects"].as_array().into_iter().flatten() {
                assert_eq!(subject["namespace"], node.as_str(), "{object}");
            }
        }
        let secret_roles: Vec<&Value> = all
            .iter()
            .filter(|o| o["kind"] == "Role" && o["metadata"]["name"] == NODE_AGENT)
            .collect();
        assert_eq!(secret_roles.len(), 1);
        assert_eq!(secret_roles[0]["metadata"]["namespace"], node.as_str());
        let named = NodeAgentSetup {
            namespace: Some("agents".to_owned()),
        };
        assert_eq!(named.namespace_of("cheiron"), "agents");
    }

    #[test]
    fn the_report_policy_binds_the_agents_identity_to_its_own_nodes_lease() {
        let all = objects(&Install::default());
        let policy = all
            .iter()
            .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            policy["spec"]["matchConditions"][0]["expression"],
            "request.userInfo.username == 'system:serviceaccount:cheiron-system-node:cheiron-node-agent'"
        );
        let rule = policy["spec"]["validations"][0]["expression"]
            .as_str()
            .unwrap_or_default();
        // The user-info extra of a token bound to a Pod: the Pod's node.
        assert!(
            rule.contains("request.userInfo.extra['authentication.kubernetes.io/node-name'][0]"),
            "{rule}"
        );
        assert!(rule.contains("object.spec.holderIdentity =="), "{rule}");
        // The prefix report.rs names Leases with.
        assert_eq!(crate::node::report::lease_name("n"), "cheiron-node-n");
        assert!(rule.contains("'cheiron-node-' +"), "{rule}");
        let binding = all
            .iter()
            .find(|o| o["kind"] == "ValidatingAdmissionPolicyBinding")
            .cloned()
            .unwrap_or_default();
        assert_eq!(binding["spec"]["policyName"], NODE_AGENT_REPORT);
        assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    }

    #[test]
    fn with_metrics_auth_the_agent_reviews_tokens_and_a_network_policy_selects_it() {
        let open = objects(&Install::default());
        let reviewed = objects(&Install {
            metrics_auth: MetricsAuth::Kubernetes,
            ..Install::default()
        });
        let args = |all: &[Value]| {
            all.iter()
                .find(|o| o["kind"] == "DaemonSet")
                .map(|d| d["spec"]["template"]["spec"]["containers"][0]["args"].clone())
                .unwrap_or_default()
        };
        assert!(!args(&open).to_string().contains("--metrics-auth"));
        assert!(
            args(&reviewed)
                .to_string()
                .contains("\"--metrics-auth=kubernetes\"")
        );
        let binding = reviewed
            .iter()
            .find(|o| o["metadata"]["name"] == NODE_AGENT_METRICS_AUTH)
            .cloned()
            .unwrap_or_default();
        assert_eq!(binding["roleRef"]["name"], METRICS_AUTH);
        assert!(
            !open
                .iter()
                .any(|o| o["metadata"]["name"] == NODE_AGENT_METRICS_AUTH)
        );
        let policy = open
            .iter()
            .find(|o| o["kind"] == "NetworkPolicy")
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            policy["spec"]["ingress"][0]["ports"][0]["port"],
            json!(ADMIN_PORT)
        );
        assert_eq!(
            policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
            COMPONENT
        );
    }
}
