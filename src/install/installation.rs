//! One installation of cheiron described as a value: its namespace and image, how its webhook
//! and controller are deployed, the names and ports every generated object agrees on, and the
//! metadata and security contexts they share.
//! The generators (`manifests`, `workload`, `certificates`) depend on this room, never on
//! each other's.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Capabilities, PodSecurityContext, SeccompProfile, SecurityContext},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

pub use super::setup::{CredentialProviderSetup, FleetSetup, NodeAgentSetup};
pub use crate::admin::MetricsAuth;

/// The namespace of the plain manifests.
pub const DEFAULT_NAMESPACE: &str = "cheiron-system";
/// Name of the Service and the MutatingWebhookConfiguration, and of the Deployment and
/// ServiceAccount of `cheiron run` ([`DeploymentMode::Combined`]).
pub const NAME: &str = "cheiron";
/// Name of the webhook's Deployment, ServiceAccount, PodDisruptionBudget and NetworkPolicy
/// ([`DeploymentMode::Split`]), and of the ClusterRole of what the webhook reads.
pub const WEBHOOK: &str = "cheiron-webhook";
/// Name of the controller's Deployment, ServiceAccount, metrics Service, PodDisruptionBudget
/// and NetworkPolicy ([`DeploymentMode::Split`]), and of the ClusterRole of what the
/// controller reads and writes.
pub const CONTROLLER: &str = "cheiron-controller";
/// The serving certificate's Secret (`kubernetes.io/tls`: tls.crt, tls.key, ca.crt).
pub const TLS_SECRET: &str = "cheiron-tls";
/// The `cheiron-certs` Job and its ServiceAccount.
pub const CERTIFICATES: &str = "cheiron-certs";
/// The controller's Lease (the default of `--leader-election-id`).
pub const LEASE: &str = "cheiron-controller";
/// With `--metrics-auth kubernetes`: the ClusterRole (and binding) that lets every identity
/// of cheiron review the tokens of `/metrics` requests.
pub const METRICS_AUTH: &str = "cheiron-metrics-auth";
/// With `--metrics-auth kubernetes`: the ClusterRole to bind to whoever scrapes `/metrics`
/// (`get` on the non-resource URL); cheiron binds it to no one.
pub const METRICS_READER: &str = "cheiron-metrics-reader";
/// Aggregated into the built-in `admin` and `edit` ClusterRoles: manage the namespaced managers
/// of the namespaces those are bound in ([`super::rbac::manager_edit_rules`]).
pub const MANAGER_EDIT: &str = "cheiron-manager-edit";
/// Aggregated into the built-in `view` ClusterRole: read the namespaced managers.
pub const MANAGER_VIEW: &str = "cheiron-manager-view";
/// The label that aggregates a ClusterRole into the built-in one named after it.
pub const AGGREGATE_TO: &str = "rbac.authorization.k8s.io/aggregate-to-";
/// Port the Service exposes to the apiserver.
pub const SERVICE_PORT: i32 = 443;
/// Container port of `--listen` (HTTPS, POST /mutate) unless [`WebhookNetwork::port`] says
/// otherwise.
pub const WEBHOOK_PORT: i32 = 8443;
/// Container port of `--admin-listen` (/healthz, /readyz, /metrics).
pub const ADMIN_PORT: i32 = 8080;
/// Where the serving certificate is mounted (`--tls-cert-dir`).
pub const TLS_DIR: &str = "/etc/cheiron/tls";
/// `--shutdown-delay`: seconds of serving after SIGTERM while `/readyz` already fails.
pub const SHUTDOWN_DELAY_SECONDS: i64 = 5;
/// Room after SIGTERM for the shutdown delay, draining connections and releasing the Lease.
pub const TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;
/// The non-root user and group the containers run as.
pub const RUN_AS: i64 = 65532;

/// The image of this build: `ghcr.io/anny-co/cheiron:<crate version>`. It holds both
/// `cheiron` and `cheiron-certs`.
pub fn default_image() -> String {
    format!("ghcr.io/anny-co/cheiron:{}", env!("CARGO_PKG_VERSION"))
}

/// How the webhook and the controller run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeploymentMode {
    /// `cheiron webhook` and `cheiron controller` in Deployments of their own, each under its
    /// own ServiceAccount: the Pods that serve the apiserver can read no Secret and write
    /// nothing. The default, and what `webhook-config/` holds.
    #[default]
    Split,
    /// `cheiron run` in one Deployment under one ServiceAccount that holds the rights of both:
    /// fewer Pods, for small clusters.
    Combined,
}

impl DeploymentMode {
    /// Both modes, the default first.
    pub const ALL: [DeploymentMode; 2] = [DeploymentMode::Split, DeploymentMode::Combined];

    /// The chart value and flag value: `split` or `combined`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentMode::Split => "split",
            DeploymentMode::Combined => "combined",
        }
    }

    /// The Deployments of this mode, in apply order.
    pub fn workloads(self) -> &'static [Workload] {
        match self {
            DeploymentMode::Split => &[Workload::Webhook, Workload::Controller],
            DeploymentMode::Combined => &[Workload::Combined],
        }
    }
}

impl std::fmt::Display for DeploymentMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for DeploymentMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|mode| mode.as_str() == text)
            .ok_or_else(|| format!("{text:?} is not a deployment mode (split or combined)"))
    }
}

/// One Deployment of cheiron: what it runs and under which identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// `cheiron webhook`, under [`WEBHOOK`].
    Webhook,
    /// `cheiron controller`, leader-elected, under [`CONTROLLER`].
    Controller,
    /// `cheiron run`, both in one process, under [`NAME`].
    Combined,
}

impl Workload {
    /// The name of its Deployment, ServiceAccount, PodDisruptionBudget and NetworkPolicy.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Webhook => WEBHOOK,
            Workload::Controller => CONTROLLER,
            Workload::Combined => NAME,
        }
    }

    /// The `app.kubernetes.io/component` of its Pods. `cheiron run` serves the webhook, so its
    /// Pods are `webhook` Pods too: the Service selects them.
    pub fn component(self) -> &'static str {
        match self {
            Workload::Webhook | Workload::Combined => "webhook",
            Workload::Controller => "controller",
        }
    }

    /// Whether its Pods serve the webhook (HTTPS port, serving certificate, Service).
    pub fn serves_webhook(self) -> bool {
        matches!(self, Workload::Webhook | Workload::Combined)
    }

    /// Whether it runs the controller (Secret writes, Lease).
    pub fn runs_controller(self) -> bool {
        matches!(self, Workload::Controller | Workload::Combined)
    }
}

/// What is installed and where. [`Install::default`] is what `webhook-config/` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Install {
    /// cheiron's namespace (created by the manifests, excluded from the webhook).
    pub namespace: String,
    /// Image of both `cheiron` and `cheiron-certs`.
    pub image: String,
    /// `--metrics-auth` of every cheiron command; `kubernetes` adds the RBAC it needs
    /// ([`METRICS_AUTH`]) and the ClusterRole for scrapers ([`METRICS_READER`]).
    pub metrics_auth: MetricsAuth,
    /// Credential-provider plugins for the controller (docs/credential-providers.md); none by
    /// default.
    pub credential_providers: Option<CredentialProviderSetup>,
    /// Workload clusters (docs/fleet.md): the controller's `--fleet` and the RBAC it needs;
    /// off by default.
    pub fleet: Option<FleetSetup>,
    /// The node agent's DaemonSet and RBAC (docs/node.md); none by default.
    pub node_agent: Option<NodeAgentSetup>,
    /// Where the Pods that serve the webhook listen: port, and the node's network or their own.
    pub webhook: WebhookNetwork,
}

/// Where the Pods that serve the webhook listen (docs/install.md, "When the apiserver cannot
/// reach Pod IPs").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WebhookNetwork {
    /// The HTTPS port (`--listen`); the Service still exposes 443.
    pub port: i32,
    /// On the node's network (`hostNetwork`), for clusters whose apiserver cannot reach Pod
    /// IPs (a custom CNI on EKS, say). Such Pods break the `baseline` and `restricted` Pod
    /// Security Standards, so cheiron's namespace then enforces `privileged`.
    pub host_network: bool,
}

impl Default for WebhookNetwork {
    fn default() -> Self {
        Self {
            port: WEBHOOK_PORT,
            host_network: false,
        }
    }
}

impl Default for Install {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            image: default_image(),
            metrics_auth: MetricsAuth::None,
            credential_providers: None,
            fleet: None,
            node_agent: None,
            webhook: WebhookNetwork::default(),
        }
    }
}

impl Install {
    /// The recommended labels of an object of `component`.
    pub fn labels(&self, component: &str) -> BTreeMap<String, String> {
        let mut labels = self.selector(component);
        labels.insert("app.kubernetes.io/part-of".into(), NAME.into());
        labels.insert(
            "app.kubernetes.io/version".into(),
            env!("CARGO_PKG_VERSION").into(),
        );
        labels
    }

    /// The labels that select the Pods of `component`.
    pub fn selector(&self, component: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".into(), NAME.into()),
            ("app.kubernetes.io/instance".into(), NAME.into()),
            ("app.kubernetes.io/component".into(), component.into()),
        ])
    }

    /// `metadata` of a namespaced object.
    pub fn meta(&self, name: &str, component: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels(component)),
            ..ObjectMeta::default()
        }
    }

    /// `metadata` of a cluster-scoped object.
    pub fn cluster_meta(&self, name: &str, component: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: None,
            ..self.meta(name, component)
        }
    }

    /// Non-root, RuntimeDefault seccomp: the restricted Pod Security Standard.
    pub fn pod_security_context(&self) -> PodSecurityContext {
        PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS),
            run_as_group: Some(RUN_AS),
            fs_group: Some(RUN_AS),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                localhost_profile: None,
            }),
            ..PodSecurityContext::default()
        }
    }

    /// Read-only root filesystem, no privilege escalation, no capabilities.
    pub fn container_security_context(&self) -> SecurityContext {
        SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: None,
            }),
            ..SecurityContext::default()
        }
    }
}
