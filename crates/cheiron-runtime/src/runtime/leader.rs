//! Leader election on a `coordination.k8s.io/v1` Lease, so that only one of several replicas
//! runs the controller; the webhook serves on every replica.
//!
//! The rules are client-go's: every replica looks at the Lease every `retry_period`; a holder
//! that has not renewed for `lease_duration` (measured on this replica's clock, from when it
//! last saw the record change, so clock skew between nodes does not matter) may be replaced;
//! every write carries the `resourceVersion` it read, so two replicas cannot both win. Unlike
//! a sleep-until-expiry design, a standby notices a *released* Lease within one retry period,
//! so a rolling update hands over in seconds; and a leader that cannot renew for
//! `renew_deadline` stops its work before anyone else may take over.

use std::{
    future::Future,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use tokio_util::sync::CancellationToken;

use crate::message::api_error;

/// Where the Lease lives and who this replica is.
#[derive(Clone, Debug)]
pub struct LeaderElection {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// This replica's identity (the Pod name in a cluster).
    pub identity: String,
    /// How long a lease is valid without renewal: a standby takes over after this.
    pub lease_duration: Duration,
}

impl LeaderElection {
    /// How often the Lease is looked at (and renewed while leading).
    fn retry_period(&self) -> Duration {
        (self.lease_duration / 5).clamp(Duration::from_millis(200), Duration::from_secs(2))
    }

    /// How long a leader keeps working without a successful renewal. Shorter than the lease,
    /// so the work has stopped before another replica may take over.
    fn renew_deadline(&self) -> Duration {
        self.lease_duration.mul_f64(2.0 / 3.0)
    }

    /// How long a replica that is shutting down tries to give the Lease up: a third of the
    /// lease, between 1 and 5 seconds. An apiserver that does not answer by then is left to
    /// let the Lease expire (a standby takes over after a whole lease instead of at once).
    fn release_timeout(&self) -> Duration {
        (self.lease_duration / 3).clamp(Duration::from_secs(1), Duration::from_secs(5))
    }
}

/// What this replica last saw of the Lease, and when (on its own clock).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Observed {
    holder: Option<String>,
    renew_time: Option<Timestamp>,
    at: Instant,
}

/// What to do with the Lease as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Take it (or renew it: we hold it).
    Take,
    /// Someone else holds it and has renewed it recently: wait.
    Wait,
}

/// Decides from the Lease as read whether `identity` may write itself into it.
fn step(
    spec: Option<&LeaseSpec>,
    identity: &str,
    observed: &Observed,
    now: Instant,
    lease: Duration,
) -> Step {
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty());
    match holder {
        None => Step::Take,
        Some(h) if h == identity => Step::Take,
        // Held by another: only once it has gone a whole lease without renewing, as seen here.
        Some(_) if now.saturating_duration_since(observed.at) > lease => Step::Take,
        Some(_) => Step::Wait,
    }
}

fn observe(spec: Option<&LeaseSpec>, previous: Option<&Observed>, now: Instant) -> Observed {
    let holder = spec.and_then(|s| s.holder_identity.clone());
    let renew_time = spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
    match previous {
        Some(p) if p.holder == holder && p.renew_time == renew_time => p.clone(),
        _ => Observed {
            holder,
            renew_time,
            at: now,
        },
    }
}

/// The Lease API of one election.
struct LeaseClient {
    api: Api<Lease>,
    election: LeaderElection,
}

impl LeaseClient {
    fn spec(&self, previous: Option<&LeaseSpec>, holding: bool) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let transitions = previous.and_then(|s| s.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.election.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.election.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            acquire_time: if holding {
                previous.and_then(|s| s.acquire_time.clone())
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if holding {
                transitions
            } else {
                transitions + 1
            }),
            ..LeaseSpec::default()
        }
    }

    /// Reads the Lease and writes this replica into it if the rules allow. `Ok(true)` when
    /// this replica holds it afterwards.
    async fn try_acquire_or_renew(&self, observed: &mut Option<Observed>) -> Result<bool, String> {
        let current = self
            .api
            .get_opt(&self.election.name)
            .await
            .map_err(|e| api_error(&e))?;
        let now = Instant::now();
        let Some(lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.election.name.clone()),
                    namespace: Some(self.election.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(None, false)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(api_error(&e)),
            };
        };
        let seen = observe(lease.spec.as_ref(), observed.as_ref(), now);
        let decision = step(
            lease.spec.as_ref(),
            &self.election.identity,
            &seen,
            now,
            self.election.lease_duration,
        );
        *observed = Some(seen);
        if decision == Step::Wait {
            return Ok(false);
        }
        let holding = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.election.identity.as_str());
        let spec = self.spec(lease.spec.as_ref(), holding);
        match self.write(&lease, &spec).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(api_error(&e)),
        }
    }

    /// Writes `spec` into the Lease as read, guarded by the `resourceVersion` read: a
    /// concurrent writer makes it a 409. (A merge patch carrying `metadata.resourceVersion`
    /// is checked like an update, and needs only the `patch` verb on this one Lease.)
    async fn write(&self, read: &Lease, spec: &LeaseSpec) -> Result<Lease, kube::Error> {
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": read.metadata.resource_version},
            "spec": {
                "holderIdentity": spec.holder_identity,
                "leaseDurationSeconds": spec.lease_duration_seconds,
                "acquireTime": spec.acquire_time,
                "renewTime": spec.renew_time,
                "leaseTransitions": spec.lease_transitions,
            },
        });
        self.api
            .patch(
                &self.election.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
    }

    /// [`Self::try_acquire_or_renew`], given up after `within`: the client waits for an
    /// answer as long as its connection stays open, and a connection whose packets are lost
    /// (a partition, a node whose network died) stays open for many minutes.
    async fn attempt(
        &self,
        observed: &mut Option<Observed>,
        within: Duration,
    ) -> Result<bool, String> {
        match tokio::time::timeout(within, self.try_acquire_or_renew(observed)).await {
            Ok(result) => result,
            Err(_) => Err(format!("the apiserver did not answer within {within:?}")),
        }
    }

    /// Gives the Lease up if this replica holds it, so a standby takes over at its next look.
    async fn release(&self) {
        let Ok(Some(lease)) = self.api.get_opt(&self.election.name).await else {
            return;
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.election.identity.as_str()) {
            return;
        }
        let released = LeaseSpec {
            holder_identity: None,
            acquire_time: None,
            renew_time: Some(MicroTime(Timestamp::now())),
            lease_duration_seconds: Some(1),
            ..spec
        };
        match self.write(&lease, &released).await {
            Ok(_) => tracing::info!(identity = self.election.identity, "released the lease"),
            Err(e) => tracing::warn!(error = %api_error(&e), "could not release the lease"),
        }
    }
}

impl LeaderElection {
    /// Runs `work` whenever this replica holds the lease, cancelling its token as soon as the
    /// lease cannot be renewed within the renew deadline or `shutdown` is cancelled. Returns,
    /// releasing the lease, on shutdown or when `work` ends by itself. An apiserver that
    /// cannot be reached is retried every retry period for as long as it takes.
    pub async fn run<F, Fut>(self, client: Client, shutdown: CancellationToken, work: F)
    where
        F: Fn(CancellationToken) -> Fut,
        Fut: Future<Output = ()>,
    {
        let retry = self.retry_period();
        let deadline = self.renew_deadline();
        let leases = LeaseClient {
            api: Api::namespaced(client, &self.namespace),
            election: self.clone(),
        };
        let lease = format!("{}/{}", self.namespace, self.name);
        let mut observed = None;
        let mut failures_in_a_row = 0u32;
        'standing_by: loop {
            // Stand by until this replica takes the lease.
            loop {
                // An attempt the apiserver does not answer neither blocks the shutdown nor
                // keeps this replica from trying again.
                let attempt = tokio::select! {
                    attempt = leases.attempt(&mut observed, deadline) => attempt,
                    () = shutdown.cancelled() => return,
                };
                match attempt {
                    Ok(true) => break,
                    Ok(false) => failures_in_a_row = 0,
                    Err(message) => {
                        // Said on the first failure and every tenth after, not every retry.
                        if failures_in_a_row.is_multiple_of(10) {
                            tracing::warn!(%lease, error = %message, failures = failures_in_a_row + 1, "cannot read or take the lease; retrying");
                        }
                        failures_in_a_row = failures_in_a_row.saturating_add(1);
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(retry) => {}
                    () = shutdown.cancelled() => return,
                }
            }
            tracing::info!(%lease, identity = self.identity, "leading");
            let term = shutdown.child_token();
            let renewing = async {
                let mut renewed = Instant::now();
                loop {
                    tokio::time::sleep(retry).await;
                    // Never past the renew deadline: a renewal the apiserver does not answer
                    // must not keep this replica working once another may take the Lease.
                    let left = deadline.saturating_sub(renewed.elapsed());
                    match leases.attempt(&mut observed, left).await {
                        Ok(true) => renewed = Instant::now(),
                        Ok(false) => return "another replica holds the lease",
                        Err(message) => {
                            tracing::warn!(%lease, error = %message, "cannot renew the lease")
                        }
                    }
                    if renewed.elapsed() > deadline {
                        return "the lease could not be renewed within the renew deadline";
                    }
                }
            };
            let working = work(term.clone());
            tokio::pin!(working);
            let finished = tokio::select! {
                () = &mut working => true,
                why = renewing => {
                    tracing::warn!(%lease, identity = self.identity, why, "stepping down");
                    // Let the work stop gracefully, but only for part of the time left
                    // before another replica may take the lease.
                    term.cancel();
                    let grace = self.lease_duration.saturating_sub(deadline) / 2;
                    if tokio::time::timeout(grace, &mut working).await.is_err() {
                        tracing::warn!(%lease, "work did not stop in time; dropped");
                    }
                    false
                }
            };
            term.cancel();
            if shutdown.is_cancelled() || finished {
                // Work that ends by itself while leading has failed: give the lease up and
                // return, rather than restarting it in a loop.
                break 'standing_by;
            }
            tokio::select! {
                () = tokio::time::sleep(retry) => {}
                () = shutdown.cancelled() => break 'standing_by,
            }
        }
        let within = self.release_timeout();
        if tokio::time::timeout(within, leases.release())
            .await
            .is_err()
        {
            tracing::warn!(%lease, ?within, "could not release the lease in time; it expires by itself");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(15);

    fn held_by(holder: &str, renewed: &str) -> Result<LeaseSpec, Box<dyn std::error::Error>> {
        Ok(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            renew_time: Some(MicroTime(renewed.parse()?)),
            ..LeaseSpec::default()
        })
    }

    #[test]
    fn a_free_or_released_lease_is_taken_at_once() -> Result<(), Box<dyn std::error::Error>> {
        let now = Instant::now();
        let released = LeaseSpec {
            holder_identity: Some(String::new()),
            ..LeaseSpec::default()
        };
        for spec in [None, Some(&released), Some(&LeaseSpec::default())] {
            let seen = observe(spec, None, now);
            assert_eq!(step(spec, "me", &seen, now, LEASE), Step::Take, "{spec:?}");
        }
        Ok(())
    }

    #[test]
    fn another_holder_is_replaced_only_after_a_whole_lease_without_renewal_seen_here()
    -> Result<(), Box<dyn std::error::Error>> {
        let start = Instant::now();
        let spec = held_by("other", "2026-01-01T00:00:00Z")?;
        let seen = observe(Some(&spec), None, start);
        assert_eq!(step(Some(&spec), "me", &seen, start, LEASE), Step::Wait);
        let later = start + LEASE - Duration::from_secs(1);
        let still = observe(Some(&spec), Some(&seen), later);
        assert_eq!(
            still.at, start,
            "an unchanged record keeps its first sighting"
        );
        assert_eq!(step(Some(&spec), "me", &still, later, LEASE), Step::Wait);
        let expired = start + LEASE + Duration::from_secs(1);
        assert_eq!(step(Some(&spec), "me", &still, expired, LEASE), Step::Take);
        // A renewal seen just before expiry restarts the clock, whatever the record's own
        // timestamps say (the holder's clock may be skewed).
        let renewed = held_by("other", "2025-01-01T00:00:00Z")?;
        let seen_again = observe(Some(&renewed), Some(&still), later);
        assert_eq!(seen_again.at, later);
        assert_eq!(
            step(Some(&renewed), "me", &seen_again, expired, LEASE),
            Step::Wait
        );
        Ok(())
    }

    #[test]
    fn the_holder_renews_its_own_lease() -> Result<(), Box<dyn std::error::Error>> {
        let now = Instant::now();
        let spec = held_by("me", "2026-01-01T00:00:00Z")?;
        let seen = observe(Some(&spec), None, now);
        assert_eq!(step(Some(&spec), "me", &seen, now, LEASE), Step::Take);
        Ok(())
    }

    #[test]
    fn the_work_stops_before_another_replica_may_take_over() {
        let election = LeaderElection {
            namespace: "ns".into(),
            name: "lease".into(),
            identity: "me".into(),
            lease_duration: LEASE,
        };
        assert!(election.renew_deadline() + election.retry_period() < election.lease_duration);
        assert!(election.retry_period() <= Duration::from_secs(2));
        // Shutting down, the Lease is given up within a third of the lease, 1 to 5 seconds.
        assert_eq!(election.release_timeout(), Duration::from_secs(5));
        for (lease, release) in [(1, 1), (6, 2), (60, 5)] {
            let election = LeaderElection {
                lease_duration: Duration::from_secs(lease),
                ..election.clone()
            };
            assert_eq!(election.release_timeout(), Duration::from_secs(release));
        }
    }

    #[tokio::test]
    async fn a_leader_that_cannot_renew_stops_its_work_before_the_lease_could_pass_on() {
        use std::sync::Mutex;

        use crate::runtime::fake_api::{FakeApi, reply, status};

        const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";
        // The Lease is created, then every later request fails (the apiserver is gone).
        let fake = FakeApi::new(vec![
            reply(
                "GET",
                &format!("{LEASES}/lease"),
                404,
                status(404, "NotFound"),
            ),
            reply(
                "POST",
                LEASES,
                201,
                serde_json::json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": "lease", "namespace": "ns", "resourceVersion": "1"},
                }),
            ),
        ]);
        let election = LeaderElection {
            namespace: "ns".into(),
            name: "lease".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(1),
        };
        let deadline = election.renew_deadline();
        let shutdown = CancellationToken::new();
        let worked: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
        let started = Instant::now();
        let run = election.run(fake.client(), shutdown.clone(), |term| {
            let worked = &worked;
            async move {
                let began = Instant::now();
                term.cancelled().await;
                if let Ok(mut w) = worked.lock() {
                    w.push(began.elapsed());
                }
            }
        });
        let stop = async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            shutdown.cancel();
        };
        tokio::join!(run, stop);
        let worked = worked.lock().map(|w| w.clone()).unwrap_or_default();
        assert_eq!(worked.len(), 1, "led once, then stood by: {worked:?}");
        assert!(
            worked[0] >= deadline && worked[0] < Duration::from_secs(1),
            "stepped down after the renew deadline ({deadline:?}) and before the lease \
             (1 s) could expire: worked {:?}",
            worked[0]
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
