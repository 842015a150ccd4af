//! `cheiron manifests`: the plain manifests for installing without Helm: the CRDs, the
//! namespace, and per Deployment (webhook and controller apart with `--deployment split`, the
//! default; one `cheiron run` with `combined`) its ServiceAccount, RBAC, Service,
//! PodDisruptionBudget and NetworkPolicy; the MutatingWebhookConfiguration and the certificate
//! Job. `cheiron manifests --out webhook-config` regenerates the committed copy.

use std::{io::Write, path::PathBuf};

use anyhow::{Context, bail};
use clap::Args;

use crate::install::{DEFAULT_NAMESPACE, DeploymentMode, Install, MetricsAuth, default_image};

/// Arguments of `cheiron manifests`.
#[derive(Args, Debug)]
pub struct ManifestsArgs {
    /// Write one file per part (crds.yaml, install.yaml, webhook-certs.yaml) into DIR instead
    /// of printing a single YAML stream.
    #[arg(long, value_name = "DIR", env = "CHEIRON_MANIFESTS_OUT")]
    out: Option<PathBuf>,
    /// With --out: write nothing, and fail if a file in DIR differs from what would be written.
    #[arg(long, requires = "out", env = "CHEIRON_MANIFESTS_CHECK")]
    check: bool,
    /// The namespace to install cheiron in.
    #[arg(long, value_name = "NS", default_value = DEFAULT_NAMESPACE, value_parser = parse_namespace, env = "CHEIRON_INSTALL_NAMESPACE")]
    namespace: String,
    /// The image holding `cheiron` and `cheiron-certs`.
    #[arg(long, value_name = "IMAGE", default_value_t = default_image(), env = "CHEIRON_IMAGE")]
    image: String,
    /// `split`: the webhook and the controller in Deployments and identities of their own (the
    /// webhook can read no Secret); `combined`: `cheiron run` in one, for small clusters.
    #[arg(
        long,
        value_name = "MODE",
        default_value_t = DeploymentMode::Split,
        env = "CHEIRON_DEPLOYMENT"
    )]
    deployment: DeploymentMode,
    /// `--metrics-auth` of every cheiron command: `kubernetes` also writes the RBAC it needs
    /// (TokenReviews, SubjectAccessReviews) and a ClusterRole to bind to your scraper.
    #[arg(
        long,
        value_name = "AUTH",
        value_enum,
        default_value_t = MetricsAuth::None,
        env = "CHEIRON_MANIFESTS_METRICS_AUTH"
    )]
    metrics_auth: MetricsAuth,
}

/// A namespace name is a DNS label.
fn parse_namespace(text: &str) -> Result<String, String> {
    let valid = !text.is_empty()
        && text.len() <= 63
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-');
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not a namespace name (lowercase letters, digits and '-', at most 63)"
        ))
    }
}

impl ManifestsArgs {
    /// Prints the manifests to `out`, or writes (or checks) the files in `--out`.
    pub fn run(self, out: &mut dyn Write) -> anyhow::Result<()> {
        let Self {
            out: dir,
            check,
            namespace,
            image,
            deployment,
            metrics_auth,
        } = self;
        let files = Install {
            namespace,
            image,
            metrics_auth,
        }
        .files_for(deployment)?;
        let Some(dir) = dir else {
            for file in &files {
                let body = file
                    .contents
                    .lines()
                    .skip_while(|line| line.starts_with('#'))
                    .collect::<Vec<_>>()
                    .join("\n");
                writeln!(out, "{body}")?;
            }
            return Ok(());
        };
        if check {
            let stale: Vec<String> = files
                .iter()
                .filter(|file| {
                    std::fs::read_to_string(dir.join(file.name)).ok().as_deref()
                        != Some(file.contents.as_str())
                })
                .map(|file| dir.join(file.name).display().to_string())
                .collect();
            if !stale.is_empty() {
                bail!(
                    "stale or missing: {}; regenerate with `cheiron manifests --out {dir}` \
                     (in the repository: `cargo run -- manifests --out {dir}`)",
                    stale.join(", "),
                    dir = dir.display()
                );
            }
            return Ok(());
        }
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        for file in &files {
            let path = dir.join(file.name);
            std::fs::write(&path, &file.contents)
                .with_context(|| format!("cannot write {}", path.display()))?;
            writeln!(out, "wrote {}", path.display())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_must_be_a_dns_label() {
        assert!(parse_namespace("cheiron-system").is_ok());
        for bad in ["", "Cheiron", "-x", "x-", "a.b", &"a".repeat(64)] {
            assert!(parse_namespace(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn stdout_is_one_stream_of_every_object() -> anyhow::Result<()> {
        let mut out = Vec::new();
        ManifestsArgs {
            out: None,
            check: false,
            namespace: DEFAULT_NAMESPACE.into(),
            image: default_image(),
            deployment: DeploymentMode::Split,
            metrics_auth: MetricsAuth::None,
        }
        .run(&mut out)?;
        let text = String::from_utf8(out)?;
        let kinds: Vec<String> = serde_saphyr::from_multiple::<serde_json::Value>(&text)?
            .iter()
            .map(|v| v["kind"].as_str().unwrap_or("").to_owned())
            .collect();
        assert_eq!(
            kinds.first().map(String::as_str),
            Some("CustomResourceDefinition")
        );
        assert_eq!(kinds.get(2).map(String::as_str), Some("Namespace"));
        assert_eq!(kinds.last().map(String::as_str), Some("Job"));
        assert!(!kinds.iter().any(String::is_empty));
        Ok(())
    }

    #[test]
    fn check_fails_on_drift_and_passes_after_writing() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let args = |check| ManifestsArgs {
            out: Some(dir.path().to_owned()),
            check,
            namespace: DEFAULT_NAMESPACE.into(),
            image: default_image(),
            deployment: DeploymentMode::Split,
            metrics_auth: MetricsAuth::None,
        };
        let error = args(true)
            .run(&mut Vec::new())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.contains("regenerate with `cheiron manifests --out"),
            "{error}"
        );
        args(false).run(&mut Vec::new())?;
        args(true).run(&mut Vec::new())?;
        Ok(())
    }
}
