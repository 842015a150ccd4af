//! cheiron: distributes registry pull secrets to every Pod that should have them, at admission.
//!
//! The binary's crate: the command line (the composition root) and what only it uses
//! (`install`, `audit`, `explain`, `warnings`). Every other room is a crate of its own under
//! `crates/`, re-exported here under its room's name, so `cheiron::controller` and
//! `crate::policy` name what they always named; Cargo keeps their dependencies one way.

pub use cheiron_controller as controller;
pub use cheiron_core::{admission, content, policy, registry};
pub use cheiron_credential as credential;
pub use cheiron_fleet as fleet;
pub use cheiron_health as health;
pub use cheiron_node as node;
pub use cheiron_runtime::{admin, api, message, metrics, runtime, telemetry, tls, yaml};
pub use cheiron_webhook::{source, webhook};

pub mod audit;
pub mod cli;
pub mod explain;
pub mod install;
pub mod warnings;
