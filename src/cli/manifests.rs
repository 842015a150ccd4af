//! `cheiron manifests`: the plain manifests for installing without Helm: the CRDs, the
//! namespace, and per Deployment (webhook and controller apart with `--deployment split`, the
//! default; one `cheiron run` with `combined`) its ServiceAccount, RBAC, Service,
//! PodDisruptionBudget and NetworkPolicy; the MutatingWebhookConfiguration and the certificate
//! Job. `cheiron manifests --out webhook-config` regenerates the committed copy.

use std::{io::Write, path::PathBuf};

use anyhow::{Context, bail};
use clap::Args;

use crate::install::{
    ADMIN_PORT, CredentialProviderSetup, DEFAULT_NAMESPACE, DeploymentMode, FleetSetup, Install,
    MetricsAuth, NodeAgentSetup, WEBHOOK_PORT, WebhookNetwork, default_image,
};

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
    #[command(flatten)]
    credential_providers: CredentialProviderManifestArgs,
    /// Workload clusters (docs/fleet.md), as the chart's fleet.enabled: the controller gets
    /// --fleet, and RBAC reading Cluster API's CRD and Clusters. Off by default: a kubeconfig
    /// is the keys to a cluster.
    #[arg(long, env = "CHEIRON_MANIFESTS_FLEET")]
    fleet: bool,
    /// With --fleet: the namespace holding the kubeconfig Secrets and Clusters (repeatable;
    /// default: cheiron's namespace), as the chart's fleet.namespaces.
    #[arg(long, value_name = "NS", requires = "fleet", value_parser = parse_namespace)]
    fleet_namespace: Vec<String>,
    /// Also install the node agent (docs/node.md): a DaemonSet of `cheiron node-agent` on
    /// every node and its RBAC, as the chart's `node.enabled=true` with its default values.
    #[arg(long, env = "CHEIRON_MANIFESTS_NODE")]
    node: bool,
    /// With --node: the agents' own namespace (their ServiceAccount, DaemonSet and report
    /// Leases; Pod Security `privileged`), as the chart's node.namespace. Default:
    /// `<--namespace>-node`.
    #[arg(long, value_name = "NS", requires = "node", value_parser = parse_namespace)]
    node_namespace: Option<String>,
    /// The webhook's HTTPS port in its Pods (--listen), as the chart's webhook.port: 1024 to
    /// 65535 (cheiron runs as non-root without capabilities), not the admin port 8080. The
    /// Service still exposes 443. With --webhook-host-network it is a port of every node that
    /// runs a webhook Pod.
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = WEBHOOK_PORT,
        value_parser = parse_webhook_port,
        env = "CHEIRON_MANIFESTS_WEBHOOK_PORT"
    )]
    webhook_port: i32,
    /// Run the Pods that serve the webhook on their node's network (hostNetwork), as the
    /// chart's webhook.hostNetwork: for clusters whose apiserver cannot reach Pod IPs (a
    /// custom CNI on EKS, say). cheiron's namespace then enforces the `privileged` Pod
    /// Security Standard (docs/install.md).
    #[arg(long, env = "CHEIRON_MANIFESTS_WEBHOOK_HOST_NETWORK")]
    webhook_host_network: bool,
}

/// A webhook port a non-root Pod can bind that is not the admin port.
fn parse_webhook_port(text: &str) -> Result<i32, String> {
    match text.parse::<i32>() {
        Ok(port) if port == ADMIN_PORT => Err(format!(
            "{port} is the admin port (/healthz, /readyz, /metrics); choose another"
        )),
        Ok(port) if (1024..=65535).contains(&port) => Ok(port),
        _ => Err(format!(
            "{text:?} is not a port from 1024 to 65535 (cheiron runs as non-root without capabilities)"
        )),
    }
}

/// How the plain manifests set up credential-provider plugins for the controller
/// (docs/credential-providers.md), as the chart's `credentialProviders` values do.
#[derive(Args, Debug, Default)]
pub struct CredentialProviderManifestArgs {
    /// Set up credential-provider plugins: this CredentialProviderConfig goes into the
    /// ConfigMap cheiron-credential-providers, mounted at /etc/cheiron/credential-providers,
    /// and the controller gets --credential-provider-config and
    /// --credential-provider-bin-dir=/plugins (an emptyDir).
    #[arg(
        long,
        value_name = "FILE",
        env = "CHEIRON_MANIFESTS_CREDENTIAL_PROVIDER_CONFIG"
    )]
    credential_provider_config: Option<PathBuf>,
    /// An image holding the plugins: an init container runs it with
    /// --credential-provider-plugins-command, which must copy the plugins into /plugins.
    #[arg(
        long,
        value_name = "IMAGE",
        requires = "credential_provider_config",
        requires = "credential_provider_plugins_command",
        env = "CHEIRON_MANIFESTS_CREDENTIAL_PROVIDER_PLUGINS_IMAGE"
    )]
    credential_provider_plugins_image: Option<String>,
    /// The init container's command, as a JSON list of strings, e.g.
    /// '["cp", "/ecr-credential-provider", "/plugins/"]'.
    #[arg(
        long,
        value_name = "JSON",
        requires = "credential_provider_plugins_image",
        value_parser = parse_command,
        env = "CHEIRON_MANIFESTS_CREDENTIAL_PROVIDER_PLUGINS_COMMAND"
    )]
    credential_provider_plugins_command: Option<PluginsCommand>,
    /// A ServiceAccount of cheiron's namespace whose tokens the controller may mint (a cluster
    /// manager's credentialProvider.serviceAccountName, for providers with tokenAttributes).
    /// Repeat for more. None by default.
    #[arg(
        long = "credential-provider-token-service-account",
        value_name = "NAME",
        requires = "credential_provider_config"
    )]
    credential_provider_token_service_accounts: Vec<String>,
    /// A namespace in which the controller may mint tokens of any ServiceAccount: one whose
    /// namespaced managers a provider with tokenAttributes allows (allowedNamespaces). Widens
    /// the controller's rights; repeat for more. None by default.
    #[arg(
        long = "credential-provider-token-namespace",
        value_name = "NS",
        requires = "credential_provider_config"
    )]
    credential_provider_token_namespaces: Vec<String>,
}

/// The plugins' init container command.
#[derive(Clone, Debug, Default)]
pub struct PluginsCommand(Vec<String>);

fn parse_command(text: &str) -> Result<PluginsCommand, String> {
    match serde_json::from_str::<Vec<String>>(text) {
        Ok(command) if !command.is_empty() => Ok(PluginsCommand(command)),
        _ => Err("a command is a non-empty JSON list of strings, e.g. '[\"cp\", \"/plugin\", \"/plugins/\"]'".to_owned()),
    }
}

impl CredentialProviderManifestArgs {
    /// The setup, with its config read and checked; `None` without a config.
    fn setup(self) -> anyhow::Result<Option<CredentialProviderSetup>> {
        let Some(path) = self.credential_provider_config else {
            return Ok(None);
        };
        let config = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let setup = CredentialProviderSetup {
            config,
            plugins_image: self.credential_provider_plugins_image,
            plugins_command: self
                .credential_provider_plugins_command
                .unwrap_or_default()
                .0,
            token_service_accounts: self.credential_provider_token_service_accounts,
            token_namespaces: self.credential_provider_token_namespaces,
        };
        setup
            .validate()
            .with_context(|| format!("--credential-provider-config {}", path.display()))?;
        Ok(Some(setup))
    }
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
            credential_providers,
            fleet,
            fleet_namespace,
            node,
            node_namespace,
            webhook_port,
            webhook_host_network,
        } = self;
        let files = Install {
            namespace,
            image,
            metrics_auth,
            credential_providers: credential_providers.setup()?,
            fleet: fleet.then_some(FleetSetup {
                namespaces: fleet_namespace,
            }),
            node_agent: node.then_some(NodeAgentSetup {
                namespace: node_namespace,
            }),
            webhook: WebhookNetwork {
                port: webhook_port,
                host_network: webhook_host_network,
            },
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
            credential_providers: CredentialProviderManifestArgs::default(),
            fleet: false,
            fleet_namespace: Vec::new(),
            node: false,
            node_namespace: None,
            webhook_port: WEBHOOK_PORT,
            webhook_host_network: false,
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
            credential_providers: CredentialProviderManifestArgs::default(),
            fleet: false,
            fleet_namespace: Vec::new(),
            node: false,
            node_namespace: None,
            webhook_port: WEBHOOK_PORT,
            webhook_host_network: false,
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

    #[derive(clap::Parser)]
    struct Command {
        #[command(flatten)]
        args: ManifestsArgs,
    }

    fn parse(args: &[&str]) -> Result<ManifestsArgs, clap::Error> {
        use clap::Parser;
        Command::try_parse_from(std::iter::once("manifests").chain(args.iter().copied()))
            .map(|c| c.args)
    }

    use crate::install::EXAMPLE_CREDENTIAL_PROVIDER_CONFIG as ECR;

    fn objects(args: ManifestsArgs) -> anyhow::Result<Vec<serde_json::Value>> {
        let mut out = Vec::new();
        args.run(&mut out)?;
        Ok(serde_saphyr::from_multiple::<serde_json::Value>(
            &String::from_utf8(out)?,
        )?)
    }

    fn find<'a>(
        objects: &'a [serde_json::Value],
        kind: &str,
        name: &str,
        namespace: &str,
    ) -> Option<&'a serde_json::Value> {
        objects.iter().find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"] == name
                && o["metadata"]["namespace"] == namespace
        })
    }

    #[test]
    fn credential_provider_flags_mount_the_config_and_plugins_into_the_controller_only()
    -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, ECR)?;
        let config = config.display().to_string();
        for (mode, controller) in [("split", "cheiron-controller"), ("combined", "cheiron")] {
            let objects = objects(parse(&[
                "--deployment",
                mode,
                "--credential-provider-config",
                &config,
                "--credential-provider-plugins-image",
                "registry.example.com/ecr-plugin:1",
                "--credential-provider-plugins-command",
                r#"["cp", "/ecr-credential-provider", "/plugins/"]"#,
            ])?)?;
            let map = find(
                &objects,
                "ConfigMap",
                "cheiron-credential-providers",
                "cheiron-system",
            )
            .ok_or("no ConfigMap")
            .map_err(anyhow::Error::msg)?;
            assert_eq!(map["data"]["config.yaml"], ECR);
            let deployment = find(&objects, "Deployment", controller, "cheiron-system")
                .ok_or("no controller Deployment")
                .map_err(anyhow::Error::msg)?;
            let pod = &deployment["spec"]["template"]["spec"];
            let args = &pod["containers"][0]["args"];
            for flag in [
                "--credential-provider-config=/etc/cheiron/credential-providers/config.yaml",
                "--credential-provider-bin-dir=/plugins",
            ] {
                assert!(
                    args.as_array().is_some_and(|a| a.iter().any(|x| x == flag)),
                    "{mode}: {args}"
                );
            }
            assert_eq!(
                pod["initContainers"][0]["command"],
                serde_json::json!(["cp", "/ecr-credential-provider", "/plugins/"])
            );
            assert_eq!(
                pod["initContainers"][0]["image"],
                "registry.example.com/ecr-plugin:1"
            );
            assert_eq!(
                pod["volumes"].as_array().map(Vec::len),
                Some(if mode == "split" { 2 } else { 3 })
            );
            // No token rights unless asked for.
            assert!(
                !objects
                    .iter()
                    .any(|o| o["metadata"]["name"] == "cheiron-credential-provider-tokens"),
                "{mode}"
            );
            if mode == "split" {
                let webhook = find(&objects, "Deployment", "cheiron-webhook", "cheiron-system")
                    .ok_or("no webhook Deployment")
                    .map_err(anyhow::Error::msg)?;
                let text = webhook.to_string();
                assert!(!text.contains("credential-provider"), "{text}");
            }
        }
        Ok(())
    }

    #[test]
    fn token_flags_grant_named_service_accounts_here_and_whole_namespaces_named()
    -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, ECR)?;
        let objects = objects(parse(&[
            "--credential-provider-config",
            &config.display().to_string(),
            "--credential-provider-token-service-account",
            "ecr-puller",
            "--credential-provider-token-namespace",
            "team-a",
            "--credential-provider-token-namespace",
            "team-b",
        ])?)?;
        let name = "cheiron-credential-provider-tokens";
        let own = find(&objects, "Role", name, "cheiron-system")
            .ok_or("no Role in cheiron's namespace")
            .map_err(anyhow::Error::msg)?;
        assert_eq!(
            own["rules"],
            serde_json::json!([{"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"], "resourceNames": ["ecr-puller"]}])
        );
        for ns in ["team-a", "team-b"] {
            let role = find(&objects, "Role", name, ns)
                .ok_or("no tenant Role")
                .map_err(anyhow::Error::msg)?;
            assert_eq!(
                role["rules"],
                serde_json::json!([{"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]}])
            );
            let binding = find(&objects, "RoleBinding", name, ns)
                .ok_or("no tenant RoleBinding")
                .map_err(anyhow::Error::msg)?;
            assert_eq!(
                binding["subjects"],
                serde_json::json!([{"kind": "ServiceAccount", "name": "cheiron-controller", "namespace": "cheiron-system"}])
            );
        }
        assert!(find(&objects, "Role", name, "team-c").is_none());
        Ok(())
    }

    #[test]
    fn bad_credential_provider_input_is_refused_and_writes_nothing() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, format!("{ECR}    bogusField: 1\n"))?;
        let out = dir.path().join("out");
        let config = config.display().to_string();
        let out_arg = out.display().to_string();
        let error = parse(&["--out", &out_arg, "--credential-provider-config", &config])?
            .run(&mut Vec::new())
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(
            error.contains("credential-provider config is invalid"),
            "{error}"
        );
        assert!(!out.exists(), "nothing is written");
        for bad in [
            vec!["--credential-provider-plugins-image", "x"],
            vec!["--credential-provider-token-namespace", "team-a"],
            vec![
                "--credential-provider-config",
                &config,
                "--credential-provider-plugins-image",
                "x",
            ],
            vec![
                "--credential-provider-config",
                &config,
                "--credential-provider-plugins-image",
                "x",
                "--credential-provider-plugins-command",
                "cp /x /plugins",
            ],
        ] {
            assert!(parse(&bad).is_err(), "{bad:?}");
        }
        let error = parse(&[
            "--credential-provider-config",
            &config.replace("config.yaml", "missing.yaml"),
        ])?
        .run(&mut Vec::new())
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
        assert!(error.contains("cannot read"), "{error}");
        Ok(())
    }
}
