//! Hostile clients against a real `cheiron webhook --self-signed --from examples/cluster`
//! child process, over loopback sockets: every limit of docs/design.md §7 (Limits) is hit by a
//! client that means harm, and the webhook keeps answering the API server's reviews with its
//! memory bounded (read from the child's `/proc/PID/status`).
//!
//! Limits are set small through the flags so that each test takes seconds. Every loop is
//! bounded in count and time; the number of sockets is sized to the file descriptor limit.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::future::join_all;
use reqwest::StatusCode;
use rustls::{
    ClientConfig, DigitallySignedStruct, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::{CryptoProvider, ring},
    pki_types::{CertificateDer, ServerName, UnixTime},
};
use serde_json::Value;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
};
use tokio_rustls::{TlsConnector, client::TlsStream};

const MIB: u64 = 1024 * 1024;
/// The series of the webhook listener's open connections.
const OPEN_CONNECTIONS: &str = r#"cheiron_connections_open{listener="webhook"}"#;

// ---------------------------------------------------------------------------------------------
// The child process
// ---------------------------------------------------------------------------------------------

/// `cheiron webhook` in static mode on free loopback ports; killed when dropped.
struct Webhook {
    child: Child,
    https: SocketAddr,
    admin: SocketAddr,
    /// Its stderr, shown when a test fails.
    log: tempfile::NamedTempFile,
}

fn free_address() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

impl Webhook {
    async fn start(flags: &[&str]) -> Self {
        let https = free_address();
        let admin = free_address();
        let log = tempfile::NamedTempFile::new().unwrap();
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cluster");
        let child = Command::new(env!("CARGO_BIN_EXE_cheiron"))
            .args([
                "--log",
                "info",
                "webhook",
                "--self-signed",
                "--shutdown-delay",
                "0",
            ])
            .arg("--from")
            .arg(&examples)
            .args(["--listen", &https.to_string()])
            .args(["--admin-listen", &admin.to_string()])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let webhook = Self {
            child,
            https,
            admin,
            log,
        };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if webhook
                .admin_get("/readyz")
                .await
                .is_some_and(|(status, _)| status == 200)
            {
                return webhook;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the webhook did not become ready:\n{}", webhook.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Resident memory of the child, in bytes.
    fn rss(&self) -> u64 {
        rss_of(self.child.id())
    }

    /// A plain HTTP/1.0 GET on the admin port (a connection of its own, closed after).
    async fn admin_get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream =
            tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(self.admin))
                .await
                .ok()?
                .ok()?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut response = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
            .await
            .ok()?
            .ok()?;
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text.split(' ').nth(1)?.parse().ok()?;
        Some((status, text))
    }

    async fn metrics(&self) -> String {
        match self.admin_get("/metrics").await {
            Some((200, text)) => text,
            other => panic!("no metrics: {other:?}\n{}", self.log()),
        }
    }

    /// The value of the metric line starting with `series` (name and labels), 0 if absent.
    async fn metric(&self, series: &str) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }

    /// Waits (up to 30 s) until the webhook listener holds `open` connections.
    async fn wait_for_open_connections(&self, open: usize) {
        self.wait_for_metric(OPEN_CONNECTIONS, open as f64, Duration::from_secs(30))
            .await;
    }

    /// Polls `metric` until it equals `value`, for at most `limit`.
    async fn wait_for_metric(&self, series: &str, value: f64, limit: Duration) {
        let started = Instant::now();
        let mut last = self.metric(series).await;
        while last != value && started.elapsed() < limit {
            tokio::time::sleep(Duration::from_millis(50)).await;
            last = self.metric(series).await;
        }
        assert_eq!(last, value, "{series}\n{}", self.log());
    }

    fn mutate_url(&self) -> String {
        format!("https://localhost:{}/mutate", self.https.port())
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rss_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kib| {
            kib.trim()
                .trim_end_matches(" kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// The soft limit on open files of this process (the child inherits it).
fn open_file_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|soft| soft.parse().ok())
        .unwrap_or(1024)
}

/// Samples the child's RSS every 20 ms until dropped; the peak is in `peak`.
struct RssSampler {
    peak: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    fn start(pid: u32) -> Self {
        let peak = Arc::new(AtomicU64::new(rss_of(pid)));
        let task = tokio::spawn({
            let peak = Arc::clone(&peak);
            async move {
                // Bounded: at most ten minutes of samples, and aborted when dropped.
                for _ in 0..30_000 {
                    peak.fetch_max(rss_of(pid), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
        Self { peak, task }
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------------------------

/// Accepts the child's self-signed certificate: the test does not have it, and only the
/// server's behaviour is under test here, not its identity.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS connector offering exactly `alpn` (`h2` or `http/1.1`).
fn connector(alpn: &[u8]) -> TlsConnector {
    let provider = Arc::new(ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    TlsConnector::from(Arc::new(config))
}

async fn tls(address: SocketAddr, alpn: &[u8]) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(address).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    tokio::time::timeout(Duration::from_secs(10), connector(alpn).connect(name, tcp))
        .await
        .expect("TLS handshake timed out")
        .unwrap()
}

/// A client like the API server's: HTTP/2 when offered, keep-alive, from `local`.
fn api_server_client(local: Option<IpAddr>) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .danger_accept_invalid_certs(true)
        .local_address(local)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn pod_review() -> Value {
    serde_json::from_str(include_str!("data/pod-create-replicaset.json")).unwrap()
}

/// Posts a Pod review; the status and, for 200, that the response echoes the uid.
async fn review(client: &reqwest::Client, webhook: &Webhook) -> StatusCode {
    let review = pod_review();
    let response = client
        .post(webhook.mutate_url())
        .json(&review)
        .send()
        .await
        .unwrap_or_else(|e| panic!("review failed: {e}\n{}", webhook.log()));
    let status = response.status();
    if status == StatusCode::OK {
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["response"]["uid"], review["request"]["uid"]);
        assert_eq!(body["response"]["allowed"], true);
    }
    status
}

/// Reads until the peer closes, for at most `limit`: the time that took, or `None`.
async fn closed_after(stream: &mut (impl AsyncRead + Unpin), limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buffer = [0u8; 4096];
    loop {
        let remaining = limit.checked_sub(started.elapsed())?;
        match tokio::time::timeout(remaining, stream.read(&mut buffer)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Connection caps
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn idle_connections_beyond_the_cap_are_closed_at_once_and_an_established_client_is_still_answered()
 {
    // Sized to the file descriptors this process may open (it holds every flood socket).
    let attempts = open_file_limit().saturating_sub(200).min(2000);
    let cap = (attempts / 4).min(200);
    assert!(
        cap >= 10,
        "too few file descriptors for this test: {attempts}"
    );
    let admin_cap = 8;
    let webhook = Webhook::start(&[
        &format!("--max-connections={cap}"),
        &format!("--max-connections-per-peer={}", attempts * 2),
        &format!("--max-admin-connections={admin_cap}"),
        // Long enough that nothing in the flood is closed by a timeout during the test.
        "--tls-handshake-timeout=60",
        "--http1-header-timeout=60",
    ])
    .await;

    // The API server's connection, established before the flood (HTTP/2, kept alive).
    let api_server = api_server_client(None);
    assert_eq!(review(&api_server, &webhook).await, StatusCode::OK);

    // The flood: connections that never even start TLS.
    let started = Instant::now();
    let mut flood = Vec::with_capacity(attempts);
    for _ in 0..attempts {
        // A refused connection may be reset before `connect` even returns.
        if let Ok(stream) = TcpStream::connect(webhook.https).await {
            flood.push(stream);
        }
    }
    let refused = (attempts - (cap - 1)) as f64;
    webhook
        .wait_for_metric(
            r#"cheiron_connections_refused_total{listener="webhook",reason="max_connections"}"#,
            refused,
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(webhook.metric(OPEN_CONNECTIONS).await, cap as f64);
    // Refused connections were closed at once; the others are held, idle.
    let probes = flood.iter_mut().map(|stream| async move {
        let mut byte = [0u8; 1];
        tokio::time::timeout(Duration::from_millis(500), stream.read(&mut byte))
            .await
            .is_err()
    });
    let held = join_all(probes)
        .await
        .into_iter()
        .filter(|held| *held)
        .count();
    assert_eq!(held, cap - 1, "{}", webhook.log());

    // The webhook still answers on the established connection.
    assert_eq!(review(&api_server, &webhook).await, StatusCode::OK);

    // The admin port has its own, small cap; the flood on the webhook port does not touch it.
    let mut admin_flood = Vec::new();
    for _ in 0..admin_cap * 3 {
        admin_flood.extend(TcpStream::connect(webhook.admin).await.ok());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        webhook.admin_get("/healthz").await.is_none(),
        "the admin cap did not hold"
    );
    drop(admin_flood);

    // Slots come back when the flood closes: a new connection is answered.
    drop(flood);
    webhook
        .wait_for_metric(OPEN_CONNECTIONS, 1.0, Duration::from_secs(10))
        .await;
    assert_eq!(
        review(&api_server_client(None), &webhook).await,
        StatusCode::OK
    );
    let refused_admin = webhook
        .metric(r#"cheiron_connections_refused_total{listener="admin",reason="max_connections"}"#)
        .await;
    assert!(refused_admin >= (admin_cap * 2) as f64, "{refused_admin}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn one_peer_cannot_take_every_connection() {
    let per_peer = 20;
    let webhook = Webhook::start(&[
        "--max-connections=1000",
        &format!("--max-connections-per-peer={per_peer}"),
        "--tls-handshake-timeout=60",
    ])
    .await;
    let mut flood = Vec::new();
    for _ in 0..per_peer * 3 {
        flood.extend(TcpStream::connect(webhook.https).await.ok());
    }
    webhook
        .wait_for_metric(
            r#"cheiron_connections_refused_total{listener="webhook",reason="max_connections_per_peer"}"#,
            (per_peer * 2) as f64,
            Duration::from_secs(10),
        )
        .await;
    // From another loopback address, a new connection is accepted and answered.
    let elsewhere = api_server_client(Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))));
    assert_eq!(review(&elsewhere, &webhook).await, StatusCode::OK);
    // From the flooding address it is refused.
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    if let Ok(mut again) = socket.connect(webhook.https).await {
        assert!(
            closed_after(&mut again, Duration::from_secs(5))
                .await
                .is_some(),
            "a connection over the per-peer cap was kept"
        );
    }
    webhook
        .wait_for_metric(
            r#"cheiron_connections_refused_total{listener="webhook",reason="max_connections_per_peer"}"#,
            (per_peer * 2 + 1) as f64,
            Duration::from_secs(10),
        )
        .await;
    drop(flood);
}

/// A loopback address of this host other than 127.0.0.1: a peer of its own to the webhook.
fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// A TLS connection from `local`, or `None` if it was refused or the handshake failed.
async fn tls_from(address: SocketAddr, local: IpAddr, alpn: &[u8]) -> Option<TlsStream<TcpStream>> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::new(local, 0)).ok()?;
    let tcp = socket.connect(address).await.ok()?;
    let name = ServerName::try_from("localhost").ok()?;
    tokio::time::timeout(Duration::from_secs(10), connector(alpn).connect(name, tcp))
        .await
        .ok()?
        .ok()
}

/// What a hostile connection does once its TLS handshake is done.
#[derive(Clone, Copy)]
enum Holding {
    /// HTTP/2: the preface and SETTINGS, then nothing.
    IdleHttp2,
    /// HTTP/1: no request at all.
    IdleHttp1,
    /// HTTP/1: a POST whose 1 000-byte body trickles in a byte every 500 ms, so that a
    /// request is always in progress.
    Busy,
}

/// What a hostile peer's connections have done: how many it holds, and how many it opened.
#[derive(Default)]
struct Hostile {
    held: AtomicU64,
    opened: AtomicU64,
}

impl Hostile {
    fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }
}

/// Waits until the hostile peers hold `counts` connections (their TLS handshakes done), for
/// at most 30 s.
async fn wait_for_held(peers: &[&Hostile], counts: &[u64]) {
    let started = Instant::now();
    let held = || peers.iter().map(|peer| peer.held()).collect::<Vec<_>>();
    while held() != counts && started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(held(), counts, "connections held by the hostile peers");
}

/// Holds one connection from `local` as `holding` says, and opens another (100 ms later)
/// whenever it is closed or refused, until aborted.
async fn hold(webhook: SocketAddr, local: IpAddr, holding: Holding, peer: Arc<Hostile>) {
    let alpn: &[u8] = match holding {
        Holding::IdleHttp2 => b"h2",
        Holding::IdleHttp1 | Holding::Busy => b"http/1.1",
    };
    // Bounded: at most a thousand connections, and aborted at the end of the test.
    for _ in 0..1000 {
        if let Some(stream) = tls_from(webhook, local, alpn).await {
            let (mut reader, mut writer) = tokio::io::split(stream);
            let opening: Vec<u8> = match holding {
                Holding::IdleHttp2 => [PREFACE, &frame(SETTINGS, 0, &[])].concat(),
                Holding::IdleHttp1 => Vec::new(),
                Holding::Busy => b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n ".to_vec(),
            };
            if writer.write_all(&opening).await.is_ok() {
                peer.held.fetch_add(1, Ordering::Relaxed);
                peer.opened.fetch_add(1, Ordering::Relaxed);
                let trickle = async {
                    if matches!(holding, Holding::Busy) {
                        for _ in 0..998 {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            if writer.write_all(b" ").await.is_err() {
                                break;
                            }
                        }
                    }
                    std::future::pending::<()>().await;
                };
                tokio::select! {
                    _ = closed_after(&mut reader, Duration::from_secs(300)) => {}
                    () = trickle => {}
                }
                peer.held.fetch_sub(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts `count` holders from `local`.
fn hostile_peer(
    holders: &mut tokio::task::JoinSet<()>,
    webhook: &Webhook,
    local: IpAddr,
    holding: Holding,
    count: usize,
) -> Arc<Hostile> {
    let peer = Arc::new(Hostile::default());
    for _ in 0..count {
        holders.spawn(hold(webhook.https, local, holding, Arc::clone(&peer)));
    }
    peer
}

/// `reviews` Pod reviews from `local`, like the API server's, each on a new connection (the
/// hardest case: each needs a slot): how many were answered 200.
async fn reviews_answered(webhook: &Webhook, local: IpAddr, reviews: usize) -> usize {
    let mut answered = 0;
    for _ in 0..reviews {
        let client = api_server_client(Some(local));
        let response = client
            .post(webhook.mutate_url())
            .json(&pod_review())
            .send()
            .await;
        if response.is_ok_and(|response| response.status() == StatusCode::OK) {
            answered += 1;
        }
    }
    answered
}

#[tokio::test]
async fn two_peers_holding_every_connection_cannot_lock_the_api_server_out() {
    let per_peer = 20;
    let cap = per_peer * 2;
    let webhook = Webhook::start(&[
        &format!("--max-connections={cap}"),
        &format!("--max-connections-per-peer={per_peer}"),
        // Long enough that no hostile connection is closed by a timeout during the test.
        "--tls-handshake-timeout=60",
        "--http1-header-timeout=60",
        "--http2-idle-timeout=60",
    ])
    .await;
    let baseline = webhook.rss();
    // Two hostile peers at their per-peer cap fill the listener with idle TLS connections,
    // and reconnect whenever one is closed.
    let mut holders = tokio::task::JoinSet::new();
    let first = hostile_peer(
        &mut holders,
        &webhook,
        loopback(2),
        Holding::IdleHttp2,
        per_peer,
    );
    let second = hostile_peer(
        &mut holders,
        &webhook,
        loopback(3),
        Holding::IdleHttp1,
        per_peer,
    );
    let open = OPEN_CONNECTIONS;
    webhook.wait_for_open_connections(cap).await;
    wait_for_held(&[&first, &second], &[per_peer as u64, per_peer as u64]).await;

    // The API server, from a third address, is answered every time.
    let answered = reviews_answered(&webhook, loopback(4), 20).await;
    assert_eq!(answered, 20, "reviews answered\n{}", webhook.log());
    let evicted = webhook
        .metric(r#"cheiron_connections_closed_total{reason="evicted"}"#)
        .await;
    assert!(evicted >= 1.0, "no connection was evicted");
    // The hostile peers still hold about their fair share: the API server took only what
    // it needed, and nothing grew without bound.
    assert!(webhook.metric(open).await <= (cap + cap / 4) as f64);
    let held = first.held() + second.held();
    assert!(held >= (cap - cap / 4) as u64, "{held}");
    let growth = webhook.rss().saturating_sub(baseline);
    assert!(growth < 32 * MIB, "RSS grew by {} MiB", growth / MIB);
    holders.abort_all();
}

#[tokio::test]
async fn requests_kept_in_progress_do_not_shield_the_largest_holder() {
    let webhook = Webhook::start(&[
        "--max-connections=30",
        "--max-connections-per-peer=20",
        "--tls-handshake-timeout=60",
        "--http1-header-timeout=60",
        "--body-timeout=60",
    ])
    .await;
    // The largest holder keeps a request in progress on every connection; another peer
    // holds the rest of the slots, idle.
    let mut holders = tokio::task::JoinSet::new();
    let busy = hostile_peer(&mut holders, &webhook, loopback(2), Holding::Busy, 20);
    webhook.wait_for_open_connections(20).await;
    let idle = hostile_peer(&mut holders, &webhook, loopback(3), Holding::IdleHttp1, 10);
    webhook.wait_for_open_connections(30).await;
    wait_for_held(&[&busy, &idle], &[20, 10]).await;

    let answered = reviews_answered(&webhook, loopback(4), 20).await;
    assert_eq!(answered, 20, "reviews answered\n{}", webhook.log());
    assert!(
        webhook
            .metric(r#"cheiron_connections_closed_total{reason="evicted"}"#)
            .await
            >= 1.0
    );
    // The idle peer, at its fair share, lost nothing: the connections given up were the
    // busy peer's, each closed once its request ends (here: after the drain timeout).
    assert_eq!((idle.held(), idle.opened()), (10, 10));
    holders.abort_all();
}

// ---------------------------------------------------------------------------------------------
// The body budget
// ---------------------------------------------------------------------------------------------

/// Sends a POST announcing 3 MiB and all of it but the last byte, reading the answer while
/// sending: the status line if one came within `limit`.
async fn withhold_last_byte(webhook: SocketAddr, limit: Duration) -> Option<String> {
    let body_length = 3 * MIB as usize;
    let stream = tls(webhook, b"http/1.1").await;
    let (mut reader, mut writer) = tokio::io::split(stream);
    let send = async move {
        let head = format!(
            "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {body_length}\r\n\r\n"
        );
        writer.write_all(head.as_bytes()).await?;
        let chunk = vec![b' '; 64 * 1024];
        let mut sent = 0;
        while sent < body_length - 1 {
            let n = chunk.len().min(body_length - 1 - sent);
            writer.write_all(&chunk[..n]).await?;
            sent += n;
        }
        writer.flush().await?;
        // Hold the connection (and the withheld byte) until the answer is read.
        std::future::pending::<()>().await;
        Ok::<_, std::io::Error>(writer)
    };
    let answer = async move {
        let mut head = Vec::new();
        let mut buffer = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buffer[..n]),
            }
        }
        String::from_utf8_lossy(&head).into_owned()
    };
    let answered = tokio::time::timeout(limit, async {
        tokio::pin!(answer);
        tokio::select! {
            biased;
            head = &mut answer => Some(head),
            // A failed write (the server answered and closed) still leaves the answer to read.
            _ = send => tokio::time::timeout(Duration::from_secs(2), answer).await.ok(),
        }
    })
    .await;
    match answered {
        Ok(Some(head)) if !head.is_empty() => Some(head),
        _ => None,
    }
}

#[tokio::test]
async fn slow_bodies_beyond_the_budget_get_503_and_the_webhook_stays_small() {
    let clients = 60;
    let webhook = Webhook::start(&[
        "--body-budget=16Mi",
        "--body-timeout=30",
        &format!("--max-connections-per-peer={}", clients * 2),
    ])
    .await;
    // Warm up: one review, so the baseline includes what serving at all costs.
    let api_server = api_server_client(None);
    assert_eq!(review(&api_server, &webhook).await, StatusCode::OK);
    let baseline = webhook.rss();
    let sampler = RssSampler::start(webhook.child.id());

    // 16 MiB: an eighth is kept for small bodies, so four 3 MiB bodies fit and the rest
    // are refused before they are read.
    let bodies = (0..clients).map(|_| withhold_last_byte(webhook.https, Duration::from_secs(8)));
    let mut answers = tokio::spawn(join_all(bodies));
    // While the budget is full, the API server's reviews are still answered.
    webhook
        .wait_for_metric(
            "cheiron_body_budget_used_bytes",
            (12 * MIB) as f64,
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(review(&api_server, &webhook).await, StatusCode::OK);

    let answers = tokio::time::timeout(Duration::from_secs(30), &mut answers)
        .await
        .unwrap()
        .unwrap();
    let refused: Vec<_> = answers
        .iter()
        .flatten()
        .filter(|head| head.starts_with("HTTP/1.1 503"))
        .collect();
    assert!(
        refused
            .iter()
            .all(|head| head.to_ascii_lowercase().contains("retry-after: 1\r\n")),
        "{refused:?}"
    );
    let unanswered = answers.iter().filter(|a| a.is_none()).count();
    assert_eq!(
        (refused.len(), unanswered),
        (clients - 4, 4),
        "{answers:?}\n{}",
        webhook.log()
    );
    assert_eq!(
        webhook
            .metric(r#"cheiron_admission_invalid_requests_total{reason="over_budget"}"#)
            .await,
        (clients - 4) as f64
    );
    // Memory: the four admitted bodies (12 MiB) and the connections, not 60 × 3 MiB.
    let growth = sampler.peak().saturating_sub(baseline);
    assert!(
        growth < 40 * MIB,
        "RSS grew by {} MiB (from {} MiB)",
        growth / MIB,
        baseline / MIB
    );
    eprintln!(
        "slow bodies: RSS {} MiB before, peak {} MiB",
        baseline / MIB,
        sampler.peak() / MIB
    );
}

// ---------------------------------------------------------------------------------------------
// Timeouts
// ---------------------------------------------------------------------------------------------

/// An HTTP/2 frame: type, flags, stream and payload.
struct Frame {
    kind: u8,
    flags: u8,
    payload: Vec<u8>,
}

const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const ACK: u8 = 0x1;
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut bytes = vec![length[1], length[2], length[3], kind, flags, 0, 0, 0, 0];
    bytes.extend_from_slice(payload);
    bytes
}

async fn read_frame(stream: &mut (impl AsyncRead + Unpin)) -> Option<Frame> {
    let mut head = [0u8; 9];
    stream.read_exact(&mut head).await.ok()?;
    let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; length];
    stream.read_exact(&mut payload).await.ok()?;
    Some(Frame {
        kind: head[3],
        flags: head[4],
        payload,
    })
}

#[tokio::test]
async fn http2_without_a_preface_is_closed_after_the_preface_timeout() {
    let webhook = Webhook::start(&["--http2-preface-timeout=1", "--http2-idle-timeout=30"]).await;
    let mut stream = tls(webhook.https, b"h2").await;
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
    let closed = closed_after(&mut stream, Duration::from_secs(10)).await;
    let closed = closed.expect("an HTTP/2 connection without a preface was kept open");
    assert!(
        closed >= Duration::from_millis(900) && closed < Duration::from_secs(5),
        "closed after {closed:?}"
    );
    assert_eq!(
        webhook
            .metric(r#"cheiron_connections_closed_total{reason="preface_timeout"}"#)
            .await,
        1.0
    );
}

#[tokio::test]
async fn http2_that_only_answers_pings_is_closed_after_the_idle_timeout() {
    let webhook = Webhook::start(&["--http2-idle-timeout=1.5", "--http2-max-streams=7"]).await;
    let stream = tls(webhook.https, b"h2").await;
    let (mut reader, mut writer) = tokio::io::split(stream);
    writer.write_all(PREFACE).await.unwrap();
    writer.write_all(&frame(SETTINGS, 0, &[])).await.unwrap();
    let started = Instant::now();

    // Keep the connection busy with everything but requests: PINGs every 200 ms, and
    // answers to the server's SETTINGS and PINGs.
    let (answers, mut to_send) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let pinging = tokio::spawn(async move {
        let mut ticks = tokio::time::interval(Duration::from_millis(200));
        for n in 0u64..100 {
            tokio::select! {
                _ = ticks.tick() => {
                    if writer.write_all(&frame(PING, 0, &n.to_be_bytes())).await.is_err() {
                        return;
                    }
                }
                Some(bytes) = to_send.recv() => {
                    if writer.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut max_streams = None;
    let mut goaway = None;
    let mut pongs = 0;
    let closed = tokio::time::timeout(Duration::from_secs(15), async {
        while let Some(frame_read) = read_frame(&mut reader).await {
            match (frame_read.kind, frame_read.flags & ACK) {
                (SETTINGS, 0) => {
                    for setting in frame_read.payload.chunks_exact(6) {
                        if setting[..2] == [0, 3] {
                            max_streams =
                                Some(u32::from_be_bytes(setting[2..].try_into().unwrap()));
                        }
                    }
                    let _ = answers.send(frame(SETTINGS, ACK, &[])).await;
                }
                (PING, 0) => {
                    let _ = answers.send(frame(PING, ACK, &frame_read.payload)).await;
                }
                (PING, ACK) => pongs += 1,
                (GOAWAY, _) => {
                    goaway.get_or_insert(started.elapsed());
                }
                _ => {}
            }
        }
        started.elapsed()
    })
    .await
    .expect("an HTTP/2 connection answering PINGs was kept open");
    pinging.abort();

    assert_eq!(max_streams, Some(7), "SETTINGS_MAX_CONCURRENT_STREAMS");
    assert!(pongs >= 5, "only {pongs} PINGs were answered");
    let goaway = goaway.expect("closed without GOAWAY");
    assert!(
        goaway >= Duration::from_millis(1400) && goaway < Duration::from_secs(6),
        "GOAWAY after {goaway:?}"
    );
    assert!(closed < Duration::from_secs(12), "closed after {closed:?}");
    assert_eq!(
        webhook
            .metric(r#"cheiron_connections_closed_total{reason="idle"}"#)
            .await,
        1.0
    );
}

#[tokio::test]
async fn http1_trickled_headers_are_closed_after_the_header_timeout() {
    let webhook = Webhook::start(&["--http1-header-timeout=1"]).await;
    let stream = tls(webhook.https, b"http/1.1").await;
    let (mut reader, mut writer) = tokio::io::split(stream);
    writer
        .write_all(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    // One header line every 200 ms, never the end of the head.
    let trickle = tokio::spawn(async move {
        for n in 0..100 {
            if writer
                .write_all(format!("X-Trickle-{n}: x\r\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let closed = closed_after(&mut reader, Duration::from_secs(10)).await;
    trickle.abort();
    let closed = closed.expect("trickled headers kept the connection open");
    assert!(
        closed >= Duration::from_millis(900) && closed < Duration::from_secs(5),
        "closed after {closed:?}"
    );
    assert_eq!(
        webhook
            .metric(r#"cheiron_connections_closed_total{reason="header_timeout"}"#)
            .await,
        1.0
    );
}
