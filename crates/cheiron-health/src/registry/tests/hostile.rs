//! Hostile registries: silent, trickling, huge, redirecting, naming a plain-http realm or
//! presenting a certificate nobody trusts. Each test fails when its protection is removed.

use std::time::{Duration, Instant};

use super::fake::{DELAY, Fake, Pki, basic, reply, streamed};
use super::{
    BODY, PASSWORD, USERNAME, basic_registry, bearer_challenge, check, client, client_with, target,
    token_service, unreachable,
};
use crate::registry::{ClientOptions, RegistryClient};

#[tokio::test]
async fn silent_registry_is_unreachable_within_the_timeout() {
    let silent = Fake::plain().await;
    let pki = Pki::new();
    let started = Instant::now();
    let verdict = check(
        &client_with(&pki, Duration::from_millis(500)),
        &target(&silent.host()),
    )
    .await;
    unreachable(&verdict, "within 500ms");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(silent.connections(), 1);
    // TLS done, no HTTP answer.
    let registry = Fake::https(&pki, |_| reply(200, &[(DELAY, "60000")], "{}")).await;
    let started = Instant::now();
    let verdict = check(
        &client_with(&pki, Duration::from_millis(500)),
        &target(&registry.host()),
    )
    .await;
    unreachable(&verdict, "no answer within 500ms");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn trickling_token_answer_is_unreachable_within_the_timeout() {
    let pki = Pki::new();
    let registry = Fake::https(&pki, |seen| match seen.path() {
        "/v2/" => bearer_challenge(&format!("https://{}/token", seen.own)),
        _ => streamed(1, 10_000, Duration::from_millis(50)),
    })
    .await;
    let started = Instant::now();
    let verdict = check(
        &client_with(&pki, Duration::from_millis(500)),
        &target(&registry.host()),
    )
    .await;
    unreachable(&verdict, "within 500ms");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn huge_token_answer_is_abandoned_at_the_cap() {
    let pki = Pki::new();
    // 1 GiB in 64 KiB chunks as fast as the client reads: reading it all would outlast the
    // 5 s deadline.
    let registry = Fake::https(&pki, |seen| match seen.path() {
        "/v2/" => bearer_challenge(&format!("https://{}/token", seen.own)),
        _ => streamed(64 * 1024, 16 * 1024, Duration::ZERO),
    })
    .await;
    let started = Instant::now();
    let verdict = check(&client(&pki), &target(&registry.host())).await;
    unreachable(&verdict, "more than 65536 bytes");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // A declared length past the cap is refused before reading.
    let declared = Fake::https(&pki, |seen| match seen.path() {
        "/v2/" => bearer_challenge(&format!("https://{}/token", seen.own)),
        _ => reply(200, &[], &"x".repeat(70_000)),
    })
    .await;
    unreachable(
        &check(&client(&pki), &target(&declared.host())).await,
        "more than 65536 bytes",
    );
}

#[tokio::test]
async fn token_answer_cap_is_the_configured_one() {
    let pki = Pki::new();
    // A token answer of about 50 bytes.
    let registry = Fake::https(&pki, |seen| match seen.path() {
        "/v2/" => bearer_challenge(&format!("https://{}/token", seen.own)),
        _ => token_service(seen),
    })
    .await;
    let capped = |max_body| {
        RegistryClient::new(ClientOptions {
            ca_bundle: Some(pki.ca_pem.clone()),
            max_body,
            ..ClientOptions::default()
        })
        .unwrap()
    };
    unreachable(
        &check(&capped(20), &target(&registry.host())).await,
        "more than 20 bytes",
    );
    assert_eq!(
        check(&capped(200), &target(&registry.host())).await,
        crate::registry::Verdict::Accepted { allowance: None }
    );
}

#[tokio::test]
async fn redirect_from_the_registry_is_not_followed() {
    let pki = Pki::new();
    let elsewhere = Fake::https(&pki, |_| reply(200, &[], "{}")).await;
    let location = format!("https://localhost:{}/v2/", elsewhere.addr.port());
    let registry = Fake::https(&pki, move |_| reply(302, &[("location", &location)], BODY)).await;
    unreachable(
        &check(&client(&pki), &target(&registry.host())).await,
        &format!(
            "redirected to localhost:{}, not followed",
            elsewhere.addr.port()
        ),
    );
    assert_eq!(elsewhere.connections(), 0);
}

#[tokio::test]
async fn redirect_after_the_basic_credential_is_not_followed() {
    let pki = Pki::new();
    let elsewhere = Fake::https(&pki, |_| reply(200, &[], "{}")).await;
    let location = format!("https://localhost:{}/v2/", elsewhere.addr.port());
    let registry = Fake::https(&pki, move |seen| match seen.authorization {
        None => reply(401, &[("www-authenticate", "Basic")], BODY),
        Some(_) => reply(307, &[("location", &location)], BODY),
    })
    .await;
    unreachable(
        &check(&client(&pki), &target(&registry.host())).await,
        "not followed",
    );
    assert_eq!(elsewhere.connections(), 0);
}

#[tokio::test]
async fn redirect_from_the_token_realm_is_not_followed() {
    let pki = Pki::new();
    let elsewhere = Fake::https(&pki, token_service).await;
    let location = format!("https://localhost:{}/token", elsewhere.addr.port());
    let registry = Fake::https(&pki, move |seen| match seen.path() {
        "/v2/" => bearer_challenge(&format!("https://{}/token", seen.own)),
        _ => reply(302, &[("location", &location)], BODY),
    })
    .await;
    unreachable(
        &check(&client(&pki), &target(&registry.host())).await,
        "not followed",
    );
    assert_eq!(elsewhere.connections(), 0);
}

#[tokio::test]
async fn plain_http_realm_never_receives_the_credential() {
    let pki = Pki::new();
    let listener = Fake::plain().await;
    let realm = format!("http://127.0.0.1:{}/token", listener.addr.port());
    let registry = Fake::https(&pki, move |_| bearer_challenge(&realm)).await;
    let verdict = check(&client(&pki), &target(&registry.host())).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let received = String::from_utf8_lossy(&listener.received()).into_owned();
    assert!(
        !received.contains(&basic(USERNAME, PASSWORD)),
        "the credential went out in clear"
    );
    assert_eq!(listener.connections(), 0);
    unreachable(&verdict, "not https; the credential was not sent");
}

#[tokio::test]
async fn realm_with_user_info_is_refused() {
    let pki = Pki::new();
    let auth = Fake::https(&pki, token_service).await;
    let realm = format!("https://someone:else@localhost:{}/token", auth.addr.port());
    let registry = Fake::https(&pki, move |_| bearer_challenge(&realm)).await;
    unreachable(
        &check(&client(&pki), &target(&registry.host())).await,
        "user info",
    );
    assert_eq!(auth.connections(), 0);
}

#[tokio::test]
async fn untrusted_certificate_is_unreachable() {
    let pki = Pki::new();
    let registry = Fake::https(&pki, basic_registry).await;
    let without_ca = RegistryClient::new(ClientOptions::default()).unwrap();
    unreachable(
        &check(&without_ca, &target(&registry.host())).await,
        "certificate",
    );
    // Another CA's bundle does not help either.
    let other = client(&Pki::new());
    unreachable(
        &check(&other, &target(&registry.host())).await,
        "certificate",
    );
    assert!(registry.seen().is_empty());
}
