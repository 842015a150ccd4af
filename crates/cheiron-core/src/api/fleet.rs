//! `spec.clusters` of a `ClusterImagePullSecretManager` and `status.clusters`: the workload
//! clusters a manager in a management cluster reaches (docs/fleet.md).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Label Cluster API puts on the Secrets of a cluster, the kubeconfig Secret among them: the
/// cluster's name.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Suffix of the name of a kubeconfig Secret (`<cluster>-kubeconfig`).
pub const KUBECONFIG_SUFFIX: &str = "-kubeconfig";
/// Key of the kubeconfig in its Secret.
pub const KUBECONFIG_KEY: &str = "value";
/// The API group of Cluster API's `Cluster`.
pub const CAPI_GROUP: &str = "cluster.x-k8s.io";

/// Which clusters a `ClusterImagePullSecretManager` acts in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSelection {
    /// Workload clusters: those whose Cluster API `Cluster` (if there is one) or else whose
    /// kubeconfig Secret (`<cluster>-kubeconfig`, labelled `cluster.x-k8s.io/cluster-name`)
    /// has labels matching this selector. Absent: no workload cluster. An empty selector
    /// (`{}`) selects every workload cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Whether the manager also acts in the cluster it lives in (default true).
    #[serde(default = "default_true")]
    pub include_local: bool,
}

impl Default for ClusterSelection {
    fn default() -> Self {
        Self {
            selector: None,
            include_local: true,
        }
    }
}

fn default_true() -> bool {
    true
}

/// How a manager stands in one workload cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// `<namespace>/<cluster>`: where its kubeconfig Secret lives, and the cluster's name.
    pub name: String,
    /// True when every target namespace there holds every Secret, up to date.
    pub ready: bool,
    /// Namespaces in scope there.
    pub target_namespaces: i32,
    /// Namespaces there holding every Secret of this manager, up to date.
    pub synced_namespaces: i32,
    /// Why it is not ready (never a secret value or a kubeconfig's content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
