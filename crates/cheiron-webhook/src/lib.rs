//! The admission webhook: the HTTPS server (`webhook`) and its two sources of truth
//! (`source`: the cluster's caches, or YAML files), around the pure `admission` and `policy`
//! of `cheiron-core`.

pub mod source;
pub mod webhook;

// The rooms this crate builds on, under the names the code uses.
use cheiron_core::{admission, content, policy};
use cheiron_runtime::{admin, api, decode, message, metrics, runtime, tls, yaml};
