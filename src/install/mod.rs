//! What installing cheiron writes into a cluster, generated from code so that tests, the plain
//! manifests of `webhook-config/` and the Helm chart cannot drift apart: the webhook
//! registration, one least-privilege identity per Deployment (the webhook and the controller
//! apart by default, or `cheiron run`), their NetworkPolicies and the certificate Job.

mod certificates;
mod credential_providers;
mod error;
mod installation;
mod manifests;
mod network_policy;
mod node_agent;
pub mod rbac;
mod setup;
mod webhook_configuration;
mod workload;

pub use certificates::{JOB_TTL_SECONDS, create_args, patch_args};
#[cfg(test)]
pub(crate) use credential_providers::tests::CONFIG as EXAMPLE_CREDENTIAL_PROVIDER_CONFIG;
pub use credential_providers::{
    CONFIG_DIR as CREDENTIAL_PROVIDER_CONFIG_DIR, CONFIG_MAP as CREDENTIAL_PROVIDER_CONFIG_MAP,
    PLUGINS_DIR as CREDENTIAL_PROVIDER_PLUGINS_DIR, TOKENS as CREDENTIAL_PROVIDER_TOKENS,
};
pub use error::ManifestError;
pub use installation::{
    ADMIN_PORT, AGGREGATE_TO, CERTIFICATES, CONTROLLER, DEFAULT_NAMESPACE, DeploymentMode, Install,
    LEASE, MANAGER_EDIT, MANAGER_VIEW, METRICS_AUTH, METRICS_READER, MetricsAuth, NAME, RUN_AS,
    SERVICE_PORT, SHUTDOWN_DELAY_SECONDS, TERMINATION_GRACE_PERIOD_SECONDS, TLS_DIR, TLS_SECRET,
    WEBHOOK, WEBHOOK_PORT, WebhookNetwork, Workload, default_image,
};
pub use manifests::ManifestFile;
pub use node_agent::{NODE_AGENT, NODE_AGENT_REPORT};
pub use setup::{CredentialProviderSetup, FleetSetup, NodeAgentSetup, SetupError};
pub use webhook_configuration::{FailurePolicy, WebhookClient, WebhookRegistration};
pub use workload::container_args;
