//! The registry check: the Docker Registry HTTP API v2 authentication handshake with one
//! credential, and nothing more (docs/credential-health.md, "What is sent where").
//!
//! ```text
//!   GET https://HOST/v2/ ── 200 ─────────────────────────────► Accepted (no auth asked)
//!        │ 401 WWW-Authenticate: Basic  ─► GET /v2/ with Basic ── 200 ► Accepted, 401/403 ► Rejected
//!        │ 401 WWW-Authenticate: Bearer realm=…,service=…
//!        └─► GET https://REALM?service=…&scope=… with Basic ── token ► Accepted, 401/403 ► Rejected
//! ```
//!
//! No image is pulled and no manifest is read, except Docker Hub's `ratelimitpreview/test`
//! manifest, with a `HEAD`, whose answer carries the pull allowance (a HEAD is not counted as a
//! pull). Every other answer — unreachable, a timeout, a 5xx, a redirect, a realm on plain http —
//! is [`Verdict::Unreachable`], never a rejection.
//!
//! - [`challenge`]: the `WWW-Authenticate` header, parsed (RFC 7235).
//! - `client`: [`RegistryClient`], the handshake over HTTPS: no redirect followed, bodies
//!   capped at [`MAX_TOKEN_BODY`], the whole check within [`DEFAULT_CHECK_TIMEOUT`] (both
//!   set in [`ClientOptions`]), a realm on plain http never sent the credential.
//! - [`allowance`]: Docker Hub's `ratelimit-*` headers.

pub mod allowance;
pub mod challenge;
mod client;
#[cfg(test)]
mod tests;

pub use client::{
    ClientError, ClientOptions, DEFAULT_CHECK_TIMEOUT, MAX_TOKEN_BODY, RegistryClient,
};

/// The registry a credential is checked against.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// `host` or `host:port`, as the URL `https://{host}/v2/` takes it (Docker Hub's keys are
    /// checked at `registry-1.docker.io`).
    pub host: String,
    /// Docker Hub: read the pull allowance too ([`Allowance`]).
    pub docker_hub: bool,
}

/// A username and password. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Credential {
    /// The username.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// What a registry said of a credential. The texts name hosts and status codes, never a
/// credential, a token or a response body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The registry (or its token service) accepted the credential.
    Accepted {
        /// Docker Hub's pull allowance for the credential; `None` for other registries.
        allowance: Option<Allowance>,
    },
    /// The registry or its token service refused the credential (401 or 403).
    Rejected {
        /// Who refused it and how, e.g. `the token service auth.example.com answered 401`.
        detail: String,
    },
    /// No answer about the credential: not reachable, a timeout, an error status, a redirect,
    /// a malformed challenge, or a realm the credential must not be sent to.
    Unreachable {
        /// What happened, e.g. `connect to registry.example.com:443 timed out after 10s`.
        detail: String,
    },
}

/// Docker Hub's pull allowance for one credential: the core's type, which the status is made
/// from.
pub use cheiron_core::health::Allowance;
