//! End-to-end tests of `cheiron controller` (and `cheiron run`) against a real kube-apiserver:
//! managers, sources and namespaces are created through the API, and the tests assert what the
//! controller stored: the materialised Secrets, ServiceAccount entries, manager status and
//! Events.
//!
//! This binary has its own control plane (the e2e harness, shared by path), because a running
//! controller backfills ServiceAccounts and would disturb the admission tests of `tests/e2e/`.
//! One shared `cheiron controller --no-leader-election --resync 15` serves most tests; the
//! leader-election and `cheiron run` tests stop it while they run their own processes (see
//! [`harness::controller`]).

// The harness serves two binaries; each uses only part of it.
#[allow(dead_code, unused_imports)]
#[path = "../e2e/harness/mod.rs"]
mod harness;

mod dockerconfig;
mod scenario;

mod conflicts;
mod deletion;
mod leader_election;
mod materialise;
mod run;
mod scope;
mod service_accounts;
mod sources;
mod status;
