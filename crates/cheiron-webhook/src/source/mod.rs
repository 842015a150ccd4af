//! Where the webhook's [`View`] comes from: files (`--from`, static mode) or the cluster
//! (kube-runtime watches). Both sit behind [`Source`].

mod cluster;
mod file;
mod lookup;
mod namespaces;
mod secrets;
mod symbols;

pub use cluster::{ClusterSource, ClusterView};
pub use file::{FileSource, LoadError, load_paths};
pub use lookup::{
    DEFAULT_LOOKUP_BURST, DEFAULT_LOOKUP_RATE, DEFAULT_MISS_CACHE_SIZE, DEFAULT_MISS_TTL,
    LookupDecision, LookupGuard, LookupLimits, MissCache, TokenBucket, is_namespace_name,
};

/// How long a live namespace lookup may take before the object is admitted unchanged.
pub const NAMESPACE_LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

use futures::future::BoxFuture;

use crate::{
    admin::Readiness,
    policy::{NamespaceMeta, View},
};

/// The answer to a namespace lookup that missed the view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceLookup {
    /// Found (live): use these labels and annotations.
    Found(NamespaceMeta),
    /// Could not be looked up: the object must be admitted unchanged rather than guessed at
    /// (an opt-out annotation could be missed).
    Unknown,
    /// This source does not track namespaces beyond the view: a namespace it does not list has
    /// no labels or annotations (static mode).
    Untracked,
}

/// A source of truth for admission decisions.
pub trait Source: Readiness {
    /// The current view. Cheap: called once per admission request.
    fn view(&self) -> &dyn View;

    /// Looks up a namespace the view does not have yet, e.g. one created milliseconds ago whose
    /// watch event has not arrived.
    fn lookup_namespace<'a>(&'a self, name: &'a str) -> BoxFuture<'a, NamespaceLookup> {
        let _ = name;
        Box::pin(std::future::ready(NamespaceLookup::Untracked))
    }
}
