//! The `cheiron.anny.co/v1alpha1` API: the two manager kinds, their status, and the
//! well-known names (annotations, labels, finalizer) cheiron reads and writes, and the
//! grammar of the namespace globs a manager names.

mod cluster;
mod crd;
mod entry;
pub mod fleet;
mod glob;
mod namespaced;
pub mod rules;
mod status;
mod validate;

pub use cluster::{ClusterImagePullSecretManager, ClusterImagePullSecretManagerSpec};
pub use crd::crds;
pub use entry::{
    CredentialProviderRef, Injection, Mode, PullSecretEntry, SecretKeyRef, SecretRef, Verify,
};
pub use fleet::{ClusterSelection, ClusterStatus};
pub use glob::{InvalidGlob, NamespaceGlob};
pub use namespaced::{ImagePullSecretManager, ImagePullSecretManagerSpec};
pub use status::{
    CredentialStatus, ManagerStatus, NODE_STATUS_FIELDS, NamespaceFailure, NodeStatus, PullFailure,
    PullFailures, PullSecretRegistries, reason,
};
pub use validate::{InvalidSpec, validate_cluster, validate_namespaced};

/// The field manager of every write the controller makes (the node agent has its own).
pub const FIELD_MANAGER: &str = "cheiron";

/// The API group of both manager kinds.
pub const GROUP: &str = "cheiron.anny.co";
/// The API version of both manager kinds.
pub const VERSION: &str = "v1alpha1";

/// Annotation keys on Pods, ServiceAccounts and Namespaces.
pub mod annotation {
    /// `"true"` on an object or namespace (label or annotation): cheiron leaves it alone.
    pub const IGNORE: &str = "cheiron.anny.co/ignore";
    /// `"false"` on an object: cheiron leaves it alone (the original Cheiron opt-out).
    pub const RECONCILABLE: &str = "cheiron.anny.co/reconcilable";
    /// Set to `"true"` on every object cheiron patched.
    pub const RECONCILED: &str = "cheiron.anny.co/reconciled";
    /// The sorted, comma-separated names of the pull secrets cheiron added.
    pub const RECONCILE_WITH: &str = "cheiron.anny.co/reconcile-with";
    /// On every Secret cheiron writes: the SHA-256 (hex) of its `.dockerconfigjson`, so that
    /// the controller can tell a copy is current from its metadata alone.
    pub const CONTENT_HASH: &str = "cheiron.anny.co/content-sha256";
    /// `"true"` on a manager being deleted: drop the cleanup finalizer even if some
    /// ServiceAccount cannot be cleaned (e.g. another admission webhook rejects the patch).
    /// The entries cheiron could not remove stay; its Secrets are deleted all the same.
    pub const ABANDON_CLEANUP: &str = "cheiron.anny.co/abandon-cleanup";
    /// On a Pod the webhook patched: the sorted, comma-separated names of the pull secrets it
    /// appended that did not exist in the namespace at admission. The controller reads it on
    /// the Pods labelled [`super::label::MISSING_SECRETS`].
    pub const MISSING_SECRETS: &str = "cheiron.anny.co/missing-secrets";
}

/// Labels on the Secrets cheiron writes.
pub mod label {
    /// Standard ownership label; cheiron never touches a Secret without it (and the controller
    /// only one whose labels also name a manager).
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    /// The value of [`MANAGED_BY`] on cheiron's Secrets.
    pub const MANAGED_BY_VALUE: &str = "cheiron";
    /// Kind of the manager that owns a Secret (`ImagePullSecretManager` or `ClusterImagePullSecretManager`).
    pub const MANAGER_KIND: &str = "cheiron.anny.co/manager-kind";
    /// Name of the manager that owns a Secret.
    pub const MANAGER_NAME: &str = "cheiron.anny.co/manager-name";
    /// Namespace of the manager that owns a Secret (namespaced managers only).
    pub const MANAGER_NAMESPACE: &str = "cheiron.anny.co/manager-namespace";

    /// `"true"` on a Pod the webhook appended a pull secret to that did not exist at admission
    /// (the names are in the annotation of the same key). The controller watches the Pods with
    /// this label, and only those, to warn when a Secret is still missing after a grace period.
    pub const MISSING_SECRETS: &str = "cheiron.anny.co/missing-secrets";
    /// The value of [`MISSING_SECRETS`].
    pub const MISSING_SECRETS_VALUE: &str = "true";

    /// The label selector of the Pods the controller checks for missing pull secrets.
    pub fn missing_secrets_selector() -> String {
        format!("{MISSING_SECRETS}={MISSING_SECRETS_VALUE}")
    }

    /// The label selector of the Secrets cheiron writes.
    pub fn managed_by_selector() -> String {
        format!("{MANAGED_BY}={MANAGED_BY_VALUE}")
    }
}

/// Finalizer cheiron puts on managers so that deleting one cleans up after it.
pub const FINALIZER: &str = "cheiron.anny.co/cleanup";

/// The namespaces a cluster manager never reaches unless it names them literally.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

#[cfg(test)]
mod tests;
