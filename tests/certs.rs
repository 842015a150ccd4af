//! cheiron-certs against a real kube-apiserver (the end-to-end harness, `tests/harness/`):
//! `create` is idempotent, re-issues when names change or expiry nears, and never touches a
//! Secret that is not cheiron's; `patch` fills `caBundle`, keeps the previous CA through a
//! rotation and changes nothing else; and the API server really calls a `cheiron webhook`
//! serving a `generate`d certificate through the `caBundle` `patch` wrote.
//!
//! These tests live in the root crate, not in `certs-tool/`, because the harness runs the
//! `cheiron` binary, whose path (`CARGO_BIN_EXE_cheiron`) cargo gives only the root package's
//! tests. They drive cheiron-certs through its library (`create`, `patch`, `generate`), which
//! is everything its `main` does but building the client from `KUBECONFIG`;
//! `certs-tool/tests/cli.rs` covers the binary itself.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::BTreeMap,
    net::IpAddr,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use cheiron::install::{FailurePolicy, WebhookClient, WebhookRegistration};
use cheiron_certs::{
    CaChoice, CreateRequest, Created, Error, GenerateRequest, PatchRequest, Patched, Reissue,
    ServingNames, Validity, create, generate, patch,
    pki::{CA_VALIDITY, CertificateInfo, certificates_from_pem, key_matches},
    time::{self, OffsetDateTime},
};
use cheiron_harness::{
    self as harness, Result, SETTLE, Scenario, free_ports, register, service_account, wait_for,
};
use k8s_openapi::{
    ByteString,
    api::{
        admissionregistration::v1::MutatingWebhookConfiguration,
        core::v1::{Secret, ServiceAccount},
    },
    apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement,
};
use kube::{
    Api, ResourceExt,
    api::{ObjectMeta, PostParams},
};
use serde_json::Value;

/// The cheiron these tests start their cluster with.
const CHEIRON: harness::Cheiron = harness::cheiron!();

const SECRET: &str = "cheiron-tls";
const CA_SECRET: &str = "cheiron-tls-ca";

fn names(ns: &str, dns: &[&str], ips: &[IpAddr]) -> ServingNames {
    let dns: Vec<String> = dns.iter().map(|d| (*d).to_owned()).collect();
    ServingNames::new("cheiron", ns, &dns, ips).unwrap()
}

fn request(ns: &str, dns: &[&str]) -> CreateRequest {
    CreateRequest {
        names: names(ns, dns, &[]),
        secret_name: SECRET.to_owned(),
        validity: Validity::default(),
    }
}

fn bytes<'a>(secret: &'a Secret, key: &str) -> &'a [u8] {
    &secret.data.as_ref().unwrap()[key].0
}

/// The serving certificate, its CA, and checks that the Secret is what `create` promises.
fn check_serving_secret(secret: &Secret, names: &ServingNames) -> CertificateInfo {
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(
        secret
            .labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("cheiron")
    );
    let keys: Vec<&str> = secret
        .data
        .as_ref()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["ca.crt", "tls.crt", "tls.key"]);
    let leaf = CertificateInfo::first_from_pem(bytes(secret, "tls.crt")).unwrap();
    let ca = CertificateInfo::first_from_pem(bytes(secret, "ca.crt")).unwrap();
    assert!(leaf.is_signed_by(&ca));
    key_matches(&leaf, bytes(secret, "tls.key")).unwrap();
    assert_eq!(leaf.sans, names.san_set());
    leaf
}

#[tokio::test]
async fn create_twice_stores_the_secret_once_and_the_second_run_writes_nothing() -> Result {
    let s = Scenario::new(CHEIRON, "certs-idempotent").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    let request = request(&ns, &[]);

    let first = create(s.client(), &request).await?;
    assert!(
        matches!(
            first,
            Created::Issued {
                reason: Reissue::Missing,
                ca: CaChoice::New,
                ..
            }
        ),
        "{first:?}"
    );
    let secrets: Api<Secret> = Api::namespaced(s.client().clone(), &ns);
    let serving = secrets.get(SECRET).await?;
    let ca = secrets.get(CA_SECRET).await?;
    let leaf = check_serving_secret(&serving, &request.names);
    let year = (OffsetDateTime::now_utc() + time::Duration::days(365)).unix_timestamp();
    assert!((leaf.not_after - year).abs() < 300, "{}", leaf.not_after);
    assert_eq!(bytes(&ca, "tls.crt"), bytes(&serving, "ca.crt"));

    let second = create(s.client(), &request).await?;
    assert!(matches!(second, Created::Kept { .. }), "{second:?}");
    assert_eq!(
        secrets.get(SECRET).await?.resource_version(),
        serving.resource_version()
    );
    assert_eq!(
        secrets.get(CA_SECRET).await?.resource_version(),
        ca.resource_version()
    );
    Ok(())
}

#[tokio::test]
async fn create_with_other_names_reissues_with_the_same_ca() -> Result {
    let s = Scenario::new(CHEIRON, "certs-names").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    create(s.client(), &request(&ns, &[])).await?;
    let secrets: Api<Secret> = Api::namespaced(s.client().clone(), &ns);
    let before = secrets.get(SECRET).await?;

    let wider = request(&ns, &["webhook.example.com"]);
    let created = create(s.client(), &wider).await?;

    let Created::Issued { reason, ca, .. } = created else {
        panic!("not re-issued: {created:?}");
    };
    assert!(
        matches!(&reason, Reissue::NamesChanged { added, removed } if added.len() == 1 && removed.is_empty()),
        "{reason:?}"
    );
    assert_eq!(ca, CaChoice::Kept);
    let after = secrets.get(SECRET).await?;
    check_serving_secret(&after, &wider.names);
    assert_eq!(bytes(&after, "ca.crt"), bytes(&before, "ca.crt"));
    assert_ne!(bytes(&after, "tls.crt"), bytes(&before, "tls.crt"));
    assert!(matches!(
        create(s.client(), &wider).await?,
        Created::Kept { .. }
    ));
    Ok(())
}

#[tokio::test]
async fn create_reissues_a_certificate_expiring_within_30_days_with_the_same_ca() -> Result {
    let s = Scenario::new(CHEIRON, "certs-expiry").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    let short = CreateRequest {
        validity: Validity {
            ca: CA_VALIDITY,
            serving: time::Duration::days(10),
        },
        ..request(&ns, &[])
    };
    create(s.client(), &short).await?;
    let secrets: Api<Secret> = Api::namespaced(s.client().clone(), &ns);
    let before = secrets.get(SECRET).await?;

    let created = create(s.client(), &request(&ns, &[])).await?;

    assert!(
        matches!(
            created,
            Created::Issued {
                reason: Reissue::Expiring { .. },
                ca: CaChoice::Kept,
                ..
            }
        ),
        "{created:?}"
    );
    let after = secrets.get(SECRET).await?;
    let leaf = check_serving_secret(&after, &request(&ns, &[]).names);
    let in_300_days = (OffsetDateTime::now_utc() + time::Duration::days(300)).unix_timestamp();
    assert!(leaf.not_after > in_300_days);
    assert_eq!(bytes(&after, "ca.crt"), bytes(&before, "ca.crt"));
    Ok(())
}

#[tokio::test]
async fn create_replaces_garbage_in_its_own_secret() -> Result {
    let s = Scenario::new(CHEIRON, "certs-garbage").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    let secrets: Api<Secret> = Api::namespaced(s.client().clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &tls_secret(
                &[("app.kubernetes.io/managed-by", "cheiron")],
                "kubernetes.io/tls",
            ),
        )
        .await?;

    let created = create(s.client(), &request(&ns, &[])).await?;

    assert!(
        matches!(
            created,
            Created::Issued {
                reason: Reissue::Unreadable(_),
                ..
            }
        ),
        "{created:?}"
    );
    check_serving_secret(&secrets.get(SECRET).await?, &request(&ns, &[]).names);
    Ok(())
}

/// A Secret named [`SECRET`] holding something that is no certificate.
fn tls_secret(labels: &[(&str, &str)], secret_type: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(SECRET.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        type_: Some(secret_type.to_owned()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_owned(), ByteString(b"someone's data".to_vec())),
            ("tls.key".to_owned(), ByteString(b"not ours".to_vec())),
        ])),
        ..Secret::default()
    }
}

#[tokio::test]
async fn create_refuses_a_secret_it_does_not_own_and_leaves_it_byte_for_byte() -> Result {
    let s = Scenario::new(CHEIRON, "certs-foreign").await?;
    for (labels, secret_type, why) in [
        (
            &[][..],
            "kubernetes.io/tls",
            "it lacks the label app.kubernetes.io/managed-by=cheiron",
        ),
        (
            &[("app.kubernetes.io/managed-by", "cheiron")][..],
            "Opaque",
            "its type is Opaque, not kubernetes.io/tls",
        ),
    ] {
        let ns = s.create_namespace(&[], &[]).await?;
        let secrets: Api<Secret> = Api::namespaced(s.client().clone(), &ns);
        secrets
            .create(&PostParams::default(), &tls_secret(labels, secret_type))
            .await?;
        let before = serde_json::to_value(secrets.get(SECRET).await?)?;

        let error = create(s.client(), &request(&ns, &[])).await.unwrap_err();

        assert!(matches!(error, Error::Refused(_)), "{error:?}");
        assert_eq!(
            error.to_string(),
            format!(
                "Secret {ns}/{SECRET} exists and is not cheiron's ({why}); cheiron never \
                 overwrites a Secret it does not own: delete it or choose another --secret-name"
            )
        );
        let after = serde_json::to_value(secrets.get(SECRET).await?)?;
        assert_eq!(after, before);
        assert!(secrets.get_opt(CA_SECRET).await?.is_none());
    }
    Ok(())
}

/// A registration with two webhooks that no namespace ever matches (the API server never
/// calls them), for `patch` to work on.
fn unused_registration(s: &Scenario) -> MutatingWebhookConfiguration {
    let mut configuration = WebhookRegistration::new(
        s.unique_name("certs-patch"),
        WebhookClient::Url("https://127.0.0.1:9/mutate".to_owned()),
        "cheiron-system",
    )
    .configuration();
    let webhooks = configuration.webhooks.as_mut().unwrap();
    let mut second = webhooks[0].clone();
    second.name = "second.cheiron.anny.co".to_owned();
    webhooks.push(second);
    for webhook in webhooks.iter_mut() {
        let selector = webhook.namespace_selector.as_mut().unwrap();
        selector.match_labels = Some(BTreeMap::from([(
            harness::SCENARIO_LABEL.to_owned(),
            s.unique_name("matches-nothing"),
        )]));
    }
    configuration
}

/// The configuration without what `patch` may change and the API server maintains.
fn without_ca_bundles(configuration: &MutatingWebhookConfiguration) -> Value {
    let mut value = serde_json::to_value(configuration).unwrap();
    for webhook in value["webhooks"].as_array_mut().unwrap() {
        webhook["clientConfig"]
            .as_object_mut()
            .unwrap()
            .remove("caBundle");
    }
    let metadata = value["metadata"].as_object_mut().unwrap();
    for field in [
        "resourceVersion",
        "generation",
        "managedFields",
        "creationTimestamp",
    ] {
        metadata.remove(field);
    }
    value
}

fn bundle_of(configuration: &MutatingWebhookConfiguration, index: usize) -> Vec<Vec<u8>> {
    let bundle = configuration.webhooks.as_ref().unwrap()[index]
        .client_config
        .ca_bundle
        .as_ref()
        .unwrap();
    certificates_from_pem(&bundle.0).unwrap()
}

#[tokio::test]
async fn patch_sets_ca_bundle_keeps_the_previous_ca_through_a_rotation_and_nothing_else() -> Result
{
    let s = Scenario::new(CHEIRON, "certs-patch").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    let client = s.client();
    let registration = unused_registration(&s);
    let name = registration.name_any();
    register(client, &registration).await?;
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let registered = configurations.get(&name).await?;
    let request = PatchRequest {
        webhook_name: name.clone(),
        secret_name: SECRET.to_owned(),
        namespace: ns.clone(),
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);

    create(client, &request_for_patch(&ns)).await?;
    let first_ca = certificates_from_pem(bytes(&secrets.get(SECRET).await?, "ca.crt"))?;
    let patched = patch(client, &request).await?;
    assert_eq!(
        patched,
        Patched::Updated {
            configuration: name.clone(),
            webhooks: vec![
                "inject.cheiron.anny.co".to_owned(),
                "second.cheiron.anny.co".to_owned()
            ],
            cas: 1,
        }
    );
    let after_first = configurations.get(&name).await?;
    assert_eq!(bundle_of(&after_first, 0), first_ca);
    assert_eq!(bundle_of(&after_first, 1), first_ca);

    // Nothing to do: no write at all.
    assert!(matches!(
        patch(client, &request).await?,
        Patched::Unchanged { .. }
    ));
    assert_eq!(
        configurations.get(&name).await?.resource_version(),
        after_first.resource_version()
    );

    // A new CA (both Secrets gone, as after a CA rotation): new CA first, previous kept.
    secrets.delete(SECRET, &Default::default()).await?;
    secrets.delete(CA_SECRET, &Default::default()).await?;
    let created = create(client, &request_for_patch(&ns)).await?;
    assert!(
        matches!(
            created,
            Created::Issued {
                ca: CaChoice::New,
                ..
            }
        ),
        "{created:?}"
    );
    let second_ca = certificates_from_pem(bytes(&secrets.get(SECRET).await?, "ca.crt"))?;
    assert_ne!(second_ca, first_ca);
    assert!(matches!(
        patch(client, &request).await?,
        Patched::Updated { cas: 2, .. }
    ));
    let rotated = configurations.get(&name).await?;
    let both = [second_ca.clone(), first_ca.clone()].concat();
    assert_eq!(bundle_of(&rotated, 0), both);
    assert_eq!(bundle_of(&rotated, 1), both);
    assert_eq!(
        without_ca_bundles(&rotated),
        without_ca_bundles(&registered)
    );
    assert!(matches!(
        patch(client, &request).await?,
        Patched::Unchanged { .. }
    ));

    configurations.delete(&name, &Default::default()).await?;
    Ok(())
}

fn request_for_patch(ns: &str) -> CreateRequest {
    request(ns, &[])
}

#[tokio::test]
async fn patch_says_what_to_do_when_the_secret_or_the_configuration_is_missing() -> Result {
    let s = Scenario::new(CHEIRON, "certs-patch-missing").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    let request = PatchRequest {
        webhook_name: s.unique_name("absent"),
        secret_name: SECRET.to_owned(),
        namespace: ns.clone(),
    };
    let error = patch(s.client(), &request).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("Secret {ns}/{SECRET} not found: run `cheiron-certs create` first")
    );
    create(s.client(), &request_for_patch(&ns)).await?;
    let error = patch(s.client(), &request).await.unwrap_err();
    assert!(
        error.to_string().starts_with(&format!(
            "MutatingWebhookConfiguration {} not found",
            request.webhook_name
        )),
        "{error}"
    );
    Ok(())
}

/// `cheiron webhook` started by a test, killed when dropped.
struct WebhookProcess(Child);

impl Drop for WebhookProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cheiron webhook --tls-cert-dir tls_dir --from static_config` on free ports and
/// waits until it is ready; returns it and its `/mutate` URL.
async fn start_webhook(
    tls_dir: &Path,
    static_config: &Path,
    log: &Path,
) -> Result<(WebhookProcess, String)> {
    let [port, admin_port] = free_ports()?;
    let log_file = std::fs::File::create(log)?;
    let child = Command::new(env!("CARGO_BIN_EXE_cheiron"))
        .args([
            "webhook",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin_port}"),
            "--shutdown-delay",
            "0",
        ])
        .arg("--tls-cert-dir")
        .arg(tls_dir)
        .arg("--from")
        .arg(static_config)
        .env("CHEIRON_LOG", "info,cheiron=debug")
        .env("NO_COLOR", "1")
        .env_remove("CHEIRON_SELF_SIGNED")
        .env_remove("CHEIRON_FROM")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .spawn()?;
    let mut process = WebhookProcess(child);
    let readyz = format!("http://127.0.0.1:{admin_port}/readyz");
    let started = Instant::now();
    loop {
        if let Some(status) = process.0.try_wait()? {
            return Err(format!(
                "cheiron webhook exited ({status}):\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
            .into());
        }
        if reqwest::get(&readyz)
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Ok((process, format!("https://127.0.0.1:{port}/mutate")));
        }
        if started.elapsed() > Duration::from_secs(20) {
            return Err(format!(
                "cheiron webhook not ready after 20 s (log: {})",
                log.display()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn apiserver_calls_a_webhook_serving_a_generated_certificate_through_the_patched_ca_bundle()
-> Result {
    let s = Scenario::new(CHEIRON, "certs-e2e").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    let client = s.client();
    let dir = tempfile::tempdir()?;

    // generate: a CA and a certificate for 127.0.0.1, where the webhook listens.
    let tls_dir = dir.path().join("tls");
    generate(
        &GenerateRequest {
            names: names(&ns, &[], &[IpAddr::from([127, 0, 0, 1])]),
            out: tls_dir.clone(),
            validity: Validity::default(),
        },
        OffsetDateTime::now_utc(),
    )?;
    // The Secret `patch` reads, holding exactly what `generate` wrote.
    let file = |name: &str| ByteString(std::fs::read(tls_dir.join(name)).unwrap());
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some(SECRET.to_owned()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_owned(),
                        "cheiron".to_owned(),
                    )])),
                    ..ObjectMeta::default()
                },
                type_: Some("kubernetes.io/tls".to_owned()),
                data: Some(BTreeMap::from([
                    ("tls.crt".to_owned(), file("tls.crt")),
                    ("tls.key".to_owned(), file("tls.key")),
                    ("ca.crt".to_owned(), file("ca.crt")),
                ])),
                ..Secret::default()
            },
        )
        .await?;

    // The webhook in static mode: a manager only it knows, so a pull secret on a new
    // ServiceAccount can only come from this webhook (the shared one has no manager here).
    let static_config = dir.path().join("static.yaml");
    std::fs::write(
        &static_config,
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n---\n\
             apiVersion: cheiron.anny.co/v1alpha1\nkind: ImagePullSecretManager\n\
             metadata:\n  name: certs-e2e\n  namespace: {ns}\n\
             spec:\n  secrets:\n    - existingSecretRef:\n        name: certs-e2e-pull\n"
        ),
    )?;
    let log = s
        .cluster()?
        .dir
        .join(format!("cheiron-webhook-{}.log", s.id()));
    let (_webhook, url) = start_webhook(&tls_dir, &static_config, &log).await?;

    // Registered without caBundle, failing closed, for this namespace only.
    let mut registration = WebhookRegistration::new(
        s.unique_name("certs-e2e"),
        WebhookClient::Url(url),
        "cheiron-system",
    );
    registration.failure_policy = FailurePolicy::Fail;
    let mut configuration = registration.configuration();
    let name = configuration.name_any();
    for webhook in configuration.webhooks.iter_mut().flatten() {
        let selector = webhook.namespace_selector.as_mut().unwrap();
        selector
            .match_expressions
            .get_or_insert_with(Vec::new)
            .push(LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".to_owned(),
                operator: "In".to_owned(),
                values: Some(vec![ns.clone()]),
            });
    }
    register(client, &configuration).await?;

    // Until caBundle is set, the API server cannot verify the webhook's certificate.
    let service_accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let probe = service_account("probe", &[], &[]);
    let refused = wait_for(
        "the API server to call the untrusted webhook",
        SETTLE,
        || async {
            match service_accounts.create(&dry_run, &probe).await {
                Ok(_) => Err("admitted: the registration is not active yet".into()),
                Err(e) => Ok(e.to_string()),
            }
        },
    )
    .await?;
    assert!(
        refused.contains("x509: certificate signed by unknown authority"),
        "{refused}"
    );

    let patched = patch(
        client,
        &PatchRequest {
            webhook_name: name.clone(),
            secret_name: SECRET.to_owned(),
            namespace: ns.clone(),
        },
    )
    .await?;
    assert!(
        matches!(patched, Patched::Updated { cas: 1, .. }),
        "{patched:?}"
    );

    s.until_new_service_account_gets(&ns, "probe", &["certs-e2e-pull"])
        .await?;
    let stored = s
        .create_service_account(&ns, &service_account("app", &["own"], &[]))
        .await?;
    let names: Vec<&str> = stored
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(names, ["own", "certs-e2e-pull"]);

    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(&name, &Default::default())
        .await?;
    Ok(())
}
