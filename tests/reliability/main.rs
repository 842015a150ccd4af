//! The fault matrix: cheiron on a real control plane while parts of it fail, each test with a
//! control plane of its own (it stops and starts etcd and kube-apiserver, kills webhook replicas
//! and controllers), one test at a time. Each test asserts the outcome users rely on and prints
//! the figures `docs/reliability.md` records (run with `--nocapture` to see them).
//!
//! | fault | outcome asserted |
//! |---|---|
//! | webhook replica SIGKILLed under Pod-create load | only creates in the seconds after the kill miss the secret; then every Pod gets it |
//! | webhook replicas SIGTERMed under load (rolling update) | zero failed admissions |
//! | serving certificate rotated under load | zero failed handshakes, zero failed admissions |
//! | leader SIGKILLed | the standby takes over within the lease and reconciles |
//! | leader cut off from the apiserver (packets lost) | it stops leading before the standby takes over |
//! | a connection to the apiserver stops answering | a request is given up at its deadline; the next is answered once healed |
//! | a watch's apiserver end vanishes without a word (needs root: iptables) | TCP keep-alive finds it; the watch resumes within 70 s |
//! | a controller cut off mid-reconcile, then SIGTERMed | it exits within its grace for reconciles |
//! | a node agent cut off while it writes its report | SIGTERM ends it within 5 s |
//! | kube-apiserver restarted mid-reconcile | the controller stays up and converges |
//! | etcd restarted mid-reconcile | the controller stays up and converges |
//! | apiserver throttling cheiron (429) | the controller backs off and converges |
//! | 10 000 foreign Secrets carrying cheiron's labels | controller memory stays bounded |
//! | webhook not registered, then stopped (`failurePolicy: Ignore`) | `cheiron audit` reports the Pods admitted without it, with reason and fix |
//! | apiserver without streaming lists (`WatchList=false`) | the webhook lists in pages, says so, and injects; with them, every watch streams |
//! | churn soak (namespaces, managers, sources, foreign writers) | state equals the rules, nothing foreign changed, memory flat |

use cheiron_harness as harness;

/// The cheiron these tests run.
const CHEIRON: harness::Cheiron = harness::cheiron!();

mod fault_cluster;

mod audit_webhook;
mod control_plane_faults;
mod leader;
mod memory;
mod soak;
mod unanswered;
mod watch_lists;
mod webhook_faults;
