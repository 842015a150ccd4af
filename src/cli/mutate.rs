//! `cheiron mutate`: the webhook's decision for each Pod and ServiceAccount in a manifest,
//! with no cluster.

use std::{
    io::{Read, Write},
    path::PathBuf,
};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use serde_json::Value;

use crate::{
    admission::mutate,
    policy::{StaticView, SubjectKind},
    source::load_paths,
    yaml,
};

/// What `cheiron mutate` prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Every object of the input as a YAML stream, in order: Pods and ServiceAccounts mutated,
    /// the others as they were (so `cheiron mutate … | kubectl apply -f -` loses nothing).
    #[default]
    Yaml,
    /// The same objects as JSON (a `v1/List` when there are several).
    Json,
    /// One RFC 6902 JSON Patch per Pod or ServiceAccount and line (`[]` when nothing changes);
    /// other objects get no line.
    Patch,
}

/// Arguments of `cheiron mutate`.
#[derive(Args, Debug)]
pub struct MutateArgs {
    /// Managers and Namespaces (YAML/JSON files or directories).
    #[arg(
        long = "from",
        value_name = "PATH",
        required = true,
        env = "CHEIRON_FROM",
        value_delimiter = ','
    )]
    from: Vec<PathBuf>,
    /// Namespace for objects without `metadata.namespace` (default: `default`).
    #[arg(long, short = 'n', env = "CHEIRON_NAMESPACE")]
    namespace: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Yaml, env = "CHEIRON_OUTPUT")]
    output: OutputFormat,
    /// The manifest to mutate; `-` reads standard input.
    #[arg(value_name = "FILE|-", env = "CHEIRON_MUTATE_FILE")]
    file: PathBuf,
}

/// One document of the input and what cheiron makes of it.
struct Mutated {
    object: Value,
    /// The patch of a Pod or ServiceAccount; `None` for any other object, passed through.
    patch: Option<json_patch::Patch>,
}

impl MutateArgs {
    /// Mutates every Pod and ServiceAccount in the file and writes the result to `out`.
    pub fn run(self, out: &mut dyn Write) -> anyhow::Result<()> {
        let Self {
            from,
            namespace,
            output,
            file,
        } = self;
        let loaded = load_paths(&from)?;
        for warning in &loaded.unusable_keys {
            tracing::warn!("{warning}");
        }
        let view = StaticView::new(loaded.managers, loaded.namespaces);
        let text = read_input(&file)?;
        let label = file.display().to_string();

        let mut results = Vec::new();
        for document in yaml::documents(&text) {
            let number = document.number;
            // The parser's message may quote a value of the input (an env var, a token):
            // it is shown with its values hidden.
            let mut object = document.content.map_err(|e| {
                anyhow::anyhow!(
                    "{label}: document {number}: not YAML or JSON: {}",
                    crate::message::without_values(&e.to_string())
                )
            })?;
            let kind = match (object["apiVersion"].as_str(), object["kind"].as_str()) {
                (Some("v1"), Some("Pod")) => SubjectKind::Pod,
                (Some("v1"), Some("ServiceAccount")) => SubjectKind::ServiceAccount,
                _ if object.is_null() => continue,
                (_, kind) => {
                    tracing::debug!(
                        "{label}: document {number} is a {}, not a Pod or ServiceAccount; \
                         passed through",
                        kind.unwrap_or("document without a kind")
                    );
                    results.push(Mutated {
                        object,
                        patch: None,
                    });
                    continue;
                }
            };
            let ns = object["metadata"]["namespace"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| namespace.clone())
                .unwrap_or_else(|| "default".to_owned());
            let mutation = mutate(&object, kind, &ns, &view)
                .with_context(|| format!("{label}: document {number}"))?;
            for warning in &mutation.warnings {
                tracing::warn!("{warning}");
            }
            json_patch::patch(&mut object, &mutation.patch)
                .with_context(|| format!("{label}: document {number}: patch does not apply"))?;
            results.push(Mutated {
                object,
                patch: Some(mutation.patch),
            });
        }
        if results.iter().all(|r| r.patch.is_none()) {
            bail!("{label}: no Pod or ServiceAccount documents (apiVersion v1)");
        }
        write_results(out, output, results)
    }
}

pub(super) fn read_input(file: &PathBuf) -> anyhow::Result<String> {
    if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("standard input")?;
        Ok(text)
    } else {
        std::fs::read_to_string(file).with_context(|| file.display().to_string())
    }
}

fn write_results(
    out: &mut dyn Write,
    output: OutputFormat,
    results: Vec<Mutated>,
) -> anyhow::Result<()> {
    match output {
        OutputFormat::Yaml => {
            for r in results {
                writeln!(out, "---")?;
                write!(out, "{}", yaml::to_string(&r.object)?)?;
            }
        }
        OutputFormat::Json => {
            let value = if results.len() == 1 {
                results
                    .into_iter()
                    .map(|r| r.object)
                    .collect::<Vec<_>>()
                    .remove(0)
            } else {
                serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "List",
                    "items": results.into_iter().map(|r| r.object).collect::<Vec<_>>(),
                })
            };
            writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
        }
        OutputFormat::Patch => {
            for patch in results.into_iter().filter_map(|r| r.patch) {
                writeln!(out, "{}", serde_json::to_string(&patch)?)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn offline_matching_images_knows_inline_registries_from_the_manager_and_copied_ones_from_its_status()
    -> TestResult {
        let dir = tempfile::tempdir()?;
        let managers = dir.path().join("managers.yaml");
        std::fs::write(
            &managers,
            r#"
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata: {name: matching, namespace: team}
spec:
  mode: Pod
  injection: MatchingImages
  secrets:
    - {name: hub, registry: "https://index.docker.io/v1/", username: u, password: p}
    - {name: ghcr, registry: ghcr.io, username: u, password: p}
    - existingSecretRef: {name: quay}
    - existingSecretRef: {name: unreported}
status:
  pullSecrets: [{name: quay, registries: [quay.io]}]
"#,
        )?;
        let pods = dir.path().join("pods.yaml");
        std::fs::write(
            &pods,
            "
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: team}
spec:
  containers: [{name: web, image: nginx}]
---
apiVersion: v1
kind: Pod
metadata: {name: tools, namespace: team}
spec:
  containers: [{name: a, image: 'quay.io/org/tool:1'}]
  initContainers: [{name: b, image: 'ghcr.io/org/init@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'}]
",
        )?;
        let mut out = Vec::new();
        MutateArgs {
            from: vec![managers],
            namespace: None,
            output: OutputFormat::Json,
            file: pods,
        }
        .run(&mut out)?;
        let list: Value = serde_json::from_slice(&out)?;
        let names = |i: usize| -> Vec<String> {
            list["items"][i]["spec"]["imagePullSecrets"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|r| r["name"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        // "unreported": a copied Secret whose registries the file does not give is added to every Pod.
        assert_eq!(names(0), ["hub", "unreported"]);
        assert_eq!(names(1), ["ghcr", "quay", "unreported"]);
        Ok(())
    }
}
