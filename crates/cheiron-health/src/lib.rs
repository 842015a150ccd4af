//! Credential health (docs/credential-health.md): whether the registries accept the credentials
//! cheiron distributes, known before a Pod fails to pull, and which manager a refused pull
//! comes from.
//!
//! ```text
//!   the reconcile ── each manager's Secrets (content) ──► checks: one per distinct
//!        ▲                                                (registry, credential), on change
//!        │ results (status, condition)                   and every period, bounded
//!        └──────────────── trigger ◄──────────────────── registry: the v2 auth handshake
//! ```
//!
//! - [`checks`]: the controller's `Health` seam: one check per distinct (registry,
//!   credential), when it appears and every interval, bounded, with a per-registry backoff.
//! - [`registry`]: the Docker Registry HTTP API v2 authentication handshake, and Docker Hub's
//!   pull allowance; it sends a credential only to its registry and the token realm that
//!   registry names, over HTTPS.
//! - [`pulls`]: the kubelet's pull-failure messages that are registry refusals, and the
//!   manager credential a refused pull was offered.

pub mod checks;
pub mod pulls;
pub mod registry;
