//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager), so that only one
//! of several replicas runs the controller; the webhook serves on every replica.

use std::{future::Future, time::Duration};

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio_util::sync::CancellationToken;

/// Why leader election could not start.
#[derive(Debug, thiserror::Error)]
#[error("leader election on Lease {namespace}/{name}: {source}")]
pub struct LeaderError {
    namespace: String,
    name: String,
    source: LeaseManagerError,
}

/// Where the Lease lives and who this replica is.
#[derive(Clone, Debug)]
pub struct LeaderElection {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// This replica's identity (the Pod name in a cluster).
    pub identity: String,
    /// How long a lease is valid without renewal.
    pub lease_duration: Duration,
}

impl LeaderElection {
    /// Runs `work` whenever this replica holds the lease, cancelling its token as soon as the
    /// lease is lost or `shutdown` is cancelled. Returns (releasing the lease) on shutdown or
    /// when `work` ends by itself.
    pub async fn run<F, Fut>(
        self,
        client: Client,
        shutdown: CancellationToken,
        work: F,
    ) -> Result<(), LeaderError>
    where
        F: Fn(CancellationToken) -> Fut,
        Fut: Future<Output = ()>,
    {
        let Self {
            namespace,
            name,
            identity,
            lease_duration,
        } = self;
        let error = |source| LeaderError {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        };
        let seconds = lease_duration.as_secs().max(2);
        let manager = LeaseManagerBuilder::new(client, &name)
            .with_namespace(&namespace)
            .with_identity(&identity)
            .with_duration(seconds)
            .with_grace((seconds / 3).max(1))
            .build()
            .await
            .map_err(error)?;
        let (mut leading, task) = manager.watch().await;
        loop {
            // Wait to become leader.
            while !*leading.borrow_and_update() {
                tokio::select! {
                    changed = leading.changed() => if changed.is_err() { break },
                    () = shutdown.cancelled() => break,
                }
            }
            if shutdown.is_cancelled() || !*leading.borrow() {
                break;
            }
            tracing::info!(lease = %format!("{namespace}/{name}"), identity, "leading");
            let term = shutdown.child_token();
            let stop = term.clone();
            let mut watch = leading.clone();
            let lost = async move {
                while *watch.borrow_and_update() {
                    if watch.changed().await.is_err() {
                        break;
                    }
                }
                stop.cancel();
            };
            let finished = tokio::select! {
                () = work(term.clone()) => true,
                () = lost => false,
            };
            term.cancel();
            // Work that ends by itself while leading has failed: give the lease up and return,
            // rather than restarting it in a loop.
            if shutdown.is_cancelled() || finished {
                break;
            }
            tracing::warn!(lease = %format!("{namespace}/{name}"), identity, "lost the lease; standing by");
        }
        // Dropping the receiver ends the manager's task, which releases the lease.
        drop(leading);
        match task.await {
            Ok(Ok(manager)) => {
                let _ = manager.release().await;
                Ok(())
            }
            Ok(Err(e)) => Err(error(e)),
            Err(_) => Ok(()),
        }
    }
}
