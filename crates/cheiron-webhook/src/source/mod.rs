//! Where the webhook's [`View`](cheiron_core::policy::View) comes from: files (`--from`,
//! static mode) or the cluster (kube-runtime watches). Both sit behind [`Source`].

mod cluster;
mod contract;
mod file;
mod lookup;
mod namespaces;
mod secrets;
mod symbols;

pub use cluster::{ClusterSource, ClusterView};
pub use contract::Source;
pub use file::{FileSource, LoadError, load_paths};
pub use lookup::{
    DEFAULT_LOOKUP_BURST, DEFAULT_LOOKUP_RATE, DEFAULT_MISS_CACHE_SIZE, DEFAULT_MISS_TTL,
    LISTING_LOOKUPS_IN_FLIGHT, LookupDecision, LookupGuard, LookupLimits, MissCache,
    NAMESPACE_LIST_WAIT, NAMESPACE_LOOKUP_TIMEOUT, NamespaceLookup, TokenBucket, is_namespace_name,
};
