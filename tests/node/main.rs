//! The node tests: a real kubelet, containerd and runc on this machine pull a private image
//! from a registry with TLS and htpasswd auth, with the credentials cheiron gives the Pods, or
//! the node (mode Node, through the kubelet's credential-provider plugin; see
//! [`harness::node`] and tests/node/README.md). A layer above `tests/e2e`: the e2e tests show
//! what the apiserver stores; these show that the kubelet can then pull. Needs root.

use cheiron_harness as harness;

/// The cheiron these tests start their cluster with.
const CHEIRON: harness::Cheiron = harness::cheiron!();

mod cluster_manager;
mod credential_health;
mod negative_control;
mod node_mode;
mod short_lived;
mod support;
