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

/// How long after its arrival a review whose namespace the view lacks, and could not be looked
/// up, may wait for the view's first list of namespaces (only while that list is coming in:
/// the webhook is ready before it, docs/design.md §5, Readiness). Below the chart's 5 s
/// `timeoutSeconds`, so that the API server gets an answer, not a timeout.
pub const NAMESPACE_LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Namespace lookups that may be in flight at once beyond the rate ([`LookupLimits`]) while
/// the view's first list of namespaces is coming in: then every review whose namespace is not
/// listed yet needs one, and the rate's burst (20) would leave the rest waiting for the list.
/// Each is one GET of a namespace's metadata (milliseconds), so this bounds what a client
/// sending reviews can make the webhook ask the API server for to a few seconds of this
/// many GETs at a time, once per start.
pub const LISTING_LOOKUPS_IN_FLIGHT: usize = 16;

use cheiron_core::policy::{NamespaceMeta, View};
use cheiron_runtime::admin::Readiness;
use futures::future::BoxFuture;

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

    /// Resolves once the view holds every namespace: its first list of them is in. At once
    /// for a source whose view is whole from the start (static mode).
    fn namespaces_listed(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}
