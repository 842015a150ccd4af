//! A network partition in miniature: a loopback address forwarding every TCP connection to
//! one upstream (an apiserver), which the test can [`Partition::cut`] and
//! [`Partition::heal`]. While cut, nothing crosses in either direction, yet every connection
//! stays open and new ones are accepted and held: what a process sees when the packets to its
//! apiserver are lost (a node whose network died, a firewall dropping them), where a request
//! gets neither an answer nor an error. Healed, what was held flows on, as TCP delivers it
//! once the path is back.
//!
//! [`Partition::vanish`] is the other silent fault: the far end of every connection is gone
//! (its host lost, a NAT or load balancer that forgot the flow) and no word of it reaches the
//! process, which learns only when it next sends something and gets a reset.

use std::{net::SocketAddr, process::Command, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};

use super::Result;

/// The forwarder: its address, its switches and its accept loop (aborted on drop).
pub struct Partition {
    address: SocketAddr,
    cut: watch::Sender<bool>,
    /// Bumped by [`Partition::vanish`]: every connection open then is reset.
    vanished: watch::Sender<u64>,
    accept: JoinHandle<()>,
}

impl Partition {
    /// Forwards `127.0.0.1:<free port>` to `upstream`, open.
    pub async fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let (cut, open) = watch::channel(false);
        let (vanished, generation) = watch::channel(0);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mut generation = generation.clone();
                generation.mark_unchanged();
                tokio::spawn(forward(client, upstream, open.clone(), generation));
            }
        });
        Ok(Self {
            address,
            cut,
            vanished,
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

    /// Makes the forwarder's end of every open connection vanish without the client hearing
    /// of it: while iptables drops every packet to and from its port on loopback, each
    /// connection is reset (`SO_LINGER` 0, so nothing of it is left to send later); then the
    /// packets flow again. The client's sockets stay open on a connection nobody holds: a
    /// silent one waits for ever, one that sends gets a reset. New connections are forwarded
    /// as before. Needs root and iptables.
    pub async fn vanish(&self) -> Result<()> {
        let port = self.address.port();
        let _dropped = Dropped::start(port)?;
        self.vanished.send_modify(|generation| *generation += 1);
        // The resets are sent (and dropped) as each forward sees the change: at once.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(())
    }
}

/// iptables rules dropping every TCP packet to or from a port on loopback (the packets of
/// both directions pass INPUT there), removed on drop.
struct Dropped {
    port: u16,
    /// The rules added so far: `--dport`, then `--sport`.
    added: Vec<&'static str>,
}

impl Dropped {
    fn start(port: u16) -> Result<Self> {
        let mut dropped = Self {
            port,
            added: Vec::new(),
        };
        for direction in ["--dport", "--sport"] {
            iptables("-I", direction, port)?;
            dropped.added.push(direction);
        }
        Ok(dropped)
    }
}

impl Drop for Dropped {
    fn drop(&mut self) {
        for direction in &self.added {
            let _ = iptables("-D", direction, self.port);
        }
    }
}

fn iptables(action: &str, direction: &str, port: u16) -> Result<()> {
    let run = Command::new("iptables")
        .args(["-w", action, "INPUT", "-i", "lo", "-p", "tcp", direction])
        .args([&port.to_string(), "-j", "DROP"])
        .output();
    let advice = "Partition::vanish drops packets with iptables, which needs root and Debian's \
                  iptables (.ci/run installs it; CI runs as root)";
    match run {
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => Err(format!(
            "iptables {action} INPUT {direction} {port}: {}; {advice}",
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into()),
        Err(e) => Err(format!("cannot run iptables: {e}; {advice}").into()),
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

async fn forward(
    client: TcpStream,
    upstream: SocketAddr,
    mut open: watch::Receiver<bool>,
    mut vanished: watch::Receiver<u64>,
) {
    // A connection made while cut reaches the upstream only once healed, like a SYN that is
    // retransmitted until it gets through.
    if !while_cut(&mut open).await {
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let mut client = client;
    let vanish = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        tokio::select! {
            _ = async {
                tokio::join!(
                    pump(client_read, server_write, open.clone()),
                    pump(server_read, client_write, open),
                )
            } => false,
            Ok(()) = vanished.changed() => true,
        }
    };
    if vanish {
        // Closed with a reset, not a FIN that would be sent again until it got through.
        let _ = client.set_zero_linger();
    }
}

/// Copies `from` to `to`, holding each chunk read while the partition is cut.
async fn pump(
    mut from: tokio::net::tcp::ReadHalf<'_>,
    mut to: tokio::net::tcp::WriteHalf<'_>,
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
