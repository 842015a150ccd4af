//! Where the webhook's [`View`] comes from: files (`--from`, static mode) or the cluster
//! (kube-runtime reflector stores). Both sit behind [`Source`].

mod cluster;
mod file;

pub use cluster::{ClusterSource, ClusterSourceError, ClusterView, managed_secrets_selector};
pub use file::{FileSource, LoadError, load_paths};

use crate::policy::View;

/// A source of truth for admission decisions.
pub trait Source: Send + Sync + 'static {
    /// The current view. Cheap: called once per admission request.
    fn view(&self) -> &dyn View;
    /// True once the view is complete (caches synced); `/readyz` answers 503 until then, so
    /// the webhook never admits with an empty view.
    fn is_ready(&self) -> bool;
}
