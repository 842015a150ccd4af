//! The webhook over a real TLS socket: AdmissionReview fixtures shaped like kube-apiserver's
//! (`tests/data/`) judged against the managers of `cheiron_harness::source`, and the server
//! started with `cheiron::webhook::serve` on port 0 (or `run` on free ports), exercised with
//! reqwest and raw sockets. What the answers say, which needs no socket, is pinned down by
//! `tests/admission_router.rs`; here: TLS and HTTP/2, hostile connections, load, the admin
//! port, shutdown, logs and certificates from `--tls-cert-dir`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    io::Write,
    net::SocketAddr,
    sync::{Arc, Mutex, OnceLock, atomic::Ordering},
    time::{Duration, Instant},
};

use cheiron::{
    metrics::Metrics,
    tls::CertResolver,
    webhook::{self, Listeners, Timing, TlsSource, WebhookError, WebhookOptions},
};
use cheiron_harness::{
    review::{
        assert_allowed_without_patch, in_namespace, labelled, patched, pod_review, pull_secrets,
        service_account_review, with_uid,
    },
    source::{INLINE_PASSWORD, PRIVATE_PODS, TEAM_A_PODS, TestSource},
};
use reqwest::{StatusCode, Version, header};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// Everything every test logs, at trace level, into one buffer.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buffer);
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || LogWriter(Arc::clone(&sink)))
            .try_init()
            .unwrap();
        buffer
    })
    .clone()
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A webhook served on port 0 with a self-signed certificate.
struct Webhook {
    https: SocketAddr,
    admin: SocketAddr,
    /// Trusts the server's certificate as its only root; offers h2 and HTTP/1.1.
    client: reqwest::Client,
    /// Same trust, HTTP/1.1 only.
    http1: reqwest::Client,
    source: Arc<TestSource>,
    certificate: Arc<CertResolver>,
    shutdown: CancellationToken,
    server: JoinHandle<Result<(), WebhookError>>,
}

impl Webhook {
    async fn start() -> Self {
        Self::start_with(Timing::new(Duration::from_millis(200))).await
    }

    async fn start_with(timing: Timing) -> Self {
        logs();
        let webhook_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let https = webhook_listener.local_addr().unwrap();
        let admin = admin_listener.local_addr().unwrap();
        let certificate = Arc::new(CertResolver::self_signed().unwrap());
        let root = root_of(&certificate);
        let source = Arc::new(TestSource::new());
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(webhook::serve(
            Listeners {
                webhook: webhook_listener,
                admin: admin_listener,
            },
            Arc::clone(&certificate),
            source.clone(),
            Arc::new(Metrics::new()),
            shutdown.clone(),
            timing,
        ));
        Self {
            https,
            admin,
            client: client_trusting(&root, false),
            http1: client_trusting(&root, true),
            source,
            certificate,
            shutdown,
            server,
        }
    }

    fn mutate_url(&self) -> String {
        format!("https://{}/mutate", self.https)
    }

    fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    /// Posts `review`, expects 200, returns `response`.
    async fn review(&self, review: &Value) -> Value {
        let response = self
            .client
            .post(self.mutate_url())
            .json(review)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(body["kind"], "AdmissionReview");
        body["response"].clone()
    }

    async fn post_raw(&self, body: impl Into<reqwest::Body>) -> (StatusCode, String) {
        let response = self
            .client
            .post(self.mutate_url())
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        (response.status(), response.text().await.unwrap())
    }

    async fn get_admin(&self, path: &str) -> reqwest::Response {
        reqwest::get(self.admin_url(path)).await.unwrap()
    }

    async fn metrics(&self) -> String {
        self.get_admin("/metrics").await.text().await.unwrap()
    }
}

fn root_of(certificate: &CertResolver) -> reqwest::Certificate {
    let current = certificate.current();
    reqwest::Certificate::from_der(current.end_entity().unwrap().as_ref()).unwrap()
}

fn client_trusting(root: &reqwest::Certificate, http1_only: bool) -> reqwest::Client {
    let builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(root.clone())
        .timeout(Duration::from_secs(20));
    let builder = if http1_only {
        builder.http1_only()
    } else {
        builder
    };
    builder.build().unwrap()
}

async fn closed_within(stream: &mut (impl AsyncReadExt + Unpin), limit: Duration) -> bool {
    let mut buffer = [0u8; 1024];
    let deadline = Instant::now() + limit;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Patching
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Left alone
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Hostile clients
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn garbage_body_gets_400_and_the_server_keeps_serving() {
    let webhook = Webhook::start().await;
    let (status, body) = webhook.post_raw(&b"\x00\x01\xffgarbage{{"[..]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.starts_with("body is not JSON"), "{body}");

    let review = pod_review();
    patched(&review, &webhook.review(&review).await);
}

#[tokio::test]
async fn body_over_3_mib_gets_413_and_the_server_keeps_serving() {
    let webhook = Webhook::start().await;
    let oversized = vec![b' '; webhook::MAX_BODY_BYTES + 1024];
    for client in [&webhook.http1, &webhook.client] {
        let response = client
            .post(webhook.mutate_url())
            .body(oversized.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);

        let review = pod_review();
        let response = client
            .post(webhook.mutate_url())
            .json(&review)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let metrics = webhook.metrics().await;
    assert!(metrics.contains(r#"cheiron_admission_invalid_requests_total{reason="too_large"} 2"#));
}

#[tokio::test]
async fn garbage_half_open_handshakes_and_slowloris_do_not_stop_the_server() {
    let webhook = Webhook::start_with(Timing {
        shutdown_delay: Duration::from_millis(100),
        drain_timeout: Duration::from_secs(1),
        handshake_timeout: Duration::from_millis(500),
    })
    .await;

    // Plain HTTP on the TLS port: the handshake fails and the server hangs up.
    let mut plaintext = TcpStream::connect(webhook.https).await.unwrap();
    plaintext
        .write_all(b"POST /mutate HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // Random bytes.
    let mut noise = TcpStream::connect(webhook.https).await.unwrap();
    noise
        .write_all(&[0xde, 0xad, 0xbe, 0xef].repeat(64))
        .await
        .unwrap();
    // The start of a ClientHello record, then silence.
    let mut half_open = TcpStream::connect(webhook.https).await.unwrap();
    half_open
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    // Connected, never a byte.
    let mut silent = TcpStream::connect(webhook.https).await.unwrap();
    // Slowloris: TLS done, then half the request headers, then nothing.
    let mut slow_headers = tls_connect(&webhook).await;
    slow_headers
        .write_all(b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
        .await
        .unwrap();
    // Slowloris on the body: headers announce 1000 bytes, ten arrive.
    let mut slow_body = tls_connect(&webhook).await;
    slow_body
        .write_all(
            b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{\"apiVersi",
        )
        .await
        .unwrap();
    // The admin port gets its own slow client.
    let mut slow_admin = TcpStream::connect(webhook.admin).await.unwrap();
    slow_admin
        .write_all(b"GET /readyz HTTP/1.1\r\nHo")
        .await
        .unwrap();

    // With all of them hanging on (the slow ones stay open to the end of the test), a real
    // review is answered. The bound is far above a review's milliseconds: it catches a server
    // that waits on the hostile connections, not a slow machine (CI runs at a load of 10).
    let review = pod_review();
    let response = tokio::time::timeout(Duration::from_secs(15), webhook.review(&review))
        .await
        .expect("a review answered while hostile connections hang on");
    patched(&review, &response);
    assert_eq!(webhook.get_admin("/healthz").await.status(), StatusCode::OK);

    for (name, stream) in [
        ("plaintext", &mut plaintext),
        ("noise", &mut noise),
        ("half-open handshake", &mut half_open),
        ("silent", &mut silent),
    ] {
        assert!(
            // The handshake timeout is 500 ms.
            closed_within(stream, Duration::from_secs(5)).await,
            "{name} connection still open"
        );
    }

    // And the server still serves after all that.
    let review = service_account_review();
    patched(&review, &webhook.review(&review).await);
    drop((slow_headers, slow_body, slow_admin));
}

async fn tls_connect(webhook: &Webhook) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    let current = webhook.certificate.current();
    roots.add(current.end_entity().unwrap().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let stream = TcpStream::connect(webhook.https).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    connector.connect(name, stream).await.unwrap()
}

// ---------------------------------------------------------------------------------------------
// Load, protocols, endpoints
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_reviews_are_all_answered_correctly() {
    let webhook = Arc::new(Webhook::start().await);
    let requests = (0..200).map(|i| {
        let webhook = Arc::clone(&webhook);
        tokio::spawn(async move {
            let uid = format!("concurrent-{i:03}");
            // Half over one multiplexed h2 connection, half over a connection each.
            let client = if i % 2 == 0 {
                &webhook.client
            } else {
                &webhook.http1
            };
            let (review, expected): (Value, &[&str]) = match i % 4 {
                0 => (pod_review(), &["docker-hub"]),
                1 => (service_account_review(), &["ghcr", "gitlab-registry"]),
                2 => (in_namespace(pod_review(), "team-m"), &[]),
                _ => (in_namespace(service_account_review(), "team-quiet"), &[]),
            };
            let review = with_uid(review, &uid);
            let response = client
                .post(webhook.mutate_url())
                .json(&review)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{uid}");
            let body: Value = response.json().await.unwrap();
            let response = &body["response"];
            assert_eq!(response["uid"], uid.as_str());
            if expected.is_empty() {
                assert_allowed_without_patch(&review, response);
            } else {
                let pointer = if i % 4 == 0 {
                    "/spec/imagePullSecrets"
                } else {
                    "/imagePullSecrets"
                };
                assert_eq!(
                    pull_secrets(&patched(&review, response), pointer),
                    expected,
                    "{uid}"
                );
            }
        })
    });
    let results = futures::future::join_all(requests).await;
    assert_eq!(results.len(), 200);
    for result in results {
        result.unwrap();
    }
    let metrics = webhook.metrics().await;
    assert!(
        metrics.contains("cheiron_admission_patches_total 100"),
        "{metrics}"
    );
}

#[tokio::test]
async fn reviews_are_answered_over_http2_when_alpn_selects_it() {
    let webhook = Webhook::start().await;
    let review = pod_review();
    let response = webhook
        .client
        .post(webhook.mutate_url())
        .json(&review)
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), Version::HTTP_2);
    assert_eq!(response.status(), StatusCode::OK);

    let response = webhook
        .http1
        .post(webhook.mutate_url())
        .json(&review)
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), Version::HTTP_11);
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn healthz_answers_ok() {
    let webhook = Webhook::start().await;
    let response = webhook.get_admin("/healthz").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.unwrap(), "ok");
}

#[tokio::test]
async fn metrics_are_openmetrics_text_with_certificate_expiry() {
    let webhook = Webhook::start().await;
    webhook.review(&pod_review()).await;

    let response = webhook.get_admin("/metrics").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = response.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"));
    let expiry = format!(
        "cheiron_certificate_expiry_timestamp_seconds {}",
        webhook.certificate.not_after()
    );
    assert!(text.contains(&expiry), "missing {expiry} in\n{text}");
    assert!(text.contains("cheiron_admission_duration_seconds_count{resource=\"pods\"} 1"));
}

#[tokio::test]
async fn readyz_is_503_until_the_source_is_ready() {
    let webhook = Webhook::start().await;
    webhook.source.ready.store(false, Ordering::SeqCst);
    assert_eq!(
        webhook.get_admin("/readyz").await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );

    webhook.source.ready.store(true, Ordering::SeqCst);
    let response = webhook.get_admin("/readyz").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.unwrap(), "ok");
}

// ---------------------------------------------------------------------------------------------
// Shutdown
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn shutdown_fails_readyz_at_once_and_closes_http1_connections_during_the_delay() {
    let webhook = Webhook::start_with(Timing {
        shutdown_delay: Duration::from_millis(1500),
        drain_timeout: Duration::from_secs(2),
        handshake_timeout: Duration::from_secs(2),
    })
    .await;
    let review = pod_review();
    let before = webhook
        .http1
        .post(webhook.mutate_url())
        .json(&review)
        .send()
        .await
        .unwrap();
    assert_eq!(before.status(), StatusCode::OK);
    assert!(before.headers().get(header::CONNECTION).is_none());
    assert_eq!(webhook.get_admin("/readyz").await.status(), StatusCode::OK);

    let shutting_down = Instant::now();
    webhook.shutdown.cancel();

    let readyz = webhook.get_admin("/readyz").await;
    assert_eq!(readyz.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(readyz.headers()[header::CONNECTION], "close");
    // Still serving during the delay, telling HTTP/1 clients to reconnect elsewhere.
    let during = webhook
        .http1
        .post(webhook.mutate_url())
        .json(&review)
        .send()
        .await
        .unwrap();
    assert_eq!(during.status(), StatusCode::OK);
    assert_eq!(during.headers()[header::CONNECTION], "close");
    let body: Value = during.json().await.unwrap();
    patched(&review, &body["response"]);
    assert!(shutting_down.elapsed() < Duration::from_millis(1500));

    // Then the server stops on its own and the ports are closed.
    let Webhook {
        server,
        https,
        admin,
        ..
    } = webhook;
    let stopped = tokio::time::timeout(Duration::from_secs(5), server).await;
    stopped.unwrap().unwrap().unwrap();
    assert!(shutting_down.elapsed() >= Duration::from_millis(1500));
    assert!(TcpStream::connect(https).await.is_err());
    assert!(TcpStream::connect(admin).await.is_err());
}

#[tokio::test]
async fn shutdown_drains_an_idle_keep_alive_connection_without_waiting_for_the_timeout() {
    let webhook = Webhook::start_with(Timing {
        shutdown_delay: Duration::from_millis(100),
        drain_timeout: Duration::from_secs(30),
        handshake_timeout: Duration::from_secs(2),
    })
    .await;
    // Leave an HTTP/1 and an h2 connection open and idle in the clients' pools.
    let review = pod_review();
    for client in [&webhook.http1, &webhook.client] {
        let response = client
            .post(webhook.mutate_url())
            .json(&review)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    webhook.shutdown.cancel();
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), webhook.server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
}

// ---------------------------------------------------------------------------------------------
// Logs
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn no_password_or_object_content_appears_in_any_log_line() {
    assert!(TEAM_A_PODS.contains(INLINE_PASSWORD) && PRIVATE_PODS.contains(INLINE_PASSWORD));
    const OBJECT_SECRET: &str = "object-env-value-5d1e88";
    let webhook = Webhook::start().await;

    // Patched, merged, skipped, unchanged and refused reviews, some carrying a secret-looking
    // value inside the object or the body.
    let mut review = with_uid(pod_review(), "log-check-pod");
    review["request"]["object"]["spec"]["containers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "API_TOKEN", "value": OBJECT_SECRET}));
    let pod = patched(&review, &webhook.review(&review).await);
    let mut again = review.clone();
    again["request"]["object"] = pod;
    webhook.review(&again).await;
    webhook
        .review(&labelled(
            in_namespace(review.clone(), "team-m"),
            "pulls",
            "private",
        ))
        .await;
    webhook
        .review(&in_namespace(service_account_review(), "team-quiet"))
        .await;
    let mut odd = review.clone();
    odd["request"]["object"]["metadata"]["annotations"] = json!({ "token": OBJECT_SECRET, "n": 1 });
    webhook.review(&odd).await;
    let (status, body) = webhook
        .post_raw(format!(r#"{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": "{OBJECT_SECRET}"}}"#))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // The sender gets serde's message (it is their own body); the logs must not.
    assert!(body.contains(OBJECT_SECRET), "{body}");

    let logs = String::from_utf8(logs().lock().unwrap().clone()).unwrap();
    // The capture works: the debug line of the first review is there, with its namespace.
    let line = logs
        .lines()
        .find(|l| l.contains("admission review answered") && l.contains("log-check-pod"))
        .unwrap_or_else(|| panic!("no review line in {} bytes of logs", logs.len()));
    assert!(
        line.contains("namespace=\"team-a\"") || line.contains("namespace=team-a"),
        "{line}"
    );
    assert!(
        line.contains("outcome=\"patched\"") || line.contains("outcome=patched"),
        "{line}"
    );
    assert!(!logs.contains(INLINE_PASSWORD), "inline password logged");
    assert!(!logs.contains(OBJECT_SECRET), "object content logged");
}

// ---------------------------------------------------------------------------------------------
// run: certificate from --tls-cert-dir
// ---------------------------------------------------------------------------------------------

struct Pair {
    cert: String,
    key: String,
}

fn generate_pair(expires: (i32, u8, u8)) -> Pair {
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    params.not_after = rcgen::date_time_ymd(expires.0, expires.1, expires.2);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// Polls `check` until it holds or `deadline` passes.
async fn eventually<F, Fut>(deadline: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while started.elapsed() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

fn free_address() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test]
async fn run_serves_the_certificate_in_tls_cert_dir_and_picks_up_a_rotated_one() {
    logs();
    let dir = tempfile::tempdir().unwrap();
    let first = generate_pair((2031, 1, 1));
    std::fs::write(dir.path().join("tls.crt"), &first.cert).unwrap();
    std::fs::write(dir.path().join("tls.key"), &first.key).unwrap();
    let options = WebhookOptions {
        listen: free_address(),
        admin_listen: free_address(),
        tls: TlsSource::Dir(dir.path().to_owned()),
        shutdown_delay: Duration::from_millis(100),
    };
    let (listen, admin) = (options.listen, options.admin_listen);
    let source = Arc::new(TestSource::new());
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(webhook::run(
        options,
        source,
        Arc::new(Metrics::new()),
        shutdown.clone(),
    ));

    let url = format!("https://{listen}/mutate");
    let trusting = |pem: &str| {
        client_trusting(
            &reqwest::Certificate::from_pem(pem.as_bytes()).unwrap(),
            true,
        )
    };
    let review = pod_review();
    let answers = |client: reqwest::Client| {
        let (url, review) = (url.clone(), review.clone());
        async move {
            client
                .post(url)
                .json(&review)
                .send()
                .await
                .is_ok_and(|r| r.status() == StatusCode::OK)
        }
    };
    assert!(
        eventually(Duration::from_secs(5), || answers(trusting(&first.cert))).await,
        "server never answered with the first certificate"
    );
    let expiry = |metrics: &str, pair_year: i32| {
        let not_after = rcgen::date_time_ymd(pair_year, 1, 1).unix_timestamp();
        metrics.contains(&format!(
            "cheiron_certificate_expiry_timestamp_seconds {not_after}"
        ))
    };
    let metrics_url = format!("http://{admin}/metrics");
    let metrics = reqwest::get(&metrics_url)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(expiry(&metrics, 2031), "{metrics}");

    // Rotate, as cert-manager or cheiron-certs would: a new pair in the same files.
    let second = generate_pair((2032, 1, 1));
    assert!(!answers(trusting(&second.cert)).await);
    std::fs::write(dir.path().join("tls.key"), &second.key).unwrap();
    std::fs::write(dir.path().join("tls.crt"), &second.cert).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || answers(trusting(&second.cert))).await,
        "rotated certificate never served"
    );
    assert!(!answers(trusting(&first.cert)).await);
    let metrics = reqwest::get(&metrics_url)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(expiry(&metrics, 2032), "{metrics}");

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn run_fails_with_a_clear_error_when_the_cert_dir_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let options = WebhookOptions {
        listen: free_address(),
        admin_listen: free_address(),
        tls: TlsSource::Dir(dir.path().to_owned()),
        shutdown_delay: Duration::ZERO,
    };
    let source = Arc::new(TestSource::new());
    let error = webhook::run(
        options,
        source,
        Arc::new(Metrics::new()),
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    let message = error.to_string();
    assert!(
        message.starts_with("cannot read ") && message.contains("tls.crt"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------------
// The admin port over HTTPS (--admin-tls-cert-dir)
// ---------------------------------------------------------------------------------------------

/// Authenticates the one token `reader`, who may read `/metrics`.
struct OneReader;

impl cheiron::admin::access::Reviewer for OneReader {
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> futures::future::BoxFuture<
        'a,
        Result<
            Option<k8s_openapi::api::authentication::v1::UserInfo>,
            cheiron::admin::access::ReviewError,
        >,
    > {
        let user = (token == "reader").then(|| k8s_openapi::api::authentication::v1::UserInfo {
            username: Some("reader".to_owned()),
            ..Default::default()
        });
        Box::pin(async move { Ok(user) })
    }

    fn may_read_metrics<'a>(
        &'a self,
        _user: &'a k8s_openapi::api::authentication::v1::UserInfo,
    ) -> futures::future::BoxFuture<'a, Result<bool, cheiron::admin::access::ReviewError>> {
        Box::pin(async { Ok(true) })
    }
}

/// An admin state that is ready, with `/metrics` for [`OneReader`] only.
fn reviewed_admin(shutdown: &CancellationToken) -> cheiron::admin::AdminState {
    use cheiron::admin::{AdminState, CacheLimits, MetricsAccess, ReadyFlag, access::MetricsGuard};
    let ready = Arc::new(ReadyFlag::default());
    ready.set(true);
    let guard = MetricsGuard::new(Arc::new(OneReader), CacheLimits::default());
    AdminState::new(ready, Arc::new(Metrics::new()))
        .with_shutdown(shutdown.clone())
        .with_metrics_access(MetricsAccess::Reviewed(Arc::new(guard)))
}

/// Status of `GET url` with `token` as bearer, or the transport error.
async fn status_of(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
) -> Result<(StatusCode, String), reqwest::Error> {
    let mut request = client.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await?;
    let status = response.status();
    Ok((status, response.text().await?))
}

#[tokio::test]
async fn admin_port_over_https_answers_a_reader_401_without_a_token_and_nothing_over_plain_http() {
    let certificate = Arc::new(CertResolver::self_signed().unwrap());
    let shutdown = CancellationToken::new();
    let state = reviewed_admin(&shutdown).with_certificate(Arc::clone(&certificate));
    let address = free_address();
    let server = tokio::spawn(
        cheiron::admin::serve_admin(address, state, Some(Arc::clone(&certificate)))
            .await
            .unwrap(),
    );
    let https = client_trusting(&root_of(&certificate), true);
    let base = format!("https://127.0.0.1:{}", address.port());

    let (status, body) = status_of(&https, &format!("{base}/metrics"), Some("reader"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body.contains("cheiron_certificate_expiry_timestamp_seconds")
            && body.trim_end().ends_with("# EOF"),
        "{body}"
    );
    for token in [None, Some("someone-else")] {
        let (status, body) = status_of(&https, &format!("{base}/metrics"), token)
            .await
            .unwrap();
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}: {body}");
        assert!(!body.contains("cheiron_"), "{body}");
    }
    // The kubelet's probes need no token (and verify no certificate).
    for path in ["/healthz", "/readyz"] {
        let (status, _) = status_of(&https, &format!("{base}{path}"), None)
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{path}");
    }
    // Plain HTTP, even with the reader's token, gets no answer at all.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let refused = status_of(
        &plain,
        &format!("http://127.0.0.1:{}/metrics", address.port()),
        Some("reader"),
    )
    .await;
    assert!(refused.is_err(), "plain HTTP was answered: {refused:?}");
    // ... and the port still serves HTTPS after it.
    assert_eq!(
        status_of(&https, &format!("{base}/healthz"), None)
            .await
            .unwrap()
            .0,
        StatusCode::OK
    );

    shutdown.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn admin_https_handshakes_are_bounded_in_number_and_time() {
    use cheiron::admin::{HandshakeLimits, HttpsListener, admin_router};
    let certificate = Arc::new(CertResolver::self_signed().unwrap());
    let shutdown = CancellationToken::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let limits = HandshakeLimits {
        timeout: Duration::from_millis(500),
        max_pending: 1,
    };
    let listener = HttpsListener::new(listener, Arc::clone(&certificate), limits).unwrap();
    let router = admin_router(reviewed_admin(&shutdown));
    let stop = shutdown.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
    });

    // A client that connects and never says hello holds the one handshake slot...
    let mut silent = TcpStream::connect(address).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // ... so the next connection is closed at once,
    let mut second = TcpStream::connect(address).await.unwrap();
    assert!(closed_within(&mut second, Duration::from_millis(300)).await);
    // and the silent one once its handshake time is up.
    assert!(closed_within(&mut silent, Duration::from_secs(3)).await);

    // Then the slot is free for a real client.
    let https = client_trusting(&root_of(&certificate), true);
    let (status, _) = status_of(
        &https,
        &format!("https://127.0.0.1:{}/healthz", address.port()),
        None,
    )
    .await
    .unwrap();
    assert_eq!(status, StatusCode::OK);

    shutdown.cancel();
    server.await.unwrap().unwrap();
}
