//! Least-privilege RBAC: exactly the API calls the code makes, split by the part of cheiron
//! that makes them, so a reviewer can check each rule against one module. The Helm chart's
//! templates carry the same rules, and `tests/install/` fails when they differ or when a
//! SubjectAccessReview shows a call the code needs is missing or a broader one is allowed.

use k8s_openapi::api::rbac::v1::PolicyRule;

use crate::api::GROUP;

/// The two manager resources.
const MANAGERS: [&str; 2] = ["imagepullsecretmanagers", "clusterimagepullsecretmanagers"];

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        resource_names: None,
        non_resource_urls: None,
    }
}

fn named(rule: PolicyRule, name: &str) -> PolicyRule {
    PolicyRule {
        resource_names: Some(vec![name.to_owned()]),
        ..rule
    }
}

/// What the webhook reads, cluster-wide (`crates/cheiron-webhook/src/source/cluster.rs`): it watches both manager
/// kinds and Namespaces (metadata), and gets a Namespace its cache has not seen yet.
///
/// No Secrets: the webhook serves the apiserver on a port any Pod may be able to reach, so its
/// identity holds nothing worth stealing. It only watches cheiron's own Secrets to warn that a
/// Secret it injects does not exist yet, and skips that watch (and the warning) when its
/// identity cannot list Secrets. `cheiron run` ([`DeploymentMode::Combined`]) has the
/// controller's Secret rules as well, so it keeps the warning.
///
/// [`DeploymentMode::Combined`]: super::DeploymentMode::Combined
pub fn webhook_rules() -> Vec<PolicyRule> {
    vec![
        rule(GROUP, &MANAGERS, &["list", "watch"]),
        rule("", &["namespaces"], &["get", "list", "watch"]),
    ]
}

/// What the controller reads and writes, cluster-wide (`crates/cheiron-controller/src/`). It is the only
/// identity of cheiron with Secret rights:
/// - managers of both kinds: watched, `patch`ed to add and remove the finalizer, their
///   `status` `patch`ed (no `*/finalizers` subresource: the ownerReferences on its Secrets set
///   no `blockOwnerDeletion`, the only thing that would need it);
/// - Secrets: cheiron's own watched by label selector, each named source watched by field
///   selector and read with `get` (any namespace a manager names), its own Secrets read,
///   created, replaced (`update`) and deleted one by one. RBAC cannot narrow `list`/`watch` to
///   a selector, so this identity can read every Secret in the cluster;
/// - ServiceAccounts: watched, read, and `patch`ed (JSON Patch with a `test` guard);
/// - Namespaces: watched (metadata);
/// - Pods: watched (metadata), only those the webhook labelled as referencing a missing pull
///   secret (a label selector; RBAC cannot narrow `list`/`watch` to it), to put a Warning
///   Event on those whose Secret is still missing after the grace period;
/// - Events (`events.k8s.io/v1`): `create`d, and `patch`ed when they repeat, in the namespace
///   of the manager, ServiceAccount or Pod (`default` for cluster managers);
/// - the kubelets' pull failures (core/v1 Events, `involvedObject.kind=Pod,reason=Failed`),
///   watched to attribute a refused pull to the manager whose credential the Pod used
///   (docs/credential-health.md); the Pod is then listed by name (the Pod rights above) and
///   its pull secrets' metadata read (the Secret rights above);
/// - mode Node (docs/node.md): Nodes watched (metadata: their labels) and the node agents'
///   report Leases watched (by label, in the node namespace, `--node-namespace`; a
///   ClusterRole cannot narrow `list`/`watch` to one namespace, and a Lease holds no secret),
///   only once a mode Node manager exists; the node credentials of each mode Node manager
///   written there (a Secret, with the Secret rights above).
pub fn controller_rules() -> Vec<PolicyRule> {
    vec![
        rule(GROUP, &MANAGERS, &["list", "watch", "patch"]),
        rule(
            GROUP,
            &[
                "imagepullsecretmanagers/status",
                "clusterimagepullsecretmanagers/status",
            ],
            &["patch"],
        ),
        rule(
            "",
            &["secrets"],
            &["get", "list", "watch", "create", "update", "delete"],
        ),
        rule("", &["serviceaccounts"], &["get", "list", "watch", "patch"]),
        rule("", &["namespaces"], &["list", "watch"]),
        rule("", &["pods"], &["list", "watch"]),
        rule("events.k8s.io", &["events"], &["create", "patch"]),
        rule("", &["events"], &["list", "watch"]),
        rule("", &["nodes"], &["list", "watch"]),
        rule("coordination.k8s.io", &["leases"], &["list", "watch"]),
    ]
}

/// The node agent (docs/node.md), cluster-wide: its Node's labels only (a `metadata.name`
/// field selector; RBAC cannot name a DaemonSet Pod's own Node). No manager: a cluster manager
/// may hold an inline password; the controller hands the agent what it needs.
pub fn node_agent_rules() -> Vec<PolicyRule> {
    vec![rule("", &["nodes"], &["get", "list", "watch"])]
}

/// The node agent's report Lease (`cheiron-node-<node>`) in the node namespace (never
/// cheiron's, which holds the controller's leader Lease), by server-side apply: `create` and
/// `patch` cannot name one Lease per Pod of a DaemonSet, so a ValidatingAdmissionPolicy holds
/// each agent to its own node's Lease (install/node_agent.rs).
pub fn node_agent_report_rules() -> Vec<PolicyRule> {
    vec![rule(
        "coordination.k8s.io",
        &["leases"],
        &["create", "patch"],
    )]
}

/// The node credentials the controller writes in the node namespace (one Secret per mode Node
/// manager, node/handoff.rs), listed and watched by label.
pub fn node_agent_secret_rules() -> Vec<PolicyRule> {
    vec![rule("", &["secrets"], &["get", "list", "watch"])]
}

/// The controller's Lease (runtime/leader.rs), in cheiron's own namespace only: created when
/// missing, then read and patched by name. `create` cannot be limited to a name in RBAC.
pub fn leader_election_rules(lease: &str) -> Vec<PolicyRule> {
    vec![
        rule("coordination.k8s.io", &["leases"], &["create"]),
        named(
            rule("coordination.k8s.io", &["leases"], &["get", "patch"]),
            lease,
        ),
    ]
}

/// With `--metrics-auth kubernetes`, what every cheiron identity asks the apiserver about a
/// `/metrics` request (`crates/cheiron-runtime/src/admin/access.rs`): who its bearer token belongs to
/// (TokenReview) and whether that user may `get` `/metrics` (SubjectAccessReview). The same
/// two rules as the built-in `system:auth-delegator` ClusterRole, spelt out here so that they
/// are reviewed with the rest.
pub fn metrics_auth_rules() -> Vec<PolicyRule> {
    vec![
        rule("authentication.k8s.io", &["tokenreviews"], &["create"]),
        rule(
            "authorization.k8s.io",
            &["subjectaccessreviews"],
            &["create"],
        ),
    ]
}

/// With `--metrics-auth kubernetes`, what a scraper (Prometheus' ServiceAccount) needs to read
/// `/metrics`: `get` on that non-resource URL. Bound to no one by cheiron.
pub fn metrics_reader_rules() -> Vec<PolicyRule> {
    vec![PolicyRule {
        api_groups: None,
        resources: None,
        resource_names: None,
        non_resource_urls: Some(vec![crate::admin::access::METRICS_PATH.to_owned()]),
        verbs: vec![crate::admin::access::METRICS_VERB.to_owned()],
    }]
}

/// What the built-in `admin` and `edit` ClusterRoles gain (aggregated, label
/// `rbac.authorization.k8s.io/aggregate-to-admin`/`-edit`): managing the namespaced
/// `ImagePullSecretManager`s of the namespaces they are bound in. A namespaced manager reads
/// Secrets of its own namespace only, which these roles can read anyway. Not its `status` (the
/// controller's), and nothing cluster-scoped.
pub fn manager_edit_rules() -> Vec<PolicyRule> {
    vec![rule(
        GROUP,
        &[MANAGERS[0]],
        &[
            "get", "list", "watch", "create", "update", "patch", "delete",
        ],
    )]
}

/// What the built-in `view` ClusterRole gains (aggregated): reading namespaced managers, their
/// status included.
pub fn manager_view_rules() -> Vec<PolicyRule> {
    vec![rule(GROUP, &[MANAGERS[0]], &["get", "list", "watch"])]
}

/// KEP-4412 credential providers (`crates/cheiron-credential/src/token.rs`): `create` on
/// `serviceaccounts/token`, the TokenRequest the controller makes for the ServiceAccount a
/// manager's `credentialProvider.serviceAccountName` names. Limited to `names` when given (the
/// request names the ServiceAccount, so RBAC can hold it to names); all ServiceAccounts of the
/// Role's namespace without.
pub fn credential_provider_token_rules(names: &[String]) -> Vec<PolicyRule> {
    let rule = rule("", &["serviceaccounts/token"], &["create"]);
    if names.is_empty() {
        return vec![rule];
    }
    vec![PolicyRule {
        resource_names: Some(names.to_vec()),
        ..rule
    }]
}

/// `cheiron-certs` in cheiron's namespace (`certs-tool/src/create.rs`, `patch.rs`): `create`
/// reads the serving Secret and its CA Secret (`<secret>-ca`), creates them when missing and
/// replaces them (`update`, under the `resourceVersion` read) when it issues a new certificate;
/// `patch` reads the serving Secret's `ca.crt`. Reads and replacements are limited to the two
/// names; `create` cannot be limited to a name in RBAC.
pub fn certificates_secret_rules(secret: &str) -> Vec<PolicyRule> {
    vec![
        rule("", &["secrets"], &["create"]),
        PolicyRule {
            resource_names: Some(vec![secret.to_owned(), format!("{secret}-ca")]),
            ..rule("", &["secrets"], &["get", "update"])
        },
    ]
}

/// `cheiron-certs patch`: reads cheiron's MutatingWebhookConfiguration and writes `caBundle`
/// into it (strategic merge patch), by name.
pub fn certificates_webhook_rules(webhook_configuration: &str) -> Vec<PolicyRule> {
    vec![named(
        rule(
            "admissionregistration.k8s.io",
            &["mutatingwebhookconfigurations"],
            &["get", "patch"],
        ),
        webhook_configuration,
    )]
}

/// With the fleet (docs/fleet.md), what the controller reads of Cluster API cluster-wide: its
/// CRD, by name only (the `Cluster` watch starts when it appears). Its `Cluster`s are read
/// only in the fleet namespaces ([`fleet_cluster_rules`]). The kubeconfig Secrets are read
/// under [`controller_rules`].
pub fn fleet_crd_rules() -> Vec<PolicyRule> {
    vec![named(
        rule(
            "apiextensions.k8s.io",
            &["customresourcedefinitions"],
            &["get", "list", "watch"],
        ),
        "clusters.cluster.x-k8s.io",
    )]
}

/// Cluster API's `Cluster`s, as metadata: their labels decide which workload clusters a
/// manager selects, their deletion releases a cluster.
pub fn fleet_cluster_rules() -> Vec<PolicyRule> {
    vec![rule("cluster.x-k8s.io", &["clusters"], &["list", "watch"])]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verbs_on(rules: &[PolicyRule], group: &str, resource: &str) -> Vec<String> {
        rules
            .iter()
            .filter(|r| r.api_groups.as_deref() == Some(&[group.to_owned()]))
            .filter(|r| {
                r.resources
                    .as_deref()
                    .is_some_and(|rs| rs.iter().any(|r| r == resource))
            })
            .flat_map(|r| r.verbs.clone())
            .collect()
    }

    #[test]
    fn no_rule_uses_wildcards_escalation_or_bulk_deletion() {
        let all = [
            webhook_rules(),
            controller_rules(),
            leader_election_rules("cheiron-controller"),
            certificates_secret_rules("cheiron-tls"),
            certificates_webhook_rules("cheiron"),
            metrics_auth_rules(),
            metrics_reader_rules(),
            manager_edit_rules(),
            manager_view_rules(),
            node_agent_rules(),
            node_agent_report_rules(),
            node_agent_secret_rules(),
        ]
        .concat();
        for rule in &all {
            for word in rule
                .verbs
                .iter()
                .chain(rule.resources.iter().flatten())
                .chain(rule.api_groups.iter().flatten())
            {
                assert_ne!(word, "*", "{rule:?}");
                assert!(
                    !["escalate", "bind", "impersonate", "deletecollection"]
                        .contains(&word.as_str()),
                    "{rule:?}"
                );
            }
        }
    }

    #[test]
    fn metrics_auth_creates_reviews_only_and_readers_only_get_metrics() {
        let rules = metrics_auth_rules();
        assert_eq!(
            verbs_on(&rules, "authentication.k8s.io", "tokenreviews"),
            ["create"]
        );
        assert_eq!(
            verbs_on(&rules, "authorization.k8s.io", "subjectaccessreviews"),
            ["create"]
        );
        assert_eq!(rules.len(), 2);
        let reader = metrics_reader_rules();
        assert_eq!(reader.len(), 1);
        assert_eq!(
            reader[0].non_resource_urls.as_deref(),
            Some(&["/metrics".to_owned()][..])
        );
        assert_eq!(reader[0].verbs, ["get"]);
        assert!(reader[0].resources.is_none() && reader[0].api_groups.is_none());
    }

    #[test]
    fn the_webhook_cannot_touch_secrets() {
        assert!(verbs_on(&webhook_rules(), "", "secrets").is_empty());
    }

    #[test]
    fn the_webhook_only_reads() {
        for rule in webhook_rules() {
            for verb in &rule.verbs {
                assert!(
                    ["get", "list", "watch"].contains(&verb.as_str()),
                    "{rule:?}"
                );
            }
        }
    }

    #[test]
    fn the_controller_patches_managers_and_service_accounts_but_never_replaces_them() {
        let rules = controller_rules();
        assert!(!verbs_on(&rules, GROUP, "imagepullsecretmanagers").contains(&"update".into()));
        assert!(!verbs_on(&rules, "", "serviceaccounts").contains(&"update".into()));
    }
}
