//! The CustomResourceDefinitions, generated from the Rust types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use super::{cluster::ClusterImagePullSecretManager, namespaced::ImagePullSecretManager};

/// Both CRDs, namespaced kind first.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        ImagePullSecretManager::crd(),
        ClusterImagePullSecretManager::crd(),
    ]
}
