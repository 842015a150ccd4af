//! The CustomResourceDefinitions, generated from the Rust types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use super::{ClusterImagePullSecretManager, ImagePullSecretManager};

/// Both CRDs, namespaced kind first.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        ImagePullSecretManager::crd(),
        ClusterImagePullSecretManager::crd(),
    ]
}

/// Both CRDs as one multi-document YAML stream, as `cheiron crds` prints it.
pub fn crds_yaml() -> Result<String, crate::yaml::WriteError> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&crate::yaml::to_string(&crd)?);
    }
    Ok(out)
}
