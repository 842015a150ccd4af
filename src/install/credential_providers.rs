//! Credential-provider plugins run by the controller (docs/credential-providers.md), set up as
//! the chart's `credentialProviders` values set them up: the `CredentialProviderConfig` in a
//! ConfigMap mounted at [`CONFIG_DIR`], an emptyDir at [`PLUGINS_DIR`] that an init container
//! fills from an image of the operator's (no hostPath), the controller's two flags, and the
//! right to mint tokens of exactly the ServiceAccounts KEP-4412 providers are to use.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, Volume, VolumeMount,
};

use super::{installation::Install, setup::CredentialProviderSetup};

/// The ConfigMap holding the config, in cheiron's namespace.
pub const CONFIG_MAP: &str = "cheiron-credential-providers";
/// Where the ConfigMap is mounted.
pub const CONFIG_DIR: &str = "/etc/cheiron/credential-providers";
/// The config's key in the ConfigMap, and its file name in [`CONFIG_DIR`].
pub const CONFIG_FILE: &str = "config.yaml";
/// The emptyDir the plugins are copied into: the controller's `--credential-provider-bin-dir`.
pub const PLUGINS_DIR: &str = "/plugins";
/// The Roles (and RoleBindings) that let the controller mint service-account tokens.
pub const TOKENS: &str = "cheiron-credential-provider-tokens";
const CONFIG_VOLUME: &str = "credential-providers";
const PLUGINS_VOLUME: &str = "credential-provider-plugins";

impl CredentialProviderSetup {
    /// The controller's flags.
    pub fn args() -> [String; 2] {
        [
            format!("--credential-provider-config={CONFIG_DIR}/{CONFIG_FILE}"),
            format!("--credential-provider-bin-dir={PLUGINS_DIR}"),
        ]
    }

    /// The controller container's mounts: the config and the plugins, read-only.
    pub fn volume_mounts() -> [VolumeMount; 2] {
        [
            VolumeMount {
                name: CONFIG_VOLUME.to_owned(),
                mount_path: CONFIG_DIR.to_owned(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: PLUGINS_VOLUME.to_owned(),
                mount_path: PLUGINS_DIR.to_owned(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
        ]
    }

    /// The ConfigMap and the emptyDir.
    pub fn volumes() -> [Volume; 2] {
        [
            Volume {
                name: CONFIG_VOLUME.to_owned(),
                config_map: Some(ConfigMapVolumeSource {
                    name: CONFIG_MAP.to_owned(),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            },
            Volume {
                name: PLUGINS_VOLUME.to_owned(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            },
        ]
    }

    /// The init container that copies the plugins into [`PLUGINS_DIR`], hardened like
    /// cheiron's own container.
    pub fn init_container(&self, install: &Install) -> Option<Container> {
        let image = self.plugins_image.clone()?;
        Some(Container {
            name: PLUGINS_VOLUME.to_owned(),
            image: Some(image),
            command: Some(self.plugins_command.clone()),
            security_context: Some(install.container_security_context()),
            volume_mounts: Some(vec![VolumeMount {
                name: PLUGINS_VOLUME.to_owned(),
                mount_path: PLUGINS_DIR.to_owned(),
                ..VolumeMount::default()
            }]),
            ..Container::default()
        })
    }

    /// The ConfigMap holding the config, as given.
    pub fn config_map(&self, install: &Install) -> ConfigMap {
        ConfigMap {
            metadata: install.meta(CONFIG_MAP, "controller"),
            data: Some(BTreeMap::from([(
                CONFIG_FILE.to_owned(),
                self.config.clone(),
            )])),
            ..ConfigMap::default()
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The ECR example of docs/credential-providers.md, for unit tests.
    pub(crate) const CONFIG: &str = "apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: ecr-credential-provider
    matchImages: [\"*.dkr.ecr.*.amazonaws.com\"]
    defaultCacheDuration: 12h
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    args: [get-credentials]
";

    fn setup() -> CredentialProviderSetup {
        CredentialProviderSetup {
            config: CONFIG.to_owned(),
            plugins_image: Some("registry.example.com/plugins:1".to_owned()),
            plugins_command: vec!["cp".to_owned(), "/ecr".to_owned(), "/plugins/".to_owned()],
            token_service_accounts: vec!["ecr-puller".to_owned()],
            token_namespaces: vec!["team-a".to_owned()],
        }
    }

    #[test]
    fn a_valid_setup_passes_and_each_broken_part_is_named() {
        assert!(setup().validate().is_ok());
        let broken = [
            (
                CredentialProviderSetup {
                    config: "kind: CredentialProviderConfig\nproviders: []\nbogus: 1\n".into(),
                    ..setup()
                },
                "config is invalid",
            ),
            (
                CredentialProviderSetup {
                    plugins_image: None,
                    ..setup()
                },
                "go together",
            ),
            (
                CredentialProviderSetup {
                    plugins_command: vec![],
                    ..setup()
                },
                "go together",
            ),
            (
                CredentialProviderSetup {
                    token_service_accounts: vec!["Bad_Name".into()],
                    ..setup()
                },
                "ServiceAccount \"Bad_Name\"",
            ),
            (
                CredentialProviderSetup {
                    token_namespaces: vec!["team.a".into()],
                    ..setup()
                },
                "namespace \"team.a\"",
            ),
        ];
        for (setup, message) in broken {
            let error = setup.validate().err().map(|e| e.to_string());
            assert!(
                error.as_deref().is_some_and(|e| e.contains(message)),
                "{setup:?}: {error:?}"
            );
        }
    }

    #[test]
    fn without_an_image_there_is_no_init_container() {
        let install = Install::default();
        let none = CredentialProviderSetup {
            plugins_image: None,
            plugins_command: vec![],
            ..setup()
        };
        assert!(none.validate().is_ok());
        assert!(none.init_container(&install).is_none());
        let init = setup().init_container(&install);
        assert_eq!(
            init.and_then(|c| c.command),
            Some(vec!["cp".into(), "/ecr".into(), "/plugins/".into()])
        );
    }
}
