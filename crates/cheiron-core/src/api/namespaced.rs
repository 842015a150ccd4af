//! `ImagePullSecretManager`: pull secrets for the manager's own namespace.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::{
    entry::{Injection, Mode, PullSecretEntry, Verify},
    rules,
    status::ManagerStatus,
};

/// Injects pull secrets into Pods or ServiceAccounts of its own namespace.
// Each printcolumn(...) repeats `type_`, which clippy mistakes for a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "cheiron.anny.co",
    version = "v1alpha1",
    kind = "ImagePullSecretManager",
    namespaced,
    shortname = "ipsm",
    category = "cheiron",
    status = "ManagerStatus",
    doc = "Distributes registry pull secrets to the Pods or ServiceAccounts of its own namespace.",
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
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = rules::secrets_not_empty(),
    validation = rules::unique_target_names(),
    validation = rules::references_stay_in_own_namespace(),
    validation = rules::pod_selector_needs_pod_mode(),
    validation = rules::service_account_filters_need_service_account_mode(),
    validation = rules::matching_images_needs_pod_mode(),
    validation = rules::node_mode_is_cluster_only(),
)]
pub struct ImagePullSecretManagerSpec {
    /// `ServiceAccount` (default) or `Pod`.
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
    /// The pull secrets; each becomes one Secret in the namespace (unless `mergeInto`).
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
}
