//! A Kubernetes Service in miniature, for tests that run several webhook replicas: one loopback
//! address the MutatingWebhookConfiguration points at, forwarding each TCP connection (TLS
//! passes through untouched) to one ready replica, round robin, as kube-proxy does.
//!
//! Which replicas are ready is decided the way the endpoints controller decides it: a replica
//! whose `/readyz` does not answer 200 at the last probe (every [`PROBE_PERIOD`]) gets no new
//! connections. Like kube-proxy, the proxy never retries a connection on another replica and
//! never cuts a connection it has forwarded: a replica that dies takes its connections with it,
//! and a replica that shuts down closes its own.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::{
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

use super::Result;

/// How often each replica's `/readyz` is probed; also roughly how long a replica that turned
/// unready (or died) still gets new connections, like endpoint propagation in a cluster.
pub const PROBE_PERIOD: Duration = Duration::from_secs(1);

/// A replica behind the proxy: where it serves and where it answers `/readyz`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The webhook's TLS address.
    pub serve: SocketAddr,
    /// The admin server (plain HTTP `/readyz`).
    pub admin: SocketAddr,
}

#[derive(Debug, Default)]
struct Endpoints {
    all: Vec<Endpoint>,
    ready: Vec<Endpoint>,
}

/// The running proxy; stops accepting when dropped (forwarded connections end on their own).
pub struct ServiceProxy {
    address: SocketAddr,
    endpoints: Arc<Mutex<Endpoints>>,
    accept: JoinHandle<()>,
    probe: JoinHandle<()>,
}

impl ServiceProxy {
    /// Listens on a free loopback port and starts probing. Runs on the calling runtime.
    pub async fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let endpoints = Arc::new(Mutex::new(Endpoints::default()));
        let accept = tokio::spawn(accept_loop(listener, endpoints.clone()));
        let probe = tokio::spawn(probe_loop(endpoints.clone()));
        Ok(Self {
            address,
            endpoints,
            accept,
            probe,
        })
    }

    /// The Service's address (what the webhook configuration's URL names).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Adds a replica; it receives connections once a probe has found it ready.
    pub fn add(&self, endpoint: Endpoint) {
        if let Ok(mut endpoints) = self.endpoints.lock()
            && !endpoints.all.contains(&endpoint)
        {
            endpoints.all.push(endpoint);
        }
    }

    /// Removes a replica at once (its Pod object was deleted).
    pub fn remove(&self, endpoint: Endpoint) {
        if let Ok(mut endpoints) = self.endpoints.lock() {
            endpoints.all.retain(|e| *e != endpoint);
            endpoints.ready.retain(|e| *e != endpoint);
        }
    }

    /// How many replicas get new connections now.
    pub fn ready_count(&self) -> usize {
        self.endpoints.lock().map_or(0, |e| e.ready.len())
    }

    /// Waits until `n` replicas are ready.
    pub async fn wait_for_ready(&self, n: usize, timeout: Duration) -> Result<()> {
        let start = std::time::Instant::now();
        while self.ready_count() < n {
            if start.elapsed() > timeout {
                return Err(format!(
                    "{} of {n} webhook replicas ready behind the proxy after {timeout:?}",
                    self.ready_count()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

impl Drop for ServiceProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.probe.abort();
    }
}

async fn accept_loop(listener: TcpListener, endpoints: Arc<Mutex<Endpoints>>) {
    let next = AtomicUsize::new(0);
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        let target = endpoints.lock().ok().and_then(|e| {
            (!e.ready.is_empty())
                .then(|| e.ready[next.fetch_add(1, Ordering::Relaxed) % e.ready.len()])
        });
        // No ready replica: the connection is closed, as a Service without endpoints rejects it.
        let Some(target) = target else { continue };
        tokio::spawn(async move {
            if let Ok(mut outbound) = TcpStream::connect(target.serve).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

async fn probe_loop(endpoints: Arc<Mutex<Endpoints>>) {
    let Ok(http) = reqwest::Client::builder()
        .timeout(Duration::from_millis(800))
        .build()
    else {
        return;
    };
    loop {
        let all = endpoints.lock().map(|e| e.all.clone()).unwrap_or_default();
        let mut ready = Vec::with_capacity(all.len());
        for endpoint in all {
            let url = format!("http://{}/readyz", endpoint.admin);
            if http
                .get(url)
                .send()
                .await
                .is_ok_and(|r| r.status().as_u16() == 200)
            {
                ready.push(endpoint);
            }
        }
        if let Ok(mut endpoints) = endpoints.lock() {
            // A replica removed while probing stays removed.
            ready.retain(|e| endpoints.all.contains(e));
            endpoints.ready = ready;
        }
        tokio::time::sleep(PROBE_PERIOD).await;
    }
}
