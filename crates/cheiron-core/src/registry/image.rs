//! Image references as the kubelet reads them before it looks up credentials: Docker's
//! `ParseNormalizedNamed` (`nginx` is `docker.io/library/nginx`, `index.docker.io/x` is
//! `docker.io/x`), then the repository name without tag or digest.

use std::fmt;

use super::url::{self, Url};

/// Docker Hub's domain in a normalised image name.
const DOCKER_HUB_DOMAIN: &str = "docker.io";
/// The legacy Docker Hub domain, rewritten to [`DOCKER_HUB_DOMAIN`].
const LEGACY_DOCKER_HUB_DOMAIN: &str = "index.docker.io";
/// The longest repository path Docker accepts.
const MAX_PATH_LENGTH: usize = 255;

/// A container image reference, normalised the way the kubelet does before a credential lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// `domain/path`: what the kubelet's keyring matches keys against.
    name: String,
    /// Length of the domain within `name` (0 when the reference has none).
    domain_len: usize,
    tag: Option<String>,
    digest: Option<String>,
    /// `name` read as the keyring reads it (`https://` + name): host and path.
    url: Url,
}

/// Why an image reference cannot be parsed (the kubelet fails such a pull before any lookup).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// The reference is empty.
    #[error("the image reference is empty")]
    Empty,
    /// A 64-character hexadecimal string, which Docker refuses as a repository name.
    #[error("{0:?} is a 64-character hexadecimal string, not a repository name")]
    Identifier(String),
    /// The repository name has upper-case letters.
    #[error("repository name {0:?} must be lowercase")]
    Uppercase(String),
    /// The repository path is longer than 255 characters.
    #[error("repository name {0:?} is longer than 255 characters")]
    TooLong(String),
    /// A digest with an algorithm other than sha256, sha384 or sha512, or a bad length.
    #[error("{0:?} is not a supported digest")]
    Digest(String),
    /// Anything else that is not `[host[:port]/]path[:tag][@digest]`.
    #[error("{0:?} is not a valid image reference")]
    Format(String),
}

impl ImageRef {
    /// Parses an image as written in a container spec (`nginx`, `ghcr.io/org/app:1.2`,
    /// `registry.example.com:5000/app@sha256:…`).
    pub fn parse(image: &str) -> Result<Self, ImageError> {
        if image.is_empty() {
            return Err(ImageError::Empty);
        }
        if image.len() == 64
            && image
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(ImageError::Identifier(image.to_owned()));
        }
        let (domain, remainder) = split_docker_domain(image);
        let remote = remainder
            .split_once(':')
            .map_or(remainder.as_str(), |(r, _)| r);
        if remote.to_lowercase() != remote {
            return Err(ImageError::Uppercase(remote.to_owned()));
        }
        parse_reference(&format!("{domain}/{remainder}"), image)
    }

    /// The repository name with its domain (`docker.io/library/nginx`), what the kubelet's
    /// keyring matches registry keys against.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The registry host and optional port (`docker.io`, `registry.example.com:5000`).
    pub fn domain(&self) -> &str {
        &self.name[..self.domain_len]
    }

    /// The repository path within the registry (`library/nginx`).
    pub fn path(&self) -> &str {
        if self.domain_len == 0 {
            &self.name
        } else {
            &self.name[self.domain_len + 1..]
        }
    }

    /// The tag, if one was written.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The digest (`sha256:…`), if one was written.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// Host and path of [`Self::name`] as the keyring's URL parser reads them.
    pub(crate) fn url(&self) -> &Url {
        &self.url
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// Docker's `splitDockerDomain`: which part of a familiar name is the registry.
fn split_docker_domain(name: &str) -> (&str, String) {
    let Some((maybe_domain, rest)) = name.split_once('/') else {
        return (DOCKER_HUB_DOMAIN, format!("library/{name}"));
    };
    let (domain, remote) = if maybe_domain == "localhost" {
        (maybe_domain, rest)
    } else if maybe_domain == LEGACY_DOCKER_HUB_DOMAIN {
        (DOCKER_HUB_DOMAIN, rest)
    } else if maybe_domain.contains(['.', ':']) || maybe_domain.to_lowercase() != maybe_domain {
        (maybe_domain, rest)
    } else {
        (DOCKER_HUB_DOMAIN, name)
    };
    if domain == DOCKER_HUB_DOMAIN && !remote.contains('/') {
        return (domain, format!("library/{remote}"));
    }
    (domain, remote.to_owned())
}

/// Docker's `reference.Parse` of `name[:tag][@digest]`, after normalisation.
fn parse_reference(full: &str, original: &str) -> Result<ImageRef, ImageError> {
    let format_error = || ImageError::Format(original.to_owned());
    let (before_digest, digest) = match full.split_once('@') {
        Some((before, digest)) => (before, Some(digest)),
        None => (full, None),
    };
    let last_slash = before_digest.rfind('/').unwrap_or(0);
    let (name, tag) = match before_digest.rfind(':') {
        Some(colon) if colon > last_slash => {
            (&before_digest[..colon], Some(&before_digest[colon + 1..]))
        }
        _ => (before_digest, None),
    };
    if let Some(tag) = tag
        && !valid_tag(tag)
    {
        return Err(format_error());
    }
    let digest = match digest {
        Some(digest) => Some(validate_digest(digest).map_err(|e| match e {
            DigestError::Format => format_error(),
            DigestError::Unsupported => ImageError::Digest(digest.to_owned()),
        })?),
        None => None,
    };
    // The domain is optional in the grammar: a first component that is not a domain may
    // still be a path component (`a.b_c/x` has no domain and the path `a.b_c/x`).
    let domain_len = match name.split_once('/') {
        Some((domain, path)) if valid_domain(domain) && valid_path(path) => domain.len(),
        _ if valid_path(name) => 0,
        _ => {
            if name.to_lowercase() != name && valid_path(&name.to_lowercase()) {
                return Err(ImageError::Uppercase(name.to_owned()));
            }
            return Err(format_error());
        }
    };
    let path_len = if domain_len == 0 {
        name.len()
    } else {
        name.len() - domain_len - 1
    };
    if path_len > MAX_PATH_LENGTH {
        return Err(ImageError::TooLong(name.to_owned()));
    }
    let url = url::parse(&format!("https://{name}")).map_err(|_| format_error())?;
    Ok(ImageRef {
        name: name.to_owned(),
        domain_len,
        tag: tag.map(str::to_owned),
        digest: digest.map(str::to_owned),
        url,
    })
}

/// `[\w][\w.-]{0,127}`
fn valid_tag(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && word(bytes[0])
        && bytes.iter().all(|&b| word(b) || b == b'.' || b == b'-')
}

enum DigestError {
    Format,
    Unsupported,
}

/// The reference grammar's digest, then `go-digest`'s check of the algorithms the kubelet
/// links (sha256, sha384, sha512) and of the encoded length.
fn validate_digest(digest: &str) -> Result<&str, DigestError> {
    let (algorithm, encoded) = digest.split_once(':').ok_or(DigestError::Format)?;
    let algorithm_ok = algorithm.split(['-', '_', '+', '.']).all(|component| {
        let mut bytes = component.bytes();
        bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
            && bytes.all(|b| b.is_ascii_alphanumeric())
    });
    if !algorithm_ok || encoded.len() < 32 || !encoded.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(DigestError::Format);
    }
    let length = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return Err(DigestError::Unsupported),
    };
    let lower_hex = encoded
        .bytes()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if encoded.len() != length || !lower_hex {
        return Err(DigestError::Unsupported);
    }
    Ok(digest)
}

/// `(domain-name | [ipv6]) (:port)?`
fn valid_domain(domain: &str) -> bool {
    let (host, port) = if let Some(inner) = domain.strip_prefix('[') {
        let Some((address, tail)) = inner.split_once(']') else {
            return false;
        };
        if address.is_empty() || !address.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
            return false;
        }
        (None, tail)
    } else {
        match domain.find(':') {
            Some(colon) => (Some(&domain[..colon]), &domain[colon..]),
            None => (Some(domain), ""),
        }
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()));
    let host_ok = host.is_none_or(|name| {
        name.split('.').all(|component| {
            let bytes = component.as_bytes();
            !bytes.is_empty()
                && bytes[0].is_ascii_alphanumeric()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || b == b'-')
        })
    });
    port_ok && host_ok
}

/// `component(/component)*`, each `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
fn valid_path(path: &str) -> bool {
    path.split('/').all(valid_path_component)
}

fn valid_path_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let mut i = 0;
    let mut expect_alnum = true;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            while i < bytes.len() && alnum(bytes[i]) {
                i += 1;
            }
            expect_alnum = false;
            continue;
        }
        if expect_alnum {
            return false;
        }
        // A separator: `.`, `_`, `__` or a run of `-`.
        match bytes[i] {
            b'.' => i += 1,
            b'_' => {
                i += if bytes.get(i + 1) == Some(&b'_') {
                    2
                } else {
                    1
                }
            }
            b'-' => {
                while i < bytes.len() && bytes[i] == b'-' {
                    i += 1;
                }
            }
            _ => return false,
        }
        expect_alnum = true;
    }
    !bytes.is_empty() && !expect_alnum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(image: &str) -> (String, Option<String>, Option<String>) {
        match ImageRef::parse(image) {
            Ok(r) => (
                r.name().to_owned(),
                r.tag().map(str::to_owned),
                r.digest().map(str::to_owned),
            ),
            Err(e) => (format!("error: {e}"), None, None),
        }
    }

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn normalises_docker_hub_short_names() {
        assert_eq!(parsed("nginx").0, "docker.io/library/nginx");
        assert_eq!(parsed("nginx:1.27").1.as_deref(), Some("1.27"));
        assert_eq!(parsed("library/nginx").0, "docker.io/library/nginx");
        assert_eq!(parsed("bitnami/redis").0, "docker.io/bitnami/redis");
        assert_eq!(parsed("docker.io/nginx").0, "docker.io/library/nginx");
        assert_eq!(parsed("index.docker.io/nginx").0, "docker.io/library/nginx");
        assert_eq!(
            parsed("index.docker.io/bitnami/redis").0,
            "docker.io/bitnami/redis"
        );
        // Only Docker Hub gets `library/`.
        assert_eq!(parsed("ghcr.io/nginx").0, "ghcr.io/nginx");
        // registry-1.docker.io is not rewritten.
        assert_eq!(
            parsed("registry-1.docker.io/library/nginx").0,
            "registry-1.docker.io/library/nginx"
        );
    }

    #[test]
    fn reads_ports_tags_and_digests() {
        let r = match ImageRef::parse(&format!("registry.example.com:5000/team/app:v1@{DIGEST}")) {
            Ok(r) => r,
            Err(e) => return assert_eq!(e.to_string(), ""),
        };
        assert_eq!(r.domain(), "registry.example.com:5000");
        assert_eq!(r.path(), "team/app");
        assert_eq!(r.tag(), Some("v1"));
        assert_eq!(r.digest(), Some(DIGEST));
        assert_eq!(r.url().host, "registry.example.com:5000");
        assert_eq!(r.url().path, "/team/app");
        assert_eq!(parsed("localhost/app").0, "localhost/app");
        assert_eq!(parsed("localhost:5000/app:1").0, "localhost:5000/app");
        assert_eq!(parsed("[::1]:5000/app").0, "[::1]:5000/app");
        assert_eq!(
            parsed(&format!("nginx@{DIGEST}")).2.as_deref(),
            Some(DIGEST)
        );
        assert_eq!(parsed("Example.com/app").0, "Example.com/app");
    }

    #[test]
    fn rejects_what_docker_rejects() {
        for image in [
            "",
            "Nginx",
            "ghcr.io/Org/app",
            "nginx:",
            "nginx:-x",
            "ghcr.io/app@sha256:abc",
            "ghcr.io/app@md5:0123456789abcdef0123456789abcdef",
            "ghcr.io//app",
            "ghcr.io/app/",
            "ghcr.io:port/app",
            "-ghcr.io/app",
            "a..b",
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert!(
                ImageRef::parse(image).is_err(),
                "{image:?} should not parse"
            );
        }
        let long = format!("ghcr.io/{}", "a".repeat(256));
        assert!(matches!(
            ImageRef::parse(&long),
            Err(ImageError::TooLong(_))
        ));
    }
}
