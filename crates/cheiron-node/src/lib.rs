//! Node-level credentials (docs/node.md): a `ClusterImagePullSecretManager` in mode `Node`
//! gives its registries to every Pod of the nodes it selects, static Pods and system images
//! included, through the kubelet rather than through `imagePullSecrets`.
//!
//! ```text
//!   cheiron node-agent (one per node)        the kubelet
//!     credentials file (0600, atomic) ──────► cheiron credential-provider (exec plugin)
//!     config.json merge (optional) ─────────► /var/lib/kubelet/config.json
//! ```
//!
//! - [`bundle`]: what the controller hands the agents for one manager (its credentials).
//! - [`atomic`]: writing a host file so a reader never sees a part of it.
//! - [`credentials`]: the node-local credentials file.
//! - [`config_json`]: merging into the kubelet's config.json and restoring it exactly.
//! - [`provider`]: the kubelet's credential-provider protocol, answered from the file.
//! - [`install`]: the plugin and its `CredentialProviderConfig`, put where the kubelet looks.
//! - [`agent`]: `cheiron node-agent`, keeping one node's files in step with the managers.
//! - [`metrics`]: the agent's `/metrics`.
//! - [`report`]: each agent's report Lease, and the controller's sum of them in the status.
//! - [`status`]: the node status of mode Node managers, kept by the controller from the
//!   reports, and the clean-up of stale bundles.

pub mod agent;
pub mod atomic;
pub mod bundle;
pub mod config_json;
pub mod credentials;
pub mod handoff;
pub mod install;
pub mod metrics;
pub mod provider;
pub mod report;
pub mod status;
