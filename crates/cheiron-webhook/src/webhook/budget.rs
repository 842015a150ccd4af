//! The body budget: bytes of request bodies held at once, across all connections.
//!
//! A body is admitted to memory only once its bytes are reserved: all of an announced
//! `Content-Length` before the first byte is read, or, without one, each growth of the
//! buffer before it happens. What does not fit is refused (503), never waited for, so a
//! client withholding the last byte of many bodies holds at most the budget.
//!
//! An eighth of the budget is kept for small bodies (at most [`SMALL_BODY_BYTES`]), which
//! is what the API server sends: a client filling the budget with large bodies still leaves
//! room for ordinary reviews.

use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Largest body that may use the part of the budget kept for small bodies. A Pod review is
/// typically 5 to 20 KB.
pub const SMALL_BODY_BYTES: usize = 256 * 1024;

/// The share of the budget kept for small bodies: one part in this many.
const SMALL_SHARE: usize = 8;

/// The budget; cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct BodyBudget {
    /// Any body draws from here first.
    shared: Arc<Semaphore>,
    /// Only bodies of at most [`SMALL_BODY_BYTES`] draw from here.
    small: Arc<Semaphore>,
    /// Bytes reserved, for `/metrics`.
    in_use: Gauge,
}

/// Bytes of the budget held by one body; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: BodyBudget,
    shared: Option<OwnedSemaphorePermit>,
    small: Option<OwnedSemaphorePermit>,
    bytes: usize,
}

impl BodyBudget {
    /// A budget of `bytes`, reporting the bytes in use to `in_use`.
    pub fn new(bytes: usize, in_use: Gauge) -> Self {
        let bytes = bytes.min(Semaphore::MAX_PERMITS);
        let small = bytes / SMALL_SHARE;
        Self {
            shared: Arc::new(Semaphore::new(bytes - small)),
            small: Arc::new(Semaphore::new(small)),
            in_use,
        }
    }

    /// Reserves `bytes`, or `None` if they do not fit now.
    pub fn reserve(&self, bytes: usize) -> Option<Reservation> {
        let mut reservation = Reservation {
            budget: self.clone(),
            shared: None,
            small: None,
            bytes: 0,
        };
        reservation.grow(bytes).then_some(reservation)
    }
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Reserves `more` bytes as well; false (and nothing more held) if they do not fit.
    pub fn grow(&mut self, more: usize) -> bool {
        if more == 0 {
            return true;
        }
        let Ok(count) = u32::try_from(more) else {
            return false;
        };
        let total = self.bytes.saturating_add(more);
        let budget = &self.budget;
        let (slot, acquired) = match Arc::clone(&budget.shared).try_acquire_many_owned(count) {
            Ok(permit) => (&mut self.shared, permit),
            Err(_) if total <= SMALL_BODY_BYTES => {
                match Arc::clone(&budget.small).try_acquire_many_owned(count) {
                    Ok(permit) => (&mut self.small, permit),
                    Err(_) => return false,
                }
            }
            Err(_) => return false,
        };
        match slot {
            Some(held) => held.merge(acquired),
            None => *slot = Some(acquired),
        }
        self.bytes = total;
        budget
            .in_use
            .inc_by(i64::try_from(more).unwrap_or(i64::MAX));
        true
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // The permits go back to their semaphores as the fields drop.
        self.budget
            .in_use
            .dec_by(i64::try_from(self.bytes).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn reservations_beyond_the_budget_are_refused_and_dropping_gives_bytes_back() {
        let gauge = Gauge::default();
        let budget = BodyBudget::new(16 * MIB, gauge.clone());
        // 14 MiB may go to large bodies; 2 MiB are kept for small ones.
        let held: Vec<_> = (0..4).map(|_| budget.reserve(3 * MIB)).collect();
        assert!(held.iter().all(Option::is_some));
        assert!(budget.reserve(3 * MIB).is_none(), "a fifth 3 MiB body fits");
        assert_eq!(gauge.get(), 12 * MIB as i64);
        // Small bodies still fit, in the shared rest and then in their own share.
        let small: Vec<_> = (0..16).map(|_| budget.reserve(SMALL_BODY_BYTES)).collect();
        assert!(small.iter().all(Option::is_some));
        assert!(budget.reserve(SMALL_BODY_BYTES).is_none());
        drop(small);
        drop(held);
        assert_eq!(gauge.get(), 0);
        assert!(budget.reserve(14 * MIB).is_some());
    }

    #[test]
    fn growing_reserves_step_by_step_and_a_failed_step_holds_nothing_more() {
        let budget = BodyBudget::new(8 * MIB, Gauge::default());
        let mut first = budget.reserve(0).unwrap();
        assert!(first.grow(MIB) && first.grow(3 * MIB) && first.grow(3 * MIB));
        assert_eq!(first.bytes(), 7 * MIB);
        assert!(!first.grow(MIB), "the last MiB is kept for small bodies");
        assert_eq!(first.bytes(), 7 * MIB);
        // A body that grows past the small size cannot use the small share.
        let mut second = budget.reserve(0).unwrap();
        assert!(second.grow(SMALL_BODY_BYTES));
        assert!(!second.grow(1));
        drop(first);
        assert!(second.grow(MIB));
    }

    #[test]
    fn a_zero_budget_refuses_every_body_but_empty_ones() {
        let budget = BodyBudget::new(0, Gauge::default());
        assert!(budget.reserve(1).is_none());
        assert!(budget.reserve(0).is_some());
    }
}
