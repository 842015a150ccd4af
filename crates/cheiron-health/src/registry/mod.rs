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
//! - `check`: what one check takes ([`Target`], [`Credential`]) and answers ([`Verdict`]).

pub mod allowance;
pub mod challenge;
mod check;
mod client;
#[cfg(test)]
mod tests;

pub use check::{Credential, Target, Verdict};
pub use client::{
    ClientError, ClientOptions, DEFAULT_CHECK_TIMEOUT, MAX_TOKEN_BODY, RegistryClient,
};

/// Docker Hub's pull allowance for one credential: the core's type, which the status is made
/// from.
pub use cheiron_core::health::Allowance;
