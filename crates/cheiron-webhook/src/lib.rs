//! The admission webhook: the HTTPS server (`webhook`) and its two sources of truth
//! (`source`: the cluster's caches, or YAML files), around the pure `admission` and `policy`
//! of `cheiron-core`.

pub mod source;
pub mod webhook;
