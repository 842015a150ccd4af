//! `--metrics-auth kubernetes` against the real apiserver. A `cheiron webhook` of its own runs
//! as a ServiceAccount holding exactly what the generated manifests grant the webhook when
//! metrics auth is on (`rbac::webhook_rules` and `rbac::metrics_auth_rules`), and
//! ServiceAccounts present TokenRequest tokens to its `/metrics`: one bound to the
//! metrics-reader rules (`nonResourceURLs: ["/metrics"], verbs: ["get"]`, what Prometheus
//! gets), one bound to nothing. With `--admin-tls-cert-dir` (what the installs pass with
//! metrics auth on), the same over HTTPS, and nothing over plain HTTP.

use std::{net::SocketAddr, path::Path, time::Duration};

use cheiron::install::rbac;
use k8s_openapi::api::{
    core::v1::ServiceAccount,
    rbac::v1::{PolicyRule, Subject},
};
use kube::core::ObjectMeta;

use crate::{
    CHEIRON,
    harness::{self, Result, Scenario, WebhookProcess, wait_for},
};

/// Refusals are remembered for 10 s: a binding made just before the first scrape may take
/// that long to show.
const GRANT_VISIBLE: Duration = Duration::from_secs(30);

async fn create_service_account(s: &Scenario, ns: &str, name: &str) -> Result {
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    s.create_service_account(ns, &sa).await?;
    Ok(())
}

/// A ClusterRole with `rules`, bound to ServiceAccount `ns/sa`, both named after the scenario.
async fn grant(s: &Scenario, ns: &str, sa: &str, rules: Vec<PolicyRule>) -> Result {
    harness::grant_cluster_role(
        s.client(),
        &s.unique_name(sa),
        rules,
        Subject {
            kind: "ServiceAccount".to_owned(),
            name: sa.to_owned(),
            namespace: Some(ns.to_owned()),
            api_group: None,
        },
    )
    .await
}

/// A bound token of ServiceAccount `ns/sa` (TokenRequest), valid for an hour.
async fn token(s: &Scenario, ns: &str, sa: &str) -> Result<String> {
    harness::service_account_token(s.client(), ns, sa).await
}

/// A kubeconfig for the apiserver of `config` that authenticates with `token`.
fn kubeconfig(config: &kube::Config, token: &str, path: &Path) -> Result {
    harness::write_token_kubeconfig(config, token, path)
}

/// Status and body of `GET /metrics` with `authorization` as the `Authorization` header.
async fn scrape(admin: SocketAddr, authorization: Option<&str>) -> Result<(u16, String)> {
    harness::admin_get(admin, None, "/metrics", authorization).await
}

/// A namespace with ServiceAccounts `cheiron` (the webhook's rights and metrics auth's) and
/// `prometheus` (metrics reader), plus `others` without rights, and a kubeconfig of `cheiron`'s
/// token for the webhook process, in the test's own directory.
async fn identities(
    s: &Scenario,
    others: &[&str],
) -> Result<(String, std::path::PathBuf, std::path::PathBuf)> {
    let cluster = s.cluster()?;
    let ns = s.create_namespace(&[], &[]).await?;
    for sa in ["cheiron", "prometheus"].iter().chain(others) {
        create_service_account(s, &ns, sa).await?;
    }
    grant(
        s,
        &ns,
        "cheiron",
        [rbac::webhook_rules(), rbac::metrics_auth_rules()].concat(),
    )
    .await?;
    grant(s, &ns, "prometheus", rbac::metrics_reader_rules()).await?;

    let dir = cluster.dir.join(s.id());
    std::fs::create_dir_all(&dir)?;
    let cheiron_kubeconfig = dir.join("cheiron.kubeconfig");
    kubeconfig(
        &cluster.admin_config(),
        &token(s, &ns, "cheiron").await?,
        &cheiron_kubeconfig,
    )?;
    Ok((ns, dir, cheiron_kubeconfig))
}

#[tokio::test]
async fn metrics_answer_a_reader_403_others_and_401_without_a_valid_token_while_probes_stay_open()
-> Result {
    let s = Scenario::new(CHEIRON, "metrics-auth").await?;
    let cluster = s.cluster()?;
    let (ns, dir, cheiron_kubeconfig) = identities(&s, &["app"]).await?;
    let mut webhook = WebhookProcess::start_with_args(
        cluster.cheiron(),
        "cheiron webhook --metrics-auth kubernetes",
        &cheiron_kubeconfig,
        cluster.webhook_tls_dir(),
        &dir.join("cheiron-webhook.log"),
        &["--metrics-auth=kubernetes"],
    )?;
    // The kubelet's probes need no token.
    webhook
        .wait_for_admin_status("/readyz", 200, Duration::from_secs(30))
        .await?;
    assert_eq!(webhook.admin_status("/healthz").await, Some(200));
    let admin = webhook.admin_address();

    let reader = token(&s, &ns, "prometheus").await?;
    let body = wait_for(
        "a 200 for the metrics reader's token",
        GRANT_VISIBLE,
        || async {
            match scrape(admin, Some(&format!("Bearer {reader}"))).await? {
                (200, body) => Ok(body),
                (status, body) => Err(format!("{status}: {body}").into()),
            }
        },
    )
    .await?;
    assert!(
        body.contains("cheiron_admission_patches_total") && body.trim_end().ends_with("# EOF"),
        "{body}"
    );

    let other = token(&s, &ns, "app").await?;
    let (status, body) = scrape(admin, Some(&format!("Bearer {other}"))).await?;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{ns}:app")),
        "{body}"
    );

    for (what, authorization) in [
        ("no Authorization header", None),
        ("a token no one issued", Some("Bearer not-a-token")),
        ("a Basic header", Some("Basic cHJvbWV0aGV1czpzZWNyZXQ=")),
        ("a bearer header without a token", Some("Bearer ")),
    ] {
        let (status, body) = scrape(admin, authorization).await?;
        assert_eq!(status, 401, "{what}: {body}");
        assert!(!body.contains("cheiron_"), "{what}: {body}");
    }

    // The reader's decision is remembered: a second scrape answers too.
    assert_eq!(
        scrape(admin, Some(&format!("Bearer {reader}"))).await?.0,
        200
    );
    webhook.check_running()?;
    let log = std::fs::read_to_string(webhook.log())?;
    assert!(
        !log.contains(&reader) && !log.contains(&other),
        "a token was logged: {}",
        webhook.log().display()
    );
    Ok(())
}

/// Status and body of `GET https://…/path` on `admin` with `authorization`, trusting `ca_pem`.
async fn scrape_https(
    admin: SocketAddr,
    ca_pem: &str,
    path: &str,
    authorization: Option<&str>,
) -> Result<(u16, String)> {
    harness::admin_get(admin, Some(ca_pem), path, authorization).await
}

#[tokio::test]
async fn with_admin_tls_a_reader_scrapes_over_https_and_plain_http_gets_no_answer() -> Result {
    let s = Scenario::new(CHEIRON, "metrics-auth-tls").await?;
    let cluster = s.cluster()?;
    let (ns, dir, cheiron_kubeconfig) = identities(&s, &[]).await?;
    let tls_dir = cluster.webhook_tls_dir();
    let admin_tls = format!("--admin-tls-cert-dir={}", tls_dir.display());
    let mut webhook = WebhookProcess::start_with_args(
        cluster.cheiron(),
        "cheiron webhook --metrics-auth kubernetes --admin-tls-cert-dir",
        &cheiron_kubeconfig,
        tls_dir,
        &dir.join("cheiron-webhook.log"),
        &["--metrics-auth=kubernetes", &admin_tls],
    )?;
    let admin = webhook.admin_address();
    let ca = cluster.webhook_ca_pem();
    // The kubelet's probes, over HTTPS without a token.
    wait_for(
        "/readyz to answer 200 over HTTPS",
        Duration::from_secs(30),
        || async {
            match scrape_https(admin, ca, "/readyz", None).await? {
                (200, _) => Ok(()),
                (status, body) => Err(format!("{status}: {body}").into()),
            }
        },
    )
    .await?;
    assert_eq!(scrape_https(admin, ca, "/healthz", None).await?.0, 200);

    let reader = format!("Bearer {}", token(&s, &ns, "prometheus").await?);
    let body = wait_for(
        "a 200 for the metrics reader's token over HTTPS",
        GRANT_VISIBLE,
        || async {
            match scrape_https(admin, ca, "/metrics", Some(&reader)).await? {
                (200, body) => Ok(body),
                (status, body) => Err(format!("{status}: {body}").into()),
            }
        },
    )
    .await?;
    assert!(
        body.contains("cheiron_admission_patches_total") && body.trim_end().ends_with("# EOF"),
        "{body}"
    );
    let (status, body) = scrape_https(admin, ca, "/metrics", None).await?;
    assert_eq!(status, 401, "{body}");
    assert!(!body.contains("cheiron_"), "{body}");

    // Plain HTTP, even with the reader's token: no answer, and the probes' paths neither.
    let plain = scrape(admin, Some(&reader)).await;
    assert!(plain.is_err(), "/metrics over plain HTTP: {plain:?}");
    for path in ["/readyz", "/healthz"] {
        assert_eq!(
            webhook.admin_status(path).await,
            None,
            "{path} over plain HTTP"
        );
    }
    webhook.check_running()?;
    let log = std::fs::read_to_string(webhook.log())?;
    assert!(
        !log.contains(reader.trim_start_matches("Bearer ")),
        "a token was logged: {}",
        webhook.log().display()
    );
    Ok(())
}
