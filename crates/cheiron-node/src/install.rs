//! What `cheiron node-agent --install-bin-dir … --install-provider-config …` puts on the host
//! for the kubelet's credential-provider mechanism: the `cheiron` binary (the plugin) and a
//! `CredentialProviderConfig` naming it for every image. The kubelet reads both at start
//! (its `--image-credential-provider-bin-dir` and `--image-credential-provider-config`), so
//! they are installed once; rotation needs no kubelet restart: the plugin reads the
//! credentials file at every call.
//!
//! A configuration file that cheiron did not write (it lacks [`MARKER`]) is never overwritten.

use std::{
    os::unix::fs::DirBuilderExt,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, bail};

use super::atomic;

/// The first line of the configuration cheiron writes; a file without it is the operator's.
pub const MARKER: &str = "# Written by cheiron node-agent; rewritten at each start.";
/// The plugin's name, and its file name in the bin directory.
pub const PLUGIN_NAME: &str = "cheiron";
/// `matchImages` of the installed configuration: hosts of one to six dot-separated parts,
/// which is every image whose registry has no port (the kubelet matches ports exactly).
pub const MATCH_EVERY_IMAGE: [&str; 6] =
    ["*", "*.*", "*.*.*", "*.*.*.*", "*.*.*.*.*", "*.*.*.*.*.*"];

/// What to install.
#[derive(Clone, Debug)]
pub struct Install {
    /// The kubelet's `--image-credential-provider-bin-dir` (as the agent sees it).
    pub bin_dir: PathBuf,
    /// The kubelet's `--image-credential-provider-config` (as the agent sees it).
    pub config: PathBuf,
    /// The credentials file as the kubelet sees it (its host path).
    pub host_credentials_file: PathBuf,
    /// The plugin's `--cache-duration`, and the configuration's `defaultCacheDuration`.
    pub cache_duration: Duration,
    /// Extra `matchImages` entries (registries with a port, e.g. `registry.local:5000`).
    pub extra_match_images: Vec<String>,
}

impl Install {
    /// The `CredentialProviderConfig` text.
    pub fn config_text(&self) -> String {
        let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let images: Vec<String> = MATCH_EVERY_IMAGE
            .iter()
            .map(|s| (*s).to_owned())
            .chain(self.extra_match_images.iter().cloned())
            .map(|s| quote(&s))
            .collect();
        let cache = format!("{}s", self.cache_duration.as_secs());
        let args = [
            "credential-provider",
            "--credentials-file",
            &self.host_credentials_file.to_string_lossy(),
            "--cache-duration",
            &cache,
        ]
        .iter()
        .map(|a| quote(a))
        .collect::<Vec<_>>()
        .join(", ");
        format!(
            "{MARKER}\napiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - name: {PLUGIN_NAME}\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n    matchImages: [{}]\n    defaultCacheDuration: {cache}\n    args: [{args}]\n",
            images.join(", ")
        )
    }

    /// Installs the running binary as the plugin and writes the configuration, each only when
    /// it differs; refuses a configuration file cheiron did not write. Creates the bin
    /// directory and the configuration's directory when they are missing (mode 0755, as the
    /// kubelet's own directories): the kubelet reads both only once pointed at them.
    pub fn apply(&self) -> anyhow::Result<()> {
        let text = self.config_text();
        let current = atomic::read(&self.config)
            .with_context(|| format!("reading {}", self.config.display()))?;
        let write_config = match current {
            Some(bytes) if bytes == text.as_bytes() => false,
            Some(bytes) if !bytes.starts_with(MARKER.as_bytes()) => bail!(
                "{} exists and was not written by cheiron; refusing to overwrite it (name another \
                 --install-provider-config, or merge the provider into it yourself: docs/node.md)",
                self.config.display()
            ),
            _ => true,
        };
        // Only once nothing is refused: a refusal changes nothing.
        create_directory(&self.bin_dir, "--install-bin-dir")?;
        if let Some(parent) = self.config.parent().filter(|p| !p.as_os_str().is_empty()) {
            create_directory(parent, "the directory of --install-provider-config")?;
        }
        if write_config {
            atomic::write(&self.config, text.as_bytes(), 0o644)
                .with_context(|| format!("writing {}", self.config.display()))?;
        }
        // Compared and copied in blocks: the chart's init container runs this under the node
        // agent's memory limit (128 MiB by default), and the binary is tens of MiB.
        let me = std::env::current_exe().context("finding the running cheiron binary")?;
        let target = self.bin_dir.join(PLUGIN_NAME);
        let installed = atomic::same_content(&me, &target)
            .with_context(|| format!("comparing {} with {}", target.display(), me.display()))?;
        if !installed {
            atomic::copy(&me, &target, 0o755)
                .with_context(|| format!("installing {}", target.display()))?;
        }
        tracing::info!(
            plugin = %target.display(),
            config = %self.config.display(),
            "credential provider installed"
        );
        Ok(())
    }
}

/// Creates `dir` and its missing parents, mode 0755; says which flag names it when that fails.
fn create_directory(dir: &Path, flag: &str) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .with_context(|| {
            format!(
                "cannot create {flag} {} (create it, or name a writable directory)",
                dir.display()
            )
        })
}

#[cfg(test)]
mod tests {
    use cheiron_core::registry::ImageRef;
    use cheiron_credential::ProviderConfig;

    use super::*;

    fn install(dir: &std::path::Path) -> Install {
        Install {
            bin_dir: dir.join("bin"),
            config: dir.join("credential-providers.yaml"),
            host_credentials_file: PathBuf::from("/var/lib/cheiron/credentials.json"),
            cache_duration: Duration::from_secs(60),
            extra_match_images: vec!["registry.local:5000".to_owned()],
        }
    }

    #[test]
    fn the_configuration_is_read_by_the_kubelet_rules_and_names_every_image() -> anyhow::Result<()>
    {
        let dir = tempfile::tempdir()?;
        let text = install(dir.path()).config_text();
        let config = ProviderConfig::parse(&text).map_err(anyhow::Error::msg)?;
        let provider = &config.providers[0];
        assert_eq!(provider.name, PLUGIN_NAME);
        assert_eq!(
            provider.args,
            [
                "credential-provider",
                "--credentials-file",
                "/var/lib/cheiron/credentials.json",
                "--cache-duration",
                "60s"
            ]
        );
        for image in [
            "nginx",
            "quay.io/org/app",
            "a.b.example.com/x:1",
            "123456789012.dkr.ecr.eu-west-1.amazonaws.com/app",
            "registry.local:5000/app",
        ] {
            let image = ImageRef::parse(image)?;
            assert!(config.provider_for(&image).is_some(), "{}", image.name());
        }
        Ok(())
    }

    #[test]
    fn missing_directories_are_created() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut install = install(dir.path());
        install.bin_dir = dir.path().join("not/yet/bin");
        install.config = dir.path().join("etc/kubelet/credential-providers.yaml");
        install.apply()?;
        assert!(install.bin_dir.join(PLUGIN_NAME).is_file());
        assert_eq!(
            std::fs::read_to_string(&install.config)?,
            install.config_text()
        );
        Ok(())
    }

    #[test]
    fn a_bin_dir_that_cannot_be_created_is_one_clear_error() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut install = install(dir.path());
        std::fs::write(dir.path().join("a-file"), b"")?;
        install.bin_dir = dir.path().join("a-file/bin");
        let error = install.apply().map_err(|e| format!("{e:#}"));
        let message = error.err().unwrap_or_default();
        assert!(
            message.starts_with(&format!(
                "cannot create --install-bin-dir {} (create it, or name a writable directory): ",
                install.bin_dir.display()
            )),
            "{message}"
        );
        assert!(!install.config.exists());
        Ok(())
    }

    #[test]
    fn an_operator_s_configuration_is_never_overwritten() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let install = install(dir.path());
        std::fs::write(
            &install.config,
            "apiVersion: kubelet.config.k8s.io/v1\n# mine\n",
        )?;
        let refused = install.apply();
        assert!(refused.is_err());
        assert!(!install.bin_dir.exists(), "a refusal created the bin dir");
        assert_eq!(
            std::fs::read_to_string(&install.config)?,
            "apiVersion: kubelet.config.k8s.io/v1\n# mine\n"
        );
        assert!(!install.bin_dir.join(PLUGIN_NAME).exists());
        std::fs::remove_file(&install.config)?;
        install.apply()?;
        assert_eq!(
            std::fs::read_to_string(&install.config)?,
            install.config_text()
        );
        assert!(install.bin_dir.join(PLUGIN_NAME).exists());
        Ok(())
    }
}
