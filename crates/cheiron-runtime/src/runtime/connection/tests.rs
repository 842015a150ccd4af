use std::{convert::Infallible, net::SocketAddr, time::Duration};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::{server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::{net::TcpListener, sync::oneshot};

use super::{KEEPALIVE_IDLE, client_builder};

/// A server answering every request with `{}` on a connection it keeps open; tells the
/// address each connection came from.
async fn server() -> (SocketAddr, oneshot::Receiver<SocketAddr>) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let address = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("address: {e}"));
    let (peer_tx, peer_rx) = oneshot::channel();
    tokio::spawn(async move {
        let (stream, peer) = listener
            .accept()
            .await
            .unwrap_or_else(|e| panic!("accept: {e}"));
        let _ = peer_tx.send(peer);
        let answer = service_fn(|_: Request<hyper::body::Incoming>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"{}"))))
        });
        let _ = http1::Builder::new()
            .serve_connection(TokioIo::new(stream), answer)
            .await;
    });
    (address, peer_rx)
}

/// The `tr` and `tm->when` columns of the kernel's line for the IPv4 connection from `local`
/// to `remote` (proc_net_tcp(5)): which timer runs on the socket (2: keep-alive) and in how
/// many hundredths of a second it fires.
fn timer(local: SocketAddr, remote: SocketAddr) -> Option<(u8, u64)> {
    let table =
        std::fs::read_to_string("/proc/net/tcp").unwrap_or_else(|e| panic!("/proc/net/tcp: {e}"));
    let port = |column: &str| u16::from_str_radix(column.rsplit(':').next()?, 16).ok();
    table.lines().skip(1).find_map(|line| {
        let columns: Vec<&str> = line.split_whitespace().collect();
        let (from, to, timer) = (columns.get(1)?, columns.get(2)?, columns.get(5)?);
        if port(from)? != local.port() || port(to)? != remote.port() {
            return None;
        }
        let (kind, when) = timer.split_once(':')?;
        Some((
            u8::from_str_radix(kind, 16).ok()?,
            u64::from_str_radix(when, 16).ok()?,
        ))
    })
}

#[tokio::test]
async fn an_idle_connection_to_the_apiserver_has_its_keep_alive_timer_running() {
    let (address, peer) = server().await;
    let config = kube::Config::new(
        format!("http://{address}")
            .parse()
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let client = client_builder(config)
        .unwrap_or_else(|e| panic!("{e}"))
        .build();
    let answer = client
        .request_text(
            Request::get("/version")
                .body(Vec::new())
                .unwrap_or_else(|e| panic!("{e}")),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(answer, "{}");
    let client_end = tokio::time::timeout(Duration::from_secs(5), peer)
        .await
        .unwrap_or_else(|_| panic!("the server saw no connection"))
        .unwrap_or_else(|e| panic!("{e}"));

    // The answered connection now waits in the client's pool, silent.
    let (kind, when) = timer(client_end, address)
        .unwrap_or_else(|| panic!("no line for {client_end} → {address} in /proc/net/tcp"));
    assert_eq!(
        kind, 2,
        "the idle connection runs timer {kind} (2 is keep-alive, 0 none): no TCP keep-alive"
    );
    let hundredths = KEEPALIVE_IDLE.as_millis() as u64 / 10;
    assert!(
        when <= hundredths && when > hundredths - 500,
        "the first probe is due in {when} hundredths of a second, not within {KEEPALIVE_IDLE:?}"
    );
    drop(client);
}
