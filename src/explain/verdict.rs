//! One manager's verdict on one object, with the reason in words. Whether a manager selects
//! the object is [`Manager::applies_to`], the webhook's own test; this module only says why
//! not, in the order that test checks (mode, scope, selectors), then the opt-outs and image
//! matching the webhook's decision applies after it.

use serde::Serialize;

use crate::{
    admission::Interpreted,
    api::{Injection, Mode, annotation},
    policy::{Image, Manager, NamespaceMeta, Pairs, Scope, SubjectKind},
};

/// The kinds of verdict, for scripts (`-o json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum VerdictKind {
    /// The manager wants the object to reference its Secrets.
    Selected,
    /// The manager acts on the other kind.
    WrongMode,
    /// The namespace is not in the manager's scope.
    NotInScope,
    /// The object's name or labels do not match the manager's selectors.
    SelectorMismatch,
    /// The manager would apply, but the object or its namespace opts out.
    OptedOut,
    /// `injection: MatchingImages`, and none of its Secrets serves one of the Pod's images.
    NoMatchingImage,
}

/// A verdict and its reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// What the manager decided.
    #[serde(rename = "verdict")]
    pub kind: VerdictKind,
    /// Why, in words.
    pub reason: String,
    /// The Secrets it wants the object to reference (selected managers only).
    pub wants: Vec<String>,
}

impl Verdict {
    fn not(kind: VerdictKind, reason: String) -> Self {
        Self {
            kind,
            reason,
            wants: Vec::new(),
        }
    }
}

/// The verdict of `manager` on `object` in `namespace`; `images` are the object's, parsed.
pub(super) fn of(
    manager: &Manager,
    object: &Interpreted,
    namespace: &NamespaceMeta,
    images: &[Image],
) -> Verdict {
    let subject = object.subject();
    if manager.mode != object.kind.mode() {
        let acts_on = match manager.mode {
            Mode::Pod => "Pods",
            Mode::ServiceAccount => "ServiceAccounts",
            Mode::Node => "the kubelets of the nodes it selects",
        };
        return Verdict::not(
            VerdictKind::WrongMode,
            format!("wrong mode: mode {:?} acts on {acts_on}", manager.mode),
        );
    }
    if !manager.scope.contains(namespace) {
        return Verdict::not(
            VerdictKind::NotInScope,
            format!("not in scope: {}", scope_miss(&manager.scope, namespace)),
        );
    }
    if !manager.applies_to(&subject, namespace) {
        return Verdict::not(
            VerdictKind::SelectorMismatch,
            format!("not selected: {}", selector_miss(manager, object)),
        );
    }
    if let Some(by) = object_opt_out(object) {
        return Verdict::not(VerdictKind::OptedOut, by);
    }
    if let Some(by) = namespace_opt_out(namespace) {
        return Verdict::not(VerdictKind::OptedOut, by);
    }
    let wants: Vec<String> = manager.secrets_for(images).cloned().collect();
    match manager.injection {
        Injection::MatchingImages if wants.is_empty() => Verdict::not(
            VerdictKind::NoMatchingImage,
            "no matching image: injection MatchingImages, and none of its Secrets serves one of the Pod's images".into(),
        ),
        Injection::MatchingImages => Verdict {
            kind: VerdictKind::Selected,
            reason: "selected; injection MatchingImages: the Secrets that serve one of the Pod's images (or whose registries are not known yet)".into(),
            wants,
        },
        Injection::All => Verdict {
            kind: VerdictKind::Selected,
            reason: "selected".into(),
            wants,
        },
    }
}

/// Why `scope` does not hold `namespace`, in the order [`Scope::contains`] checks.
fn scope_miss(scope: &Scope, namespace: &NamespaceMeta) -> String {
    let name = namespace.name.as_str();
    match scope {
        Scope::Namespace(own) => format!("it acts only in namespace {own}"),
        Scope::Cluster {
            selector,
            include,
            exclude,
        } => {
            if let Some(glob) = exclude.iter().find(|g| g.matches(name)) {
                return format!("namespace {name} matches excludeNamespaces entry {glob}");
            }
            if crate::api::SYSTEM_NAMESPACES.contains(&name)
                && !include.iter().any(|g| g.is_literal() && g.as_str() == name)
            {
                return format!(
                    "{name} is a system namespace, reached only when namespaces names it literally"
                );
            }
            if !include.is_empty() && !include.iter().any(|g| g.matches(name)) {
                let list: Vec<&str> = include.iter().map(|g| g.as_str()).collect();
                return format!(
                    "namespace {name} matches none of namespaces [{}]",
                    list.join(", ")
                );
            }
            match selector {
                Some(selector) => format!(
                    "namespace {name} with labels {} does not match namespaceSelector {selector}",
                    pairs(&namespace.labels)
                ),
                None => format!("namespace {name} is not in scope"),
            }
        }
    }
}

/// Why the object's name or labels do not match `manager`'s selectors.
fn selector_miss(manager: &Manager, object: &Interpreted) -> String {
    let labels = pairs(&object.labels);
    match object.kind {
        SubjectKind::Pod => match manager.pod_selector() {
            Some(selector) => {
                format!("podSelector {selector} does not match the Pod's labels {labels}")
            }
            None => "podSelector does not match".into(),
        },
        SubjectKind::ServiceAccount => {
            if let Some(names) = manager
                .service_account_names()
                .filter(|names| !names.contains(&object.name))
            {
                let list: Vec<&str> = names.iter().map(String::as_str).collect();
                return format!(
                    "serviceAccountNames [{}] does not name {}",
                    list.join(", "),
                    object.name
                );
            }
            match manager.service_account_selector() {
                Some(selector) => format!(
                    "serviceAccountSelector {selector} does not match the ServiceAccount's labels {labels}"
                ),
                None => "serviceAccountSelector does not match".into(),
            }
        }
    }
}

/// The object's own opt-out, named, as [`crate::policy::object_opted_out`] reads it.
fn object_opt_out(object: &Interpreted) -> Option<String> {
    let kind = object.kind.as_str();
    let name = &object.name;
    let value = |key: &str| object.annotations.get(key).map(String::as_str);
    if value(annotation::IGNORE) == Some("true") {
        return Some(format!(
            "opted out: annotation {}=true on {kind} {name}",
            annotation::IGNORE
        ));
    }
    (value(annotation::RECONCILABLE) == Some("false")).then(|| {
        format!(
            "opted out: annotation {}=false on {kind} {name}",
            annotation::RECONCILABLE
        )
    })
}

/// The namespace's opt-out, named, as [`crate::policy::namespace_opted_out`] reads it.
fn namespace_opt_out(namespace: &NamespaceMeta) -> Option<String> {
    let ignored = |map: &Pairs| map.get(annotation::IGNORE) == Some("true");
    let what = if ignored(&namespace.labels) {
        "label"
    } else if ignored(&namespace.annotations) {
        "annotation"
    } else {
        return None;
    };
    Some(format!(
        "opted out: {what} {}=true on Namespace {}",
        annotation::IGNORE,
        namespace.name
    ))
}

/// `{a=b, c=d}`, or `{}`.
fn pairs<K: std::fmt::Display, V: std::fmt::Display>(
    map: impl IntoIterator<Item = (K, V)>,
) -> String {
    let list: Vec<String> = map.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", list.join(", "))
}
