//! `ClusterImagePullSecretManager`: pull secrets for every namespace it selects.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::{
    entry::{Injection, Mode, PullSecretEntry, Verify},
    fleet::ClusterSelection,
    rules,
    status::ManagerStatus,
};

/// Injects pull secrets into Pods or ServiceAccounts of every namespace it selects.
// Each printcolumn(...) repeats `type_`, which clippy mistakes for a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "cheiron.anny.co",
    version = "v1alpha1",
    kind = "ClusterImagePullSecretManager",
    shortname = "cipsm",
    category = "cheiron",
    status = "ManagerStatus",
    doc = "Distributes registry pull secrets to the Pods or ServiceAccounts of the namespaces it selects.",
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Namespaces",
        type_ = "string",
        json_path = ".status.namespaces",
        description = "synced/target namespaces"
    ),
    printcolumn(
        name = "Nodes",
        type_ = "string",
        json_path = ".status.nodeSummary",
        description = "mode Node: synced/selected nodes"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = rules::secrets_not_empty(),
    validation = rules::unique_target_names(),
    validation = rules::references_name_a_namespace(),
    validation = rules::pod_selector_needs_pod_mode(),
    validation = rules::service_account_filters_need_service_account_mode(),
    validation = rules::matching_images_needs_pod_mode(),
    validation = rules::namespace_globs("namespaces"),
    validation = rules::namespace_globs("excludeNamespaces"),
    validation = rules::node_selector_with_node_mode(),
    validation = rules::node_mode_has_no_namespaces(),
    validation = rules::node_mode_no_provider(),
)]
pub struct ClusterImagePullSecretManagerSpec {
    /// `ServiceAccount` (default), `Pod`, or `Node` (the kubelets of the nodes `nodeSelector`
    /// selects get the credentials; docs/node.md).
    #[serde(default)]
    pub mode: Mode,
    /// `All` (default): every Secret goes to every Pod or ServiceAccount selected.
    /// `MatchingImages` (mode Pod only): a Pod gets only the Secrets whose registries the
    /// kubelet would use for one of its images.
    #[serde(default)]
    pub injection: Injection,
    /// `None` (default): no check. `Registry`: the controller checks each credential with its
    /// registry (the v2 authentication handshake, nothing pulled) when it changes and
    /// periodically, and reports the `CredentialsAccepted` condition
    /// (docs/credential-health.md).
    #[serde(default)]
    pub verify: Verify,
    /// The pull secrets; each becomes one Secret in every target namespace (unless `mergeInto`).
    #[schemars(length(min = 1, max = 64))]
    pub secrets: Vec<PullSecretEntry>,
    /// Write one merged dockerconfigjson Secret of this name instead of one per entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), regex(pattern = rules::OBJECT_NAME_PATTERN))]
    pub merge_into: Option<String>,
    /// Mode ServiceAccount: only ServiceAccounts of these names (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)))]
    pub service_account_names: Option<Vec<String>>,
    /// Mode ServiceAccount: only ServiceAccounts matching this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_selector: Option<LabelSelector>,
    /// Mode Pod: only Pods matching this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    /// Only namespaces whose labels match this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Namespace name globs to include (default: all). kube-system, kube-public and
    /// kube-node-lease are reached only when named literally here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 63)))]
    pub namespaces: Option<Vec<String>>,
    /// Namespace name globs to exclude; wins over `namespaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 63)))]
    pub exclude_namespaces: Option<Vec<String>>,
    /// The clusters to act in: workload clusters chosen by `selector`, and this one unless
    /// `includeLocal` is false. Absent: this cluster only (docs/fleet.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<ClusterSelection>,
    /// Mode Node: the nodes whose kubelets get the credentials (`{}`: every node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
}
