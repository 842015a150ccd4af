//! cheiron: distributes registry pull secrets to every Pod that should have them, at admission.

pub mod admin;
pub mod admission;
pub mod api;
pub mod audit;
pub mod cli;
pub mod content;
pub mod controller;
pub mod credential;
pub mod explain;
pub mod fleet;
pub mod install;
pub mod message;
pub mod metrics;
pub mod node;
pub mod policy;
pub mod registry;
pub mod runtime;
pub mod source;
pub mod telemetry;
pub mod tls;
pub mod warnings;
pub mod webhook;
pub mod yaml;
