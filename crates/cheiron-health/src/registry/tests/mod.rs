//! The client against a fake registry over real TLS: the handshakes, Docker Hub's allowance,
//! and hostile registries (silent, trickling, huge, redirecting, naming a plain-http realm).
//! Every verdict goes through [`check`], which asserts that no detail shows the password, the
//! token or a response body.

mod fake;
mod hostile;

use std::time::{Duration, Instant};

use fake::{DELAY, Fake, Pki, Reply, Seen, basic, reply};

use super::{Allowance, ClientError, ClientOptions, Credential, RegistryClient, Target, Verdict};

const USERNAME: &str = "robot";
const PASSWORD: &str = "pa55-0f-the-robot";
const TOKEN: &str = "t0ken-from-the-realm";
/// Every body the fakes send contains this; no detail may.
const BODY: &str = "body-text-the-client-must-not-repeat";

fn credential() -> Credential {
    Credential {
        username: USERNAME.to_owned(),
        password: PASSWORD.to_owned(),
    }
}

fn target(host: &str) -> Target {
    Target {
        host: host.to_owned(),
        docker_hub: false,
    }
}

fn hub(host: &str) -> Target {
    Target {
        host: host.to_owned(),
        docker_hub: true,
    }
}

fn client(pki: &Pki) -> RegistryClient {
    client_with(pki, Duration::from_secs(5))
}

fn client_with(pki: &Pki, timeout: Duration) -> RegistryClient {
    RegistryClient::new(ClientOptions {
        timeout,
        ca_bundle: Some(pki.ca_pem.clone()),
        ..ClientOptions::default()
    })
    .unwrap()
}

/// The check, asserting that its text holds no secret and no body.
async fn check(client: &RegistryClient, target: &Target) -> Verdict {
    // A hung check fails the test instead of hanging it.
    let verdict =
        tokio::time::timeout(Duration::from_secs(20), client.check(target, &credential()))
            .await
            .expect("the check hung");
    if let Verdict::Rejected { detail } | Verdict::Unreachable { detail } = &verdict {
        for secret in [PASSWORD, TOKEN, BODY, &basic(USERNAME, PASSWORD)[6..]] {
            assert!(!detail.contains(secret), "{detail:?} shows {secret:?}");
        }
    }
    verdict
}

fn unreachable(verdict: &Verdict, says: &str) {
    match verdict {
        Verdict::Unreachable { detail } => {
            assert!(detail.contains(says), "{detail:?} lacks {says:?}")
        }
        other => panic!("expected Unreachable ({says}), got {other:?}"),
    }
}

fn rejected(verdict: &Verdict, says: &str) {
    match verdict {
        Verdict::Rejected { detail } => assert!(detail.contains(says), "{detail:?} lacks {says:?}"),
        other => panic!("expected Rejected ({says}), got {other:?}"),
    }
}

const ACCEPTED: Verdict = Verdict::Accepted { allowance: None };

fn good_basic(seen: &Seen) -> bool {
    seen.authorization.as_deref() == Some(&basic(USERNAME, PASSWORD))
}

/// A registry asking for Basic and accepting only the right credential.
fn basic_registry(seen: &Seen) -> Reply {
    match &seen.authorization {
        None => reply(401, &[("www-authenticate", r#"Basic realm="fake""#)], BODY),
        Some(_) if good_basic(seen) => reply(200, &[], "{}"),
        Some(_) => reply(401, &[("www-authenticate", r#"Basic realm="fake""#)], BODY),
    }
}

fn bearer_challenge(realm: &str) -> Reply {
    reply(
        401,
        &[(
            "www-authenticate",
            &format!(r#"Bearer realm="{realm}",service="fake-registry""#),
        )],
        BODY,
    )
}

/// A token service granting a token for the right credential only.
fn token_service(seen: &Seen) -> Reply {
    if good_basic(seen) {
        reply(
            200,
            &[],
            &format!(r#"{{"token":"{TOKEN}","expires_in":300}}"#),
        )
    } else {
        reply(401, &[], BODY)
    }
}

/// A registry whose token service is its own `/token`.
fn bearer_registry(seen: &Seen) -> Reply {
    match seen.path() {
        "/v2/" => bearer_challenge(&format!("https://{}/token", seen.own)),
        "/token" => token_service(seen),
        _ => reply(404, &[], BODY),
    }
}

#[tokio::test]
async fn registry_asking_no_auth_is_accepted() {
    let pki = Pki::new();
    let registry = Fake::https(&pki, |_| reply(200, &[], "{}")).await;
    assert_eq!(
        check(&client(&pki), &target(&registry.host())).await,
        ACCEPTED
    );
    assert!(registry.seen().iter().all(|s| s.authorization.is_none()));
}

#[tokio::test]
async fn basic_registry_accepts_the_right_credential_sent_only_after_the_challenge() {
    let pki = Pki::new();
    let registry = Fake::https(&pki, basic_registry).await;
    assert_eq!(
        check(&client(&pki), &target(&registry.host())).await,
        ACCEPTED
    );
    let seen = registry.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].authorization, None);
    assert!(good_basic(&seen[1]));
}

#[tokio::test]
async fn basic_registry_refusing_the_credential_is_rejected() {
    let pki = Pki::new();
    let registry = Fake::https(&pki, |seen| match seen.authorization {
        None => reply(401, &[("www-authenticate", "basic")], BODY),
        Some(_) => reply(403, &[], BODY),
    })
    .await;
    rejected(
        &check(&client(&pki), &target(&registry.host())).await,
        "answered 403",
    );
    let other = Fake::https(&pki, basic_registry).await;
    let wrong = RegistryClient::check(
        &client(&pki),
        &target(&other.host()),
        &Credential {
            username: USERNAME.to_owned(),
            password: "wrong".to_owned(),
        },
    )
    .await;
    rejected(&wrong, "answered 401");
}

#[tokio::test]
async fn bearer_realm_on_the_registry_grants_a_token_for_the_right_credential() {
    let pki = Pki::new();
    let registry = Fake::https(&pki, bearer_registry).await;
    assert_eq!(
        check(&client(&pki), &target(&registry.host())).await,
        ACCEPTED
    );
    let seen = registry.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].authorization, None);
    assert_eq!(
        seen[1].uri, "/token?service=fake-registry",
        "no scope but for Docker Hub"
    );
    assert!(good_basic(&seen[1]));
}

#[tokio::test]
async fn bearer_token_service_refusing_the_credential_is_rejected() {
    let pki = Pki::new();
    let registry = Fake::https(&pki, |seen| match seen.path() {
        "/v2/" => bearer_challenge(&format!("https://{}/token", seen.own)),
        _ => reply(401, &[], BODY),
    })
    .await;
    rejected(
        &check(&client(&pki), &target(&registry.host())).await,
        "token service 127.0.0.1",
    );
}

#[tokio::test]
async fn bearer_realm_on_another_host_gets_the_credential_and_the_registry_does_not() {
    let pki = Pki::new();
    let auth = Fake::https(&pki, token_service).await;
    let realm = format!("https://localhost:{}/token?account=x", auth.addr.port());
    let registry = Fake::https(&pki, move |_| bearer_challenge(&realm)).await;
    assert_eq!(
        check(&client(&pki), &target(&registry.host())).await,
        ACCEPTED
    );
    assert!(registry.seen().iter().all(|s| s.authorization.is_none()));
    let asked = auth.seen();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].uri, "/token?account=x&service=fake-registry");
    assert!(good_basic(&asked[0]));
}

#[tokio::test]
async fn token_service_answering_access_token_is_accepted_and_without_token_unreachable() {
    let pki = Pki::new();
    let registry = Fake::https(&pki, |seen| match seen.path() {
        "/v2/" => bearer_challenge(&format!("https://{}/token", seen.own)),
        _ => reply(200, &[], &format!(r#"{{"access_token":"{TOKEN}"}}"#)),
    })
    .await;
    assert_eq!(
        check(&client(&pki), &target(&registry.host())).await,
        ACCEPTED
    );
    for body in [
        format!(r#"{{"note":"{BODY}"}}"#),
        BODY.to_owned(),
        r#"{"token":""}"#.to_owned(),
    ] {
        let registry = Fake::https(&pki, move |seen| match seen.path() {
            "/v2/" => bearer_challenge(&format!("https://{}/token", seen.own)),
            _ => reply(200, &[], &body),
        })
        .await;
        unreachable(
            &check(&client(&pki), &target(&registry.host())).await,
            "without",
        );
    }
}

/// Docker Hub: a token for `ratelimitpreview/test`, then a HEAD of its manifest.
fn hub_registry(allowance: &'static [(&'static str, &'static str)]) -> impl Fn(&Seen) -> Reply {
    move |seen| match (seen.method.as_str(), seen.path()) {
        ("GET", "/v2/") => bearer_challenge(&format!("https://{}/token", seen.own)),
        ("GET", "/token") => token_service(seen),
        ("HEAD", "/v2/ratelimitpreview/test/manifests/latest")
            if seen.authorization.as_deref() == Some(&format!("Bearer {TOKEN}")) =>
        {
            reply(200, allowance, "")
        }
        _ => reply(401, &[], BODY),
    }
}

#[tokio::test]
async fn docker_hub_allowance_is_read_from_the_ratelimit_headers() {
    let pki = Pki::new();
    let registry = Fake::https(
        &pki,
        hub_registry(&[
            ("ratelimit-limit", "100;w=21600"),
            ("ratelimit-remaining", "76;w=21600"),
            ("docker-ratelimit-source", "10.0.0.1"),
        ]),
    )
    .await;
    assert_eq!(
        check(&client(&pki), &hub(&registry.host())).await,
        Verdict::Accepted {
            allowance: Some(Allowance::Limited {
                limit: 100,
                remaining: 76,
                window: Some(Duration::from_secs(21600)),
            })
        }
    );
    let seen = registry.seen();
    assert_eq!(
        seen[1].uri,
        "/token?service=fake-registry&scope=repository%3Aratelimitpreview%2Ftest%3Apull"
    );
    assert_eq!(seen[2].method, "HEAD");
}

#[tokio::test]
async fn docker_hub_without_ratelimit_headers_is_unlimited() {
    let pki = Pki::new();
    let registry = Fake::https(&pki, hub_registry(&[])).await;
    assert_eq!(
        check(&client(&pki), &hub(&registry.host())).await,
        Verdict::Accepted {
            allowance: Some(Allowance::Unlimited)
        }
    );
}

#[tokio::test]
async fn docker_hub_malformed_or_failing_allowance_still_accepts_the_credential() {
    let pki = Pki::new();
    let registry = Fake::https(
        &pki,
        hub_registry(&[("ratelimit-limit", "lots"), ("ratelimit-remaining", "76")]),
    )
    .await;
    assert_eq!(check(&client(&pki), &hub(&registry.host())).await, ACCEPTED);
    let failing = Fake::https(&pki, |seen| match seen.method.as_str() {
        "HEAD" => reply(500, &[], BODY),
        _ => bearer_registry(seen),
    })
    .await;
    assert_eq!(check(&client(&pki), &hub(&failing.host())).await, ACCEPTED);
}

#[tokio::test]
async fn docker_hub_allowance_head_hanging_still_accepts_within_the_deadline() {
    let pki = Pki::new();
    let registry = Fake::https(&pki, |seen| match seen.method.as_str() {
        "HEAD" => reply(200, &[(DELAY, "60000")], ""),
        _ => bearer_registry(seen),
    })
    .await;
    let started = Instant::now();
    let verdict = check(
        &client_with(&pki, Duration::from_millis(800)),
        &hub(&registry.host()),
    )
    .await;
    assert_eq!(verdict, ACCEPTED);
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn registry_down_is_unreachable() {
    let pki = Pki::new();
    let closed = Fake::closed_port().await;
    unreachable(
        &check(&client(&pki), &target(&closed.to_string())).await,
        "cannot connect",
    );
}

#[tokio::test]
async fn error_statuses_are_unreachable_never_rejected() {
    let pki = Pki::new();
    for status in [500, 502, 503, 429, 404, 400] {
        let registry = Fake::https(&pki, move |_| reply(status, &[], BODY)).await;
        unreachable(
            &check(&client(&pki), &target(&registry.host())).await,
            &format!("answered {status}"),
        );
        // The same status from the token service.
        let realm = Fake::https(&pki, move |seen| match seen.path() {
            "/v2/" => bearer_challenge(&format!("https://{}/token", seen.own)),
            _ => reply(status, &[], BODY),
        })
        .await;
        unreachable(
            &check(&client(&pki), &target(&realm.host())).await,
            &format!("answered {status}"),
        );
    }
}

#[tokio::test]
async fn unusable_challenges_are_unreachable() {
    let pki = Pki::new();
    for challenge in [
        r#"Bearer realm="https://a"#,
        "Digest realm=\"x\"",
        "Bearer service=\"x\"",
    ] {
        let registry = Fake::https(&pki, move |_| {
            reply(401, &[("www-authenticate", challenge)], BODY)
        })
        .await;
        unreachable(
            &check(&client(&pki), &target(&registry.host())).await,
            "unusable challenge",
        );
        assert_eq!(registry.seen().len(), 1, "the credential was never sent");
    }
    let none = Fake::https(&pki, |_| reply(401, &[], BODY)).await;
    unreachable(
        &check(&client(&pki), &target(&none.host())).await,
        "no WWW-Authenticate",
    );
}

#[tokio::test]
async fn hosts_that_are_more_than_a_host_are_refused_before_any_connection() {
    let pki = Pki::new();
    let registry = Fake::https(&pki, |_| reply(200, &[], "{}")).await;
    let host = registry.host();
    for bad in [
        format!("https://{host}"),
        format!("{host}/v2"),
        format!("user:pw@{host}"),
        format!("{host} "),
        format!("{host}?x"),
        format!("{host}#x"),
        String::new(),
    ] {
        unreachable(
            &check(&client(&pki), &target(&bad)).await,
            "not a registry host",
        );
    }
    assert_eq!(registry.connections(), 0);
}

#[tokio::test]
async fn checks_tunnel_through_the_proxy_which_never_sees_the_credential() {
    let pki = Pki::new();
    let registry = Fake::https(&pki, basic_registry).await;
    let proxy = Fake::connect_proxy().await;
    let through = RegistryClient::new(ClientOptions {
        ca_bundle: Some(pki.ca_pem.clone()),
        proxy: Some(format!("http://{}", proxy.host())),
        ..ClientOptions::default()
    })
    .unwrap();
    assert_eq!(check(&through, &target(&registry.host())).await, ACCEPTED);
    let connects = proxy.seen();
    assert!(!connects.is_empty());
    for connect in connects {
        assert_eq!(connect.uri, format!("CONNECT {} HTTP/1.1", registry.host()));
    }
    assert!(good_basic(&registry.seen()[1]));
    let tunnelled = String::from_utf8_lossy(&proxy.received()).into_owned();
    assert!(!tunnelled.contains(PASSWORD));
    assert!(!tunnelled.contains(&basic(USERNAME, PASSWORD)));
}

#[test]
fn a_proxy_that_is_not_a_url_is_a_clear_error() {
    let error = RegistryClient::new(ClientOptions {
        proxy: Some("not a url at all".to_owned()),
        ..ClientOptions::default()
    })
    .err();
    assert!(matches!(error, Some(ClientError::BadProxy)), "{error:?}");
}

#[tokio::test]
async fn bearer_in_a_second_header_value_is_chosen_over_basic_in_the_first() {
    let pki = Pki::new();
    let registry = Fake::https(&pki, |seen| match seen.path() {
        "/v2/" if seen.authorization.is_none() => reply(
            401,
            &[
                ("www-authenticate", r#"Basic realm="fake""#),
                (
                    "www-authenticate",
                    &format!(r#"Bearer realm="https://{}/token""#, seen.own),
                ),
            ],
            BODY,
        ),
        "/token" => token_service(seen),
        _ => reply(500, &[], BODY),
    })
    .await;
    assert_eq!(
        check(&client(&pki), &target(&registry.host())).await,
        ACCEPTED
    );
    let seen = registry.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[1].uri, "/token");
}

#[test]
fn a_ca_bundle_without_certificates_is_a_clear_error() {
    for bad in [&b""[..], b"not pem at all"] {
        let error = RegistryClient::new(ClientOptions {
            ca_bundle: Some(bad.to_vec()),
            ..ClientOptions::default()
        })
        .err();
        assert!(
            matches!(error, Some(ClientError::NoCertificate)),
            "{error:?}"
        );
    }
    let broken = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let error = RegistryClient::new(ClientOptions {
        ca_bundle: Some(broken.to_vec()),
        ..ClientOptions::default()
    })
    .err();
    assert!(
        matches!(error, Some(ClientError::BadCertificate(_))),
        "{error:?}"
    );
    assert!(RegistryClient::new(ClientOptions::default()).is_ok());
}
