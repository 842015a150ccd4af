//! Two replicas never both act: of two `cheiron controller` processes on one Lease only the
//! holder reconciles, and when it stops (SIGTERM, as in a rolling update) it releases the
//! Lease and the standby takes over within seconds, long before the lease would expire.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use crate::{
    harness::{
        Result,
        controller::{CheironProcess, READY_WITHIN},
    },
    scenario::ControllerScenario,
};

/// `--lease-duration` of both replicas: long, so that a takeover faster than this proves the
/// Lease was released rather than left to expire.
const LEASE_SECONDS: u64 = 15;
/// A released Lease is taken at the standby's next look (every 2 s), plus headroom.
const TAKEOVER_AFTER_RELEASE: Duration = Duration::from_secs(5);
/// How long the standby is watched doing nothing (more than one renewal of the lease).
const STANDBY_SAMPLE: Duration = Duration::from_secs(6);

async fn holder(leases: &Api<Lease>, name: &str) -> Result<Option<String>> {
    Ok(leases
        .get_opt(name)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

#[tokio::test]
async fn only_the_lease_holder_reconciles_and_the_standby_takes_over_when_it_stops() -> Result {
    let s = ControllerScenario::without_shared_controller("leader").await?;
    let lease_ns = s.create_namespace(&[], &[]).await?;
    let lease = s.unique_name("lease");
    let lease_seconds = LEASE_SECONDS.to_string();
    let args = [
        "--leader-election",
        "--leader-election-namespace",
        lease_ns.as_str(),
        "--leader-election-id",
        lease.as_str(),
        "--lease-duration",
        lease_seconds.as_str(),
        "--resync",
        "15",
    ];
    let replicas = [
        CheironProcess::controller(&s.unique_name("replica-a"), &args)?,
        CheironProcess::controller(&s.unique_name("replica-b"), &args)?,
    ];
    for replica in &replicas {
        replica
            .wait_for_admin_status("/readyz", 200, READY_WITHIN)
            .await?;
    }

    let leases: Api<Lease> = Api::namespaced(s.client().clone(), &lease_ns);
    let holder_at_start = s
        .eventually(format!("Lease {lease_ns}/{lease} to be held"), || async {
            holder(&leases, &lease)
                .await?
                .ok_or_else(|| "no holder".into())
        })
        .await?;
    // The identity is `<CHEIRON_POD_NAME>-<pid>`.
    let leader_index = replicas
        .iter()
        .position(|r| holder_at_start.starts_with(&format!("{}-", r.name())))
        .ok_or_else(|| format!("Lease held by {holder_at_start:?}, neither replica"))?;
    let (leader, standby) = (&replicas[leader_index], &replicas[1 - leader_index]);

    let first = s.create_target_namespace(&[], &[]).await?;
    s.apply(&s.cluster_manager(
        "leader",
        "  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: alice-password
",
    ))
    .await?;
    s.until_secret(&first, "docker-hub", |_| Ok(())).await?;
    // The counter moves once the reconcile returns, a moment after its copy is visible.
    s.eventually("the leader to count its reconcile", || async {
        match leader.metric("cheiron_reconcile_runs_total").await? {
            runs if runs > 0.0 => Ok(()),
            runs => Err(format!("the leader reconciles ({runs} runs)").into()),
        }
    })
    .await?;

    let sampled = Instant::now();
    while sampled.elapsed() < STANDBY_SAMPLE {
        let standby_runs = standby.metric("cheiron_reconcile_runs_total").await?;
        let standby_writes = standby.metric("cheiron_secrets_written_total").await?;
        assert_eq!(
            (standby_runs, standby_writes),
            (0.0, 0.0),
            "the standby {} must not act while {} leads",
            standby.name(),
            leader.name()
        );
        assert_eq!(
            holder(&leases, &lease).await?.as_deref(),
            Some(holder_at_start.as_str()),
            "the lease stays with its holder"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for replica in &replicas {
        assert_eq!(
            replica.admin_status("/readyz").await,
            Some(200),
            "{} is ready, leading or standing by",
            replica.name()
        );
    }

    let stopped = Instant::now();
    let exit = leader.stop();
    assert!(
        exit.is_some_and(|e| e.success()),
        "the leader exits cleanly on SIGTERM: {exit:?}\n{}",
        leader.log_excerpt(20)
    );
    let new_holder = s
        .eventually(format!("{} to take the Lease", standby.name()), || async {
            match holder(&leases, &lease).await? {
                Some(h) if h.starts_with(&format!("{}-", standby.name())) => Ok(h),
                other => Err(format!("held by {other:?}").into()),
            }
        })
        .await?;
    let takeover = stopped.elapsed();
    println!(
        "leader election: the standby took the Lease {takeover:?} after SIGTERM to the leader"
    );
    assert!(
        takeover <= TAKEOVER_AFTER_RELEASE,
        "takeover took {takeover:?} with a {LEASE_SECONDS} s lease ({new_holder}): the leader \
         must release the Lease on SIGTERM"
    );

    let second = s.create_target_namespace(&[], &[]).await?;
    s.until_secret(&second, "docker-hub", |_| Ok(()))
        .await
        .map_err(|e| format!("{e}\n{}", standby.log_excerpt(30)))?;
    let standby_runs = standby.metric("cheiron_reconcile_runs_total").await?;
    let standby_writes = standby.metric("cheiron_secrets_written_total").await?;
    assert!(
        standby_runs > 0.0 && standby_writes > 0.0,
        "the new leader reconciles ({standby_runs} runs, {standby_writes} Secrets written)"
    );
    // Ready again once its manager caches have their first list, polled every 100 ms, which
    // can be just after its first writes.
    standby
        .wait_for_admin_status("/readyz", 200, Duration::from_secs(5))
        .await?;
    Ok(())
}
