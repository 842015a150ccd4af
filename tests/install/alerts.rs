use std::{collections::BTreeSet, time::Duration};

use super::*;

/// `promtool` from `CHEIRON_PROMTOOL` or the PATH (Debian's `prometheus` package, which
/// `.ci/run` installs), or an error saying how to get it.
fn promtool() -> Result<PathBuf> {
    let path = std::env::var_os("CHEIRON_PROMTOOL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("promtool"));
    match Command::new(&path).arg("--version").output() {
        Ok(out) if out.status.success() => Ok(path),
        _ => Err(format!(
            "these tests need promtool ({} did not run): install Debian's prometheus \
                 package (`apt-get install --no-install-recommends prometheus`, as .ci/run does) \
                 or set CHEIRON_PROMTOOL to a promtool executable",
            path.display()
        )
        .into()),
    }
}

/// The rule groups the chart renders with the alerts switched on.
fn rendered_groups() -> Result<Value> {
    let objects = render(&["prometheusRule.enabled=true"])?;
    let rule = find(&objects, "PrometheusRule", RELEASE)?;
    Ok(serde_json::json!({ "groups": rule["spec"]["groups"] }))
}

fn run(command: &mut Command) -> Result<String> {
    let out = command.output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(format!("{command:?} failed:\n{text}").into());
    }
    Ok(text)
}

#[test]
fn the_rendered_rules_pass_promtool_check_and_their_unit_tests() -> Result {
    let promtool = promtool()?;
    let dir = tempfile::tempdir()?;
    // JSON is YAML: promtool reads the rendered groups as they are.
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_json::to_vec(&rendered_groups()?)?,
    )?;
    std::fs::copy(
        repo().join("tests/alerts/rules_test.yaml"),
        dir.path().join("rules_test.yaml"),
    )?;
    let checked = run(Command::new(&promtool)
        .args(["check", "rules", "rules.yaml"])
        .current_dir(dir.path()))?;
    assert!(checked.contains("SUCCESS: 12 rules found"), "{checked}");
    let tested = run(Command::new(&promtool)
        .args(["test", "rules", "rules_test.yaml"])
        .current_dir(dir.path()))?;
    assert!(tested.contains("SUCCESS"), "{tested}");
    Ok(())
}

/// Metrics an expression may use that other exporters provide: kube-state-metrics' memory
/// limits (CheironMemoryNearLimit).
pub(crate) const FOREIGN_METRICS: [&str; 1] = ["kube_pod_container_resource_limits"];

/// Metrics an expression may use that have no series until there is data to report, so a scrape
/// of a fresh cheiron cannot show them: Docker Hub's pull allowance, per credential checked
/// (CheironDockerHubPullsLow; the names are checked in crates/cheiron-health/src/checks_tests.rs).
const DATA_ONLY_METRICS: [&str; 2] = [
    "cheiron_registry_pulls_remaining",
    "cheiron_registry_pulls_limit",
];

/// The words of PromQL that are not metric names: aggregations (which may take `by (…)`
/// before their parenthesis) and keywords.
const PROMQL_WORDS: [&str; 26] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
];

/// The metric names a PromQL expression selects: identifiers outside label matchers
/// (`{…}`), grouping lists (`by (…)`, `on (…)`), ranges (`[5m]`) and strings, that are not
/// function calls or keywords.
pub(crate) fn promql_metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    // After `by`/`on`/…, the parenthesised list holds label names.
    let mut labels_follow = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '{' | '[' | '"' | '\'' => {
                let close = match c {
                    '{' => '}',
                    '[' => ']',
                    other => other,
                };
                i += 1;
                while i < chars.len() && chars[i] != close {
                    i += 1;
                }
                i += 1;
            }
            '(' if labels_follow => {
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                labels_follow = false;
                i += 1;
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                let lower = word.to_ascii_lowercase();
                if [
                    "by",
                    "without",
                    "on",
                    "ignoring",
                    "group_left",
                    "group_right",
                ]
                .contains(&lower.as_str())
                {
                    labels_follow = true;
                } else if chars.get(next) == Some(&'(') || PROMQL_WORDS.contains(&lower.as_str()) {
                    // A function or aggregation, or a keyword.
                } else if !(start > 0 && chars[start - 1].is_ascii_digit()) {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// The metric names every alert expression uses.
fn metric_names(groups: &Value) -> BTreeSet<String> {
    groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .flat_map(|rule| promql_metric_names(rule["expr"].as_str().unwrap_or_default()))
        .collect()
}

#[test]
fn promql_metric_names_skips_labels_functions_keywords_and_numbers() {
    let names = promql_metric_names(
        "histogram_quantile(0.99, sum by (namespace, le) (rate(a_bucket{x=\"y\"}[5m]))) > 0.1 \
         and on (pod) b unless max without (pod) (c:rule) / 1e3 > bool 2",
    );
    let expected: BTreeSet<String> = ["a_bucket", "b", "c:rule"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(names, expected);
}

#[tokio::test]
async fn every_metric_the_alerts_use_is_one_a_running_cheiron_exports() -> Result {
    let mut used = metric_names(&rendered_groups()?);
    assert!(
        used.len() >= 10,
        "too few metrics found in the rules: {used:?}"
    );
    for foreign in FOREIGN_METRICS.into_iter().chain(DATA_ONLY_METRICS) {
        assert!(used.remove(foreign), "{foreign} is no longer used: drop it");
    }
    let exported = exported_metric_names().await?;
    let missing: Vec<&String> = used.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the alert rules use metrics cheiron does not export: {missing:?}\nexported: {exported:?}"
    );
    Ok(())
}

/// The metric names a running cheiron exports: a scrape of a `cheiron webhook` serving the
/// bundled example managers that has answered one review and refused one garbage body, so
/// the admission series exist as they do in any cluster. Histograms and counters are named
/// as Prometheus stores them (`_bucket`, `_total`, …).
pub(crate) async fn exported_metric_names() -> Result<BTreeSet<String>> {
    let dir = tempfile::tempdir()?;
    let certificates = harness::WebhookCertificates::generate(&dir.path().join("tls"))?;
    let from = repo().join("examples/cluster");
    let from = from.to_str().ok_or("non-UTF-8 repository path")?;
    let mut webhook = harness::WebhookProcess::start_with_args(
        CHEIRON,
        "alerts-webhook",
        &dir.path().join("no-kubeconfig"),
        &certificates.dir,
        &dir.path().join("webhook.log"),
        &["--from", from],
    )?;
    webhook
        .wait_for_admin_status("/readyz", 200, Duration::from_secs(30))
        .await?;
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(
            certificates.ca_pem.as_bytes(),
        )?)
        .build()?;
    let answered = https
        .post(webhook.url())
        .json(&harness::review::pod_review())
        .send()
        .await?;
    assert_eq!(answered.status(), 200);
    let refused = https
        .post(webhook.url())
        .header("content-type", "application/json")
        .body("not a review")
        .send()
        .await?;
    assert_eq!(refused.status(), 400);

    let scrape = reqwest::get(format!("http://{}/metrics", webhook.admin_address()))
        .await?
        .text()
        .await?;
    webhook.check_running()?;
    Ok(exported_names(&scrape))
}

/// The series names an OpenMetrics scrape can hold: those of its samples, and those of every
/// family its `# TYPE` lines declare (a family with labels has no sample until a label set
/// is used), named as Prometheus stores them.
fn exported_names(scrape: &str) -> BTreeSet<String> {
    let mut exported: BTreeSet<String> = scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect();
    for declared in scrape.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let mut words = declared.split_whitespace();
        let (Some(family), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total", "_created"],
            "histogram" | "gaugehistogram" => &["_bucket", "_sum", "_count", "_created"],
            "summary" => &["", "_sum", "_count", "_created"],
            "info" => &["_info"],
            _ => &[""],
        };
        exported.extend(suffixes.iter().map(|s| format!("{family}{s}")));
    }
    exported
}

#[test]
fn exported_names_include_declared_families_without_samples() {
    let scrape = "# TYPE a counter\n# TYPE b histogram\n# TYPE c gauge\nc{x=\"y\"} 1\n# EOF\n";
    let names = exported_names(scrape);
    for name in ["a_total", "b_bucket", "b_sum", "b_count", "c"] {
        assert!(names.contains(name), "{name}: {names:?}");
    }
    assert!(!names.contains("a"), "{names:?}");
}

/// The anchors GitHub gives the headings of a Markdown file: lower case, punctuation
/// dropped, spaces as hyphens.
fn heading_anchors(markdown: &str) -> BTreeSet<String> {
    markdown
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| {
            h.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

/// Each alert's `runbook_url` annotation: the alert and the URL.
fn runbook_urls(groups: &Value) -> Vec<(String, String)> {
    groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .map(|rule| {
            assert!(
                rule["annotations"]["runbook"].is_null(),
                "the relative `runbook` annotation is gone: {rule}"
            );
            (
                rule["alert"].as_str().unwrap_or_default().to_owned(),
                rule["annotations"]["runbook_url"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

#[test]
fn every_alert_links_its_runbook_section_under_the_configurable_base_url() -> Result {
    // The default base is the project's docs/alerts.md where the chart says the project is.
    let chart: Value = serde_saphyr::from_str(&std::fs::read_to_string(
        repo().join("charts/cheiron/Chart.yaml"),
    )?)?;
    let home = chart["home"].as_str().ok_or("Chart.yaml has no home")?;
    let default_base = format!("{home}/blob/main/docs/alerts.md");
    let anchors = heading_anchors(&std::fs::read_to_string(repo().join("docs/alerts.md"))?);

    for (values, base) in [
        (vec!["prometheusRule.enabled=true"], default_base.as_str()),
        (
            vec![
                "prometheusRule.enabled=true",
                "prometheusRule.runbookBaseURL=https://docs.example.com/cheiron/v1/alerts.html",
            ],
            "https://docs.example.com/cheiron/v1/alerts.html",
        ),
    ] {
        let objects = render(&values)?;
        let rule = find(&objects, "PrometheusRule", RELEASE)?;
        let urls = runbook_urls(&serde_json::json!({ "groups": rule["spec"]["groups"] }));
        assert_eq!(urls.len(), 12, "{values:?}");
        for (alert, url) in urls {
            let anchor = url
                .strip_prefix(&format!("{base}#"))
                .ok_or_else(|| format!("{alert}: {url} is not under {base}#"))?;
            assert_eq!(
                anchor,
                alert.to_lowercase(),
                "{alert}: the anchor of its own section"
            );
            assert!(
                anchors.contains(anchor),
                "{alert}: docs/alerts.md has no section #{anchor}"
            );
        }
    }

    // A base with an anchor of its own, or no scheme, is refused by the schema.
    for bad in ["docs/alerts.md", "https://example.com/alerts.md#top"] {
        let output = run_helm(&template_args(&[
            "prometheusRule.enabled=true",
            &format!("prometheusRule.runbookBaseURL={bad}"),
        ]))?;
        assert!(!output.status.success(), "{bad} was accepted");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("runbookBaseURL"),
            "{bad}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}
