//! The seam between the reconcile of a cluster manager and the node agents that mode Node
//! hands its credentials to (docs/node.md). The reconcile knows them only through [`Nodes`]:
//! it hands over what the manager's sources hold and gets back what could not be done; where
//! and how the agents read it is the node room's (`crates/cheiron-node/src/handoff.rs`).

use std::collections::HashMap;

use cheiron_core::{
    content::{Fetched, SourceKey},
    findings::Issue,
};
use cheiron_runtime::api::ClusterImagePullSecretManager;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// Where cluster managers' credentials are handed to the node agents.
pub trait Nodes: Send + Sync {
    /// Hands the credentials `manager` (owned by `owner`) yields from its `fetched` sources
    /// to the nodes when it is in mode Node; nothing otherwise.
    fn publish<'a>(
        &'a self,
        manager: &'a ClusterImagePullSecretManager,
        owner: &'a OwnerReference,
        fetched: &'a HashMap<SourceKey, Fetched>,
    ) -> BoxFuture<'a, Option<Issue>>;

    /// Takes away what the deleted manager `name` (with `uid`) handed to the nodes.
    fn remove<'a>(&'a self, name: &'a str, uid: &'a str) -> BoxFuture<'a, Option<Issue>>;
}
