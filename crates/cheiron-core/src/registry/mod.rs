//! Registry keys and image names as the kubelet reads them: which credential of a
//! `.dockerconfigjson` the kubelet offers for which image. Pure: no Kubernetes types, no I/O.
//! The webhook, the controller and the CLI all decide with this module, so what cheiron reports
//! is what the kubelet does. docs/registries.md explains the rules for users.
//!
//! The rules are those of the kubelet's keyring (`pkg/credentialprovider/keyring.go` in
//! `k8s.io/kubernetes`), reimplemented here and tested with its own test vectors:
//!
//! - **A key is normalised** by adding `https://` unless it starts with `https://` or
//!   `http://`, parsing it as a URL (a key that does not parse is skipped), and stripping a
//!   `/v1/` or `/v2/` path prefix *with* its trailing slash. `https://index.docker.io/v1/` is
//!   read as `index.docker.io`; `https://index.docker.io/v1` as `index.docker.io/v1`, which
//!   matches no image ([`KeyProblem::VersionWithoutSlash`]).
//! - **An image is normalised** as Docker does (`nginx` → `docker.io/library/nginx`,
//!   `index.docker.io/x/y` → `docker.io/x/y`); tag and digest play no part.
//! - **A key matches an image** when the ports are equal, the hosts have the same number of
//!   dot-separated parts and each key part matches as a glob (`*.example.com` matches
//!   `a.example.com`, not `example.com` nor `a.b.example.com`), and the key's path is a string
//!   prefix of the image's path (`host/team` also matches `host/teamx/app`).
//! - **Docker Hub**: the kubelet offers the key read as `index.docker.io` for every Docker Hub
//!   image, but only when no other key matched. `docker.io` matches Docker Hub images directly.
//!   Both are Docker Hub's credential ([`RegistryKey::is_docker_hub`], [`same_registry`]).
//!   `registry-1.docker.io` is not: the kubelet matches it only for images written with that
//!   host ([`KeyProblem::DockerHubApiHost`]).
//!
//! The API:
//!
//! - [`RegistryKey::parse`] reads a key (never fails); [`RegistryKey::as_kubelet_reads`],
//!   [`RegistryKey::matches`] an [`ImageRef`], and [`RegistryKey::problem`], a [`KeyProblem`]
//!   (its `Display` says in words why the kubelet would never use the key as meant).
//! - [`ImageRef::parse`] reads an image reference, or fails with an [`ImageError`].
//! - [`canonical_key`] is the key cheiron writes for an inline `registry:` value
//!   ([`DOCKER_HUB_KEY`] for Docker Hub).
//! - [`same_registry`] tells whether the kubelet reads two keys as one registry.
//! - [`offered_for`] lists the keys the kubelet's keyring offers for an image, in its order.

mod host_glob;
mod image;
mod key;
mod url;

#[cfg(test)]
mod tests;

pub use image::{ImageError, ImageRef};
pub use key::{
    DOCKER_HUB_API_HOST, DOCKER_HUB_KEY, KeyProblem, RegistryKey, canonical_key, offered_for,
    same_registry,
};
