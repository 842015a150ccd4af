//! `cheiron controller --metrics-auth kubernetes --admin-tls-cert-dir DIR`: what the installs
//! run when metrics auth is on. A controller stands by behind a Lease someone else holds for
//! an hour (so it never reconciles beside the shared controller) and serves its admin port
//! over HTTPS only, with the cluster's webhook certificate.

use cheiron::install::rbac;
use k8s_openapi::{
    api::{
        coordination::v1::{Lease, LeaseSpec},
        core::v1::ServiceAccount,
        rbac::v1::Subject,
    },
    apimachinery::pkg::apis::meta::v1::MicroTime,
};
use kube::{Api, api::PostParams, core::ObjectMeta};

use crate::{
    harness::{self, Result, controller::CheironProcess},
    scenario::ControllerScenario,
};

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    }
}

/// Status and body of `GET https://ADMIN/path`, trusting `ca_pem`, with a bearer `token`.
async fn get(
    admin: std::net::SocketAddr,
    ca_pem: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String)> {
    let authorization = token.map(|t| format!("Bearer {t}"));
    harness::admin_get(admin, Some(ca_pem), path, authorization.as_deref()).await
}

#[tokio::test]
async fn with_admin_tls_the_controller_serves_a_reader_over_https_and_nothing_over_plain_http()
-> Result {
    let s = ControllerScenario::new("metrics-tls").await?;
    let cluster = s.cluster()?;
    let ns = s.create_namespace(&[], &[]).await?;
    let lease = s.unique_name("lease");
    Api::<Lease>::namespaced(s.client().clone(), &ns)
        .create(
            &PostParams::default(),
            &Lease {
                metadata: meta(&lease),
                spec: Some(LeaseSpec {
                    holder_identity: Some("someone-else".to_owned()),
                    lease_duration_seconds: Some(3600),
                    acquire_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
                    renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
                    ..LeaseSpec::default()
                }),
            },
        )
        .await?;
    // Prometheus: a ServiceAccount bound to the metrics-reader rules of the installs.
    Api::<ServiceAccount>::namespaced(s.client().clone(), &ns)
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: meta("prometheus"),
                ..ServiceAccount::default()
            },
        )
        .await?;
    harness::grant_cluster_role(
        s.client(),
        &s.unique_name("metrics-reader"),
        rbac::metrics_reader_rules(),
        Subject {
            kind: "ServiceAccount".to_owned(),
            name: "prometheus".to_owned(),
            namespace: Some(ns.clone()),
            api_group: None,
        },
    )
    .await?;
    let reader = harness::service_account_token(s.client(), &ns, "prometheus").await?;

    let admin_tls = format!(
        "--admin-tls-cert-dir={}",
        cluster.webhook_tls_dir().display()
    );
    let controller = CheironProcess::controller(
        &s.unique_name("tls"),
        &[
            "--leader-election",
            "--leader-election-namespace",
            &ns,
            "--leader-election-id",
            &lease,
            "--metrics-auth=kubernetes",
            &admin_tls,
        ],
    )?;
    let (admin, ca) = (controller.admin(), cluster.webhook_ca_pem());
    // The kubelet's probe, over HTTPS without a token: a standby is ready.
    s.eventually("/readyz to answer 200 over HTTPS", || async {
        controller.check_running()?;
        match get(admin, ca, "/readyz", None).await? {
            (200, _) => Ok(()),
            (status, body) => Err(format!("{status}: {body}").into()),
        }
    })
    .await?;

    let body = s
        .eventually("a 200 for the reader's token over HTTPS", || async {
            match get(admin, ca, "/metrics", Some(&reader)).await? {
                (200, body) => Ok(body),
                (status, body) => Err(format!("{status}: {body}").into()),
            }
        })
        .await?;
    assert!(body.contains("cheiron_leader 0"), "a standby: {body}");
    let expiry = body
        .lines()
        .find(|l| l.starts_with("cheiron_certificate_expiry_timestamp_seconds "))
        .ok_or_else(|| format!("no certificate expiry in {body}"))?;
    assert!(
        !expiry.ends_with(" 0"),
        "the admin certificate's expiry: {expiry}"
    );
    let (status, body) = get(admin, ca, "/metrics", None).await?;
    assert_eq!(status, 401, "{body}");

    // Plain HTTP gets no answer, probes' paths included.
    for path in ["/metrics", "/readyz", "/healthz"] {
        assert_eq!(
            controller.admin_status(path).await,
            None,
            "{path} over plain HTTP"
        );
    }
    controller.check_running()?;
    let log = std::fs::read_to_string(controller.log())?;
    assert!(!log.contains(&reader), "a token was logged");
    Ok(())
}
