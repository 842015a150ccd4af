//! One shared credential and the task that keeps it fresh: the plugin is called at
//! [`REFRESH_FRACTION`] of the credential's life (spread by ±[`JITTER`]), never less than
//! [`MIN_REFRESH`] apart; on failure the last good credential is kept and the call retried from
//! [`FIRST_RETRY`], doubling to [`MAX_RETRY`], waking at the expiry to report it. The managers
//! that use the credential are told whenever what a lookup returns changes. Lookups never wait
//! for a call: before the first answer they say the credential is pending. At most
//! `--credential-provider-max-concurrent` calls run at once, over all keys.

use std::{
    collections::BTreeSet,
    hash::{Hash, Hasher},
    path::PathBuf,
    sync::{Arc, Mutex, Weak},
    time::{Duration, SystemTime},
};

use cheiron_core::policy::ManagerId;
use cheiron_runtime::metrics::Metrics;

use crate::{
    config::Provider,
    exec::{self, ExecLimits},
    lookup::{Credential, Key, Lookup, seconds},
    token,
};

/// A credential is refreshed after this fraction of its life.
pub const REFRESH_FRACTION: f64 = 0.5;
/// Refresh times are spread by up to ± this fraction, so keys fetched together drift apart.
pub const JITTER: f64 = 0.1;
/// Never call a plugin for one key more often than this.
pub const MIN_REFRESH: Duration = Duration::from_secs(1);
/// A credential the plugin says not to cache (`cacheDuration: 0s`) is fetched again this often.
pub const NO_CACHE_REFRESH: Duration = Duration::from_secs(60);
/// First retry after a failed call.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Longest wait between retries.
pub const MAX_RETRY: Duration = Duration::from_secs(60);

/// When to call a plugin again.
#[derive(Clone, Copy, Debug)]
pub struct RefreshPolicy {
    /// Fraction of the life after which to refresh.
    pub fraction: f64,
    /// First retry after a failure.
    pub first_retry: Duration,
    /// Longest retry interval.
    pub max_retry: Duration,
}

impl Default for RefreshPolicy {
    fn default() -> Self {
        Self {
            fraction: REFRESH_FRACTION,
            first_retry: FIRST_RETRY,
            max_retry: MAX_RETRY,
        }
    }
}

impl RefreshPolicy {
    /// When to refresh a credential living `life`, fetched for the `n`th time.
    pub fn refresh_after(&self, key: &Key, n: u64, life: Duration) -> Duration {
        if life.is_zero() {
            return NO_CACHE_REFRESH;
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (key, n).hash(&mut hasher);
        let spread = (hasher.finish() % 2001) as f64 / 1000.0 - 1.0; // [-1, 1]
        life.mul_f64(self.fraction * (1.0 + JITTER * spread))
            .max(MIN_REFRESH)
    }

    /// The wait before retry number `failures` (from 1).
    pub fn retry_after(&self, failures: u32) -> Duration {
        self.first_retry
            .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
            .min(self.max_retry)
    }
}

/// What the refresh tasks call plugins with.
pub(crate) struct Calls {
    /// Where the plugins are.
    pub(crate) bin_dir: PathBuf,
    /// Bounds of each run.
    pub(crate) limits: ExecLimits,
    /// When to refresh.
    pub(crate) policy: RefreshPolicy,
    /// Permits for plugin calls: `--credential-provider-max-concurrent` of them.
    pub(crate) running: Arc<tokio::sync::Semaphore>,
    /// Mints service-account tokens.
    pub(crate) client: Option<kube::Client>,
    pub(crate) metrics: Option<Arc<Metrics>>,
}

/// What a slot's refresh task needs of the providers that started it. The task holds it
/// weakly: once the providers are gone, it stops.
pub(crate) trait Host: Send + Sync + 'static {
    /// How plugins are called.
    fn calls(&self) -> &Calls;
    /// Tells `managers` that what their lookups return changed.
    fn notify(&self, managers: &[ManagerId]);
    /// A credential's expiry may have changed (the expiry metric).
    fn expiry_changed(&self);
}

#[derive(Default)]
struct State {
    good: Option<Credential>,
    error: Option<String>,
    answered: bool,
    subscribers: BTreeSet<ManagerId>,
}

/// One key's credential and refresh task.
pub(super) struct Slot {
    key: Key,
    state: Mutex<State>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Slot {
    /// A slot for `key` used by `manager`, with its refresh task running. `manager` subscribes
    /// before the task starts, so it is told of the first answer however soon that comes.
    pub(super) fn start(
        host: Weak<dyn Host>,
        key: Key,
        provider: Provider,
        manager: &ManagerId,
    ) -> Arc<Self> {
        let slot = Arc::new(Self {
            key,
            state: Mutex::default(),
            task: Mutex::new(None),
        });
        slot.subscribe(manager);
        let task = tokio::spawn(run(host, Arc::downgrade(&slot), provider));
        if let Ok(mut handle) = slot.task.lock() {
            *handle = Some(task.abort_handle());
        }
        slot
    }

    pub(super) fn provider(&self) -> &str {
        &self.key.provider
    }

    pub(super) fn subscribe(&self, manager: &ManagerId) {
        if let Ok(mut s) = self.state.lock() {
            s.subscribers.insert(manager.clone());
        }
    }

    pub(super) fn unsubscribe(&self, manager: &ManagerId) {
        if let Ok(mut s) = self.state.lock() {
            s.subscribers.remove(manager);
        }
    }

    pub(super) fn stop(&self) {
        if let Some(task) = self.task.lock().ok().and_then(|mut t| t.take()) {
            task.abort();
        }
    }

    pub(super) fn expires_at(&self) -> Option<SystemTime> {
        self.state
            .lock()
            .ok()
            .and_then(|s| s.good.as_ref().and_then(|c| c.expires_at))
    }

    /// What a lookup returns now; never waits for the plugin.
    pub(super) fn lookup(&self, now: SystemTime) -> Lookup {
        let provider = self.key.provider.clone();
        let Ok(state) = self.state.lock() else {
            return Lookup::Failed {
                provider,
                message: "internal error: credential state unavailable".to_owned(),
                expired_at: None,
            };
        };
        match &state.good {
            Some(good) if !good.is_expired(now) => Lookup::Ready {
                provider,
                credential: good.clone(),
                failing: state.error.clone(),
            },
            None if state.error.is_none() && !state.answered => Lookup::Pending {
                message: format!(
                    "waiting for the first answer of plugin {provider}; existing copies are kept"
                ),
                provider,
            },
            good => {
                let expired_at = good.as_ref().and_then(|g| g.expires_at);
                let why = match &state.error {
                    Some(e) => e.clone(),
                    None => format!("plugin {provider}'s credential expired"),
                };
                let message = match expired_at {
                    Some(t) => format!(
                        "{why}; the last good credential expired {}s ago; existing copies are kept",
                        seconds(now.duration_since(t).unwrap_or_default())
                    ),
                    None => format!("{why}; existing copies are kept"),
                };
                Lookup::Failed {
                    provider,
                    message,
                    expired_at,
                }
            }
        }
    }

    fn subscribers(&self) -> Vec<ManagerId> {
        self.state
            .lock()
            .map(|s| s.subscribers.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Calls the plugin once for `key`, minting a service-account token first if it wants one.
async fn fetch(calls: &Calls, key: &Key, provider: &Provider) -> Result<Credential, String> {
    let mut request = exec::Request {
        image: key.image.clone(),
        ..exec::Request::default()
    };
    if let (Some(attributes), Some((namespace, name))) =
        (&provider.token_attributes, &key.service_account)
    {
        let client = calls
            .client
            .clone()
            .ok_or("no Kubernetes client to mint a service-account token")?;
        let minted = token::mint(client, namespace, name, attributes)
            .await
            .map_err(|e| e.to_string())?;
        request.service_account_token = Some(minted.token);
        request.service_account_annotations = minted.annotations;
    }
    let started = SystemTime::now();
    let response = exec::call(provider, &calls.bin_dir, &request, calls.limits)
        .await
        .map_err(|e| e.to_string())?;
    if let (Some(attributes), Some(token)) =
        (&provider.token_attributes, &request.service_account_token)
        && attributes.cache_type != "Token"
        && response.auth.iter().any(|a| &a.password == token)
    {
        // The kubelet's rule: a plugin may echo the token as the password only with
        // cacheType Token.
        return Err(format!(
            "plugin {} returned the service-account token as a password, which only \
             cacheType Token allows",
            provider.name
        ));
    }
    let life = response
        .cache_duration
        .unwrap_or(provider.default_cache_duration);
    Ok(Credential {
        auth: response.auth,
        expires_at: (!life.is_zero()).then(|| started + life),
    })
}

async fn run(host: Weak<dyn Host>, slot: Weak<Slot>, provider: Provider) {
    let mut failures = 0u32;
    let mut fetched = 0u64;
    let mut seen: Option<Seen> = None;
    loop {
        let (Some(host), Some(slot)) = (host.upgrade(), slot.upgrade()) else {
            return;
        };
        let calls = host.calls();
        // An expiry passed while sleeping changes what lookups return.
        slot.tell_if_changed(&*host, &mut seen);
        let result = {
            // One of the --credential-provider-max-concurrent calls, held for the token and
            // the plugin run (bounded by the plugin timeout).
            let Ok(_permit) = calls.running.clone().acquire_owned().await else {
                return;
            };
            fetch(calls, &slot.key, &provider).await
        };
        let now = SystemTime::now();
        let outcome = if result.is_ok() { "success" } else { "failure" };
        if let Some(metrics) = &calls.metrics {
            metrics.credentials.record_call(&provider.name, outcome);
        }
        let wait = {
            let Ok(mut state) = slot.state.lock() else {
                return;
            };
            state.answered = true;
            match result {
                Ok(credential) => {
                    failures = 0;
                    fetched += 1;
                    let life = credential
                        .expires_at
                        .and_then(|t| t.duration_since(now).ok())
                        .unwrap_or_default();
                    state.good = Some(credential);
                    state.error = None;
                    calls.policy.refresh_after(&slot.key, fetched, life)
                }
                Err(message) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(provider = %provider.name, image = %slot.key.image, failures, error = %message, "credential provider call failed");
                    state.error = Some(message);
                    let retry = calls.policy.retry_after(failures);
                    match state.good.as_ref().and_then(|g| g.expires_at) {
                        // Wake just after the expiry, to report it.
                        Some(t) if t > now => retry.min(
                            t.duration_since(now).unwrap_or_default() + Duration::from_millis(50),
                        ),
                        _ => retry,
                    }
                }
            }
        };
        slot.tell_if_changed(&*host, &mut seen);
        host.expiry_changed();
        drop((host, slot));
        tokio::time::sleep(wait).await;
    }
}

/// What the subscribers were last told: valid or not, the credential, the error.
type Seen = (bool, Option<Credential>, Option<String>);

impl Slot {
    fn seen(&self, now: SystemTime) -> Option<Seen> {
        let state = self.state.lock().ok()?;
        let valid = state.good.as_ref().is_some_and(|g| !g.is_expired(now));
        Some((valid, state.good.clone(), state.error.clone()))
    }

    /// Tells the subscribers when what a lookup returns changed since `seen`.
    fn tell_if_changed(&self, host: &dyn Host, seen: &mut Option<Seen>) {
        let now = self.seen(SystemTime::now());
        if now.is_some() && now != *seen {
            *seen = now;
            host.notify(&self.subscribers());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(image: &str) -> Key {
        Key {
            provider: "p".to_owned(),
            image: image.to_owned(),
            service_account: None,
        }
    }

    #[test]
    fn retries_double_from_the_first_and_stop_at_the_longest() {
        let policy = RefreshPolicy::default();
        let waits: Vec<Duration> = (1..=8).map(|n| policy.retry_after(n)).collect();
        let secs = |s| Duration::from_secs(s);
        assert_eq!(
            waits,
            [
                secs(1),
                secs(2),
                secs(4),
                secs(8),
                secs(16),
                secs(32),
                secs(60),
                secs(60)
            ]
        );
        // However many failures, no overflow and no wait past the cap.
        assert_eq!(policy.retry_after(u32::MAX), MAX_RETRY);
        // Retry 0 does not exist; it is read as the first.
        assert_eq!(policy.retry_after(0), FIRST_RETRY);
    }

    #[test]
    fn a_refresh_comes_at_the_fraction_of_the_life_spread_by_the_jitter() {
        let policy = RefreshPolicy::default();
        let life = Duration::from_secs(1000);
        let (low, high) = (
            life.mul_f64(REFRESH_FRACTION * (1.0 - JITTER)),
            life.mul_f64(REFRESH_FRACTION * (1.0 + JITTER)),
        );
        let waits: BTreeSet<Duration> = (0..200)
            .map(|i| policy.refresh_after(&key(&format!("r.example/app-{i}")), 1, life))
            .collect();
        for wait in &waits {
            assert!(
                (low..=high).contains(wait),
                "{wait:?} outside {low:?}..={high:?}"
            );
        }
        // Spread: keys fetched together do not all refresh together.
        assert!(
            waits.len() > 100,
            "only {} distinct refresh times",
            waits.len()
        );
        // The same key and fetch always wait the same; the next fetch draws again.
        let k = key("r.example/app");
        assert_eq!(
            policy.refresh_after(&k, 3, life),
            policy.refresh_after(&k, 3, life)
        );
    }

    #[test]
    fn short_lives_refresh_no_sooner_than_the_floor_and_uncached_ones_every_minute() {
        let policy = RefreshPolicy::default();
        let k = key("r.example/app");
        assert_eq!(
            policy.refresh_after(&k, 1, Duration::from_millis(10)),
            MIN_REFRESH
        );
        assert_eq!(
            policy.refresh_after(&k, 1, Duration::ZERO),
            NO_CACHE_REFRESH
        );
    }
}
