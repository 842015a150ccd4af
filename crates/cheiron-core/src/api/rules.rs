//! The validation rules of both manager kinds, in two forms that share their messages: here,
//! the CEL rules the apiserver enforces at admission (`x-kubernetes-validations` in the CRDs)
//! and the patterns of the schema; in `validate.rs`, the same checks in Rust for static mode
//! (`--from`), where no apiserver is asked. The end-to-end tests hold the two to the same table
//! of invalid manifests.

use kube::core::{Message, Rule};

/// Entry: references and inline credentials are exclusive.
pub const ENTRY_EXCLUSIVE: &str = "an entry takes either existingSecretRef or inline credentials (registry, username, password or passwordSecretRef, email), not both";
/// Entry: inline credentials need these fields.
pub const ENTRY_INLINE_FIELDS: &str =
    "an entry without existingSecretRef needs name, registry and username";
/// Entry: exactly one password source.
pub const ENTRY_ONE_PASSWORD: &str =
    "an entry with inline credentials needs exactly one of password and passwordSecretRef";
/// Entry: a credential-provider entry takes a name and nothing else.
pub const ENTRY_PROVIDER_ALONE: &str = "an entry with credentialProvider takes name and nothing else (no existingSecretRef, registry, username, password, passwordSecretRef or email)";
/// Spec: unique target names.
pub const UNIQUE_TARGET_NAMES: &str = "target Secret names must be unique (an entry's name, or existingSecretRef.name when name is unset)";
/// Spec: at least one entry.
pub const SECRETS_NOT_EMPTY: &str = "secrets needs at least one entry";
/// Namespaced spec: no namespace in references.
pub const REFERENCES_OWN_NAMESPACE: &str = "an ImagePullSecretManager resolves references in its own namespace: remove namespace from existingSecretRef and passwordSecretRef";
/// Cluster spec: references need a namespace.
pub const REFERENCES_NEED_NAMESPACE: &str =
    "a ClusterImagePullSecretManager's existingSecretRef and passwordSecretRef need a namespace";
/// `podSelector` needs mode Pod.
pub const POD_SELECTOR_NEEDS_POD_MODE: &str =
    "podSelector applies to mode Pod only; use serviceAccountSelector in mode ServiceAccount";
/// ServiceAccount filters need mode ServiceAccount.
pub const SERVICE_ACCOUNT_FILTERS_NEED_SERVICE_ACCOUNT_MODE: &str =
    "serviceAccountNames and serviceAccountSelector apply to mode ServiceAccount only";
/// `injection: MatchingImages` needs mode Pod.
pub const MATCHING_IMAGES_NEEDS_POD_MODE: &str = "injection: MatchingImages applies to mode Pod only: a ServiceAccount's pull secrets serve every image of every Pod that uses it; use mode Pod, or injection All";
/// Mode Node is for the cluster kind only.
pub const NODE_MODE_IS_CLUSTER_ONLY: &str = "mode Node gives credentials to nodes, for every namespace: use a ClusterImagePullSecretManager";
/// `nodeSelector` and mode Node go together.
pub const NODE_SELECTOR_WITH_NODE_MODE: &str =
    "nodeSelector applies to mode Node only, and mode Node needs it ({} selects every node)";
/// Mode Node has no namespace scope.
pub const NODE_MODE_HAS_NO_NAMESPACES: &str = "mode Node gives credentials to nodes, not namespaces: remove namespaceSelector, namespaces, excludeNamespaces, mergeInto and clusters";
/// Mode Node reads Secrets only.
pub const NODE_MODE_NO_PROVIDER: &str = "mode Node takes existingSecretRef and inline entries; credentialProvider entries are not supported there";
/// The namespace globs accepted in `namespaces` and `excludeNamespaces`.
pub const NAMESPACE_GLOB_PATTERN: &str = "^[a-z0-9*?]([-a-z0-9*?]*[a-z0-9*?])?$";
/// A Kubernetes object name (DNS-1123 subdomain).
pub const OBJECT_NAME_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

pub(super) fn glob_message(field: &str) -> String {
    format!(
        "{field}: each entry must be a namespace name or a glob of lowercase letters, digits, '-', '*' and '?'"
    )
}

pub(super) fn entry_exclusive() -> Rule {
    Rule::new("!has(self.existingSecretRef) || !(has(self.registry) || has(self.username) || has(self.password) || has(self.passwordSecretRef) || has(self.email))")
        .message(ENTRY_EXCLUSIVE)
}

pub(super) fn entry_provider_alone() -> Rule {
    Rule::new("!has(self.credentialProvider) || (has(self.name) && !has(self.existingSecretRef) && !(has(self.registry) || has(self.username) || has(self.password) || has(self.passwordSecretRef) || has(self.email)))")
        .message(ENTRY_PROVIDER_ALONE)
}

pub(super) fn entry_inline_fields() -> Rule {
    Rule::new("has(self.existingSecretRef) || has(self.credentialProvider) || (has(self.name) && has(self.registry) && has(self.username))")
        .message(ENTRY_INLINE_FIELDS)
}

pub(super) fn entry_one_password() -> Rule {
    Rule::new("has(self.existingSecretRef) || has(self.credentialProvider) || (has(self.password) != has(self.passwordSecretRef))")
        .message(ENTRY_ONE_PASSWORD)
}

pub(super) fn unique_target_names() -> Rule {
    let target = |v: &str| {
        format!(
            "(has({v}.name) ? {v}.name : (has({v}.existingSecretRef) ? {v}.existingSecretRef.name : ''))"
        )
    };
    Rule::new(format!(
        "self.secrets.all(a, self.secrets.exists_one(b, {} == {}))",
        target("b"),
        target("a")
    ))
    .message(UNIQUE_TARGET_NAMES)
}

pub(super) fn secrets_not_empty() -> Rule {
    Rule::new("size(self.secrets) > 0").message(SECRETS_NOT_EMPTY)
}

pub(super) fn pod_selector_needs_pod_mode() -> Rule {
    Rule::new("!has(self.podSelector) || self.mode == 'Pod'").message(POD_SELECTOR_NEEDS_POD_MODE)
}

pub(super) fn service_account_filters_need_service_account_mode() -> Rule {
    Rule::new("(!has(self.serviceAccountNames) && !has(self.serviceAccountSelector)) || self.mode == 'ServiceAccount'")
        .message(SERVICE_ACCOUNT_FILTERS_NEED_SERVICE_ACCOUNT_MODE)
}

pub(super) fn matching_images_needs_pod_mode() -> Rule {
    Rule::new("self.injection != 'MatchingImages' || self.mode == 'Pod'")
        .message(MATCHING_IMAGES_NEEDS_POD_MODE)
}

pub(super) fn node_mode_is_cluster_only() -> Rule {
    Rule::new("self.mode != 'Node'").message(NODE_MODE_IS_CLUSTER_ONLY)
}

pub(super) fn node_selector_with_node_mode() -> Rule {
    Rule::new("has(self.nodeSelector) == (self.mode == 'Node')")
        .message(NODE_SELECTOR_WITH_NODE_MODE)
}

pub(super) fn node_mode_has_no_namespaces() -> Rule {
    Rule::new("self.mode != 'Node' || !(has(self.namespaceSelector) || has(self.namespaces) || has(self.excludeNamespaces) || has(self.mergeInto) || has(self.clusters))")
        .message(NODE_MODE_HAS_NO_NAMESPACES)
}

pub(super) fn node_mode_no_provider() -> Rule {
    Rule::new("self.mode != 'Node' || self.secrets.all(s, !has(s.credentialProvider))")
        .message(NODE_MODE_NO_PROVIDER)
}

fn references_namespace(want_namespace: bool) -> String {
    let check = |field: &str| {
        let has = if want_namespace { "" } else { "!" };
        format!("(!has(s.{field}) || {has}has(s.{field}.namespace))")
    };
    format!(
        "self.secrets.all(s, {} && {})",
        check("existingSecretRef"),
        check("passwordSecretRef")
    )
}

pub(super) fn references_stay_in_own_namespace() -> Rule {
    Rule::new(references_namespace(false)).message(REFERENCES_OWN_NAMESPACE)
}

pub(super) fn references_name_a_namespace() -> Rule {
    Rule::new(references_namespace(true)).message(REFERENCES_NEED_NAMESPACE)
}

pub(super) fn namespace_globs(field: &str) -> Rule {
    Rule::new(format!(
        "!has(self.{field}) || self.{field}.all(g, g.matches('{NAMESPACE_GLOB_PATTERN}'))"
    ))
    .message(Message::Message(glob_message(field)))
}
