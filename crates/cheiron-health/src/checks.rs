//! The registry checks of the managers' credentials (docs/credential-health.md): the
//! controller's [`Health`] seam. One check per distinct (registry, credential), however many
//! managers and namespaces hold it: when it first appears (a new or rotated credential), then
//! every `interval` (spread per credential), at most `concurrency` at once, and a registry that
//! gave no answer is asked again on a backoff of its own.
//!
//! ```text
//!   reconcile ── observe(manager, Secrets) ──► credentials (by hash of host, user, password)
//!      ▲                                           │ due now or at next
//!      │ on_change(manager)                        ▼
//!      └──────── a result changed ◄──── run(): at most `concurrency` checks ──► registry
//! ```
//!
//! Nothing here blocks a reconcile: [`Checks::observe`] answers from memory.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use cheiron_controller::{Health, HealthReport, OnChange};
use cheiron_core::{
    api::{PullFailure, PullFailures},
    content::{desired::DesiredSecret, logins},
    health::{Allowance, CheckResult, CredentialCheck},
    policy::{ManagerId, ManagerKind},
    registry::{DOCKER_HUB_API_HOST, RegistryKey},
};
use cheiron_runtime::metrics::{AllowanceLabels, CheckedKindLabels, Metrics};
use futures::{FutureExt, future::BoxFuture};
use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use tokio::{sync::Notify, task::JoinSet, time::Instant};

use crate::registry::{Credential, RegistryClient, Target, Verdict};

/// How often each credential is checked again (`--registry-check-interval`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(6 * 3600);
/// Most checks at once (`--registry-check-concurrency`).
pub const DEFAULT_CONCURRENCY: usize = 4;
/// The first wait before asking a registry that gave no answer again; it doubles per
/// failure, up to the interval.
pub const FIRST_RETRY: Duration = Duration::from_secs(30);
/// How long a refused pull counts in a manager's `status.pullFailures`.
pub const PULL_FAILURE_WINDOW: Duration = Duration::from_secs(3600);
/// Refused pulls remembered per manager (the count says how many there were).
pub const MAX_PULL_FAILURES_KEPT: usize = 1000;
/// Refused pulls listed in a manager's status.
pub const PULL_FAILURES_LISTED: usize = 5;
/// At most one Warning Event per manager and registry in this time, however many Pods fail.
pub const PULL_FAILURE_EVENT_WINDOW: Duration = Duration::from_secs(600);

/// Most registry keys checked per manager (the bound of `status.credentials`); the rest are
/// reported `Unchecked`.
pub const MAX_CHECKS_PER_MANAGER: usize = 64;

/// Whom the checks serve, and how often.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Check every manager, not only those whose `spec.verify` is `Registry`.
    pub all_managers: bool,
    /// How often a credential is checked again.
    pub interval: Duration,
    /// Most checks at once.
    pub concurrency: usize,
    /// Registry hosts (globs, `host` or `host:port`) the checks may contact. Empty: any host
    /// for cluster managers, and none for namespaced ones, whose tenants must not make the
    /// controller probe hosts of their choosing.
    pub hosts: Vec<String>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            all_managers: false,
            interval: DEFAULT_INTERVAL,
            concurrency: DEFAULT_CONCURRENCY,
            hosts: Vec::new(),
        }
    }
}

/// What asks a registry: the HTTPS client, or a fake in unit tests.
pub trait Checker: Send + Sync {
    /// Checks `credential` with `target`.
    fn check<'a>(
        &'a self,
        target: &'a Target,
        credential: &'a Credential,
    ) -> BoxFuture<'a, Verdict>;
}

impl Checker for RegistryClient {
    fn check<'a>(
        &'a self,
        target: &'a Target,
        credential: &'a Credential,
    ) -> BoxFuture<'a, Verdict> {
        RegistryClient::check(self, target, credential).boxed()
    }
}

/// The distinct credential a check is for: a hash, so no map key holds a password.
type Key = [u8; 32];

/// One registry key of one of a manager's Secrets.
#[derive(Clone, Debug)]
struct Use {
    secret: String,
    registry: String,
    /// `Err`: why it is not checked.
    key: Result<Key, String>,
}

/// What a check found.
#[derive(Clone, Debug, PartialEq)]
struct Outcome {
    result: CheckResult,
    message: Option<String>,
    allowance: Option<Allowance>,
    at: Timestamp,
}

struct Tracked {
    target: Target,
    credential: Credential,
    outcome: Option<Outcome>,
    due: Instant,
    running: bool,
}

#[derive(Default)]
struct State {
    credentials: HashMap<Key, Tracked>,
    managers: HashMap<ManagerId, Vec<Use>>,
    /// Registries that gave no answer: failures in a row, and when they may be asked again.
    unreachable: HashMap<String, (u32, Instant)>,
    /// Each manager's rejected credentials at its last report, summed per kind in the gauge.
    rejected: HashMap<ManagerId, usize>,
    /// Pulls refused with each manager's credentials, newest last, within
    /// [`PULL_FAILURE_WINDOW`].
    pulls: HashMap<ManagerId, VecDeque<(Instant, PullFailure)>>,
    /// When a manager last got a Warning Event for a registry's refusals.
    warned: HashMap<(ManagerId, String), Instant>,
}

struct Inner {
    options: CheckOptions,
    checker: Arc<dyn Checker>,
    metrics: Option<Arc<Metrics>>,
    state: Mutex<State>,
    wake: Notify,
    on_change: Mutex<Option<OnChange>>,
}

/// The registry checks; cheap to clone.
#[derive(Clone)]
pub struct Checks {
    inner: Arc<Inner>,
}

impl Checks {
    /// Checks asking registries through `checker`; nothing runs until [`Checks::run`].
    pub fn new(
        options: CheckOptions,
        checker: Arc<dyn Checker>,
        metrics: Option<Arc<Metrics>>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                options,
                checker,
                metrics,
                state: Mutex::new(State::default()),
                wake: Notify::new(),
                on_change: Mutex::new(None),
            }),
        }
    }

    /// Runs the checks that are due, for ever (until the task is aborted).
    pub async fn run(self) {
        let concurrency = self.inner.options.concurrency.max(1);
        let mut running: JoinSet<(Key, String, Verdict)> = JoinSet::new();
        // Checks a previous run (an earlier term as leader) left unfinished start again.
        for tracked in self.state().credentials.values_mut() {
            tracked.running = false;
        }
        loop {
            let next = self.start_due(&mut running, concurrency);
            let sleep = next.map_or(self.inner.options.interval, |at| {
                at.saturating_duration_since(Instant::now())
            });
            tokio::select! {
                Some(done) = running.join_next(), if !running.is_empty() => {
                    if let Ok((key, host, verdict)) = done {
                        self.record(key, &host, verdict);
                    }
                }
                () = self.inner.wake.notified() => {}
                () = tokio::time::sleep(sleep) => {}
            }
        }
    }

    /// Starts the due checks while fewer than `concurrency` run; returns when the next one is
    /// due.
    fn start_due(
        &self,
        running: &mut JoinSet<(Key, String, Verdict)>,
        concurrency: usize,
    ) -> Option<Instant> {
        let now = Instant::now();
        let mut state = self.state();
        let State {
            credentials,
            unreachable,
            ..
        } = &mut *state;
        let mut due: Vec<(&Key, &mut Tracked)> =
            credentials.iter_mut().filter(|(_, t)| !t.running).collect();
        due.sort_by_key(|(_, t)| t.due);
        let mut next = None;
        for (key, tracked) in due {
            let held = unreachable
                .get(&tracked.target.host)
                .map_or(tracked.due, |(_, until)| (*until).max(tracked.due));
            if held > now {
                next = Some(next.map_or(held, |n: Instant| n.min(held)));
                continue;
            }
            if running.len() >= concurrency {
                // Started when a running check ends.
                continue;
            }
            tracked.running = true;
            let (key, target, credential) =
                (*key, tracked.target.clone(), tracked.credential.clone());
            let checker = self.inner.checker.clone();
            running.spawn(async move {
                let verdict = checker.check(&target, &credential).await;
                (key, target.host, verdict)
            });
        }
        next
    }

    /// Keeps what a check found, schedules the next, and tells the managers holding the
    /// credential when it changed.
    fn record(&self, key: Key, host: &str, verdict: Verdict) {
        let now = Instant::now();
        let (result, message, allowance) = match verdict {
            Verdict::Accepted { allowance } => (CheckResult::Accepted, None, allowance),
            Verdict::Rejected { detail } => (CheckResult::Rejected, Some(detail), None),
            Verdict::Unreachable { detail } => (CheckResult::Unreachable, Some(detail), None),
        };
        if let Some(metrics) = &self.inner.metrics {
            metrics.health.record_check(match result {
                CheckResult::Accepted => "accepted",
                CheckResult::Rejected => "rejected",
                _ => "unreachable",
            });
        }
        let interval = self.inner.options.interval;
        let changed: Vec<ManagerId> = {
            let mut state = self.state();
            let due = if result == CheckResult::Unreachable {
                let (failures, until) =
                    state.unreachable.entry(host.to_owned()).or_insert((0, now));
                // One round of failures (the registry's credentials checked together) counts
                // once: the wait doubles per round, not per credential.
                if now >= *until {
                    let wait = FIRST_RETRY
                        .saturating_mul(1u32 << (*failures).min(16))
                        .min(interval);
                    *failures = failures.saturating_add(1);
                    *until = now + wait;
                }
                *until
            } else {
                state.unreachable.remove(host);
                now + spread(interval, &key)
            };
            let Some(tracked) = state.credentials.get_mut(&key) else {
                // No manager holds it any more.
                return;
            };
            tracked.running = false;
            tracked.due = due;
            let outcome = Outcome {
                result,
                message,
                allowance,
                at: Timestamp::now(),
            };
            let same = tracked.outcome.as_ref().is_some_and(|o| {
                o.result == outcome.result
                    && o.message == outcome.message
                    && o.allowance == outcome.allowance
            });
            tracing::debug!(
                host,
                result = result.as_str(),
                changed = !same,
                "registry check"
            );
            tracked.outcome = Some(outcome);
            if same {
                return;
            }
            state
                .managers
                .iter()
                .filter(|(_, uses)| uses.iter().any(|u| u.key.as_ref() == Ok(&key)))
                .map(|(id, _)| id.clone())
                .collect()
        };
        // The check time changes every time; the managers read it in their next reconcile,
        // asked for at once only when the result itself changed or was new.
        self.notify(&changed);
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The uses of one manager's Secrets: each registry key of each Secret with content.
    fn uses(
        &self,
        manager: &ManagerId,
        secrets: &[DesiredSecret],
    ) -> Vec<(Use, Option<(Target, Credential)>)> {
        let mut out = Vec::new();
        for secret in secrets {
            let Some(content) = &secret.content else {
                continue;
            };
            let Ok(logins) = logins::logins(content) else {
                continue;
            };
            for login in logins {
                let mut entry = Use {
                    secret: secret.name.clone(),
                    registry: login.key.clone(),
                    key: Err(String::new()),
                };
                if out.len() >= MAX_CHECKS_PER_MANAGER {
                    entry.key = Err(format!(
                        "not checked: at most {MAX_CHECKS_PER_MANAGER} registry keys per manager are"
                    ));
                    out.push((entry, None));
                    continue;
                }
                match self.target(manager, &login.key) {
                    Ok(target) => {
                        let credential = Credential {
                            username: login.username,
                            password: login.password,
                        };
                        entry.key = Ok(key_of(&target, &credential));
                        out.push((entry, Some((target, credential))));
                    }
                    Err(why) => {
                        entry.key = Err(why);
                        out.push((entry, None));
                    }
                }
            }
        }
        out
    }

    /// The registry a key is checked at, or why it is not.
    fn target(&self, manager: &ManagerId, raw: &str) -> Result<Target, String> {
        let key = RegistryKey::parse(raw);
        let Some(host) = key.host() else {
            return Err("not checked: the kubelet skips this key".to_owned());
        };
        if host.contains(['*', '?', '[']) {
            return Err("not checked: a wildcard key names no single registry".to_owned());
        }
        let target = if key.is_docker_hub() {
            Target {
                host: DOCKER_HUB_API_HOST.to_owned(),
                docker_hub: true,
            }
        } else {
            Target {
                host: host.to_owned(),
                docker_hub: false,
            }
        };
        let hosts = &self.inner.options.hosts;
        let allowed = if hosts.is_empty() {
            manager.kind == ManagerKind::Cluster
        } else {
            hosts
                .iter()
                .any(|glob| wildmatch::WildMatch::new(glob).matches(&target.host))
        };
        if !allowed {
            return Err(if hosts.is_empty() {
                "not checked: a namespaced manager's registries are checked only when listed in --registry-check-hosts".to_owned()
            } else {
                format!(
                    "not checked: {} is not in --registry-check-hosts",
                    target.host
                )
            });
        }
        Ok(target)
    }

    fn report(state: &State, uses: &[Use]) -> Vec<CredentialCheck> {
        uses.iter()
            .map(|u| {
                let outcome = u
                    .key
                    .as_ref()
                    .ok()
                    .and_then(|k| state.credentials.get(k))
                    .and_then(|t| t.outcome.clone());
                match (&u.key, outcome) {
                    (Err(why), _) => CredentialCheck {
                        secret: u.secret.clone(),
                        registry: u.registry.clone(),
                        result: CheckResult::Unchecked,
                        checked_at: None,
                        message: Some(why.clone()),
                        allowance: None,
                    },
                    (Ok(_), None) => CredentialCheck {
                        secret: u.secret.clone(),
                        registry: u.registry.clone(),
                        result: CheckResult::Pending,
                        checked_at: None,
                        message: None,
                        allowance: None,
                    },
                    (Ok(_), Some(o)) => CredentialCheck {
                        secret: u.secret.clone(),
                        registry: u.registry.clone(),
                        result: o.result,
                        checked_at: Some(Time(o.at)),
                        message: o.message,
                        allowance: o.allowance,
                    },
                }
            })
            .collect()
    }

    /// Sets the gauges from a manager's report.
    fn gauges(&self, manager: &ManagerId, report: &[CredentialCheck], previous: &[Use]) {
        let Some(metrics) = &self.inner.metrics else {
            return;
        };
        let name = manager_label(manager);
        let rejected = report
            .iter()
            .filter(|c| c.result == CheckResult::Rejected)
            .count();
        let of_kind = {
            let mut state = self.state();
            if rejected == 0 {
                state.rejected.remove(manager);
            } else {
                state.rejected.insert(manager.clone(), rejected);
            }
            state
                .rejected
                .iter()
                .filter(|(id, _)| id.kind == manager.kind)
                .map(|(_, n)| n)
                .sum::<usize>()
        };
        metrics
            .health
            .rejected
            .get_or_create(&CheckedKindLabels {
                manager_kind: manager.kind.as_str(),
            })
            .set(i64::try_from(of_kind).unwrap_or(i64::MAX));
        for old in previous {
            let labels = AllowanceLabels {
                registry: old.registry.clone(),
                entry: format!("{name}/{}", old.secret),
            };
            metrics.health.pulls_remaining.remove(&labels);
            metrics.health.pulls_limit.remove(&labels);
        }
        for check in report {
            if let Some(Allowance::Limited {
                limit, remaining, ..
            }) = check.allowance
            {
                let labels = AllowanceLabels {
                    registry: check.registry.clone(),
                    entry: format!("{name}/{}", check.secret),
                };
                metrics
                    .health
                    .pulls_remaining
                    .get_or_create(&labels)
                    .set(i64::try_from(remaining).unwrap_or(i64::MAX));
                metrics
                    .health
                    .pulls_limit
                    .get_or_create(&labels)
                    .set(i64::try_from(limit).unwrap_or(i64::MAX));
            }
        }
    }
}

impl Health for Checks {
    fn on_change(&self, changed: OnChange) {
        let mut slot = self
            .inner
            .on_change
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = Some(changed);
    }

    fn observe(
        &self,
        manager: &ManagerId,
        verify: bool,
        secrets: &[DesiredSecret],
    ) -> HealthReport {
        let pull_failures = self.pull_failures(manager);
        if !(verify || self.inner.options.all_managers) {
            self.forget_checks(manager);
            return HealthReport {
                checks: Vec::new(),
                pull_failures,
            };
        }
        let uses = self.uses(manager, secrets);
        let (report, previous, new) = {
            let mut state = self.state();
            let mut new = false;
            for (u, fresh) in &uses {
                if let (Ok(key), Some((target, credential))) = (&u.key, fresh) {
                    state.credentials.entry(*key).or_insert_with(|| {
                        new = true;
                        Tracked {
                            target: target.clone(),
                            credential: credential.clone(),
                            outcome: None,
                            due: Instant::now(),
                            running: false,
                        }
                    });
                }
            }
            let uses: Vec<Use> = uses.into_iter().map(|(u, _)| u).collect();
            let previous = state
                .managers
                .insert(manager.clone(), uses.clone())
                .unwrap_or_default();
            collect_garbage(&mut state);
            (Self::report(&state, &uses), previous, new)
        };
        self.gauges(manager, &report, &previous);
        if new {
            self.inner.wake.notify_one();
        }
        HealthReport {
            checks: report,
            pull_failures,
        }
    }

    fn forget(&self, manager: &ManagerId) {
        {
            let mut state = self.state();
            state.pulls.remove(manager);
            state.warned.retain(|(id, _), _| id != manager);
        }
        self.forget_checks(manager);
    }
}

impl Checks {
    /// Stops checking a manager's credentials.
    fn forget_checks(&self, manager: &ManagerId) {
        let previous = {
            let mut state = self.state();
            let previous = state.managers.remove(manager);
            collect_garbage(&mut state);
            previous
        };
        if let Some(previous) = previous {
            self.gauges(manager, &[], &previous);
        }
    }
}

impl Checks {
    /// Records a pull the registry refused with `manager`'s credential (docs/credential-health.md,
    /// "Pull failures") and asks for the manager's reconcile. Returns true when the manager
    /// should get a Warning Event for this registry: at most one per
    /// [`PULL_FAILURE_EVENT_WINDOW`].
    pub fn pull_refused(&self, manager: &ManagerId, failure: PullFailure) -> bool {
        let now = Instant::now();
        let warn = {
            let mut state = self.state();
            let key = (manager.clone(), failure.registry.clone());
            let warn = state
                .warned
                .get(&key)
                .is_none_or(|at| now.duration_since(*at) >= PULL_FAILURE_EVENT_WINDOW);
            if warn {
                state.warned.insert(key, now);
            }
            let list = state.pulls.entry(manager.clone()).or_default();
            list.push_back((now, failure));
            while list.len() > MAX_PULL_FAILURES_KEPT {
                list.pop_front();
            }
            warn
        };
        self.notify(std::slice::from_ref(manager));
        warn
    }

    /// Asks for the reconcile of `managers` through the callback the controller gave.
    fn notify(&self, managers: &[ManagerId]) {
        let callback = self
            .inner
            .on_change
            .lock()
            .map(|c| c.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone());
        if let Some(callback) = callback {
            for id in managers {
                callback(id);
            }
        }
    }

    /// The manager's refused pulls within the window, newest first; `None` when there are none.
    fn pull_failures(&self, manager: &ManagerId) -> Option<PullFailures> {
        let now = Instant::now();
        let mut state = self.state();
        let list = state.pulls.get_mut(manager)?;
        while list
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) >= PULL_FAILURE_WINDOW)
        {
            list.pop_front();
        }
        if list.is_empty() {
            state.pulls.remove(manager);
            return None;
        }
        Some(PullFailures {
            count: i64::try_from(list.len()).unwrap_or(i64::MAX),
            recent: list
                .iter()
                .rev()
                .take(PULL_FAILURES_LISTED)
                .map(|(_, f)| f.clone())
                .collect(),
        })
    }
}

/// Drops the credentials no manager holds any more (a running check's answer is then
/// dropped too).
fn collect_garbage(state: &mut State) {
    let held: HashSet<Key> = state
        .managers
        .values()
        .flatten()
        .filter_map(|u| u.key.as_ref().ok().copied())
        .collect();
    state.credentials.retain(|k, _| held.contains(k));
}

/// The hash naming one (registry, credential).
fn key_of(target: &Target, credential: &Credential) -> Key {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [
        target.host.as_bytes(),
        &[u8::from(target.docker_hub)],
        credential.username.as_bytes(),
        credential.password.as_bytes(),
    ] {
        context.update(&u64::try_from(part.len()).unwrap_or(u64::MAX).to_be_bytes());
        context.update(part);
    }
    let mut key = [0u8; 32];
    key.copy_from_slice(context.finish().as_ref());
    key
}

/// `interval` spread by up to ±10 % per credential, so that credentials first seen together
/// (a controller's start) are not checked again together.
fn spread(interval: Duration, key: &Key) -> Duration {
    interval.mul_f64(0.9 + f64::from(key[0]) / 255.0 * 0.2)
}

fn manager_label(id: &ManagerId) -> String {
    match &id.namespace {
        Some(ns) => format!("{ns}/{}", id.name),
        None => id.name.clone(),
    }
}

#[cfg(test)]
#[path = "checks_tests.rs"]
mod tests;
