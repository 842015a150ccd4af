//! End-to-end tests of cheiron against a real kube-apiserver: managers are created through the
//! API, objects are created through the API, and the tests assert what the apiserver stored
//! after calling the shared `cheiron webhook`. See [`harness`] for the cluster's lifecycle.

use cheiron_harness as harness;

/// The cheiron these tests start their cluster with.
const CHEIRON: harness::Cheiron = harness::cheiron!();

mod audit;
mod crd_schema;
mod dry_run;
mod explain;
mod failure_policy;
mod live_managers;
mod matching_images;
mod metrics_auth;
mod opt_out;
mod pods;
mod readiness;
mod service_accounts;
