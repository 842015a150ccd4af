//! A network partition in miniature: a loopback address forwarding every TCP connection to
//! one upstream (an apiserver), which the test can [`Partition::cut`] and
//! [`Partition::heal`]. While cut, nothing crosses in either direction, yet every connection
//! stays open and new ones are accepted and held: what a process sees when the packets to its
//! apiserver are lost (a node whose network died, a firewall dropping them), where a request
//! gets neither an answer nor an error. Healed, what was held flows on, as TCP delivers it
//! once the path is back.

use std::net::SocketAddr;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};

use super::Result;

/// The forwarder: its address, its switch and its accept loop (aborted on drop).
pub struct Partition {
    address: SocketAddr,
    cut: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl Partition {
    /// Forwards `127.0.0.1:<free port>` to `upstream`, open.
    pub async fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let (cut, open) = watch::channel(false);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(forward(client, upstream, open.clone()));
            }
        });
        Ok(Self {
            address,
            cut,
            accept,
        })
    }

    /// Where to connect instead of the upstream.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops every byte in both directions, keeping the connections open.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Lets what was held, and everything after it, through again.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Waits while the partition is cut. `false` once the [`Partition`] is gone.
async fn while_cut(open: &mut watch::Receiver<bool>) -> bool {
    open.wait_for(|cut| !cut).await.is_ok()
}

async fn forward(client: TcpStream, upstream: SocketAddr, mut open: watch::Receiver<bool>) {
    // A connection made while cut reaches the upstream only once healed, like a SYN that is
    // retransmitted until it gets through.
    if !while_cut(&mut open).await {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        pump(client_read, server_write, open.clone()),
        pump(server_read, client_write, open),
    );
}

/// Copies `from` to `to`, holding each chunk read while the partition is cut.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut open: watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        if !while_cut(&mut open).await {
            return;
        }
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Cut while reading: this chunk waits too.
        if !while_cut(&mut open).await {
            return;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
