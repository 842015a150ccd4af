//! `validate_namespaced` and `validate_cluster`: the CRD schema's rules (`rules.rs`) checked in
//! Rust, with the same messages, for static mode (`--from`), where no apiserver is asked.

use std::fmt;

use super::{
    cluster::ClusterImagePullSecretManagerSpec,
    entry::{Injection, Mode, PullSecretEntry},
    namespaced::ImagePullSecretManagerSpec,
    rules::{
        ENTRY_EXCLUSIVE, ENTRY_INLINE_FIELDS, ENTRY_ONE_PASSWORD, ENTRY_PROVIDER_ALONE,
        MATCHING_IMAGES_NEEDS_POD_MODE, NODE_MODE_HAS_NO_NAMESPACES, NODE_MODE_IS_CLUSTER_ONLY,
        NODE_MODE_NO_PROVIDER, NODE_SELECTOR_WITH_NODE_MODE, POD_SELECTOR_NEEDS_POD_MODE,
        REFERENCES_NEED_NAMESPACE, REFERENCES_OWN_NAMESPACE, SECRETS_NOT_EMPTY,
        SERVICE_ACCOUNT_FILTERS_NEED_SERVICE_ACCOUNT_MODE, UNIQUE_TARGET_NAMES, glob_message,
    },
};

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
    super::glob::NamespaceGlob::parse(s).is_ok()
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
