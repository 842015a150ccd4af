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
    assert!(checked.contains("SUCCESS: 9 rules found"), "{checked}");
    let tested = run(Command::new(&promtool)
        .args(["test", "rules", "rules_test.yaml"])
        .current_dir(dir.path()))?;
    assert!(tested.contains("SUCCESS"), "{tested}");
    Ok(())
}

/// The `cheiron_…` names an expression uses.
fn metric_names(groups: &Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for rule in groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
    {
        let expr = rule["expr"].as_str().unwrap_or_default();
        for (start, _) in expr.match_indices("cheiron_") {
            let name: String = expr[start..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            names.insert(name);
        }
    }
    names
}

#[tokio::test]
async fn every_metric_the_alerts_use_is_one_a_running_cheiron_exports() -> Result {
    let used = metric_names(&rendered_groups()?);
    assert!(
        used.len() >= 8,
        "too few metrics found in the rules: {used:?}"
    );

    // A webhook serving the bundled example managers; one review and one garbage body,
    // so the admission series exist as they do in any cluster.
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
    let exported: BTreeSet<String> = scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect();
    let missing: Vec<&String> = used.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the alert rules use metrics cheiron does not export: {missing:?}\nexported: {exported:?}"
    );
    Ok(())
}
