//! Failed attempts in a row, per key, and how long to wait before the next one: one rule for
//! the controller's reconcile of a manager (keyed by the manager) and the fleet's of a manager
//! in one workload cluster (keyed by manager and cluster), so a struggling apiserver is not
//! hammered by either.

use std::{collections::HashMap, hash::Hash, sync::Mutex, time::Duration};

/// Failed attempts in a row, by key; a success forgets the key.
pub struct Backoff<K> {
    failures: Mutex<HashMap<K, u32>>,
}

impl<K> Default for Backoff<K> {
    fn default() -> Self {
        Self {
            failures: Mutex::default(),
        }
    }
}

impl<K: Hash + Eq> Backoff<K> {
    /// Counts a failed attempt of `key` and returns how many came before it.
    pub fn record_failure(&self, key: K) -> u32 {
        let Ok(mut failures) = self.failures.lock() else {
            return 0;
        };
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        *n - 1
    }

    /// Forgets the failures of `key`: its next failure waits the shortest time again.
    pub fn reset(&self, key: &K) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.remove(key);
        }
    }
}

/// The first retry after a failure, doubling up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_secs(5);
/// The longest wait between retries of a key that keeps failing.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(300);

/// How long to wait before retrying what is named `name` (a manager) after `failures` failed
/// attempts in a row: exponential, capped, and spread by up to ±20 % per name, so that
/// managers failing together (an apiserver throttling everyone) do not retry together.
pub fn retry_delay(name: &str, failures: u32) -> Duration {
    use std::hash::{Hash, Hasher};
    let base = FIRST_RETRY_DELAY
        .saturating_mul(1u32 << failures.min(6))
        .min(MAX_RETRY_DELAY);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (name, failures).hash(&mut hasher);
    // A factor in [0.8, 1.2), fixed for a given manager and attempt.
    let spread = 0.8 + f64::from(u32::try_from(hasher.finish() % 400).unwrap_or(0)) / 1000.0;
    base.mul_f64(spread).min(MAX_RETRY_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_count_up_per_key_until_a_success() {
        let backoff = Backoff::<(String, String)>::default();
        let key = |c: &str| ("m".to_owned(), c.to_owned());
        assert_eq!(backoff.record_failure(key("a")), 0);
        assert_eq!(backoff.record_failure(key("a")), 1);
        assert_eq!(
            backoff.record_failure(key("b")),
            0,
            "another key counts apart"
        );
        backoff.reset(&key("a"));
        assert_eq!(backoff.record_failure(key("a")), 0);
    }

    #[test]
    fn retries_back_off_exponentially_up_to_a_cap_with_jitter() {
        let delays: Vec<Duration> = (0..10).map(|n| retry_delay("m", n)).collect();
        for (n, d) in delays.iter().enumerate() {
            let base = FIRST_RETRY_DELAY
                .saturating_mul(1 << n.min(6))
                .min(MAX_RETRY_DELAY);
            assert!(
                *d >= base.mul_f64(0.8) && *d <= base.mul_f64(1.2),
                "attempt {n}: {d:?}"
            );
            assert!(*d <= MAX_RETRY_DELAY);
        }
        assert!(delays[3] > delays[0] * 4, "{delays:?}");
        assert!(delays[9] >= MAX_RETRY_DELAY.mul_f64(0.8));
        // Managers that fail together are spread out.
        let spread: std::collections::BTreeSet<Duration> =
            (0..20).map(|i| retry_delay(&format!("m{i}"), 2)).collect();
        assert!(spread.len() > 10, "{spread:?}");
    }
}
