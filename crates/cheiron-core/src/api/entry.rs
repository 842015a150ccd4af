//! One entry of a manager's `spec.secrets`: inline credentials or a reference to an
//! existing Secret.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a manager injects pull secrets into.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Mode {
    /// Add the pull secrets to ServiceAccounts; Pods inherit them through the built-in
    /// ServiceAccount admission plugin.
    #[default]
    ServiceAccount,
    /// Add the pull secrets to each Pod's spec at creation.
    Pod,
    /// `ClusterImagePullSecretManager` only: give the credentials to the kubelet of every node
    /// `nodeSelector` selects, through `cheiron node-agent` (docs/node.md). The webhook and the
    /// namespace controller leave such a manager alone.
    Node,
}

impl Mode {
    /// The name as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ServiceAccount => "ServiceAccount",
            Mode::Pod => "Pod",
            Mode::Node => "Node",
        }
    }
}

/// Whether the controller checks a manager's credentials against their registries
/// (docs/credential-health.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Verify {
    /// No check, unless the controller checks every manager (`--verify-registries`).
    #[default]
    None,
    /// Each credential is checked with its registry's v2 authentication handshake, when it
    /// changes and periodically; the result is the `CredentialsAccepted` condition.
    Registry,
}

impl Verify {
    /// The name as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Verify::None => "None",
            Verify::Registry => "Registry",
        }
    }
}

/// Which of a manager's Secrets a Pod gets (docs/design.md §5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Injection {
    /// Every Secret of the manager, whatever the Pod pulls (the original Cheiron's behaviour).
    #[default]
    All,
    /// Mode Pod only: the Secrets holding a registry the kubelet would use for at least one
    /// image of the Pod's containers, initContainers or ephemeralContainers.
    MatchingImages,
}

impl Injection {
    /// The name as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Injection::All => "All",
            Injection::MatchingImages => "MatchingImages",
        }
    }
}

/// One pull secret of a manager. Either inline credentials (`name`, `registry`, `username`,
/// `password` or `passwordSecretRef`, optional `email`) or `existingSecretRef`, never both.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = super::rules::entry_exclusive(),
    validation = super::rules::entry_inline_fields(),
    validation = super::rules::entry_one_password(),
    validation = super::rules::entry_provider_alone(),
)]
pub struct PullSecretEntry {
    /// Name of the Secret cheiron writes into every target namespace. Defaults to
    /// `existingSecretRef.name` for references.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), regex(pattern = super::rules::OBJECT_NAME_PATTERN))]
    pub name: Option<String>,
    /// Registry server, e.g. `https://index.docker.io/v1/` or `ghcr.io`. Written in the form
    /// the kubelet matches: Docker Hub under any of its names as `https://index.docker.io/v1/`,
    /// other registries without a scheme or a `/v1/`, `/v2/` suffix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub registry: Option<String>,
    /// Registry user name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub username: Option<String>,
    /// Inline password or token. Accepted for compatibility with the original Cheiron;
    /// prefer `passwordSecretRef` (the manager reports `InlineCredentials`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 8192))]
    pub password: Option<String>,
    /// Key of a Secret holding the password or token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret_ref: Option<SecretKeyRef>,
    /// Optional e-mail address some registries want.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub email: Option<String>,
    /// An existing `kubernetes.io/dockerconfigjson` (or legacy `kubernetes.io/dockercfg`)
    /// Secret to copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing_secret_ref: Option<SecretRef>,
    /// Short-lived credentials from one of the controller's credential-provider exec
    /// plugins (the kubelet's `CredentialProviderConfig`), kept fresh in every target
    /// namespace (docs/credential-providers.md). Takes `name` and nothing else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_provider: Option<CredentialProviderRef>,
}

/// Which credential a provider entry wants.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialProviderRef {
    /// An image of the registry, e.g. `123456789012.dkr.ecr.eu-west-1.amazonaws.com/app`: the
    /// provider whose `matchImages` matches it is asked, with this image.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// For providers with `tokenAttributes`: the ServiceAccount whose token the plugin gets
    /// (in the manager's namespace; for a cluster manager, in cheiron's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = super::rules::OBJECT_NAME_PATTERN))]
    pub service_account_name: Option<String>,
}

/// Written by hand so that no `{:?}` of a manager (a log line, a panic message, a test
/// failure) can print an inline password.
impl std::fmt::Debug for PullSecretEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            name,
            registry,
            username,
            password,
            password_secret_ref,
            email,
            existing_secret_ref,
            credential_provider,
        } = self;
        f.debug_struct("PullSecretEntry")
            .field("name", name)
            .field("registry", registry)
            .field("username", username)
            .field("password", &password.as_ref().map(|_| "<redacted>"))
            .field("password_secret_ref", password_secret_ref)
            .field("email", email)
            .field("existing_secret_ref", existing_secret_ref)
            .field("credential_provider", credential_provider)
            .finish()
    }
}

impl PullSecretEntry {
    /// The name of the Secret this entry becomes in each target namespace.
    pub fn target_name(&self) -> Option<&str> {
        self.name
            .as_deref()
            .or_else(|| self.existing_secret_ref.as_ref().map(|r| r.name.as_str()))
    }
}

/// Reference to a whole Secret. `namespace` is required in cluster managers and rejected
/// in namespaced ones.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253), regex(pattern = super::rules::OBJECT_NAME_PATTERN))]
    pub name: String,
    /// Secret namespace (cluster managers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

/// Reference to one key of a Secret. `namespace` is required in cluster managers and
/// rejected in namespaced ones.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253), regex(pattern = super::rules::OBJECT_NAME_PATTERN))]
    pub name: String,
    /// Key within the Secret's data.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
    /// Secret namespace (cluster managers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}
