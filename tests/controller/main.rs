//! End-to-end tests of `cheiron controller` (and `cheiron run`) against a real kube-apiserver:
//! managers, sources and namespaces are created through the API, and the tests assert what the
//! controller stored: the materialised Secrets, ServiceAccount entries, manager status and
//! Events.
//!
//! This binary has its own control plane (the e2e harness), because a running controller
//! backfills ServiceAccounts and would disturb the admission tests of `tests/e2e/`.
//! One shared `cheiron controller --no-leader-election --resync 15` serves most tests; the
//! leader-election and `cheiron run` tests stop it while they run their own processes (see
//! [`harness::controller`]).

use cheiron_harness as harness;

/// The cheiron these tests start their cluster with.
const CHEIRON: harness::Cheiron = harness::cheiron!();

mod dockerconfig;
mod scenario;

mod conflicts;
mod credential_provider;
mod deletion;
mod fleet;
mod gitops;
mod leader_election;
mod materialise;
mod metrics_tls;
mod missing_secrets;
mod node;
mod pull_failures;
mod pull_secret_registries;
mod registry_keys;
mod repair;
mod run;
mod scope;
mod service_accounts;
mod sources;
mod status;
