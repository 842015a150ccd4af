//! What every long-running part of cheiron needs of the Kubernetes client, whatever it does:
//! Events with a bounded memory ([`events`]), API requests paced to what the apiserver serves
//! ([`pace`]), and leader election on a Lease ([`leader`]). None of it knows about managers or
//! pull secrets; the controller, the fleet, the node status and the warnings build on it.

pub mod events;
#[cfg(any(test, feature = "fake-api"))]
pub mod fake_api;
pub mod leader;
pub mod pace;

pub use leader::LeaderElection;
