//! What an installation is asked for, capability by capability: the credential-provider
//! plugins, the fleet and the node agent, as the chart's values give them. Plain values with
//! their checks; what each renders is in its own file (`credential_providers.rs`,
//! `manifests.rs`, `node_agent.rs`), and `Install` (installation.rs) holds one of each.

use crate::credential::ProviderConfig;

/// Credential-provider plugins for the controller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CredentialProviderSetup {
    /// The `CredentialProviderConfig` file's text: the ConfigMap's `config.yaml`.
    pub config: String,
    /// An image holding the plugins; its init container runs `plugins_command`, which
    /// must copy them into `/plugins`. Without it the directory stays empty and the
    /// controller refuses to start (every provider's plugin must be there).
    pub plugins_image: Option<String>,
    /// The init container's command.
    pub plugins_command: Vec<String>,
    /// ServiceAccounts of cheiron's namespace whose tokens the controller may mint: those
    /// cluster managers name in `credentialProvider.serviceAccountName`. Only these names, so
    /// the controller cannot mint tokens of cheiron's own identities.
    pub token_service_accounts: Vec<String>,
    /// Namespaces in which the controller may mint tokens of any ServiceAccount: those whose
    /// namespaced managers a provider with `tokenAttributes` allows (`allowedNamespaces`).
    /// This widens the controller's rights, so it is opt-in, namespace by namespace.
    pub token_namespaces: Vec<String>,
}

/// Why a setup is refused.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The config is not a valid `CredentialProviderConfig`.
    #[error("the credential-provider config is invalid: {0}")]
    Config(String),
    /// A command without an image, or an image without a command.
    #[error("the plugins image and the plugins command go together: give both or neither")]
    PluginsImage,
    /// A name that cannot be a namespace or ServiceAccount.
    #[error("{what} {name:?} is not a valid name (lowercase letters, digits, '-' and '.')")]
    Name {
        /// Namespace or ServiceAccount.
        what: &'static str,
        /// The name.
        name: String,
    },
}

impl CredentialProviderSetup {
    /// Checks the config as the controller will read it (strictly, as the kubelet does; the
    /// plugins themselves are only checked when the controller starts), and the names.
    pub fn validate(&self) -> Result<(), SetupError> {
        ProviderConfig::parse(&self.config).map_err(SetupError::Config)?;
        if self.plugins_image.is_some() == self.plugins_command.is_empty() {
            return Err(SetupError::PluginsImage);
        }
        let checks = self
            .token_service_accounts
            .iter()
            .map(|n| ("ServiceAccount", n, 253))
            .chain(self.token_namespaces.iter().map(|n| ("namespace", n, 63)));
        for (what, name, max) in checks {
            let valid = !name.is_empty()
                && name.len() <= max
                && name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                })
                && !(what == "namespace" && name.contains('.'))
                && name.starts_with(|c: char| c.is_ascii_alphanumeric())
                && name.ends_with(|c: char| c.is_ascii_alphanumeric());
            if !valid {
                return Err(SetupError::Name {
                    what,
                    name: name.clone(),
                });
            }
        }
        Ok(())
    }
}

/// The plain manifests' fleet, as the chart's `fleet` values (docs/fleet.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetSetup {
    /// The namespaces holding the kubeconfig Secrets and Cluster API `Cluster`s
    /// (`--fleet-namespace`); empty: cheiron's own namespace (never every namespace).
    pub namespaces: Vec<String>,
}

impl FleetSetup {
    /// The fleet namespaces of an install in `own`: those named, or `own`.
    pub fn namespaces_in(&self, own: &str) -> Vec<String> {
        if self.namespaces.is_empty() {
            vec![own.to_owned()]
        } else {
            self.namespaces.clone()
        }
    }
}

/// The node namespace's default: cheiron's namespace and this suffix.
pub const NODE_NAMESPACE_SUFFIX: &str = "-node";

/// A namespace's name is a DNS label of at most 63 characters: the default node namespace cuts
/// cheiron's namespace to this many before the suffix (the chart's `cheiron.nodeNamespace`
/// does the same).
pub const NODE_NAMESPACE_PREFIX_MAX: usize = 63 - NODE_NAMESPACE_SUFFIX.len();

/// What `--node` installs: where the agents run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeAgentSetup {
    /// The chart's `node.namespace`: the agents' namespace, of their ServiceAccount, their
    /// report Leases and the node credentials (none: cheiron's namespace and
    /// `NODE_NAMESPACE_SUFFIX`).
    pub namespace: Option<String>,
}

impl NodeAgentSetup {
    /// The node namespace of an installation in `cheiron_namespace`.
    pub fn namespace_of(&self, cheiron_namespace: &str) -> String {
        self.namespace.clone().unwrap_or_else(|| {
            // Namespace names are ASCII; a name that is not cannot be cut, nor be a namespace.
            let prefix = cheiron_namespace
                .get(..NODE_NAMESPACE_PREFIX_MAX)
                .unwrap_or(cheiron_namespace);
            // One dash, as the chart's trimSuffix: the name then ends in the suffix anyway.
            let prefix = prefix.strip_suffix('-').unwrap_or(prefix);
            format!("{prefix}{NODE_NAMESPACE_SUFFIX}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_node_namespace_stays_a_dns_label_for_the_longest_namespace() {
        let setup = NodeAgentSetup::default();
        assert_eq!(setup.namespace_of("cheiron-system"), "cheiron-system-node");
        let longest = "n".repeat(63);
        let node = setup.namespace_of(&longest);
        assert_eq!(node.len(), 63);
        assert_eq!(node, format!("{}-node", "n".repeat(58)));
        // No `--node` from a cut that ends on a dash.
        let dashed = format!("{}-{}", "a".repeat(57), "b".repeat(5));
        assert_eq!(
            setup.namespace_of(&dashed),
            format!("{}-node", "a".repeat(57))
        );
        let named = NodeAgentSetup {
            namespace: Some("agents".to_owned()),
        };
        assert_eq!(named.namespace_of(&longest), "agents");
    }
}
