//! Whose credential a refused pull carried: which of cheiron's Secrets of the Pod the kubelet
//! offered for the image, decided with the kubelet's own matching
//! ([`cheiron_core::registry::offered_for`]).

use std::collections::{BTreeMap, BTreeSet};

use cheiron_core::policy::ManagerId;
use cheiron_core::registry::{ImageRef, RegistryKey, offered_for};

/// One of the Secrets cheiron manages in the Pod's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedSecret {
    /// The Secret's name.
    pub name: String,
    /// The manager its labels name (`cheiron.anny.co/manager-kind`, `-name`, `-namespace`).
    pub manager: ManagerId,
    /// The registry keys of its `.dockerconfigjson`, as the manager's `status.pullSecrets`
    /// lists them for this Secret.
    pub registries: Vec<String>,
}

/// One of cheiron's credentials the kubelet offered for the refused image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfferedCredential {
    /// The manager behind the Secret.
    pub manager: ManagerId,
    /// The Secret's name (in the Pod's namespace).
    pub secret: String,
    /// The registry key of the Secret the kubelet matched the image with, as written.
    pub registry_key: String,
}

/// What a refused pull says about cheiron's credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attribution {
    /// The kubelet offered these credentials of cheiron's for the image (in the order it tries
    /// them) and the pull still failed: the registry refused each one.
    Rejected {
        /// Never empty.
        credentials: Vec<OfferedCredential>,
    },
    /// No Secret of cheiron's among the Pod's pull secrets is offered for the image: the Pod
    /// pulled without cheiron's credential (anonymously, or with a Secret cheiron does not
    /// manage). Whether a manager serves the registry is the caller's question
    /// ([`offered_key`] answers it for one manager's keys).
    NoCredential {
        /// The image's registry as normalised (`docker.io` for `nginx`).
        registry: String,
        /// The image, for [`offered_key`].
        image: ImageRef,
    },
}

/// Attributes a pull of `image` that the registry refused.
///
/// `pull_secrets` are the names in the Pod's `spec.imagePullSecrets` (in order; repeats and
/// names of other Secrets are fine), `managed` the Secrets cheiron manages in the Pod's
/// namespace. The kubelet builds one keyring of all the Pod's pull secrets and offers every
/// credential whose key matches the image, so each of cheiron's Secrets whose key is among
/// those [`offered_for`] the image was refused. `None` when `image` is not a valid reference
/// (the kubelet would not have pulled it).
///
/// The keys of Secrets cheiron does not manage are not known here. One of them can only change
/// the outcome for a Docker Hub image: the kubelet offers Docker Hub's default key
/// (`https://index.docker.io/v1/`) only when no other key matched, and a foreign Secret's
/// `docker.io` key would match first; then cheiron's credential was not offered, though this
/// says [`Attribution::Rejected`].
pub fn attribute(
    image: &str,
    pull_secrets: &[String],
    managed: &[ManagedSecret],
) -> Option<Attribution> {
    let image = ImageRef::parse(image).ok()?;
    let mut by_name: BTreeMap<&str, &ManagedSecret> = BTreeMap::new();
    for secret in managed {
        by_name.entry(secret.name.as_str()).or_insert(secret);
    }

    // The keys of the Pod's cheiron Secrets, in the order the kubelet adds them to its keyring.
    let mut seen = BTreeSet::new();
    let mut held: Vec<(&ManagedSecret, RegistryKey)> = Vec::new();
    for name in pull_secrets {
        if !seen.insert(name.as_str()) {
            continue;
        }
        let Some(secret) = by_name.get(name.as_str()) else {
            continue;
        };
        held.extend(
            secret
                .registries
                .iter()
                .map(|raw| (*secret, RegistryKey::parse(raw))),
        );
    }

    let keys: Vec<RegistryKey> = held.iter().map(|(_, key)| key.clone()).collect();
    let mut credentials = Vec::new();
    for offered in offered_for(&keys, &image) {
        let reading = offered.as_kubelet_reads();
        credentials.extend(
            held.iter()
                .filter(|(_, key)| key.as_kubelet_reads() == reading)
                .map(|(secret, key)| OfferedCredential {
                    manager: secret.manager.clone(),
                    secret: secret.name.clone(),
                    registry_key: key.raw().to_owned(),
                }),
        );
    }

    Some(if credentials.is_empty() {
        Attribution::NoCredential {
            registry: image.domain().to_owned(),
            image,
        }
    } else {
        Attribution::Rejected { credentials }
    })
}

/// The first of `registries` (one manager's or one Secret's keys) that the kubelet would offer
/// for `image` on its own, most specific first; `None` when none would.
pub fn offered_key<'a>(registries: &'a [String], image: &ImageRef) -> Option<&'a str> {
    let keys: Vec<RegistryKey> = registries
        .iter()
        .map(|raw| RegistryKey::parse(raw))
        .collect();
    let first = offered_for(&keys, image).into_iter().next()?;
    registries
        .iter()
        .map(String::as_str)
        .find(|raw| *raw == first.raw())
}

#[cfg(test)]
#[path = "attribute_tests.rs"]
mod tests;
