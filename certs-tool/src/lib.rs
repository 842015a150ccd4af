//! cheiron-certs: the webhook's CA and serving certificate (docs/design.md §2, §6).
//!
//! ```text
//!  generate ──► Ca::generate ─► Ca::issue ─► ca.crt tls.crt tls.key (files)
//!  create ──► get Secrets ─► decide() ─► Keep | Issue{reuse_ca} | Refuse ─► write Secrets
//!  patch  ──► ca.crt of the Secret ─► ca_bundle::changes() ─► strategic merge patch
//! ```
//!
//! The decisions ([`decide`], [`ca_bundle::merge`]) are pure functions of what is stored and
//! the time; the commands are thin shells that read, decide, and write.

pub mod ca_bundle;
pub mod cli;
pub mod create;
pub mod decision;
pub mod error;
pub mod generate;
pub mod names;
pub mod patch;
pub mod pki;
pub mod secret;

pub use cli::{Cli, Outcome};
pub use create::{CaChoice, CreateRequest, Created, create};
pub use decision::{Decision, RENEW_BEFORE, Refusal, Reissue, decide};
pub use error::{Error, Result};
pub use generate::{GenerateRequest, Generated, generate};
pub use names::{San, ServingNames};
pub use patch::{PatchRequest, Patched, patch};
pub use pki::{Ca, ServingCertificate, Validity};
/// The `time` crate, whose `OffsetDateTime` and `Duration` appear in this API.
pub use time;
