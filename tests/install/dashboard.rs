use std::collections::BTreeSet;

use super::{
    alerts::{FOREIGN_METRICS, exported_metric_names, promql_metric_names},
    *,
};

/// The dashboard as committed in the chart.
fn dashboard() -> Result<Value> {
    let path = repo().join("charts/cheiron/dashboards/cheiron.json");
    Ok(serde_json::from_slice(&std::fs::read(&path).map_err(
        |e| format!("cannot read {}: {e}", path.display()),
    )?)?)
}

/// Every panel, those inside collapsed rows too.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        all.push(panel);
        all.extend(panel["panels"].as_array().into_iter().flatten());
    }
    all
}

/// Every PromQL expression the dashboard runs: its panels' targets and its variables'
/// queries (`label_values(metric, label)` runs `metric`).
fn expressions(dashboard: &Value) -> Result<Vec<String>> {
    let mut exprs = Vec::new();
    for panel in panels(dashboard) {
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if targets.is_empty() {
            return Err(format!("panel {} queries nothing", panel["title"]).into());
        }
        for target in targets {
            let expr = target["expr"]
                .as_str()
                .filter(|e| !e.trim().is_empty())
                .ok_or_else(|| format!("panel {} has a target without expr", panel["title"]))?;
            exprs.push(expr.to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"]
            .as_str()
            .or_else(|| variable["query"].as_str())
            .ok_or_else(|| format!("variable {} has no query", variable["name"]))?;
        let metric = query
            .strip_prefix("label_values(")
            .and_then(|rest| rest.split(',').next())
            .ok_or_else(|| {
                format!(
                    "variable {}: {query} is not label_values(…)",
                    variable["name"]
                )
            })?;
        exprs.push(metric.trim().to_owned());
    }
    Ok(exprs)
}

#[test]
fn the_dashboard_has_a_panel_for_each_thing_an_operator_watches() -> Result {
    let dashboard = dashboard()?;
    let mut ids = BTreeSet::new();
    for panel in panels(&dashboard) {
        assert!(
            ids.insert(panel["id"].as_u64()),
            "duplicate panel id: {panel}"
        );
    }
    let exprs = expressions(&dashboard)?.join("\n");
    for metric in [
        "cheiron_admission_requests_total",
        "cheiron_admission_duration_seconds_bucket",
        "cheiron_managers_not_ready",
        "cheiron_reconcile_errors_total",
        "cheiron_audit_findings",
        "cheiron_certificate_expiry_timestamp_seconds",
        "process_resident_memory_bytes",
        "kube_pod_container_resource_limits",
        "cheiron_build_info",
    ] {
        assert!(exprs.contains(metric), "no panel shows {metric}");
    }
    // Every query goes to the data source the user picks.
    for panel in panels(&dashboard) {
        if panel["type"] != "row" {
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "{}",
                panel["title"]
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn every_metric_the_dashboard_queries_is_one_a_running_cheiron_exports() -> Result {
    let mut used: BTreeSet<String> = expressions(&dashboard()?)?
        .iter()
        .flat_map(|e| promql_metric_names(e))
        .collect();
    assert!(used.len() >= 15, "too few metrics found: {used:?}");
    for foreign in FOREIGN_METRICS {
        assert!(used.remove(foreign), "{foreign} is no longer used");
    }
    let exported = exported_metric_names().await?;
    let missing: Vec<&String> = used.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics cheiron does not export: {missing:?}\nexported: {exported:?}"
    );
    Ok(())
}

#[test]
fn the_dashboard_configmap_is_opt_in_and_carries_the_charts_json_and_the_sidecar_label() -> Result {
    assert!(super::chart::named(&render(&[])?, "ConfigMap").is_empty());

    let objects = render(&["grafanaDashboard.enabled=true"])?;
    let map = find(&objects, "ConfigMap", "cheiron-dashboard")?;
    assert_eq!(map["metadata"]["namespace"], NAMESPACE);
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value = serde_json::from_str(
        map["data"]["cheiron.json"]
            .as_str()
            .ok_or("no cheiron.json in the ConfigMap")?,
    )?;
    assert_eq!(json, dashboard()?);

    let objects = render(&[
        "grafanaDashboard.enabled=true",
        "grafanaDashboard.namespace=monitoring",
        "grafanaDashboard.sidecarLabel=dashboards.example.com/grafana",
        "grafanaDashboard.sidecarLabelValue=cheiron",
        "grafanaDashboard.labels.team=platform",
        "grafanaDashboard.annotations.grafana_folder=Platform",
    ])?;
    let map = find(&objects, "ConfigMap", "cheiron-dashboard")?;
    assert_eq!(map["metadata"]["namespace"], "monitoring");
    let labels = &map["metadata"]["labels"];
    assert_eq!(labels["dashboards.example.com/grafana"], "cheiron");
    assert!(labels["grafana_dashboard"].is_null(), "{labels}");
    assert_eq!(labels["team"], "platform");
    assert_eq!(map["metadata"]["annotations"]["grafana_folder"], "Platform");
    Ok(())
}
