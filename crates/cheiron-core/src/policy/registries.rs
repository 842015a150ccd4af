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
    registry::{ImageRef, RegistryKey, canonical_key},
};

/// Most registries admission keeps for one Secret; a Secret reported with more is treated as
/// [`Registries::Unknown`] (injected whatever the images), the same bound the controller
/// applies when it writes the status.
pub const MAX_REGISTRIES: usize = 32;

/// The registry keys of one Secret, parsed once. Compared and hashed by the text the kubelet
/// reads, so equal lists can be shared between managers ([`super::index::ManagerIndex`] interns
/// them).
#[derive(Debug)]
pub struct RegistryList {
    text: Box<[Box<str>]>,
    keys: Box<[RegistryKey]>,
    /// Per key, its host when [`plain_host`] and the key is not Docker Hub's default
    /// credential: such a key can match only images on exactly that host, which one string
    /// comparison tells before the kubelet's rules are applied in full.
    hosts: Box<[Option<Box<str>>]>,
}

/// The kubelet's default-registry key, which matches every Docker Hub image whatever its host.
const DEFAULT_REGISTRY: &str = "index.docker.io";

/// `host` when it is lower-case letters, digits, `.` and `-`, with an optional numeric port:
/// for such hosts, the kubelet's part-by-part glob match with equal ports is string equality.
fn plain_host(host: &str) -> Option<&str> {
    let (name, port) = match host.split_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    let plain = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    plain.then_some(host)
}

/// The host of an image or key name (`host[:port]/path`), when plain.
fn plain_host_of(name: &str) -> Option<&str> {
    plain_host(name.split_once('/').map_or(name, |(host, _)| host))
}

impl RegistryList {
    /// The list of these raw keys (as written in a manager or a `.dockerconfigjson`), in
    /// order, without duplicates. A key the kubelet cannot parse is left out: it serves no
    /// image.
    pub fn parse<'a>(raw: impl IntoIterator<Item = &'a str>) -> Self {
        let mut text: Vec<Box<str>> = Vec::new();
        let mut keys = Vec::new();
        let mut hosts = Vec::new();
        for raw in raw {
            let key = RegistryKey::parse(raw);
            let Some(read) = key.as_kubelet_reads() else {
                continue;
            };
            if !text.iter().any(|t| **t == *read) {
                text.push(read.into());
                hosts.push(
                    plain_host_of(read)
                        .filter(|_| read != DEFAULT_REGISTRY)
                        .map(Box::from),
                );
                keys.push(key);
            }
        }
        Self {
            text: text.into(),
            keys: keys.into(),
            hosts: hosts.into(),
        }
    }

    /// The keys as the kubelet reads them.
    pub fn as_kubelet_reads(&self) -> impl Iterator<Item = &str> {
        self.text.iter().map(|t| &**t)
    }

    /// True when the kubelet would use one of these keys for one of `images`.
    pub fn serves_any(&self, images: &[Image]) -> bool {
        self.keys.iter().zip(&self.hosts).any(|(key, host)| {
            images.iter().any(|image| {
                let other_host = matches!((host, image.host()), (Some(k), Some(i)) if **k != *i);
                !other_host && key.matches(&image.reference)
            })
        })
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

/// An image of a Pod, parsed once per review.
#[derive(Clone, Debug)]
pub struct Image {
    reference: ImageRef,
    /// The length of the normalised name's host (and port), when [`plain_host`].
    host_len: Option<usize>,
}

impl Image {
    /// The image as the kubelet reads it; `None` when it cannot be parsed (the kubelet could
    /// not pull it either, so it matches no registry).
    pub fn parse(image: &str) -> Option<Self> {
        let reference = ImageRef::parse(image).ok()?;
        let host_len = plain_host_of(reference.name()).map(str::len);
        Some(Self {
            reference,
            host_len,
        })
    }

    fn host(&self) -> Option<&str> {
        self.reference.name().get(..self.host_len?)
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
    pub fn serve_any(&self, images: &[Image]) -> bool {
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
    // Inline registries as the controller writes them: `https://index.docker.io/v1` is
    // written as `https://index.docker.io/v1/`.
    let written: Vec<Option<String>> = entries
        .iter()
        .map(|e| e.registry.as_deref().map(canonical_key))
        .collect();
    if merge_into.is_some() {
        let inline: Vec<&str> = written.iter().filter_map(|r| r.as_deref()).collect();
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
                .position(|e| e.target_name() == Some(name.as_str()));
            match entry.and_then(|i| written.get(i)?.as_deref()) {
                Some(inline) => known(vec![inline]),
                None => reported(name).map_or(Registries::Unknown, known),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
