//! The validation rules of both manager kinds, in two forms that share their messages: CEL
//! rules the apiserver enforces at admission (`x-kubernetes-validations` in the CRDs), and
//! `validate_namespaced` and `validate_cluster`, the same checks in Rust for static mode (`--from`), where no apiserver is
//! asked. The end-to-end tests hold the two to the same table of invalid manifests.

use std::fmt;

use kube::core::{Message, Rule};

use super::{
    ClusterImagePullSecretManagerSpec, ImagePullSecretManagerSpec, Injection, Mode, PullSecretEntry,
};

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

fn glob_message(field: &str) -> String {
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

/// The rules a spec breaks, each as `field: message`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct InvalidSpec(pub Vec<String>);

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

fn is_object_name(s: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(label)
}

fn is_namespace_glob(s: &str) -> bool {
    super::NamespaceGlob::parse(s).is_ok()
}

/// Where references must point: nowhere else (namespaced) or at a named namespace (cluster).
#[derive(Clone, Copy, PartialEq, Eq)]
enum References {
    OwnNamespace,
    NamedNamespace,
}

struct Parts<'a> {
    mode: Mode,
    injection: Injection,
    secrets: &'a [PullSecretEntry],
    merge_into: Option<&'a str>,
    service_account_filters: bool,
    pod_selector: bool,
    /// `None` for the namespaced kind (no such field); else whether it is set.
    node_selector: Option<bool>,
    /// namespaceSelector, namespaces, excludeNamespaces or mergeInto is set.
    namespace_scope: bool,
    references: References,
    globs: [(&'static str, Option<&'a Vec<String>>); 2],
}

/// Checks a namespaced spec against the same rules as the CRD schema.
pub fn validate_namespaced(spec: &ImagePullSecretManagerSpec) -> Result<(), InvalidSpec> {
    validate(&Parts {
        mode: spec.mode,
        injection: spec.injection,
        secrets: &spec.secrets,
        merge_into: spec.merge_into.as_deref(),
        service_account_filters: spec.service_account_names.is_some()
            || spec.service_account_selector.is_some(),
        pod_selector: spec.pod_selector.is_some(),
        node_selector: None,
        namespace_scope: spec.merge_into.is_some(),
        references: References::OwnNamespace,
        globs: [("namespaces", None), ("excludeNamespaces", None)],
    })
}

/// Checks a cluster spec against the same rules as the CRD schema.
pub fn validate_cluster(spec: &ClusterImagePullSecretManagerSpec) -> Result<(), InvalidSpec> {
    validate(&Parts {
        mode: spec.mode,
        injection: spec.injection,
        secrets: &spec.secrets,
        merge_into: spec.merge_into.as_deref(),
        service_account_filters: spec.service_account_names.is_some()
            || spec.service_account_selector.is_some(),
        pod_selector: spec.pod_selector.is_some(),
        node_selector: Some(spec.node_selector.is_some()),
        namespace_scope: spec.namespace_selector.is_some()
            || spec.namespaces.is_some()
            || spec.exclude_namespaces.is_some()
            || spec.merge_into.is_some()
            || spec.clusters.is_some(),
        references: References::NamedNamespace,
        globs: [
            ("namespaces", spec.namespaces.as_ref()),
            ("excludeNamespaces", spec.exclude_namespaces.as_ref()),
        ],
    })
}

/// The checks of one entry of `spec.secrets` (`field`), each fault told to `fail`: which
/// fields go together, valid Secret names, and namespaces on references only where
/// `references` allows them.
fn validate_entry(
    entry: &PullSecretEntry,
    field: &str,
    references: References,
    fail: &mut impl FnMut(String, &str),
) {
    let inline = entry.registry.is_some()
        || entry.username.is_some()
        || entry.password.is_some()
        || entry.password_secret_ref.is_some()
        || entry.email.is_some();
    if entry.credential_provider.is_some() {
        if inline || entry.existing_secret_ref.is_some() || entry.name.is_none() {
            fail(field.to_owned(), ENTRY_PROVIDER_ALONE);
        }
    } else {
        match &entry.existing_secret_ref {
            Some(_) if inline => fail(field.to_owned(), ENTRY_EXCLUSIVE),
            Some(_) => {}
            None => {
                if entry.name.is_none() || entry.registry.is_none() || entry.username.is_none() {
                    fail(field.to_owned(), ENTRY_INLINE_FIELDS);
                }
                if entry.password.is_some() == entry.password_secret_ref.is_some() {
                    fail(field.to_owned(), ENTRY_ONE_PASSWORD);
                }
            }
        }
    }
    let names = [
        ("name", entry.name.as_deref()),
        (
            "existingSecretRef.name",
            entry.existing_secret_ref.as_ref().map(|r| r.name.as_str()),
        ),
        (
            "passwordSecretRef.name",
            entry.password_secret_ref.as_ref().map(|r| r.name.as_str()),
        ),
    ];
    for (sub, name) in names {
        if let Some(name) = name.filter(|n| !is_object_name(n)) {
            fail(
                format!("{field}.{sub}"),
                &format!("{name:?} is not a valid Secret name"),
            );
        }
    }
    let namespaces = [
        entry
            .existing_secret_ref
            .as_ref()
            .map(|r| r.namespace.is_some()),
        entry
            .password_secret_ref
            .as_ref()
            .map(|r| r.namespace.is_some()),
    ];
    let misplaced = namespaces
        .into_iter()
        .flatten()
        .any(|has_namespace| has_namespace != (references == References::NamedNamespace));
    if misplaced {
        let message = match references {
            References::OwnNamespace => REFERENCES_OWN_NAMESPACE,
            References::NamedNamespace => REFERENCES_NEED_NAMESPACE,
        };
        fail(field.to_owned(), message);
    }
}

fn validate(spec: &Parts<'_>) -> Result<(), InvalidSpec> {
    let mut errors = Vec::new();
    let mut fail = |field: String, message: &str| errors.push(format!("{field}: {message}"));
    if spec.secrets.is_empty() {
        fail("spec.secrets".into(), SECRETS_NOT_EMPTY);
    }
    let mut targets: Vec<&str> = Vec::new();
    for (i, entry) in spec.secrets.iter().enumerate() {
        let field = format!("spec.secrets[{i}]");
        validate_entry(entry, &field, spec.references, &mut fail);
        if let Some(target) = entry.target_name() {
            if targets.contains(&target) {
                fail(field.clone(), UNIQUE_TARGET_NAMES);
            }
            targets.push(target);
        }
    }
    if let Some(name) = spec.merge_into.filter(|n| !is_object_name(n)) {
        fail(
            "spec.mergeInto".into(),
            &format!("{name:?} is not a valid Secret name"),
        );
    }
    if spec.pod_selector && spec.mode != Mode::Pod {
        fail("spec".into(), POD_SELECTOR_NEEDS_POD_MODE);
    }
    if spec.service_account_filters && spec.mode != Mode::ServiceAccount {
        fail(
            "spec".into(),
            SERVICE_ACCOUNT_FILTERS_NEED_SERVICE_ACCOUNT_MODE,
        );
    }
    if spec.injection == Injection::MatchingImages && spec.mode != Mode::Pod {
        fail("spec".into(), MATCHING_IMAGES_NEEDS_POD_MODE);
    }
    let node = spec.mode == Mode::Node;
    match spec.node_selector {
        None if node => fail("spec.mode".into(), NODE_MODE_IS_CLUSTER_ONLY),
        None => {}
        Some(has) => {
            if has != node {
                fail("spec".into(), NODE_SELECTOR_WITH_NODE_MODE);
            }
            if node && spec.namespace_scope {
                fail("spec".into(), NODE_MODE_HAS_NO_NAMESPACES);
            }
            if node && spec.secrets.iter().any(|e| e.credential_provider.is_some()) {
                fail("spec.secrets".into(), NODE_MODE_NO_PROVIDER);
            }
        }
    }
    for (field, globs) in spec.globs {
        if globs.is_some_and(|g| !g.iter().all(|g| is_namespace_glob(g))) {
            fail(format!("spec.{field}"), &glob_message(field));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(InvalidSpec(errors))
    }
}
