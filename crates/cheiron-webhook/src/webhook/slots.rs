//! The connection cap of one listener, shared fairly between peer addresses.
//!
//! A cap alone lets a few addresses take every slot and lock out the API server (with
//! `failurePolicy: Ignore`, a silent bypass of the webhook); a per-peer cap alone does not
//! help against two or more of them. So when the listener is full, a peer holding less than
//! its fair share (the cap divided by the peers holding connections, itself included) still
//! gets a slot: the peer holding the most gives up its oldest idle connection (its oldest
//! busy one if none is idle, so that slow requests cannot shield it), which is closed
//! gracefully, an HTTP/2 GOAWAY or an HTTP/1 close once its request is answered. Whoever
//! holds more than a fair share loses connections to whoever holds less, and a peer at its
//! fair share is refused as before.
//!
//! The evicted connection no longer counts against the cap while it finishes (at most the
//! drain timeout). At most a [`MAX_EVICTING_SHARE`]th of the cap may be finishing so at
//! once; beyond that a full listener refuses, so the sockets open stay bounded.

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    sync::{Arc, Mutex},
};

use prometheus_client::metrics::gauge::Gauge;
use tokio_util::sync::CancellationToken;

use super::{connection::Activity, limits::MAX_EVICTING_SHARE};

/// Why a connection was refused a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The listener has [`ConnectionLimiter`]'s maximum open, and no peer holds more than
    /// its fair share that could give one up.
    Full,
    /// This peer has its maximum open.
    PeerFull,
}

impl Refusal {
    /// The `reason` label of `cheiron_connections_refused_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Full => "max_connections",
            Refusal::PeerFull => "max_connections_per_peer",
        }
    }
}

/// The connection cap of one listener: connections by peer address, shared fairly.
#[derive(Debug)]
pub struct ConnectionLimiter {
    max: usize,
    per_peer: usize,
    max_evicting: usize,
    table: Arc<Mutex<Table>>,
    open: Gauge,
}

/// Who holds the slots.
#[derive(Debug, Default)]
struct Table {
    /// Connections by peer, oldest first (ids grow). An address leaves the map with its
    /// last connection, so it never holds more entries than there are slots.
    peers: HashMap<IpAddr, BTreeMap<u64, Held>>,
    /// Connections counted against the cap: those in `peers`.
    holding: usize,
    /// Connections evicted but not yet closed.
    evicting: usize,
    next_id: u64,
}

/// What the limiter keeps of a connection: whether it is idle, and how to close it.
#[derive(Debug)]
struct Held {
    activity: Arc<Activity>,
    evict: CancellationToken,
}

/// A connection's slot; given back when dropped, however the connection ends.
#[derive(Debug)]
pub struct ConnectionPermit {
    id: u64,
    peer: IpAddr,
    activity: Arc<Activity>,
    evict: CancellationToken,
    table: Arc<Mutex<Table>>,
    open: Gauge,
}

impl ConnectionLimiter {
    /// At most `max` connections, `per_peer` of them from one address, counted in `open`.
    pub fn new(max: usize, per_peer: usize, open: Gauge) -> Self {
        Self {
            max,
            per_peer,
            max_evicting: (max / MAX_EVICTING_SHARE).max(1),
            table: Arc::default(),
            open,
        }
    }

    /// A slot for a connection from `peer`: a free one, or one another peer holding more
    /// than its fair share gives up (that connection is told to close).
    pub fn try_admit(&self, peer: IpAddr) -> Result<ConnectionPermit, Refusal> {
        let Ok(mut table) = self.table.lock() else {
            return Err(Refusal::Full);
        };
        let held = table.peers.get(&peer).map_or(0, BTreeMap::len);
        if held >= self.per_peer {
            // A full listener is the reason that matters (and the only one, when the
            // per-peer cap is the cap, as on the admin port).
            let full = table.holding >= self.max;
            return Err(if full {
                Refusal::Full
            } else {
                Refusal::PeerFull
            });
        }
        if table.holding >= self.max && !table.make_room(peer, held, self.max, self.max_evicting) {
            return Err(Refusal::Full);
        }
        let id = table.next_id;
        table.next_id += 1;
        let activity = Activity::new();
        let evict = CancellationToken::new();
        table.peers.entry(peer).or_default().insert(
            id,
            Held {
                activity: Arc::clone(&activity),
                evict: evict.clone(),
            },
        );
        table.holding += 1;
        self.open.inc();
        Ok(ConnectionPermit {
            id,
            peer,
            activity,
            evict,
            table: Arc::clone(&self.table),
            open: self.open.clone(),
        })
    }
}

impl Table {
    /// Evicts a connection for `peer`, which holds `held`, if it is below its fair share of
    /// `max` and another peer holds more than `peer` would after admission. False if not.
    fn make_room(&mut self, peer: IpAddr, held: usize, max: usize, max_evicting: usize) -> bool {
        if self.evicting >= max_evicting {
            return false;
        }
        let peers = self.peers.len() + usize::from(!self.peers.contains_key(&peer));
        let fair_share = max / peers.max(1);
        if held >= fair_share {
            return false;
        }
        let Some(largest) = self
            .peers
            .values_mut()
            .max_by_key(|connections| connections.len())
        else {
            return false;
        };
        // Strictly more than `peer` would hold, so that two peers never trade a connection
        // back and forth. The largest holds at least two, so it keeps one: no entry to remove.
        if largest.len() <= held + 1 {
            return false;
        }
        let oldest_idle = largest
            .iter()
            .find(|(_, connection)| connection.activity.is_idle())
            .map(|(id, _)| *id);
        let Some(victim) = oldest_idle.or_else(|| largest.keys().next().copied()) else {
            return false;
        };
        let Some(evicted) = largest.remove(&victim) else {
            return false;
        };
        evicted.evict.cancel();
        self.holding -= 1;
        self.evicting += 1;
        true
    }
}

impl ConnectionPermit {
    /// What the connection is doing; the limiter evicts idle connections first.
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// Cancelled when the connection gave up its slot to a peer holding less: it should
    /// close gracefully.
    pub fn evicted(&self) -> &CancellationToken {
        &self.evict
    }
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.open.dec();
        let Ok(mut table) = self.table.lock() else {
            return;
        };
        let table = &mut *table;
        let held = match table.peers.get_mut(&self.peer) {
            Some(connections) => {
                let held = connections.remove(&self.id).is_some();
                if connections.is_empty() {
                    table.peers.remove(&self.peer);
                }
                held
            }
            None => false,
        };
        if held {
            table.holding = table.holding.saturating_sub(1);
        } else {
            table.evicting = table.evicting.saturating_sub(1);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    fn admit(limiter: &ConnectionLimiter, peer: u8, count: usize) -> Vec<ConnectionPermit> {
        (0..count)
            .map(|_| limiter.try_admit(ip(peer)).unwrap())
            .collect()
    }

    /// The positions of the permits told to close.
    fn evicted(permits: &[ConnectionPermit]) -> Vec<usize> {
        permits
            .iter()
            .enumerate()
            .filter(|(_, permit)| permit.evicted().is_cancelled())
            .map(|(n, _)| n)
            .collect()
    }

    #[test]
    fn the_cap_and_the_per_peer_cap_hold_and_slots_come_back() {
        let open = Gauge::default();
        let limiter = ConnectionLimiter::new(4, 2, open.clone());
        let a1 = limiter.try_admit(ip(1)).unwrap();
        let _a2 = limiter.try_admit(ip(1)).unwrap();
        assert_eq!(limiter.try_admit(ip(1)).unwrap_err(), Refusal::PeerFull);
        let _b1 = limiter.try_admit(ip(2)).unwrap();
        let _c1 = limiter.try_admit(ip(3)).unwrap();
        // Full: a fourth peer takes the oldest connection of the one holding two.
        let d1 = limiter.try_admit(ip(4)).unwrap();
        assert!(a1.evicted().is_cancelled());
        // Now nobody holds more than a newcomer would.
        assert_eq!(limiter.try_admit(ip(5)).unwrap_err(), Refusal::Full);
        assert_eq!(open.get(), 5);
        drop(a1);
        assert_eq!(open.get(), 4);
        assert_eq!(limiter.try_admit(ip(5)).unwrap_err(), Refusal::Full);
        drop(d1);
        assert_eq!(open.get(), 3);
        let _e1 = limiter.try_admit(ip(5)).unwrap();
        assert_eq!(limiter.table.lock().unwrap().peers.len(), 4);
    }

    #[test]
    fn peers_without_connections_are_forgotten() {
        let limiter = ConnectionLimiter::new(1000, 10, Gauge::default());
        for last in 0..=255 {
            drop(limiter.try_admit(ip(last)).unwrap());
        }
        let table = limiter.table.lock().unwrap();
        assert!(table.peers.is_empty());
        assert_eq!((table.holding, table.evicting), (0, 0));
    }

    #[test]
    fn two_peers_holding_every_slot_give_one_up_to_a_third() {
        let open = Gauge::default();
        let limiter = ConnectionLimiter::new(8, 4, open.clone());
        let first = admit(&limiter, 1, 4);
        let second = admit(&limiter, 2, 4);
        // Both hostile peers are at the per-peer cap and the listener is full.
        assert_eq!(limiter.try_admit(ip(1)).unwrap_err(), Refusal::Full);
        // The third peer's fair share is 8 / 3 = 2: it gets two slots, each one the oldest
        // idle connection of whoever holds the most.
        let third = admit(&limiter, 3, 2);
        let lost = evicted(&first).len() + evicted(&second).len();
        assert_eq!(lost, 2);
        for permits in [&first, &second] {
            assert_eq!(evicted(permits), [0], "not the oldest, or not one each");
        }
        assert_eq!(limiter.try_admit(ip(3)).unwrap_err(), Refusal::Full);
        // The peers that lost a connection are above their share: they cannot take it back.
        assert_eq!(limiter.try_admit(ip(1)).unwrap_err(), Refusal::Full);
        assert_eq!(limiter.try_admit(ip(2)).unwrap_err(), Refusal::Full);
        // Evicted connections stay open (and counted as open) until they close.
        assert_eq!(open.get(), 10);
        {
            let table = limiter.table.lock().unwrap();
            assert_eq!((table.holding, table.evicting), (8, 2));
        }
        drop((first, second, third));
        assert_eq!(open.get(), 0);
        let table = limiter.table.lock().unwrap();
        assert_eq!((table.holding, table.evicting), (0, 0));
        assert!(table.peers.is_empty());
    }

    /// Closes the connections that were told to: drops their permits.
    fn close_evicted(permits: &mut Vec<ConnectionPermit>) {
        permits.retain(|permit| !permit.evicted().is_cancelled());
    }

    #[test]
    fn idle_connections_go_first_and_busy_ones_do_not_shield_a_peer() {
        let limiter = ConnectionLimiter::new(8, 8, Gauge::default());
        let hostile = admit(&limiter, 1, 8);
        let _busy: Vec<_> = [0, 1, 3, 4, 5, 6, 7]
            .iter()
            .map(|&n| hostile[n].activity().begin())
            .collect();
        let _newcomer = limiter.try_admit(ip(2)).unwrap();
        assert_eq!(evicted(&hostile), [2], "the idle one goes first");
        let _again = limiter.try_admit(ip(2)).unwrap();
        assert_eq!(evicted(&hostile), [0, 2], "then the oldest busy one");
    }

    #[test]
    fn a_peer_at_its_fair_share_is_refused() {
        let limiter = ConnectionLimiter::new(12, 12, Gauge::default());
        let mut first = admit(&limiter, 1, 6);
        let mut second = admit(&limiter, 2, 6);
        // Two peers hold six each: the fair share of either is 6.
        assert_eq!(limiter.try_admit(ip(1)).unwrap_err(), Refusal::Full);
        // A third peer's share is 4, and the largest holds more than it would.
        let mut third = Vec::new();
        for _ in 0..4 {
            third.push(limiter.try_admit(ip(3)).unwrap());
            close_evicted(&mut first);
            close_evicted(&mut second);
        }
        assert_eq!(limiter.try_admit(ip(3)).unwrap_err(), Refusal::Full);
        assert_eq!((first.len(), second.len()), (4, 4));
        assert!(third.iter().all(|permit| !permit.evicted().is_cancelled()));
        // Three peers at four each: nobody takes from anybody.
        for peer in 1..=3 {
            assert_eq!(limiter.try_admit(ip(peer)).unwrap_err(), Refusal::Full);
        }
        // A peer that closed a connection is below its share only while the listener has
        // room, so it takes its slot back without evicting anyone.
        first.pop();
        first.push(limiter.try_admit(ip(1)).unwrap());
        assert!(
            [&first, &second, &third]
                .iter()
                .all(|permits| evicted(permits).is_empty())
        );
    }

    #[test]
    fn evictions_in_progress_are_bounded() {
        let max = MAX_EVICTING_SHARE * 4;
        let limiter = ConnectionLimiter::new(max, max, Gauge::default());
        let mut hostile = admit(&limiter, 1, max);
        // Each newcomer holds nothing, so each could evict; only `max / share` connections
        // may be finishing at once.
        let newcomers: Vec<_> = (2..=u8::try_from(max).unwrap())
            .map_while(|peer| limiter.try_admit(ip(peer)).ok())
            .collect();
        assert_eq!(newcomers.len(), 4);
        assert_eq!(evicted(&hostile).len(), 4);
        // Once they have closed, more can go.
        close_evicted(&mut hostile);
        let _more = limiter.try_admit(ip(200)).unwrap();
        assert_eq!(evicted(&hostile).len(), 1);
    }
}
