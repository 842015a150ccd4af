//! A leader that dies without a word (SIGKILL: no Lease release): the standby takes over once
//! the lease expires, and reconciles what changed meanwhile.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use crate::{
    fault_cluster::{FaultCluster, serial},
    harness::{
        ControlPlaneOptions, Result,
        controller::{CheironProcess, READY_WITHIN},
        wait_for,
    },
};

/// `--lease-duration` of both replicas (the default).
const LEASE_SECONDS: u64 = 15;
/// A standby looks at the Lease every `--retry-period` (2 s by default).
const RETRY_PERIOD: Duration = Duration::from_secs(2);

async fn holder(leases: &Api<Lease>, name: &str) -> Result<Option<String>> {
    Ok(leases
        .get_opt(name)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_leader_is_replaced_by_the_standby_within_the_lease() -> Result {
    let _serial = serial().await;
    let cluster = FaultCluster::start("leader-sigkill", ControlPlaneOptions::default()).await?;
    let s = cluster.scenario();
    let lease_ns = s.create_namespace(&[], &[]).await?;
    let lease_seconds = LEASE_SECONDS.to_string();
    let args = [
        "--leader-election",
        "--leader-election-namespace",
        lease_ns.as_str(),
        "--leader-election-id",
        "cheiron-controller",
        "--lease-duration",
        lease_seconds.as_str(),
    ];
    let host = cluster.host();
    let replicas = [
        CheironProcess::controller_on(&host, "controller-a", &args)?,
        CheironProcess::controller_on(&host, "controller-b", &args)?,
    ];
    for replica in &replicas {
        replica
            .wait_for_admin_status("/readyz", 200, READY_WITHIN)
            .await?;
    }
    let leases: Api<Lease> = Api::namespaced(cluster.client().clone(), &lease_ns);
    let first = wait_for("the Lease to be held", Duration::from_secs(30), || async {
        holder(&leases, "cheiron-controller")
            .await?
            .ok_or_else(|| "no holder".into())
    })
    .await?;
    let leader = replicas
        .iter()
        .position(|r| first.starts_with(&format!("{}-", r.name())))
        .ok_or_else(|| format!("Lease held by {first:?}, neither replica"))?;
    let (leader, standby) = (&replicas[leader], &replicas[1 - leader]);

    s.apply_manager(&cluster.service_account_manager("leader", "pull", "before"))
        .await?;
    let before = cluster.create_target_namespaces(1).await?;
    cluster.until_converged(&before, "pull").await?;

    leader.kill();
    let killed = Instant::now();
    // Work for the new leader, created while nobody leads.
    let after = cluster.create_target_namespaces(3).await?;
    let second = wait_for(
        "the standby to take the Lease",
        Duration::from_secs(LEASE_SECONDS) * 3,
        || async {
            match holder(&leases, "cheiron-controller").await? {
                Some(h) if h != first => Ok(h),
                other => Err(format!("held by {other:?}").into()),
            }
        },
    )
    .await?;
    let takeover = killed.elapsed();
    assert!(
        second.starts_with(&format!("{}-", standby.name())),
        "the standby {} holds the Lease, not {second:?}",
        standby.name()
    );
    let converged = cluster.until_converged(&after, "pull").await?;
    eprintln!(
        "leader SIGKILLed: standby leads after {takeover:.1?} (lease {LEASE_SECONDS} s), \
         namespaces created meanwhile converged {converged:.1?} after that"
    );
    let bound = Duration::from_secs(LEASE_SECONDS) + RETRY_PERIOD + Duration::from_secs(3);
    assert!(
        takeover <= bound,
        "takeover took {takeover:?}, more than the lease plus one retry period ({bound:?})"
    );
    // Counted when a reconcile ends, which may be after the state it wrote is visible.
    wait_for(
        "the new leader to count its reconciles",
        Duration::from_secs(10),
        || async {
            match standby.metric("cheiron_reconcile_runs_total").await? {
                runs if runs > 0.0 => Ok(()),
                runs => Err(format!("{runs} runs").into()),
            }
        },
    )
    .await?;
    Ok(())
}
