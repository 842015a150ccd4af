//! What installing cheiron writes into a cluster: the webhook registration (and, later, the
//! plain manifests), generated from code so tests and manifests cannot drift apart.

mod webhook_configuration;

pub use webhook_configuration::{FailurePolicy, WebhookClient, WebhookRegistration};
