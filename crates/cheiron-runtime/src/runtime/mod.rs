//! What every long-running part of cheiron needs of the Kubernetes client, whatever it does:
//! Events with a bounded memory ([`events`]), connections kept alive ([`connection`]), API
//! requests bounded in time ([`deadline`]) and paced to what the apiserver serves
//! ([`pace`]), leader election on a Lease ([`leader`]), how a cache follows a watch's lists
//! ([`relist`]), watches that list by streaming where the apiserver serves it
//! ([`watch`](mod@watch)), and how long a failing key waits before its next attempt
//! ([`backoff`]). None of it knows about managers or pull secrets; the controller, the fleet,
//! the webhook's sources, the node status and the warnings build on it.

pub mod backoff;
pub mod connection;
pub mod deadline;
pub mod events;
#[cfg(any(test, feature = "fake-api"))]
pub mod fake_api;
pub mod leader;
pub mod pace;
pub mod relist;
pub mod watch;

pub use backoff::{Backoff, retry_delay};
pub use connection::client_builder;
pub use deadline::{API_REQUEST_DEADLINE, DeadlineLayer, bounded_client};
pub use leader::LeaderElection;
pub use relist::{Relist, Step};
pub use watch::{InitialList, WatchStream, watch};
