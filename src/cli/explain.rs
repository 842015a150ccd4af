//! `cheiron explain`: why a Pod or ServiceAccount has (or lacks) each pull secret, from the
//! live cluster or, with `--from`, from manager files (docs/design.md §6).

use std::{io::Write, path::PathBuf};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};

use super::cluster::ClusterArgs;
use crate::{
    admission::interpret,
    explain::{Explanation, explain, render, source},
    policy::{NamespaceMeta, StaticView, SubjectKind, View},
    source::load_paths,
    yaml,
};

/// What `cheiron explain` and `cheiron audit` print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// Words and a table, for people.
    #[default]
    #[value(alias = "table")]
    Text,
    /// JSON, for scripts.
    Json,
}

/// Arguments of `cheiron explain`.
#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// Offline: managers and Namespaces (YAML/JSON files or directories), as `cheiron mutate`
    /// reads them; the one argument is then the manifest to explain (`-` reads stdin).
    #[arg(
        long = "from",
        value_name = "PATH",
        env = "CHEIRON_FROM",
        value_delimiter = ','
    )]
    from: Vec<PathBuf>,
    /// Namespace of the object (live: default the kubeconfig context's; offline: for objects
    /// without `metadata.namespace`, default `default`).
    #[arg(long, short = 'n', env = "CHEIRON_NAMESPACE")]
    namespace: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = ReportFormat::Text, env = "CHEIRON_OUTPUT")]
    output: ReportFormat,
    /// `pod NAME` or `serviceaccount NAME` (live), or `FILE` (with --from).
    #[arg(value_name = "pod|serviceaccount NAME | FILE", required = true, num_args = 1..=2)]
    target: Vec<String>,
}

/// `pod`, `po`, `pods`, `serviceaccount`, `serviceaccounts`, `sa`, as kubectl takes them.
fn kind(word: &str) -> anyhow::Result<SubjectKind> {
    match word.to_ascii_lowercase().as_str() {
        "pod" | "pods" | "po" => Ok(SubjectKind::Pod),
        "serviceaccount" | "serviceaccounts" | "sa" => Ok(SubjectKind::ServiceAccount),
        other => bail!("cannot explain a {other}: give pod NAME or serviceaccount NAME"),
    }
}

impl ExplainArgs {
    /// Explains the object(s) and writes the report to `out`.
    pub async fn run(self, cluster: &ClusterArgs, out: &mut dyn Write) -> anyhow::Result<()> {
        let Self {
            from,
            namespace,
            output,
            target,
        } = self;
        let explanations = if from.is_empty() {
            let [word, name] = target.as_slice() else {
                bail!("give pod NAME or serviceaccount NAME (or --from PATH FILE offline)");
            };
            let kind = kind(word)?;
            let (client, default_namespace) = cluster
                .client_and_namespace(
                    "cannot reach the cluster (set KUBECONFIG or --kubeconfig, run in a Pod, or \
                     use --from)",
                )
                .await?;
            let namespace = namespace.unwrap_or(default_namespace);
            vec![source::live(&client, kind, &namespace, name).await?]
        } else {
            let [file] = target.as_slice() else {
                bail!(
                    "with --from, give one manifest FILE (or -), not {}",
                    target.join(" ")
                );
            };
            offline(&from, namespace.as_deref(), file)?
        };
        write_report(out, output, &explanations)
    }
}

/// Explains every v1 Pod and ServiceAccount of `file` under the managers of `from`.
fn offline(
    from: &[PathBuf],
    namespace: Option<&str>,
    file: &str,
) -> anyhow::Result<Vec<Explanation>> {
    let loaded = load_paths(from)?;
    let view = StaticView::new(loaded.managers, loaded.namespaces);
    let managers = view.managers();
    let text = super::mutate::read_input(&PathBuf::from(file))?;
    let mut explanations = Vec::new();
    for document in yaml::documents(&text) {
        let number = document.number;
        let object = document.content.map_err(|e| {
            anyhow::anyhow!(
                "{file}: document {number}: not YAML or JSON: {}",
                crate::message::without_values(&e.to_string())
            )
        })?;
        let kind = match (object["apiVersion"].as_str(), object["kind"].as_str()) {
            (Some("v1"), Some("Pod")) => SubjectKind::Pod,
            (Some("v1"), Some("ServiceAccount")) => SubjectKind::ServiceAccount,
            _ => continue,
        };
        let ns = object["metadata"]["namespace"]
            .as_str()
            .or(namespace)
            .unwrap_or("default")
            .to_owned();
        let interpreted =
            interpret(&object, kind).with_context(|| format!("{file}: document {number}"))?;
        let meta = view
            .namespace(&ns)
            .unwrap_or_else(|| NamespaceMeta::named(&ns));
        explanations.push(explain(&interpreted, &meta, &managers));
    }
    if explanations.is_empty() {
        bail!("{file}: no Pod or ServiceAccount documents (apiVersion v1)");
    }
    Ok(explanations)
}

fn write_report(
    out: &mut dyn Write,
    output: ReportFormat,
    explanations: &[Explanation],
) -> anyhow::Result<()> {
    match output {
        ReportFormat::Text => {
            for (i, e) in explanations.iter().enumerate() {
                if i > 0 {
                    writeln!(out, "---")?;
                }
                write!(out, "{}", render::text(e))?;
            }
        }
        ReportFormat::Json => {
            let text = match explanations {
                [one] => serde_json::to_string_pretty(one)?,
                many => serde_json::to_string_pretty(many)?,
            };
            writeln!(out, "{text}")?;
        }
    }
    Ok(())
}
