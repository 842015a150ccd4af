//! `cheiron explain`: why a Pod or ServiceAccount has (or lacks) each pull secret, manager by
//! manager, in words. Pure: the object, its namespace and the managers in, an [`Explanation`]
//! out. Built on the webhook's own policy code ([`crate::policy::decide`] for what is wanted,
//! [`Manager::applies_to`] for who selects), so that it cannot disagree with admission;
//! `verdict` only puts the reason into words. The live and offline readers are in
//! [`source`], the text rendering in [`render`].

pub mod render;
pub mod source;
mod verdict;

#[cfg(test)]
mod tests;

use serde::Serialize;

pub use verdict::{Verdict, VerdictKind};

use crate::{
    admission::Interpreted,
    policy::{Decision, Image, Manager, NamespaceMeta, Registries, Skip, decide},
};

/// What is known of one Secret in the object's namespace (read as metadata only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SecretState {
    /// The Secret exists.
    pub exists: bool,
    /// It carries `app.kubernetes.io/managed-by: cheiron`.
    pub managed_by_cheiron: bool,
}

/// One manager and what it made of the object.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagerVerdict {
    /// `ImagePullSecretManager ns/name` or `ClusterImagePullSecretManager name`.
    pub manager: String,
    /// The verdict and its reason.
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// One Secret the object references or policy wants it to reference.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretRow {
    /// The Secret's name.
    pub name: String,
    /// The object's pull secret list names it.
    pub referenced: bool,
    /// Policy wants the object to reference it.
    pub wanted: bool,
    /// The selected managers that want it.
    pub wanted_by: Vec<String>,
    /// It exists in the namespace; `null` when not known (offline).
    pub exists: Option<bool>,
    /// It is labelled as cheiron's; `null` when not known.
    pub managed_by_cheiron: Option<bool>,
    /// The object's images it serves, by the kubelet's matching, when the wanting manager
    /// uses `injection: MatchingImages` and its registries are known; `null` otherwise.
    pub serves: Option<Vec<String>>,
}

/// What policy decides for the object as a whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// The Secrets policy says the object should reference, in the webhook's order.
    pub wanted: Vec<String>,
    /// Those of `wanted` the object does not reference.
    pub missing: Vec<String>,
    /// Why policy wants nothing, when it does not (`object_opted_out`, `namespace_opted_out`,
    /// `no_manager`, `no_matching_image`).
    pub skipped: Option<&'static str>,
}

/// Everything `cheiron explain` says about one object.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `Pod` or `ServiceAccount`.
    pub kind: &'static str,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name (empty for a Pod with only `generateName`).
    pub name: String,
    /// The Pod's images (containers, initContainers, ephemeralContainers).
    pub images: Vec<String>,
    /// The object's decision.
    pub outcome: Outcome,
    /// Every manager that considered the object: cluster managers, and the namespaced
    /// managers of its namespace, oldest first.
    pub managers: Vec<ManagerVerdict>,
    /// The Secrets the object references and those policy wants, referenced first.
    pub secrets: Vec<SecretRow>,
}

/// Explains `object` in `namespace` under `managers` (live, oldest first, as the webhook
/// holds them). Secrets' existence is left unknown; see [`Explanation::fill_secrets`].
pub fn explain(
    object: &Interpreted,
    namespace: &NamespaceMeta,
    managers: &[Manager],
) -> Explanation {
    let considering: Vec<&Manager> = managers
        .iter()
        .filter(|m| {
            m.id.namespace
                .as_ref()
                .is_none_or(|ns| *ns == namespace.name)
        })
        .collect();
    let images: Vec<Image> = object
        .images
        .iter()
        .filter_map(|i| Image::parse(i))
        .collect();
    let verdicts: Vec<(&Manager, Verdict)> = considering
        .iter()
        .map(|m| (*m, verdict::of(m, object, namespace, &images)))
        .collect();
    let decision = decide(&object.subject(), namespace, considering.iter().copied());
    let (wanted, skipped) = match decision {
        Decision::Inject { secrets, .. } => (secrets, None),
        Decision::Skip(skip) => (Vec::new(), Some(skip)),
    };
    let missing = wanted
        .iter()
        .filter(|n| !object.existing.contains(n))
        .cloned()
        .collect();
    let secrets = secret_rows(object, &wanted, &verdicts);
    Explanation {
        kind: object.kind.as_str(),
        namespace: namespace.name.clone(),
        name: object.name.clone(),
        images: object.images.clone(),
        outcome: Outcome {
            wanted,
            missing,
            skipped: skipped.map(Skip::as_str),
        },
        managers: verdicts
            .into_iter()
            .map(|(m, verdict)| ManagerVerdict {
                manager: m.id.to_string(),
                verdict,
            })
            .collect(),
        secrets,
    }
}

/// The rows of the Secrets table: referenced names in list order, then wanted ones.
fn secret_rows(
    object: &Interpreted,
    wanted: &[String],
    verdicts: &[(&Manager, Verdict)],
) -> Vec<SecretRow> {
    let mut names: Vec<&String> = Vec::new();
    for name in object.existing.iter().chain(wanted) {
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let selected = verdicts
                .iter()
                .filter(|(_, v)| v.kind == VerdictKind::Selected && v.wants.contains(name));
            SecretRow {
                name: name.clone(),
                referenced: object.existing.contains(name),
                wanted: wanted.contains(name),
                wanted_by: selected.clone().map(|(m, _)| m.id.to_string()).collect(),
                exists: None,
                managed_by_cheiron: None,
                serves: selected
                    .filter_map(|(m, _)| served_images(m, name, &object.images))
                    .next(),
            }
        })
        .collect()
}

/// The images of `images` that Secret `name` of `manager` serves, when the manager matches
/// images and knows the Secret's registries.
fn served_images(manager: &Manager, name: &str, images: &[String]) -> Option<Vec<String>> {
    let at = manager.secret_names().iter().position(|n| n == name)?;
    match manager.registries().get(at)? {
        Registries::Unknown => None,
        registries @ Registries::Known(_) => Some(
            images
                .iter()
                .filter(|raw| {
                    Image::parse(raw)
                        .is_some_and(|i| registries.serve_any(std::slice::from_ref(&i)))
                })
                .cloned()
                .collect(),
        ),
    }
}

impl Explanation {
    /// Fills in what `state` knows of each Secret (`None`: not known).
    pub fn fill_secrets(&mut self, state: impl Fn(&str) -> Option<SecretState>) {
        for row in &mut self.secrets {
            let known = state(&row.name);
            row.exists = known.map(|s| s.exists);
            row.managed_by_cheiron = known.map(|s| s.managed_by_cheiron);
        }
    }

    /// The names of the Secrets in the table.
    pub fn secret_names(&self) -> Vec<String> {
        self.secrets.iter().map(|r| r.name.clone()).collect()
    }
}
