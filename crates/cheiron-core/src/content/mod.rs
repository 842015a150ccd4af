//! What each pull Secret holds, from a manager's entries, the source Secrets fetched for them
//! and the credentials providers answered: the `.dockerconfigjson` documents, the registry keys
//! in them and the registries a manager reports. Pure: no client, no I/O, no clock. The
//! controller, the node agent's credentials and the file source all build on it; it imports
//! only the API, the registry grammar and the policy limits below it.

pub mod desired;
pub mod dockerconfig;
pub mod logins;
pub mod registries;
pub mod registry_keys;

pub use desired::{Desired, Fetched, Problem, Provided, SourceKey, desired_with, source_key};
pub use dockerconfig::{DockerConfig, InvalidSource};
