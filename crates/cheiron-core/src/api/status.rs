//! Status shared by both manager kinds.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The reasons of the `Ready` condition: what the controller writes, what `explain`, the
/// alerts and users read.
pub mod reason {
    /// Every target namespace holds every Secret, up to date.
    pub const SYNCED: &str = "Synced";
    /// Synced, but an entry keeps its password inline.
    pub const INLINE_CREDENTIALS: &str = "InlineCredentials";
    /// A source Secret does not exist.
    pub const SOURCE_MISSING: &str = "SourceMissing";
    /// A source Secret is not a usable docker config.
    pub const INVALID_SOURCE: &str = "InvalidSource";
    /// A registry key the kubelet would never use for the images it plausibly means; the
    /// Secrets are written all the same (docs/registries.md).
    pub const UNUSABLE_REGISTRY_KEY: &str = "UnusableRegistryKey";
    /// A Secret name is taken by something cheiron does not manage, or by an older manager.
    pub const CONFLICT: &str = "Conflict";
    /// Writing to some namespaces failed.
    pub const SYNC_FAILED: &str = "SyncFailed";
    /// A credential-provider entry has no valid credential: the plugin fails and the last
    /// good credential expired (or there never was one), or no provider serves its image.
    pub const CREDENTIAL_PROVIDER_FAILED: &str = "CredentialProviderFailed";
    /// A credential-provider entry waits for its plugin's first answer, fetched in the
    /// background; the answer triggers a reconcile (docs/credential-providers.md).
    pub const CREDENTIAL_PENDING: &str = "CredentialPending";
    /// A namespaced manager may not use the provider (docs/credential-providers.md).
    pub const CREDENTIAL_PROVIDER_NOT_ALLOWED: &str = "CredentialProviderNotAllowed";
    /// A workload cluster the manager selects is not in sync: unreachable, a bad kubeconfig,
    /// or writes refused there (`status.clusters` says which and why; docs/fleet.md).
    pub const WORKLOAD_CLUSTER_NOT_SYNCED: &str = "WorkloadClusterNotSynced";
}

/// The status fields of a mode Node manager that only the node status keeps (node/status.rs),
/// summed up from the node agents' reports; the reconcile leaves them out of its own patch.
pub const NODE_STATUS_FIELDS: [&str; 5] = [
    "nodesSelected",
    "nodesSynced",
    "nodeSummary",
    "nodes",
    "nodesOmitted",
];

/// What the controller last observed and did for a manager.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagerStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, with reasons such as `Synced`, `SourceMissing`, `InvalidSource`, `Conflict`,
    /// `InlineCredentials`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Namespaces in scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_namespaces: Option<i32>,
    /// Namespaces holding every Secret of this manager, up to date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_namespaces: Option<i32>,
    /// `synced/target`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<String>,
    // Always written, even empty, so that a merge patch of the status clears old entries.
    /// A bounded list of namespaces that could not be synced, with the reason.
    #[serde(default)]
    pub failures: Vec<NamespaceFailure>,
    // Always written, for the same reason.
    /// The Secrets this manager writes, each with the registries it holds, as the kubelet
    /// reads them (never a credential). The webhook reads them for `injection:
    /// MatchingImages`; a Secret whose registries are not known yet is not listed.
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub pull_secrets: Vec<PullSecretRegistries>,
    /// The Secrets filled by a credential provider, with when their credential expires, and
    /// with `spec.verify: Registry` what each registry said of each credential at its last
    /// check (docs/credential-health.md). Never a credential.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub credentials: Vec<CredentialStatus>,
    /// Pulls a registry refused with this manager's credential in the last hour, as the
    /// kubelets reported them (docs/credential-health.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_failures: Option<PullFailures>,
    /// How the manager stands in each workload cluster it selects (`spec.clusters`), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub clusters: Vec<super::fleet::ClusterStatus>,
    /// Mode Node: the nodes its `nodeSelector` selects (written by the controller from the
    /// node agents' reports; docs/node.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_selected: Option<i32>,
    /// Mode Node: the selected nodes whose agent applied the manager's current sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_synced: Option<i32>,
    /// Mode Node: `synced/selected` nodes, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_summary: Option<String>,
    /// Mode Node: the selected nodes not synced, then the synced nodes with conflicts, at most
    /// 20 (written by the controller from the node agents' reports). Never a credential.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub nodes: Vec<NodeStatus>,
    /// Mode Node: the entries beyond the 20 `status.nodes` lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_omitted: Option<i32>,
}

/// How one node applies a mode Node manager.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// The node.
    pub name: String,
    /// The manager's `metadata.generation` the node applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// True when the node's files hold this manager's credentials, as they are now.
    pub synced: bool,
    /// The registry keys the node serves from this manager (never a credential).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub registries: Vec<String>,
    /// Registries the kubelet's config.json already held: its entry was kept, not cheiron's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub conflicts: Vec<String>,
    /// Why the node is not synced, bounded, never a secret value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The credential behind one Secret: its provider (a provider-backed Secret), and what its
/// registry said of it (`spec.verify: Registry`; docs/credential-health.md). Never the
/// credential, a token or a registry's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialStatus {
    /// The Secret's name in each target namespace.
    pub name: String,
    /// The credential provider (provider-backed Secrets only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider: String,
    /// The registry key checked, as the Secret's `.dockerconfigjson` writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// The registry check: `Pending`, `Accepted`, `Rejected`, `Unreachable` or `Unchecked`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// When the registry last answered the check (or failed to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Who refused the credential or what failed (hosts and status codes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Docker Hub: the pull allowance, e.g. `76 of 100 pulls left per 6h` or `unlimited`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_allowance: Option<String>,
    /// Docker Hub: pulls left in the current window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pulls_remaining: Option<i64>,
    /// Docker Hub: pulls allowed per window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pulls_limit: Option<i64>,
    /// When the credential written expires (unset: the provider gave no lifetime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Why the last refresh failed, while the credential is still valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_failing: Option<String>,
}

/// Pulls refused with a manager's credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullFailures {
    /// Refused pulls attributed to the manager in the last hour.
    pub count: i64,
    /// The latest, newest first, at most 5.
    #[serde(default)]
    #[schemars(length(max = 5))]
    pub recent: Vec<PullFailure>,
}

/// One pull a registry refused with a manager's credential.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullFailure {
    /// The Pod's namespace.
    pub namespace: String,
    /// The Pod.
    pub pod: String,
    /// The image, as the container names it.
    pub image: String,
    /// The manager's Secret the kubelet offered for it.
    pub secret: String,
    /// The Secret's registry key that matched the image.
    pub registry: String,
    /// When the kubelet first reported it.
    pub since: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
}

/// The registries one Secret of a manager holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullSecretRegistries {
    /// The Secret's name in each target namespace.
    pub name: String,
    /// The registry keys of its `.dockerconfigjson`, as the kubelet reads them, in order.
    #[schemars(length(max = 32))]
    pub registries: Vec<String>,
}

/// Why one namespace could not be synced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceFailure {
    /// The namespace.
    pub namespace: String,
    /// What went wrong, never a secret value.
    pub message: String,
}
