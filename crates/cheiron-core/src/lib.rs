//! cheiron's pure core: what the webhook, the controller, the node agent and the offline
//! commands (`mutate`, `explain`, `audit`) decide, from plain values only. No client, no
//! server, no clock: a crate of its own, so that a dependency on the outside is a compile
//! error here, and `cargo test -p cheiron-core` runs these tests without building either.
//!
//! - [`api`]: the two manager kinds, their status and condition reasons, well-known names.
//! - [`registry`]: image references and the kubelet's registry-key matching.
//! - [`policy`]: which Secret names an object should reference (scopes, modes, opt-outs).
//! - [`admission`]: an AdmissionReview in, the response and its JSON Patch out.
//! - [`content`]: what each pull Secret holds, from entries, sources and providers.
//! - [`findings`]: what a reconcile found, and the manager status it makes.
//! - [`health`]: what the registry checks found, and the condition it makes.
//! - [`message`]: how long a message cheiron shows to others may be.

pub mod admission;
pub mod api;
pub mod content;
pub mod findings;
pub mod health;
pub mod message;
pub mod policy;
pub mod registry;
