//! cheiron: distributes registry pull secrets to every Pod that should have them, at admission.

// The pure core: the API types, policy, admission, pull-Secret content and registry matching,
// a crate of its own so that nothing in it can reach a client, a server or the controller.
pub use cheiron_core::{admission, content, policy, registry};

pub mod admin;
pub mod api;
pub mod audit;
pub mod cli;
pub mod controller;
pub mod credential;
pub mod explain;
pub mod fleet;
pub mod install;
pub mod message;
pub mod metrics;
pub mod node;
pub mod runtime;
pub mod source;
pub mod telemetry;
pub mod tls;
pub mod warnings;
pub mod webhook;
pub mod yaml;
