//! The API (`cheiron.anny.co/v1alpha1`): the types, condition reasons and well-known names
//! from the pure `cheiron-core` crate (`crates/cheiron-core/src/api/`), and what checking
//! them against a cluster or printing them needs.

pub use cheiron_core::api::*;

mod served;

pub use served::{ApiCheckError, ensure_crds};

/// Both CRDs as one multi-document YAML stream, as `cheiron crds` prints it.
pub fn crds_yaml() -> Result<String, crate::yaml::WriteError> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&crate::yaml::to_string(&crd)?);
    }
    Ok(out)
}
