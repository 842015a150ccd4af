//! Certificate rotation over a real socket: `cheiron::webhook::run` serves `--tls-cert-dir`
//! laid out exactly like a Kubernetes Secret volume, a client opens a new TLS connection every
//! 20 ms trusting both the old and the new CA, and the `..data` symlink is swapped the way
//! kubelet swaps it. The new certificate must be served faster than the periodic re-read
//! could (the directory watch), no handshake may fail at any point, and an invalid pair must
//! leave the current certificate in place.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    net::{IpAddr, SocketAddr},
    os::unix::fs::symlink,
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use cheiron::{
    admin::Readiness,
    metrics::Metrics,
    policy::{StaticView, View},
    source::Source,
    tls::RELOAD_PERIOD,
    webhook::{self, TlsSource, WebhookOptions},
};
use cheiron_certs::time::{self, OffsetDateTime};
use cheiron_certs::{Ca, ServingCertificate, ServingNames, Validity};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// Time between two new connections of the prober.
const PROBE_INTERVAL: Duration = Duration::from_millis(20);
/// How soon a rotated certificate must be served: well under [`RELOAD_PERIOD`], so only the
/// directory watch can meet it.
const WATCH_DEADLINE: Duration = Duration::from_secs(1);

struct EmptySource(StaticView);

impl Source for EmptySource {
    fn view(&self) -> &dyn View {
        &self.0
    }
}

impl Readiness for EmptySource {
    fn is_ready(&self) -> bool {
        true
    }
}

/// A CA and a serving certificate for 127.0.0.1 signed by it, valid `days`.
fn issue(days: i64) -> (Ca, ServingCertificate) {
    let now = OffsetDateTime::now_utc();
    let ca = Ca::generate(now, Validity::default().ca).unwrap();
    let names = ServingNames::new(
        "cheiron",
        "tls-reload",
        &[],
        &[IpAddr::from([127, 0, 0, 1])],
    )
    .unwrap();
    let serving = ca.issue(&names, now, time::Duration::days(days)).unwrap();
    (ca, serving)
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .as_ref()
        .to_vec()
}

/// Writes `cert` and `key` into a new `..<timestamp>` directory and points `..data` at it the
/// way kubelet's atomic writer does: a `..data_tmp` symlink renamed over `..data`. The first
/// call also creates the `tls.crt -> ..data/tls.crt` and `tls.key -> ..data/tls.key` links.
fn publish(root: &Path, timestamp: &str, cert: &str, key: &str) {
    let dir = root.join(format!("..{timestamp}"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("tls.crt"), cert).unwrap();
    std::fs::write(dir.join("tls.key"), key).unwrap();
    let previous = std::fs::read_link(root.join("..data")).ok();
    symlink(dir.file_name().unwrap(), root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    if let Some(previous) = previous {
        std::fs::remove_dir_all(root.join(previous)).unwrap();
    } else {
        symlink("..data/tls.crt", root.join("tls.crt")).unwrap();
        symlink("..data/tls.key", root.join("tls.key")).unwrap();
    }
}

/// One new connection: when it started, and the served end-entity certificate (DER) or why
/// the handshake failed.
struct Probe {
    at: Instant,
    served: Result<Vec<u8>, String>,
}

/// Opens a new TLS connection every [`PROBE_INTERVAL`] until `stop`, verifying the server
/// against `roots` for IP 127.0.0.1.
async fn probe(
    address: SocketAddr,
    roots: rustls::RootCertStore,
    probes: Arc<Mutex<Vec<Probe>>>,
    stop: Arc<AtomicBool>,
) {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::IpAddress(IpAddr::from([127, 0, 0, 1]).into());
    while !stop.load(Ordering::SeqCst) {
        let at = Instant::now();
        let handshake = async {
            let tcp = TcpStream::connect(address)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let tls = connector
                .connect(name.clone(), tcp)
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            let (_, connection) = tls.get_ref();
            connection
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|leaf| leaf.as_ref().to_vec())
                .ok_or_else(|| "no peer certificate".to_owned())
        };
        let served = tokio::time::timeout(Duration::from_secs(2), handshake)
            .await
            .unwrap_or_else(|_| Err("handshake timed out".to_owned()));
        probes.lock().unwrap().push(Probe { at, served });
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

/// The first probe started after `since` that was served `der`, waiting up to 5 s.
async fn first_served_after(probes: &Mutex<Vec<Probe>>, der: &[u8], since: Instant) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = probes
            .lock()
            .unwrap()
            .iter()
            .find(|p| p.at >= since && p.served.as_deref() == Ok(der))
            .map(|p| p.at - since);
        if let Some(after) = found {
            return after;
        }
        assert!(Instant::now() < deadline, "certificate never served");
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

async fn expiry_metric(admin: SocketAddr) -> String {
    let text = reqwest::get(format!("http://{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with("cheiron_certificate_expiry_timestamp_seconds "))
        .unwrap_or_else(|| panic!("no expiry metric in\n{text}"))
        .to_owned()
}

fn expiry_line(serving: &ServingCertificate) -> String {
    format!(
        "cheiron_certificate_expiry_timestamp_seconds {}",
        serving.not_after.unix_timestamp()
    )
}

fn free_address() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_volume_rotation_is_served_within_a_second_without_a_failed_handshake() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (first_ca, first) = issue(100);
    let (second_ca, second) = issue(200);
    let (third_ca, third) = issue(300);
    let (_, stranger) = issue(50);
    publish(
        root,
        "2026_01_01_00_00_00.000000001",
        &first.cert_pem,
        &first.key_pem,
    );

    let options = WebhookOptions {
        listen: free_address(),
        admin_listen: free_address(),
        tls: TlsSource::Dir(root.to_owned()),
        shutdown_delay: Duration::from_millis(100),
    };
    let (listen, admin) = (options.listen, options.admin_listen);
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(webhook::run(
        options,
        Arc::new(EmptySource(StaticView::new(Vec::new(), []))),
        Arc::new(Metrics::new()),
        shutdown.clone(),
    ));

    let mut roots = rustls::RootCertStore::empty();
    for ca in [&first_ca, &second_ca, &third_ca] {
        roots
            .add(CertificateDer::from(der_of(ca.cert_pem())))
            .unwrap();
    }
    let probes = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    // Waits for the listener: connection refused until `run` has bound it.
    let started = Instant::now();
    while TcpStream::connect(listen).await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never listened"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let prober = tokio::spawn(probe(listen, roots, Arc::clone(&probes), Arc::clone(&stop)));
    first_served_after(&probes, &der_of(&first.cert_pem), started).await;
    assert_eq!(expiry_metric(admin).await, expiry_line(&first));

    // Rotation: served within a second, well before the periodic re-read would have to.
    let rotated = Instant::now();
    publish(
        root,
        "2026_02_01_00_00_00.000000002",
        &second.cert_pem,
        &second.key_pem,
    );
    let latency = first_served_after(&probes, &der_of(&second.cert_pem), rotated).await;
    eprintln!("rotated certificate served after {latency:?}");
    assert!(
        latency < WATCH_DEADLINE,
        "new certificate served after {latency:?} (periodic re-read: {RELOAD_PERIOD:?})"
    );
    assert_eq!(expiry_metric(admin).await, expiry_line(&second));

    // An invalid pair (a certificate with another certificate's key): the current one stays,
    // through more than one periodic re-read.
    let invalid_at = Instant::now();
    publish(
        root,
        "2026_03_01_00_00_00.000000003",
        &third.cert_pem,
        &stranger.key_pem,
    );
    tokio::time::sleep(RELOAD_PERIOD + Duration::from_secs(1)).await;
    let after_invalid: Vec<_> = probes
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.at >= invalid_at)
        .map(|p| p.served.clone())
        .collect();
    assert!(after_invalid.len() > 20, "{} probes", after_invalid.len());
    assert!(
        after_invalid
            .iter()
            .all(|served| served.as_deref() == Ok(der_of(&second.cert_pem).as_slice())),
        "something other than the current certificate was served after the invalid pair"
    );
    assert_eq!(expiry_metric(admin).await, expiry_line(&second));

    // A valid pair again: the watch picks it up just as fast.
    let rotated = Instant::now();
    publish(
        root,
        "2026_04_01_00_00_00.000000004",
        &third.cert_pem,
        &third.key_pem,
    );
    let latency = first_served_after(&probes, &der_of(&third.cert_pem), rotated).await;
    eprintln!("certificate after the invalid pair served after {latency:?}");
    assert!(latency < WATCH_DEADLINE, "served after {latency:?}");
    assert_eq!(expiry_metric(admin).await, expiry_line(&third));

    stop.store(true, Ordering::SeqCst);
    prober.await.unwrap();
    let probes = std::mem::take(&mut *probes.lock().unwrap());
    let failed: Vec<_> = probes
        .iter()
        .filter_map(|p| p.served.as_ref().err())
        .collect();
    assert!(failed.is_empty(), "failed handshakes: {failed:?}");
    // Each certificate, once replaced, is never served again.
    let order = [&first, &second, &third].map(|s| der_of(&s.cert_pem));
    let served: Vec<usize> = probes
        .iter()
        .filter_map(|p| p.served.as_ref().ok())
        .map(|der| order.iter().position(|o| o == der).unwrap())
        .collect();
    assert!(served.windows(2).all(|w| w[0] <= w[1]), "{served:?}");
    assert!(probes.len() > 100, "only {} connections", probes.len());

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
