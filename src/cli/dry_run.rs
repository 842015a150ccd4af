//! `cheiron dry-run`: a Pod created as a server-side dry run, so that it passes the cluster's
//! whole admission chain (cheiron's webhook included) and nothing is stored; prints the pull
//! secrets and cheiron annotations it came back with. With `--expect`, a check: the chart's
//! `helm test` runs it (docs/install.md, "helm test").

use std::{collections::BTreeMap, io::Write, time::Duration};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, Pod, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};
use kube::{
    Api, ResourceExt,
    api::{ObjectMeta, PostParams},
};

use super::cluster::ClusterArgs;

/// The image of the dry-run Pod unless `--image` names one: it is never pulled.
pub const DEFAULT_IMAGE: &str = "dry-run.cheiron.invalid/pause:latest";

/// How often `--expect` asks again while `--timeout` allows (managers reach the webhook's
/// cache within a second or two of their creation).
const RETRY_EVERY: Duration = Duration::from_secs(2);

/// The annotations cheiron writes are under this prefix.
const ANNOTATION_PREFIX: &str = "cheiron.anny.co/";

/// What `cheiron dry-run` prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum DryRunFormat {
    /// Lines for people.
    #[default]
    Text,
    /// JSON: `{"namespace", "pod", "imagePullSecrets", "annotations"}`.
    Json,
}

/// Arguments of `cheiron dry-run`.
#[derive(Args, Debug)]
pub struct DryRunArgs {
    /// Namespace of the Pod (default: the kubeconfig context's, or the Pod's own).
    #[arg(long, short = 'n', env = "CHEIRON_NAMESPACE")]
    namespace: Option<String>,
    /// A label of the Pod, `KEY=VALUE` (repeat it), for managers with a podSelector.
    #[arg(long = "label", short = 'l', value_name = "KEY=VALUE", value_parser = label)]
    labels: Vec<(String, String)>,
    /// The Pod's ServiceAccount (default: the namespace's `default`).
    #[arg(long, value_name = "NAME")]
    service_account: Option<String>,
    /// The Pod's image, for managers with `injection: MatchingImages` (never pulled).
    #[arg(long, value_name = "IMAGE", default_value = DEFAULT_IMAGE)]
    image: String,
    /// A pull secret the Pod must come back with (repeat it): exit 1 without it.
    #[arg(long = "expect", value_name = "SECRET")]
    expect: Vec<String>,
    /// With --expect, how many seconds to keep asking while a secret is missing (a manager
    /// created just before reaches the webhook within seconds).
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    timeout: u64,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = DryRunFormat::Text)]
    output: DryRunFormat,
}

/// `KEY=VALUE`.
fn label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// What the apiserver answered.
struct Admitted {
    namespace: String,
    name: String,
    pull_secrets: Vec<String>,
    annotations: BTreeMap<String, String>,
}

impl DryRunArgs {
    pub async fn run(self, cluster: &ClusterArgs, out: &mut dyn Write) -> anyhow::Result<()> {
        let (client, default_namespace) = cluster.client_and_namespace(
            "cheiron dry-run needs a cluster: --kubeconfig, $KUBECONFIG, ~/.kube/config or a Pod's ServiceAccount",
        )
        .await?;
        let namespace = self.namespace.clone().unwrap_or(default_namespace);
        let pods: Api<Pod> = Api::namespaced(client, &namespace);
        let pod = self.pod();
        let params = PostParams {
            dry_run: true,
            field_manager: Some("cheiron-dry-run".to_owned()),
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(self.timeout);
        let admitted = loop {
            let answer = pods.create(&params, &pod).await.with_context(|| {
                format!("the apiserver refused a dry-run Pod in namespace {namespace}")
            })?;
            let admitted = Admitted {
                namespace: namespace.clone(),
                name: answer.name_any(),
                pull_secrets: answer
                    .spec
                    .iter()
                    .flat_map(|s| s.image_pull_secrets.iter().flatten())
                    .map(|r| r.name.clone())
                    .collect(),
                annotations: answer
                    .annotations()
                    .iter()
                    .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            };
            if self.missing(&admitted).is_empty() || tokio::time::Instant::now() >= deadline {
                break admitted;
            }
            tokio::time::sleep(RETRY_EVERY).await;
        };
        print(&admitted, self.output, out)?;
        let missing = self.missing(&admitted);
        if !missing.is_empty() {
            bail!(
                "the dry-run Pod in namespace {namespace} did not get pull secret(s) {} ({}): is \
                 cheiron's webhook registered, does a manager select this Pod, and can the \
                 apiserver reach the webhook? With failurePolicy Ignore it admits Pods unchanged \
                 when it cannot",
                missing.join(", "),
                if admitted.pull_secrets.is_empty() {
                    "it got none".to_owned()
                } else {
                    format!("it got {}", admitted.pull_secrets.join(", "))
                }
            );
        }
        Ok(())
    }

    fn missing(&self, admitted: &Admitted) -> Vec<String> {
        self.expect
            .iter()
            .filter(|e| !admitted.pull_secrets.contains(e))
            .cloned()
            .collect()
    }

    /// A Pod of one container that meets the `restricted` Pod Security Standard, so that the
    /// namespace's Pod Security admission accepts it whatever its level.
    fn pod(&self) -> Pod {
        Pod {
            metadata: ObjectMeta {
                generate_name: Some("cheiron-dry-run-".to_owned()),
                labels: (!self.labels.is_empty()).then(|| self.labels.iter().cloned().collect()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                service_account_name: self.service_account.clone(),
                restart_policy: Some("Never".to_owned()),
                security_context: Some(PodSecurityContext {
                    run_as_non_root: Some(true),
                    run_as_user: Some(65532),
                    seccomp_profile: Some(SeccompProfile {
                        type_: "RuntimeDefault".to_owned(),
                        ..SeccompProfile::default()
                    }),
                    ..PodSecurityContext::default()
                }),
                containers: vec![Container {
                    name: "dry-run".to_owned(),
                    image: Some(self.image.clone()),
                    security_context: Some(SecurityContext {
                        allow_privilege_escalation: Some(false),
                        capabilities: Some(Capabilities {
                            drop: Some(vec!["ALL".to_owned()]),
                            ..Capabilities::default()
                        }),
                        ..SecurityContext::default()
                    }),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }
}

fn print(admitted: &Admitted, format: DryRunFormat, out: &mut dyn Write) -> anyhow::Result<()> {
    match format {
        DryRunFormat::Text => {
            writeln!(
                out,
                "Pod {}/{} (server-side dry run: nothing was created)",
                admitted.namespace, admitted.name
            )?;
            writeln!(
                out,
                "  imagePullSecrets: {}",
                if admitted.pull_secrets.is_empty() {
                    "(none)".to_owned()
                } else {
                    admitted.pull_secrets.join(", ")
                }
            )?;
            for (key, value) in &admitted.annotations {
                writeln!(out, "  {key}: {value}")?;
            }
        }
        DryRunFormat::Json => writeln!(
            out,
            "{}",
            serde_json::json!({
                "namespace": admitted.namespace,
                "pod": admitted.name,
                "imagePullSecrets": admitted.pull_secrets,
                "annotations": admitted.annotations,
            })
        )?,
    }
    out.flush().map_err(Into::into)
}
