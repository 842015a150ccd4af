//! `cheiron audit`: the Pods and ServiceAccounts that lack what policy says they should
//! have (docs/design.md §6). Exit 0 when clean, 1 with findings, 2 on error.

use std::io::Write;

use clap::Args;

use super::{cluster::ClusterArgs, explain::ReportFormat};
use crate::{
    audit::{
        Finding,
        cluster::{Audit, audit},
    },
    explain::render::table,
};

/// Arguments of `cheiron audit`.
#[derive(Args, Debug)]
pub struct AuditArgs {
    /// Namespace to audit (default: the kubeconfig context's).
    #[arg(
        long,
        short = 'n',
        env = "CHEIRON_NAMESPACE",
        conflicts_with = "all_namespaces"
    )]
    namespace: Option<String>,
    /// Audit every namespace.
    #[arg(long, short = 'A')]
    all_namespaces: bool,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = ReportFormat::Text, env = "CHEIRON_OUTPUT")]
    output: ReportFormat,
    /// Pods, ServiceAccounts and Namespaces read per list request (limit/continue).
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::audit::cluster::PAGE_SIZE,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    page_size: u32,
}

impl AuditArgs {
    /// Audits and writes the findings to `out`; true when there are findings.
    pub async fn run(self, cluster: &ClusterArgs, out: &mut dyn Write) -> anyhow::Result<bool> {
        let Self {
            namespace,
            all_namespaces,
            output,
            page_size,
        } = self;
        let (client, default_namespace) = cluster
            .client_and_namespace(
                "cannot reach the cluster (set KUBECONFIG or --kubeconfig, or run in a Pod)",
            )
            .await?;
        let scope = (!all_namespaces).then(|| namespace.unwrap_or(default_namespace));
        let Audit {
            findings,
            docker_hub,
        } = audit(&client, scope.as_deref(), page_size).await?;
        match output {
            ReportFormat::Json => writeln!(out, "{}", serde_json::to_string_pretty(&findings)?)?,
            ReportFormat::Text => {
                write!(out, "{}", text(&findings))?;
                if !docker_hub.is_empty() {
                    // Where Docker Hub's pull allowance is spent (docs/credential-health.md).
                    writeln!(out, "\nDocker Hub pulls count against:")?;
                    for line in &docker_hub {
                        writeln!(out, "  {line}")?;
                    }
                }
            }
        }
        Ok(!findings.is_empty())
    }
}

fn text(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "No findings: every Pod and ServiceAccount has what policy wants.\n".into();
    }
    let mut rows = vec![
        [
            "KIND",
            "NAMESPACE",
            "NAME",
            "OWNER",
            "MISSING",
            "WHY",
            "FIX",
        ]
        .map(String::from)
        .to_vec(),
    ];
    rows.extend(findings.iter().map(|f| {
        vec![
            f.kind.to_owned(),
            f.namespace.clone(),
            f.name.clone(),
            f.owner.clone().unwrap_or_else(|| "-".into()),
            f.lacking.missing.join(","),
            f.reason.to_owned(),
            f.fix.clone(),
        ]
    }));
    table(&rows)
}
