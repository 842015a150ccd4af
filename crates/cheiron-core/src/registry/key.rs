//! A registry key of a `.dockerconfigjson` `auths` map, read the way the kubelet's keyring
//! (`pkg/credentialprovider/keyring.go`) reads it, and matched against images the same way.

use std::fmt;

use super::host_glob;
use super::image::ImageRef;
use super::url::{self, Url};

/// The key Docker's own tools write for Docker Hub, and the one cheiron writes.
pub const DOCKER_HUB_KEY: &str = "https://index.docker.io/v1/";
/// What the kubelet reads [`DOCKER_HUB_KEY`] as: its default-registry credential.
const DEFAULT_REGISTRY_READ: &str = "index.docker.io";
/// Docker Hub's domain in normalised image names.
const DOCKER_HUB_DOMAIN: &str = "docker.io";
/// Docker Hub's API host: a name users write, but not one the kubelet treats as Docker Hub.
pub const DOCKER_HUB_API_HOST: &str = "registry-1.docker.io";

/// A registry key (`ghcr.io`, `https://index.docker.io/v1/`, `*.example.com:5000/team`) as the
/// kubelet reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegistryKey {
    raw: String,
    reading: Reading,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Reading {
    /// Go's URL parser rejects the key; the kubelet logs it and skips the entry.
    Ignored(String),
    Read {
        /// `url.Host` of the key with the scheme added when missing.
        host: String,
        /// The path after the kubelet strips a `/v1/` or `/v2/` prefix.
        path: String,
        /// `host` + `path` (no path when it is empty or `/`): the keyring's index key.
        key: String,
        /// `key` parsed again, as `URLsMatchStr` does on every lookup; `None` when that fails
        /// (then no image matches through the glob, only through the Docker Hub fallback).
        glob: Option<Url>,
    },
}

/// Why the kubelet would never use a key for the images its author plausibly means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyProblem {
    /// The kubelet cannot parse the key and skips it.
    Ignored {
        /// Go's parse error.
        reason: String,
    },
    /// A scheme other than lowercase `https://` or `http://`, which the kubelet keeps as part
    /// of the host.
    Scheme {
        /// What the kubelet reads.
        read_as: String,
    },
    /// No host name.
    EmptyHost,
    /// `/v1` or `/v2` without the trailing slash, kept as a repository path.
    VersionWithoutSlash {
        /// What the kubelet reads (`index.docker.io/v1`).
        read_as: String,
        /// The key to write instead.
        fix: String,
    },
    /// `index.docker.io` with a path: image names never carry that host, and the Docker Hub
    /// fallback wants the bare default key.
    DockerHubPath {
        /// What the kubelet reads.
        read_as: String,
        /// The key to write instead.
        fix: String,
    },
    /// `registry-1.docker.io`, which the kubelet matches only for images written with that host.
    DockerHubApiHost,
    /// Upper-case letters: the kubelet compares case-sensitively and image names are lowercase.
    Uppercase {
        /// What the kubelet reads.
        read_as: String,
        /// The key to write instead.
        fix: String,
    },
    /// A path with characters no repository name has, so no image matches it.
    PathNeverMatches {
        /// What the kubelet reads.
        read_as: String,
    },
}

impl fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ignored { reason } => {
                write!(f, "the kubelet cannot parse it ({reason}) and ignores it")
            }
            Self::Scheme { read_as } => write!(
                f,
                "the kubelet strips only a lowercase https:// or http://, so it reads {read_as:?} and matches no image; write the registry host without the scheme"
            ),
            Self::EmptyHost => {
                f.write_str("it has no host name, so the kubelet matches no image with it")
            }
            Self::VersionWithoutSlash { read_as, fix } => write!(
                f,
                "the kubelet strips /v1/ and /v2/ only with the trailing slash, so it reads {read_as:?}, a repository path no image has; write {fix:?}"
            ),
            Self::DockerHubPath { read_as, fix } => write!(
                f,
                "the kubelet reads {read_as:?}, but image names never carry the host index.docker.io and the Docker Hub credential must be exactly {DOCKER_HUB_KEY:?}; write {fix:?}"
            ),
            Self::DockerHubApiHost => write!(
                f,
                "the kubelet matches it only for images written {DOCKER_HUB_API_HOST}/…, never for Docker Hub images such as nginx or docker.io/…; write {DOCKER_HUB_KEY:?}"
            ),
            Self::Uppercase { read_as, fix } => write!(
                f,
                "the kubelet compares keys case-sensitively and reads {read_as:?}, but image names are lowercase; write {fix:?}"
            ),
            Self::PathNeverMatches { read_as } => write!(
                f,
                "the kubelet reads {read_as:?}, a path no repository name starts with, so it matches no image"
            ),
        }
    }
}

impl RegistryKey {
    /// Reads a key as the kubelet's keyring does: adds `https://` unless the key starts with
    /// `https://` or `http://`, parses it as a URL, strips a `/v1/` or `/v2/` path prefix
    /// (with its slash) and keeps host (with port) plus the rest of the path. Never fails:
    /// a key the kubelet cannot parse is kept, matches nothing, and has a [`KeyProblem`].
    pub fn parse(raw: &str) -> Self {
        let with_scheme = if raw.starts_with("https://") || raw.starts_with("http://") {
            raw.to_owned()
        } else {
            format!("https://{raw}")
        };
        let reading = match url::parse(&with_scheme) {
            Err(reason) => Reading::Ignored(reason),
            Ok(Url { host, path }) => {
                let path = match path
                    .strip_prefix("/v1")
                    .or_else(|| path.strip_prefix("/v2"))
                {
                    Some(rest) if rest.starts_with('/') => rest.to_owned(),
                    _ => path,
                };
                let key = if path.is_empty() || path == "/" {
                    host.clone()
                } else {
                    format!("{host}{path}")
                };
                let glob = url::parse(&format!("https://{key}")).ok();
                Reading::Read {
                    host,
                    path,
                    key,
                    glob,
                }
            }
        };
        Self {
            raw: raw.to_owned(),
            reading,
        }
    }

    /// The key as written.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// What the kubelet's keyring indexes the key as (`index.docker.io` for
    /// `https://index.docker.io/v1/`, `index.docker.io/v1` for `https://index.docker.io/v1`);
    /// `None` when the kubelet cannot parse the key and skips it.
    pub fn as_kubelet_reads(&self) -> Option<&str> {
        match &self.reading {
            Reading::Ignored(_) => None,
            Reading::Read { key, .. } => Some(key),
        }
    }

    /// The host (and `:port`) the kubelet reads from the key; `None` when it skips the key.
    /// It may hold glob wildcards (`*.example.com`).
    pub fn host(&self) -> Option<&str> {
        match &self.reading {
            Reading::Ignored(_) => None,
            Reading::Read { host, .. } => Some(host),
        }
    }

    /// True when this is Docker Hub's default credential for the kubelet (`docker.io`,
    /// `index.docker.io`, `https://index.docker.io/v1/`): every Docker Hub image matches it.
    pub fn is_docker_hub(&self) -> bool {
        self.as_kubelet_reads()
            .is_some_and(|key| key == DOCKER_HUB_DOMAIN || key == DEFAULT_REGISTRY_READ)
    }

    /// True when the kubelet would offer this key's credential for `image`, on its own: the
    /// key's host matches the image's host part by part (glob wildcards per part, same number of
    /// parts), the ports are equal, and the key's path is a string prefix of the image's path;
    /// or the key is the default registry `index.docker.io` and the image is on Docker Hub.
    ///
    /// With several keys for one image the kubelet offers all keys that match this way (most
    /// specific first) and falls back to the default registry key only when none does.
    pub fn matches(&self, image: &ImageRef) -> bool {
        self.matches_url(image.url(), image.name())
    }

    /// True when the key's host and path match `image` (globs per host part), leaving out the
    /// Docker Hub fallback of [`Self::matches`].
    fn matches_glob(&self, image: &ImageRef) -> bool {
        let Reading::Read { glob, .. } = &self.reading else {
            return false;
        };
        glob.as_ref()
            .is_some_and(|glob| urls_match(glob, image.url()))
    }

    /// The keyring's `Lookup` for one key, on the string it is given (the repository name).
    #[cfg(test)]
    pub(crate) fn matches_lookup(&self, repository: &str) -> bool {
        self.glob_matches_lookup(repository)
            || (self.is_default_registry_key() && is_default_registry_match(repository))
    }

    /// The keyring's `URLsMatchStr` of this key against a repository name.
    #[cfg(test)]
    pub(crate) fn glob_matches_lookup(&self, repository: &str) -> bool {
        let Reading::Read {
            glob: Some(glob), ..
        } = &self.reading
        else {
            return false;
        };
        url::parse(&format!("https://{repository}")).is_ok_and(|target| urls_match(glob, &target))
    }

    fn matches_url(&self, target: &Url, repository: &str) -> bool {
        let Reading::Read { glob, .. } = &self.reading else {
            return false;
        };
        glob.as_ref().is_some_and(|glob| urls_match(glob, target))
            || (self.is_default_registry_key() && is_default_registry_match(repository))
    }

    fn is_default_registry_key(&self) -> bool {
        self.as_kubelet_reads() == Some(DEFAULT_REGISTRY_READ)
    }

    /// True when the kubelet reads both keys as the same registry: the same index key, or both
    /// Docker Hub's default credential (`docker.io` and `https://index.docker.io/v1/`). Keys
    /// the kubelet skips are the same only when written the same.
    pub fn same_registry(&self, other: &Self) -> bool {
        match (self.as_kubelet_reads(), other.as_kubelet_reads()) {
            (Some(a), Some(b)) => a == b || (self.is_docker_hub() && other.is_docker_hub()),
            _ => self.raw == other.raw,
        }
    }

    /// Why the kubelet would never use this key for the images its author plausibly means,
    /// or `None` when it is usable.
    pub fn problem(&self) -> Option<KeyProblem> {
        let (host, path, key) = match &self.reading {
            Reading::Ignored(reason) => {
                return Some(KeyProblem::Ignored {
                    reason: reason.clone(),
                });
            }
            Reading::Read {
                host, path, key, ..
            } => (host, path, key),
        };
        let read_as = || key.clone();
        let has_scheme = self.raw.starts_with("https://") || self.raw.starts_with("http://");
        if !has_scheme && self.raw.contains("://") {
            return Some(KeyProblem::Scheme { read_as: read_as() });
        }
        if url::split_host_port(host).0.is_empty() {
            return Some(KeyProblem::EmptyHost);
        }
        if path == "/v1" || path == "/v2" {
            return Some(KeyProblem::VersionWithoutSlash {
                read_as: read_as(),
                fix: canonical_key(&self.raw),
            });
        }
        if host == DEFAULT_REGISTRY_READ && key != DEFAULT_REGISTRY_READ {
            return Some(KeyProblem::DockerHubPath {
                read_as: read_as(),
                fix: canonical_key(&self.raw),
            });
        }
        if host == DOCKER_HUB_API_HOST {
            return Some(KeyProblem::DockerHubApiHost);
        }
        if key.bytes().any(|b| b.is_ascii_uppercase()) {
            return Some(KeyProblem::Uppercase {
                read_as: read_as(),
                fix: canonical_key(&self.raw).to_lowercase(),
            });
        }
        let repository_byte = |b: u8| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-' | b'/')
        };
        if !path.bytes().all(repository_byte) {
            return Some(KeyProblem::PathNeverMatches { read_as: read_as() });
        }
        None
    }
}

impl fmt::Display for RegistryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// The key cheiron writes for a registry named in a manager's inline entry: what the kubelet
/// reads (scheme dropped, `/v1/` or `/v2/` dropped, also without the trailing slash; host in
/// lower case), except that Docker Hub under any of its names (`docker.io`, `index.docker.io`,
/// `registry-1.docker.io`, with or without scheme and API version) becomes
/// [`DOCKER_HUB_KEY`], `https://index.docker.io/v1/`. A Docker Hub key with a repository path
/// becomes `docker.io/<path>`, the one host the kubelet matches such a path on. A value the
/// kubelet cannot read at all is returned unchanged (its [`KeyProblem`] is reported instead).
pub fn canonical_key(registry: &str) -> String {
    let key = RegistryKey::parse(registry.trim());
    let Reading::Read { host, path, .. } = &key.reading else {
        return registry.to_owned();
    };
    let has_scheme = key.raw.starts_with("https://") || key.raw.starts_with("http://");
    if (!has_scheme && key.raw.contains("://")) || url::split_host_port(host).0.is_empty() {
        return registry.to_owned();
    }
    let host = host.to_lowercase();
    let path = match path.as_str() {
        "/" | "/v1" | "/v2" => "",
        other => other,
    };
    let docker_hub = matches!(
        host.as_str(),
        DOCKER_HUB_DOMAIN | DEFAULT_REGISTRY_READ | DOCKER_HUB_API_HOST
    );
    match (docker_hub, path.is_empty()) {
        (true, true) => DOCKER_HUB_KEY.to_owned(),
        (true, false) => format!("{DOCKER_HUB_DOMAIN}{path}"),
        (false, _) => format!("{host}{path}"),
    }
}

/// The keys the kubelet's keyring (`BasicDockerKeyring.Lookup`) offers for `image`, most
/// specific first: every key whose host and path match, one per registry as the kubelet reads
/// it (the first written wins); only when none does, Docker Hub's default key for a Docker Hub
/// image.
pub fn offered_for<'a>(keys: &'a [RegistryKey], image: &ImageRef) -> Vec<&'a RegistryKey> {
    let mut index: Vec<&RegistryKey> = keys
        .iter()
        .filter(|k| k.as_kubelet_reads().is_some())
        .collect();
    // Stable sort: among keys read alike the first written is kept by `dedup_by`.
    index.sort_by(|a, b| b.as_kubelet_reads().cmp(&a.as_kubelet_reads()));
    index.dedup_by(|later, earlier| later.as_kubelet_reads() == earlier.as_kubelet_reads());
    let hits: Vec<&RegistryKey> = index
        .iter()
        .copied()
        .filter(|k| k.matches_glob(image))
        .collect();
    if !hits.is_empty() {
        return hits;
    }
    index.into_iter().filter(|k| k.matches(image)).collect()
}

/// True when the kubelet treats both keys as the same registry (see
/// [`RegistryKey::same_registry`]): `docker.io` and `https://index.docker.io/v1/` are one.
pub fn same_registry(a: &str, b: &str) -> bool {
    RegistryKey::parse(a).same_registry(&RegistryKey::parse(b))
}

/// The keyring's `URLsMatch`: same port, same number of host parts, each part matching its
/// glob, and the key's path a string prefix of the target's path.
fn urls_match(glob: &Url, target: &Url) -> bool {
    let (glob_host, glob_port) = url::split_host_port(&glob.host);
    let (target_host, target_port) = url::split_host_port(&target.host);
    if glob_port != target_port || !target.path.starts_with(glob.path.as_str()) {
        return false;
    }
    let glob_parts = glob_host.split('.');
    let target_parts = target_host.split('.');
    if glob_parts.clone().count() != target_parts.clone().count() {
        return false;
    }
    glob_parts
        .zip(target_parts)
        .all(|(pattern, part)| host_glob::matches(pattern, part))
}

/// The keyring's `isDefaultRegistryMatch`: whether a repository name pulls from Docker Hub.
fn is_default_registry_match(repository: &str) -> bool {
    let mut parts = repository.splitn(2, '/');
    let first = parts.next().unwrap_or_default();
    if first.is_empty() {
        return false;
    }
    if parts.next().is_none() {
        return true;
    }
    first == DOCKER_HUB_DOMAIN || first == DEFAULT_REGISTRY_READ || !first.contains(['.', ':'])
}
