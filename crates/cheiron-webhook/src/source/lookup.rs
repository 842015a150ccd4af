//! The guard in front of live namespace lookups (docs/design.md §5, namespace cache misses).
//!
//! `request.namespace` is whatever the client sent, and a miss costs one API request made
//! with cheiron's own credentials. So before a lookup: the name must be a namespace name (a
//! DNS-1123 label, which also keeps `/`, `?` and `%` out of the API path); a name found
//! missing a moment ago is not looked up again until [`LookupLimits::miss_ttl`] passes; and
//! misses are rate-limited by a token bucket. A refused lookup admits the object unchanged,
//! with a warning, as a failed one does.
//!
//! Pure: every decision takes the current [`Instant`], so tests drive the clock. Here too: how
//! long a lookup and a wait for the namespaces' list may take, and a lookup's answer
//! ([`NamespaceLookup`]).

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use cheiron_core::policy::NamespaceMeta;

/// How long a live namespace lookup may take before the object is admitted unchanged.
pub const NAMESPACE_LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

/// How long after its arrival a review whose namespace the view lacks, and could not be looked
/// up, may wait for the view's first list of namespaces (only while that list is coming in:
/// the webhook is ready before it, docs/design.md §5, Readiness). Below the chart's 5 s
/// `timeoutSeconds`, so that the API server gets an answer, not a timeout.
pub const NAMESPACE_LIST_WAIT: Duration = Duration::from_secs(3);

/// Namespace lookups that may be in flight at once beyond the rate ([`LookupLimits`]) while
/// the view's first list of namespaces is coming in: then every review whose namespace is not
/// listed yet needs one, and the rate's burst (20) would leave the rest waiting for the list.
/// Each is one GET of a namespace's metadata (milliseconds), so this bounds what a client
/// sending reviews can make the webhook ask the API server for to a few seconds of this
/// many GETs at a time, once per start.
pub const LISTING_LOOKUPS_IN_FLIGHT: usize = 16;

/// The answer to a namespace lookup that missed the view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceLookup {
    /// Found (live): use these labels and annotations.
    Found(NamespaceMeta),
    /// Could not be looked up: the object must be admitted unchanged rather than guessed at
    /// (an opt-out annotation could be missed).
    Unknown,
    /// This source does not track namespaces beyond the view: a namespace it does not list has
    /// no labels or annotations (static mode).
    Untracked,
}

/// Longest namespace name (a DNS-1123 label).
pub const MAX_NAMESPACE_NAME_BYTES: usize = 63;

/// Default of [`LookupLimits::rate_per_second`].
pub const DEFAULT_LOOKUP_RATE: u32 = 10;
/// Default of [`LookupLimits::burst`].
pub const DEFAULT_LOOKUP_BURST: u32 = 20;
/// Default of [`LookupLimits::miss_ttl`].
pub const DEFAULT_MISS_TTL: Duration = Duration::from_secs(5);
/// Default of [`LookupLimits::miss_cache_size`].
pub const DEFAULT_MISS_CACHE_SIZE: usize = 1024;

/// True if `name` can be a namespace's name: a DNS-1123 label, at most 63 characters of
/// `a-z`, `0-9` and `-`, starting and ending with a letter or digit.
pub fn is_namespace_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let alphanumeric = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= MAX_NAMESPACE_NAME_BYTES
                && alphanumeric(first)
                && alphanumeric(last)
                && bytes.iter().all(|b| alphanumeric(b) || *b == b'-')
        }
        _ => false,
    }
}

/// The bounds of live namespace lookups.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LookupLimits {
    /// Lookups per second, on average; 0 turns live lookups off.
    pub rate_per_second: u32,
    /// Lookups allowed at once after a quiet spell (the bucket's size).
    pub burst: u32,
    /// How long a name found missing (or whose lookup failed) is not looked up again.
    pub miss_ttl: Duration,
    /// Most names remembered as missing; the oldest are forgotten first.
    pub miss_cache_size: usize,
}

impl Default for LookupLimits {
    fn default() -> Self {
        Self {
            rate_per_second: DEFAULT_LOOKUP_RATE,
            burst: DEFAULT_LOOKUP_BURST,
            miss_ttl: DEFAULT_MISS_TTL,
            miss_cache_size: DEFAULT_MISS_CACHE_SIZE,
        }
    }
}

/// Whether a namespace the view does not hold may be looked up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupDecision {
    /// Look it up.
    Allowed,
    /// The name cannot be a namespace's: never looked up.
    InvalidName,
    /// Looked up and not found (or failed) less than [`LookupLimits::miss_ttl`] ago.
    RecentlyMissing,
    /// Too many lookups lately.
    RateLimited,
}

/// A token bucket: `rate` tokens a second, at most `capacity` saved up.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. With a rate of 0 it is empty and stays so.
    pub fn new(rate_per_second: u32, capacity: u32, now: Instant) -> Self {
        let capacity = if rate_per_second == 0 { 0 } else { capacity };
        Self {
            rate: f64::from(rate_per_second),
            capacity: f64::from(capacity),
            tokens: f64::from(capacity),
            last: now,
        }
    }

    /// Takes one token if there is one.
    pub fn try_take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.capacity);
        self.last = now.max(self.last);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Names recently found missing, each until its expiry; at most `capacity` of them.
#[derive(Debug)]
pub struct MissCache {
    ttl: Duration,
    capacity: usize,
    expiries: HashMap<String, Instant>,
    /// Insertion order, which with one TTL for all is also expiry order.
    order: VecDeque<(String, Instant)>,
}

impl MissCache {
    /// An empty cache.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            ttl,
            capacity,
            expiries: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// True if `name` was recorded missing less than the TTL before `now`.
    pub fn contains(&self, name: &str, now: Instant) -> bool {
        self.expiries.get(name).is_some_and(|expiry| now < *expiry)
    }

    /// Records `name` as missing from `now` on, forgetting expired names and, when full,
    /// the oldest.
    pub fn insert(&mut self, name: &str, now: Instant) {
        if self.capacity == 0 || self.ttl.is_zero() {
            return;
        }
        self.forget_expired(now);
        while self.expiries.len() >= self.capacity {
            if !self.pop_oldest() {
                break;
            }
        }
        let expiry = now + self.ttl;
        self.expiries.insert(name.to_owned(), expiry);
        self.order.push_back((name.to_owned(), expiry));
    }

    /// Names held.
    pub fn len(&self) -> usize {
        self.expiries.len()
    }

    /// True if no name is held.
    pub fn is_empty(&self) -> bool {
        self.expiries.is_empty()
    }

    fn forget_expired(&mut self, now: Instant) {
        while self.order.front().is_some_and(|(_, expiry)| *expiry <= now) {
            self.pop_oldest();
        }
    }

    /// Drops the oldest entry of the queue, and its name unless re-inserted since.
    fn pop_oldest(&mut self) -> bool {
        let Some((name, expiry)) = self.order.pop_front() else {
            return false;
        };
        if self.expiries.get(&name) == Some(&expiry) {
            self.expiries.remove(&name);
        }
        true
    }
}

/// The guard: one per webhook, shared by every request.
#[derive(Debug)]
pub struct LookupGuard {
    state: Mutex<GuardState>,
    /// Set once the source answers [`NamespaceLookup::Untracked`]: it makes no API calls
    /// (static mode), so only the name check applies.
    untracked: AtomicBool,
}

#[derive(Debug)]
struct GuardState {
    misses: MissCache,
    bucket: TokenBucket,
}

impl LookupGuard {
    /// A guard with a full bucket and no misses.
    pub fn new(limits: LookupLimits, now: Instant) -> Self {
        Self {
            state: Mutex::new(GuardState {
                misses: MissCache::new(limits.miss_ttl, limits.miss_cache_size),
                bucket: TokenBucket::new(limits.rate_per_second, limits.burst, now),
            }),
            untracked: AtomicBool::new(false),
        }
    }

    /// Whether `name` may be looked up now. [`LookupDecision::Allowed`] takes a token.
    pub fn decide(&self, name: &str, now: Instant) -> LookupDecision {
        if !is_namespace_name(name) {
            return LookupDecision::InvalidName;
        }
        if self.untracked.load(Ordering::Relaxed) {
            return LookupDecision::Allowed;
        }
        let Ok(mut state) = self.state.lock() else {
            // Poisoned only if a holder panicked; refusing is the safe answer.
            return LookupDecision::RateLimited;
        };
        if state.misses.contains(name, now) {
            LookupDecision::RecentlyMissing
        } else if state.bucket.try_take(now) {
            LookupDecision::Allowed
        } else {
            LookupDecision::RateLimited
        }
    }

    /// Records the answer to an allowed lookup: a name not found (or whose lookup failed) is
    /// remembered as missing.
    pub fn record(&self, name: &str, answer: &NamespaceLookup, now: Instant) {
        match answer {
            NamespaceLookup::Found(_) => {}
            NamespaceLookup::Untracked => self.untracked.store(true, Ordering::Relaxed),
            NamespaceLookup::Unknown => {
                if let Ok(mut state) = self.state.lock() {
                    state.misses.insert(name, now);
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use cheiron_core::policy::NamespaceMeta;

    use super::*;

    #[test]
    fn namespace_names_are_dns1123_labels() {
        for valid in ["a", "team-a", "0", "kube-system", &"a".repeat(63), "a-1-b"] {
            assert!(is_namespace_name(valid), "{valid:?} refused");
        }
        for invalid in [
            "",
            "-a",
            "a-",
            "Team",
            "team_a",
            "team.a",
            &"a".repeat(64),
            "kube-system/secrets/db-password",
            "team?watch=true",
            "team%2Fsecrets",
            "..",
            "team a",
            "tëam",
        ] {
            assert!(!is_namespace_name(invalid), "{invalid:?} accepted");
        }
    }

    #[test]
    fn token_bucket_allows_a_burst_then_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10, 20, start);
        let taken = (0..25).filter(|_| bucket.try_take(start)).count();
        assert_eq!(taken, 20, "the burst");
        // 10 a second: one token per 100 ms, no more.
        assert!(!bucket.try_take(start + Duration::from_millis(50)));
        assert!(bucket.try_take(start + Duration::from_millis(100)));
        assert!(!bucket.try_take(start + Duration::from_millis(100)));
        let later = start + Duration::from_millis(1100);
        assert_eq!((0..25).filter(|_| bucket.try_take(later)).count(), 10);
        // Never more than the burst saved up, however long the quiet.
        let much_later = start + Duration::from_secs(3600);
        assert_eq!((0..100).filter(|_| bucket.try_take(much_later)).count(), 20);
    }

    #[test]
    fn a_zero_rate_or_burst_allows_nothing() {
        let now = Instant::now();
        let mut no_rate = TokenBucket::new(0, 20, now);
        assert!(!no_rate.try_take(now));
        assert!(!no_rate.try_take(now + Duration::from_secs(60)));
        let mut no_burst = TokenBucket::new(10, 0, now);
        assert!(!no_burst.try_take(now + Duration::from_secs(60)));
    }

    #[test]
    fn misses_expire_after_the_ttl() {
        let start = Instant::now();
        let mut cache = MissCache::new(Duration::from_secs(5), 10);
        cache.insert("gone", start);
        assert!(cache.contains("gone", start + Duration::from_millis(4999)));
        assert!(!cache.contains("gone", start + Duration::from_secs(5)));
        assert!(!cache.contains("other", start));
        // Expired names are dropped on the next insert.
        cache.insert("next", start + Duration::from_secs(6));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn the_miss_cache_is_bounded_and_forgets_the_oldest_first() {
        let now = Instant::now();
        let mut cache = MissCache::new(Duration::from_secs(5), 3);
        for (i, name) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            cache.insert(name, now + Duration::from_millis(i as u64));
        }
        assert_eq!(cache.len(), 3);
        let at = now + Duration::from_millis(10);
        assert!(!cache.contains("a", at) && !cache.contains("b", at));
        assert!(cache.contains("c", at) && cache.contains("d", at) && cache.contains("e", at));
        // Many distinct names never grow it past its bound.
        for i in 0..10_000 {
            cache.insert(&format!("ns-{i}"), at);
        }
        assert_eq!(cache.len(), 3);
        assert!(
            cache.order.len() <= 3,
            "queue grew to {}",
            cache.order.len()
        );
    }

    #[test]
    fn a_name_inserted_again_keeps_its_newer_expiry() {
        let start = Instant::now();
        let mut cache = MissCache::new(Duration::from_secs(5), 10);
        cache.insert("ns", start);
        cache.insert("ns", start + Duration::from_secs(3));
        // The first entry's expiry passing does not drop the newer one.
        cache.insert("other", start + Duration::from_secs(6));
        assert!(cache.contains("ns", start + Duration::from_secs(7)));
        assert!(!cache.contains("ns", start + Duration::from_secs(8)));
    }

    #[test]
    fn invalid_names_are_refused_before_anything_else() {
        let now = Instant::now();
        let guard = LookupGuard::new(LookupLimits::default(), now);
        assert_eq!(
            guard.decide("kube-system/secrets/db-password", now),
            LookupDecision::InvalidName
        );
        // Refusals take no token: the whole burst is still there.
        for _ in 0..DEFAULT_LOOKUP_BURST {
            assert_eq!(guard.decide("team-new", now), LookupDecision::Allowed);
        }
        assert_eq!(guard.decide("team-new", now), LookupDecision::RateLimited);
    }

    #[test]
    fn a_missing_name_is_not_looked_up_again_until_its_ttl_passes() {
        let now = Instant::now();
        let guard = LookupGuard::new(LookupLimits::default(), now);
        assert_eq!(guard.decide("gone", now), LookupDecision::Allowed);
        guard.record("gone", &NamespaceLookup::Unknown, now);
        assert_eq!(
            guard.decide("gone", now + Duration::from_secs(1)),
            LookupDecision::RecentlyMissing
        );
        assert_eq!(
            guard.decide("gone", now + DEFAULT_MISS_TTL),
            LookupDecision::Allowed
        );
        // A namespace that was found is not remembered as missing.
        guard.record(
            "found",
            &NamespaceLookup::Found(NamespaceMeta::named("found")),
            now,
        );
        assert_eq!(guard.decide("found", now), LookupDecision::Allowed);
    }

    #[test]
    fn misses_are_rate_limited_and_the_bucket_refills() {
        let now = Instant::now();
        let limits = LookupLimits {
            rate_per_second: 2,
            burst: 3,
            ..LookupLimits::default()
        };
        let guard = LookupGuard::new(limits, now);
        let decisions: Vec<_> = (0..5)
            .map(|i| guard.decide(&format!("ns-{i}"), now))
            .collect();
        assert_eq!(
            decisions,
            [
                LookupDecision::Allowed,
                LookupDecision::Allowed,
                LookupDecision::Allowed,
                LookupDecision::RateLimited,
                LookupDecision::RateLimited,
            ]
        );
        assert_eq!(
            guard.decide("ns-9", now + Duration::from_millis(500)),
            LookupDecision::Allowed
        );
    }

    #[test]
    fn a_source_that_does_not_track_namespaces_is_never_rate_limited() {
        let now = Instant::now();
        let limits = LookupLimits {
            rate_per_second: 1,
            burst: 1,
            ..LookupLimits::default()
        };
        let guard = LookupGuard::new(limits, now);
        assert_eq!(guard.decide("a", now), LookupDecision::Allowed);
        guard.record("a", &NamespaceLookup::Untracked, now);
        for i in 0..100 {
            assert_eq!(
                guard.decide(&format!("ns-{i}"), now),
                LookupDecision::Allowed
            );
        }
        assert_eq!(guard.decide("Not_A_Name", now), LookupDecision::InvalidName);
    }
}
