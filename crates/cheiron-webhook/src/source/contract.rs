//! What a source of the webhook's [`View`] offers: the view, live lookups of namespaces it
//! lacks, and when its namespaces are listed.

use cheiron_core::policy::View;
use cheiron_runtime::admin::Readiness;
use futures::future::BoxFuture;

use super::lookup::NamespaceLookup;

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
