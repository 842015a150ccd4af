//! A leader that dies without a word (SIGKILL: no Lease release): the standby takes over once
//! the lease expires, and reconciles what changed meanwhile. A leader cut off from the
//! apiserver (its packets lost, its connections open): it stops leading within the renew
//! deadline, before the standby takes over, so two replicas never act at once.

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

/// The flags of every replica: the Lease `cheiron-controller` in `lease_ns`, held for
/// [`LEASE_SECONDS`].
fn election_args(lease_ns: &str) -> [String; 7] {
    [
        "--leader-election".to_owned(),
        "--leader-election-namespace".to_owned(),
        lease_ns.to_owned(),
        "--leader-election-id".to_owned(),
        "cheiron-controller".to_owned(),
        "--lease-duration".to_owned(),
        LEASE_SECONDS.to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_leader_is_replaced_by_the_standby_within_the_lease() -> Result {
    let _serial = serial().await;
    let cluster = FaultCluster::start("leader-sigkill", ControlPlaneOptions::default()).await?;
    let s = cluster.scenario();
    let lease_ns = s.create_namespace(&[], &[]).await?;
    let args = election_args(&lease_ns);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
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

/// The renew deadline of a [`LEASE_SECONDS`] lease (two thirds of it): a leader that has not
/// renewed for this long stops its work.
const RENEW_DEADLINE: Duration = Duration::from_secs(LEASE_SECONDS * 2 / 3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_apiserver_stops_leading_before_the_standby_takes_over() -> Result
{
    let _serial = serial().await;
    let cluster = FaultCluster::start("leader-partition", ControlPlaneOptions::default()).await?;
    let s = cluster.scenario();
    let lease_ns = s.create_namespace(&[], &[]).await?;
    let args = election_args(&lease_ns);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // The leader-to-be reaches the apiserver only through the partition.
    let (partition, kubeconfig) = cluster.partitioned("partitioned").await?;

    let leader = CheironProcess::controller_on(&cluster.host_as(&kubeconfig), "cut-off", &args)?;
    leader
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let leases: Api<Lease> = Api::namespaced(cluster.client().clone(), &lease_ns);
    let first = wait_for(
        "the first replica to take the Lease",
        Duration::from_secs(30),
        || async {
            match holder(&leases, "cheiron-controller").await? {
                Some(h) if h.starts_with(&format!("{}-", leader.name())) => Ok(h),
                other => Err(format!("held by {other:?}").into()),
            }
        },
    )
    .await?;
    let standby = CheironProcess::controller_on(&cluster.host(), "standby", &args)?;
    standby
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    s.apply_manager(&cluster.service_account_manager("leader", "pull", "before"))
        .await?;
    let before = cluster.create_target_namespaces(1).await?;
    cluster.until_converged(&before, "pull").await?;
    assert_eq!(leader.metric("cheiron_leader").await?, 1.0, "{first} leads");
    assert_eq!(standby.metric("cheiron_leader").await?, 0.0);

    partition.cut();
    let cut = Instant::now();
    // Both sides watched from outside the partition: the leader's gauge on its admin port, the
    // Lease through the test's own connection.
    let (mut stepped_down, mut taken_over) = (None, None);
    while cut.elapsed() < Duration::from_secs(LEASE_SECONDS) * 3
        && (stepped_down.is_none() || taken_over.is_none())
    {
        if stepped_down.is_none() && leader.metric("cheiron_leader").await? == 0.0 {
            stepped_down = Some(cut.elapsed());
        }
        if taken_over.is_none()
            && holder(&leases, "cheiron-controller")
                .await?
                .is_some_and(|h| h.starts_with(&format!("{}-", standby.name())))
        {
            taken_over = Some(cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "leader cut off: stopped leading after {stepped_down:.1?}, the standby led after \
         {taken_over:.1?} (lease {LEASE_SECONDS} s, renew deadline {RENEW_DEADLINE:?})"
    );
    let stepped_down = stepped_down.ok_or_else(|| {
        format!(
            "the cut-off leader still leads {:?} after the cut: its renewal waits for an \
             answer that never comes\n{}",
            cut.elapsed(),
            leader.log_excerpt(20)
        )
    })?;
    let taken_over = taken_over.ok_or("the standby never took the Lease")?;
    assert!(
        stepped_down < taken_over,
        "the cut-off leader stopped after {stepped_down:?}, the standby led after \
         {taken_over:?}: both led at once"
    );
    // The renew deadline, one retry period, and the work's grace to stop.
    let bound = RENEW_DEADLINE + RETRY_PERIOD + Duration::from_secs(3);
    assert!(
        stepped_down <= bound,
        "the cut-off leader stopped after {stepped_down:?}, more than {bound:?}"
    );
    let during = cluster.create_target_namespaces(1).await?;
    cluster.until_converged(&during, "pull").await?;

    // Healed, it stands by: ready, not leading, the Lease left with the new leader.
    partition.heal();
    tokio::time::sleep(RETRY_PERIOD * 2).await;
    leader
        .wait_for_admin_status("/readyz", 200, Duration::from_secs(10))
        .await?;
    assert_eq!(leader.metric("cheiron_leader").await?, 0.0);
    assert!(
        holder(&leases, "cheiron-controller")
            .await?
            .is_some_and(|h| h.starts_with(&format!("{}-", standby.name()))),
        "the Lease stays with the new leader"
    );
    leader.check_running()?;

    // Cut off again, as a standby: SIGTERM still ends it at once, though the apiserver
    // answers none of its looks at the Lease.
    partition.cut();
    tokio::time::sleep(RETRY_PERIOD * 2).await;
    let stopping = Instant::now();
    let exit = leader.stop();
    let stopped = stopping.elapsed();
    assert!(
        exit.is_some_and(|e| e.success()),
        "the cut-off standby exits cleanly on SIGTERM: {exit:?}\n{}",
        leader.log_excerpt(20)
    );
    assert!(
        stopped < Duration::from_secs(5),
        "the cut-off standby took {stopped:?} to exit on SIGTERM"
    );
    Ok(())
}
