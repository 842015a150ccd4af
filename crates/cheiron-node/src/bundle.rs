//! A node bundle: what the controller hands the node agents for one mode Node manager
//! (docs/node.md, "What one node can read and write").
//!
//! ```text
//!   controller (reconcile of a mode Node manager)
//!     reads the manager's sources (anywhere it may read) ──► Secret <node namespace>/
//!                                                            cheiron-node-credentials-<manager>
//!       data[.dockerconfigjson]: the resolved credentials (the last good ones on a problem)
//!       annotation node.cheiron.anny.co/bundle: {manager, uid, generation, created,
//!                                                nodeSelector, problem}
//!   node agent ──► lists the bundles of its namespace (by label), keeps those whose
//!                  nodeSelector matches its Node, reports each bundle's resourceVersion
//! ```
//!
//! The agents read nothing else: no manager (a cluster manager may hold an inline password),
//! no source Secret. The bundles carry no cheiron managed-by label, so the controller's Secret
//! cache and its copy bookkeeping never see them.

use k8s_openapi::{
    ByteString, api::core::v1::Secret, apimachinery::pkg::apis::meta::v1::LabelSelector,
};
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

/// The label every bundle carries (value [`BUNDLE_LABEL_VALUE`]); agents list by it.
pub const BUNDLE_LABEL: &str = "node.cheiron.anny.co/credentials";
/// See [`BUNDLE_LABEL`].
pub const BUNDLE_LABEL_VALUE: &str = "v1";
/// The annotation holding a bundle's [`BundleMeta`] (JSON).
pub const BUNDLE_ANNOTATION: &str = "node.cheiron.anny.co/bundle";
/// A bundle's Secret type: not `kubernetes.io/dockerconfigjson`, so no Pod can name it as a
/// pull secret by mistake.
pub const BUNDLE_TYPE: &str = "cheiron.anny.co/node-credentials";
/// The data key of the credentials (a docker config: `{"auths": {...}}`).
pub const BUNDLE_KEY: &str = ".dockerconfigjson";
/// The longest `problem` a bundle holds.
pub const MAX_PROBLEM: usize = 1024;

/// What a bundle says about its manager (never a credential).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleMeta {
    /// The manager's name.
    pub manager: String,
    /// The manager's uid.
    pub uid: String,
    /// The manager's generation the bundle was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The manager's creation time (Unix seconds): on two managers for one registry, the
    /// older wins on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<i64>,
    /// The manager's `nodeSelector`.
    pub node_selector: LabelSelector,
    /// Why the sources could not be used (the data is then the last good credentials, or
    /// none); bounded, never a value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The bundle name of manager `manager` (at most 253 characters, distinct per manager).
pub fn bundle_name(manager: &str) -> String {
    const PREFIX: &str = "cheiron-node-credentials-";
    if PREFIX.len() + manager.len() <= 253 {
        return format!("{PREFIX}{manager}");
    }
    let digest = super::config_json::sha256_hex(manager.as_bytes());
    format!("{PREFIX}{}", &digest[..40])
}

/// A bundle as an agent reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Bundle {
    /// What it says about its manager.
    pub meta: BundleMeta,
    /// The Secret's `resourceVersion`: what an agent reports as applied, and what the
    /// controller counts a node as synced against.
    pub version: String,
    /// The credentials, if the controller could make them at least once.
    pub content: Option<Vec<u8>>,
}

impl Bundle {
    /// Reads `secret` as a bundle; `None` for a Secret that is not one.
    pub fn from_secret(secret: &Secret) -> Option<Self> {
        if secret.type_.as_deref() != Some(BUNDLE_TYPE)
            || secret.labels().get(BUNDLE_LABEL).map(String::as_str) != Some(BUNDLE_LABEL_VALUE)
        {
            return None;
        }
        let meta: BundleMeta =
            serde_json::from_str(secret.annotations().get(BUNDLE_ANNOTATION)?).ok()?;
        Some(Self {
            meta,
            version: secret.resource_version().unwrap_or_default(),
            content: secret
                .data
                .as_ref()
                .and_then(|d| d.get(BUNDLE_KEY))
                .map(|v| v.0.clone()),
        })
    }

    /// The Secret holding `meta` and `content` (no name, namespace or owner: the caller's).
    pub fn secret(meta: &BundleMeta, content: Option<&[u8]>) -> Secret {
        let mut secret = Secret {
            type_: Some(BUNDLE_TYPE.to_owned()),
            data: content.map(|c| [(BUNDLE_KEY.to_owned(), ByteString(c.to_vec()))].into()),
            ..Secret::default()
        };
        secret.metadata.labels =
            Some([(BUNDLE_LABEL.to_owned(), BUNDLE_LABEL_VALUE.to_owned())].into());
        secret.metadata.annotations = Some(
            [(
                BUNDLE_ANNOTATION.to_owned(),
                serde_json::to_string(meta).unwrap_or_default(),
            )]
            .into(),
        );
        secret
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_reads_back_what_was_written_and_other_secrets_are_not_bundles() {
        let meta = BundleMeta {
            manager: "node-pull".to_owned(),
            uid: "u-1".to_owned(),
            generation: Some(3),
            created: Some(10),
            node_selector: LabelSelector::default(),
            problem: Some("Secret cheiron/registry-pull does not exist".to_owned()),
        };
        let mut secret = Bundle::secret(&meta, Some(b"{\"auths\":{}}"));
        secret.metadata.resource_version = Some("42".to_owned());
        let read = Bundle::from_secret(&secret);
        assert_eq!(
            read,
            Some(Bundle {
                meta: meta.clone(),
                version: "42".to_owned(),
                content: Some(b"{\"auths\":{}}".to_vec()),
            })
        );
        let mut other_type = secret.clone();
        other_type.type_ = Some("kubernetes.io/dockerconfigjson".to_owned());
        assert_eq!(Bundle::from_secret(&other_type), None);
        let mut unlabelled = secret.clone();
        unlabelled.metadata.labels = None;
        assert_eq!(Bundle::from_secret(&unlabelled), None);
        let mut garbled = secret;
        garbled.metadata.annotations =
            Some([(BUNDLE_ANNOTATION.to_owned(), "{".to_owned())].into());
        assert_eq!(Bundle::from_secret(&garbled), None);
    }

    #[test]
    fn bundle_names_are_valid_and_distinct_for_long_manager_names() {
        assert_eq!(bundle_name("pull"), "cheiron-node-credentials-pull");
        let long_a = "a".repeat(253);
        let long_b = format!("{}b", "a".repeat(252));
        assert!(bundle_name(&long_a).len() <= 253);
        assert_ne!(bundle_name(&long_a), bundle_name(&long_b));
    }
}
