//! One installation of cheiron described as a value: its namespace and image, the names and
//! ports every generated object agrees on, and the metadata and security contexts they share.
//! The generators (`manifests`, `workload`, `certificates`) depend on this room, never on
//! each other's.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Capabilities, PodSecurityContext, SeccompProfile, SecurityContext},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// The namespace of the plain manifests.
pub const DEFAULT_NAMESPACE: &str = "cheiron-system";
/// Name of the Deployment, Service, ServiceAccount and MutatingWebhookConfiguration.
pub const NAME: &str = "cheiron";
/// The serving certificate's Secret (`kubernetes.io/tls`: tls.crt, tls.key, ca.crt).
pub const TLS_SECRET: &str = "cheiron-tls";
/// The `cheiron-certs` Job and its ServiceAccount.
pub const CERTIFICATES: &str = "cheiron-certs";
/// The controller's Lease (the default of `--leader-election-id`).
pub const LEASE: &str = "cheiron-controller";
/// Port the Service exposes to the apiserver.
pub const SERVICE_PORT: i32 = 443;
/// Container port of `--listen` (HTTPS, POST /mutate).
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

/// What is installed and where. [`Install::default`] is what `webhook-config/` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Install {
    /// cheiron's namespace (created by the manifests, excluded from the webhook).
    pub namespace: String,
    /// Image of both `cheiron` and `cheiron-certs`.
    pub image: String,
}

impl Default for Install {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            image: default_image(),
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
