//! A fake registry: a real HTTPS server on 127.0.0.1 with a test CA, answering with a
//! handler and recording every request it sees; and two TCP listeners that only record
//! (plain) or hold connections without answering (silent).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use futures::StreamExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A reply header the fake removes, waiting that many milliseconds before answering.
pub const DELAY: &str = "x-fake-delay-ms";

/// The answer a handler gives.
pub type Reply = hyper::Response<UnsyncBoxBody<Bytes, Infallible>>;

/// A test CA and a certificate for 127.0.0.1 and localhost issued by it.
pub struct Pki {
    pub ca_pem: Vec<u8>,
    config: Arc<rustls::ServerConfig>,
}

impl Pki {
    pub fn new() -> Self {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::default();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf_params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(leaf.der().to_vec())], key)
        .unwrap();
        Self {
            ca_pem: ca_cert.pem().into_bytes(),
            config: Arc::new(config),
        }
    }
}

/// One request as the fake saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The fake's own `127.0.0.1:port`.
    pub own: String,
    pub method: String,
    /// Path and query.
    pub uri: String,
    pub authorization: Option<String>,
}

impl Seen {
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or_default()
    }
}

/// A listener on 127.0.0.1 that records what it sees; stops when dropped.
pub struct Fake {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<u8>>>,
    task: JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fake {
    fn new(addr: SocketAddr, task: JoinHandle<()>, parts: Parts) -> Self {
        Self {
            addr,
            seen: parts.seen,
            connections: parts.connections,
            received: parts.received,
            task,
        }
    }

    /// `127.0.0.1:port`, a registry host.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The bytes a plain listener received.
    pub fn received(&self) -> Vec<u8> {
        self.received.lock().unwrap().clone()
    }

    /// An HTTPS server answering each request with `handler`.
    pub async fn https(
        pki: &Pki,
        handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let parts = Parts::default();
        let acceptor = tokio_rustls::TlsAcceptor::from(pki.config.clone());
        let handler = Arc::new(handler);
        let (seen, connections) = (parts.seen.clone(), parts.connections.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                connections.fetch_add(1, Ordering::SeqCst);
                let (acceptor, handler, seen) = (acceptor.clone(), handler.clone(), seen.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request| {
                        let (handler, seen) = (handler.clone(), seen.clone());
                        async move {
                            let request: hyper::Request<hyper::body::Incoming> = request;
                            let one = Seen {
                                own: addr.to_string(),
                                method: request.method().to_string(),
                                uri: request
                                    .uri()
                                    .path_and_query()
                                    .map(ToString::to_string)
                                    .unwrap_or_default(),
                                authorization: request
                                    .headers()
                                    .get(hyper::header::AUTHORIZATION)
                                    .map(|v| v.to_str().unwrap().to_owned()),
                            };
                            seen.lock().unwrap().push(one.clone());
                            let mut answer = handler(&one);
                            if let Some(delay) = answer.headers_mut().remove(DELAY) {
                                let ms = delay.to_str().unwrap().parse().unwrap();
                                tokio::time::sleep(Duration::from_millis(ms)).await;
                            }
                            Ok::<_, Infallible>(answer)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Self::new(addr, task, parts)
    }

    /// A TCP listener that records connections and the bytes sent, and never answers.
    pub async fn plain() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let parts = Parts::default();
        let (connections, received) = (parts.connections.clone(), parts.received.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut tcp, _)) = listener.accept().await else {
                    return;
                };
                connections.fetch_add(1, Ordering::SeqCst);
                let received = received.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    while let Ok(n @ 1..) = tcp.read(&mut buffer).await {
                        received.lock().unwrap().extend_from_slice(&buffer[..n]);
                    }
                });
            }
        });
        Self::new(addr, task, parts)
    }

    /// An HTTP CONNECT proxy: records each CONNECT line in [`Fake::seen`] (as `uri`) and
    /// what the client sent through the tunnel in [`Fake::received`].
    pub async fn connect_proxy() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let parts = Parts::default();
        let (seen, connections, received) = (
            parts.seen.clone(),
            parts.connections.clone(),
            parts.received.clone(),
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                connections.fetch_add(1, Ordering::SeqCst);
                let (seen, received) = (seen.clone(), received.clone());
                tokio::spawn(async move {
                    // The request head, byte by byte so nothing of the tunnel is consumed.
                    let mut head = Vec::new();
                    while !head.ends_with(b"\r\n\r\n") {
                        let mut byte = [0u8; 1];
                        if client.read_exact(&mut byte).await.is_err() {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let line = head.lines().next().unwrap_or_default().to_owned();
                    seen.lock().unwrap().push(Seen {
                        own: addr.to_string(),
                        method: "CONNECT".to_owned(),
                        uri: line.clone(),
                        authorization: None,
                    });
                    let target = line.split(' ').nth(1).unwrap_or_default().to_owned();
                    let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    client
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await
                        .unwrap();
                    let (mut client_read, mut client_write) = client.split();
                    let (mut upstream_read, mut upstream_write) = upstream.split();
                    let up = async {
                        let mut buffer = [0u8; 4096];
                        while let Ok(n @ 1..) = client_read.read(&mut buffer).await {
                            received.lock().unwrap().extend_from_slice(&buffer[..n]);
                            if upstream_write.write_all(&buffer[..n]).await.is_err() {
                                return;
                            }
                        }
                    };
                    let down = tokio::io::copy(&mut upstream_read, &mut client_write);
                    let _ = tokio::join!(up, down);
                });
            }
        });
        Self::new(addr, task, parts)
    }

    /// A port nothing listens on.
    pub async fn closed_port() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    }
}

#[derive(Default)]
struct Parts {
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<u8>>>,
}

/// An answer with `status`, these headers and `body`.
pub fn reply(status: u16, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut builder = hyper::Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder
        .body(Full::new(Bytes::from(body.to_owned())).boxed_unsync())
        .unwrap()
}

/// A 200 whose body is `count` chunks of `chunk` bytes, one every `every`, with no length.
pub fn streamed(chunk: usize, count: usize, every: Duration) -> Reply {
    let stream = futures::stream::iter(0..count).then(move |_| async move {
        tokio::time::sleep(every).await;
        Ok::<_, Infallible>(Frame::data(Bytes::from(vec![b'x'; chunk])))
    });
    hyper::Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(StreamBody::new(stream).boxed_unsync())
        .unwrap()
}

/// The `Authorization` value of Basic `username:password`.
pub fn basic(username: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
    )
}
