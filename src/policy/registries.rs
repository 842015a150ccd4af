//! Which registries each of a manager's Secrets holds, as far as admission knows, for
//! `injection: MatchingImages` (docs/design.md §5). The webhook never reads Secret data: an
//! inline entry's registry is in the manager's spec, and the registries of a copied or merged
//! Secret are those the controller reports in the manager's `status.pullSecrets`.

use std::{
    hash::{Hash, Hasher},
    sync::Arc,
};

use crate::{
    api::{ManagerStatus, PullSecretEntry},
    registry::{ImageRef, RegistryKey},
};

/// Most registries admission keeps for one Secret; a Secret reported with more is treated as
/// [`Registries::Unknown`] (injected whatever the images), the same bound the controller
/// applies when it writes the status.
pub const MAX_REGISTRIES: usize = 32;

/// The registry keys of one Secret, parsed once. Compared and hashed by the text the kubelet
/// reads, so equal lists can be shared between managers ([`super::ManagerIndex`] interns
/// them).
#[derive(Debug)]
pub struct RegistryList {
    text: Box<[Box<str>]>,
    keys: Box<[RegistryKey]>,
}

impl RegistryList {
    /// The list of these raw keys (as written in a manager or a `.dockerconfigjson`), in
    /// order, without duplicates. A key the kubelet cannot parse is left out: it serves no
    /// image.
    pub fn parse<'a>(raw: impl IntoIterator<Item = &'a str>) -> Self {
        let mut text: Vec<Box<str>> = Vec::new();
        let mut keys = Vec::new();
        for raw in raw {
            let key = RegistryKey::parse(raw);
            let Some(read) = key.as_kubelet_reads() else {
                continue;
            };
            if !text.iter().any(|t| **t == *read) {
                text.push(read.into());
                keys.push(key);
            }
        }
        Self {
            text: text.into(),
            keys: keys.into(),
        }
    }

    /// The keys as the kubelet reads them.
    pub fn as_kubelet_reads(&self) -> impl Iterator<Item = &str> {
        self.text.iter().map(|t| &**t)
    }

    /// True when the kubelet would use one of these keys for one of `images`.
    pub fn serves_any(&self, images: &[ImageRef]) -> bool {
        self.keys
            .iter()
            .any(|key| images.iter().any(|image| key.matches(image)))
    }
}

impl PartialEq for RegistryList {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for RegistryList {}

impl Hash for RegistryList {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

/// What admission knows of the registries one Secret holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registries {
    /// Not known yet: a copied Secret the controller has not reported (a new manager, a
    /// source not read yet), or one holding more than [`MAX_REGISTRIES`]. Injected whatever
    /// the images: a reference the kubelet does not use costs nothing, a missing one fails
    /// the pull.
    Unknown,
    /// These registries.
    Known(Arc<RegistryList>),
}

impl Registries {
    /// True when this Secret should be injected into a Pod pulling `images`.
    pub fn serve_any(&self, images: &[ImageRef]) -> bool {
        match self {
            Registries::Unknown => true,
            Registries::Known(list) => list.serves_any(images),
        }
    }
}

/// The registries of each Secret a manager writes, in the order of `names` (one per entry,
/// or the `mergeInto` name alone): inline entries from the spec, the rest from the status.
pub(super) fn of_secrets(
    names: &[String],
    entries: &[PullSecretEntry],
    merge_into: Option<&str>,
    status: Option<&ManagerStatus>,
) -> Vec<Registries> {
    let reported = |name: &str| -> Option<Vec<&str>> {
        let listed = status?.pull_secrets.iter().find(|p| p.name == name)?;
        (listed.registries.len() <= MAX_REGISTRIES)
            .then(|| listed.registries.iter().map(String::as_str).collect())
    };
    let known = |raw: Vec<&str>| Registries::Known(Arc::new(RegistryList::parse(raw)));
    if merge_into.is_some() {
        let inline: Vec<&str> = entries
            .iter()
            .filter_map(|e| e.registry.as_deref())
            .collect();
        let all_inline = entries.iter().all(|e| e.existing_secret_ref.is_none());
        let merged = names.first().map(String::as_str).unwrap_or_default();
        // The spec's registries count even when the status lists the Secret: it may predate
        // an edit of the spec, and injecting one Secret too many is harmless.
        let registries = match (all_inline, reported(merged)) {
            (true, _) => known(inline),
            (false, Some(mut listed)) => {
                listed.extend(inline);
                known(listed)
            }
            (false, None) => Registries::Unknown,
        };
        return vec![registries];
    }
    names
        .iter()
        .map(|name| {
            let entry = entries
                .iter()
                .find(|e| e.target_name() == Some(name.as_str()));
            match entry.and_then(|e| e.registry.as_deref()) {
                Some(inline) => known(vec![inline]),
                None => reported(name).map_or(Registries::Unknown, known),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
