//! The pure policy engine: which pull secrets an admitted Pod or ServiceAccount should
//! reference, given the managers and the namespace. No I/O, no Kubernetes client.

mod index;
mod manager;
mod namespace;
mod pairs;
mod registries;
mod scope;
mod subject;
mod view;

#[cfg(test)]
mod tests;

pub use crate::api::{InvalidGlob, NamespaceGlob};
pub use index::ManagerIndex;
pub use manager::{InvalidManager, Manager, ManagerId, ManagerKind, live_managers};
pub use namespace::NamespaceMeta;
pub use pairs::Pairs;
pub use registries::{Image, MAX_REGISTRIES, Registries, RegistryList};
pub use scope::{NamespaceSelector, Scope};
pub use subject::{Subject, SubjectKind};
pub use view::{StaticView, View, WithNamespace};

use std::collections::BTreeMap;

use crate::api::{Injection, annotation};

/// Why an object gets no pull secrets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The object is annotated `cheiron.anny.co/ignore: "true"` or `cheiron.anny.co/reconcilable: "false"`.
    ObjectOptedOut,
    /// The namespace is labelled or annotated `cheiron.anny.co/ignore: "true"`.
    NamespaceOptedOut,
    /// No manager of the right mode has the namespace in scope and selects the object.
    NoManager,
    /// Managers apply, all with `injection: MatchingImages`, and none holds a registry for
    /// one of the Pod's images.
    NoMatchingImage,
}

impl Skip {
    /// Short machine-readable name, used as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::ObjectOptedOut => "object_opted_out",
            Skip::NamespaceOptedOut => "namespace_opted_out",
            Skip::NoManager => "no_manager",
            Skip::NoMatchingImage => "no_matching_image",
        }
    }
}

/// The policy's answer for one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Reference these Secrets (in order, without duplicates), on behalf of these managers.
    Inject {
        /// Secret names in the order they should be appended.
        secrets: Vec<String>,
        /// The managers that asked for them.
        managers: Vec<ManagerId>,
    },
    /// Leave the object alone.
    Skip(Skip),
}

/// True when a namespace's labels or annotations opt out with `cheiron.anny.co/ignore: "true"`.
fn ignored(map: &Pairs) -> bool {
    map.get(annotation::IGNORE).is_some_and(|v| v == "true")
}

/// True when an object's annotations opt it out of cheiron.
pub fn object_opted_out(annotations: &BTreeMap<String, String>) -> bool {
    opts_out(|key| annotations.get(key).map(String::as_str))
}

/// [`object_opted_out`] for annotations kept in another shape: `annotation(key)` is the
/// object's value of `key`.
pub fn opts_out<'a>(annotation: impl Fn(&str) -> Option<&'a str>) -> bool {
    annotation(annotation::IGNORE) == Some("true")
        || annotation(annotation::RECONCILABLE) == Some("false")
}

/// True when a namespace opts out through its labels or annotations.
pub fn namespace_opted_out(namespace: &NamespaceMeta) -> bool {
    ignored(&namespace.labels) || ignored(&namespace.annotations)
}

/// Decides which pull secrets `subject` in `namespace` should reference.
///
/// Managers are consulted in the order given; the first to name a Secret decides its
/// position, so callers pass them oldest first for a stable result.
pub fn decide<'m>(
    subject: &Subject<'_>,
    namespace: &NamespaceMeta,
    managers: impl IntoIterator<Item = &'m Manager>,
) -> Decision {
    if object_opted_out(subject.annotations) {
        return Decision::Skip(Skip::ObjectOptedOut);
    }
    if namespace_opted_out(namespace) {
        return Decision::Skip(Skip::NamespaceOptedOut);
    }
    let mut secrets: Vec<String> = Vec::new();
    let mut ids = Vec::new();
    // Parsed once, and only when a manager with `injection: MatchingImages` applies.
    let mut images: Option<Vec<Image>> = None;
    let mut unmatched = false;
    for manager in managers {
        if !manager.applies_to(subject, namespace) {
            continue;
        }
        let images: &[Image] = match manager.injection {
            Injection::All => &[],
            Injection::MatchingImages => images.get_or_insert_with(|| parse_images(subject)),
        };
        let mut wanted = false;
        for name in manager.secrets_for(images) {
            wanted = true;
            if !secrets.iter().any(|s| s == name) {
                secrets.push(name.clone());
            }
        }
        if wanted || manager.injection == Injection::All {
            ids.push(manager.id.clone());
        } else {
            unmatched = true;
        }
    }
    if ids.is_empty() {
        Decision::Skip(if unmatched {
            Skip::NoMatchingImage
        } else {
            Skip::NoManager
        })
    } else {
        Decision::Inject {
            secrets,
            managers: ids,
        }
    }
}

/// The images of `subject` the kubelet could pull; a reference it cannot parse matches no
/// registry (the kubelet could not pull it either).
fn parse_images(subject: &Subject<'_>) -> Vec<Image> {
    subject
        .images
        .iter()
        .filter_map(|i| Image::parse(i))
        .collect()
}
