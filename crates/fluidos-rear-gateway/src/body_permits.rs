//! Permits to buffer a POST body, in all and per peer address.
//!
//! A body is read whole before routing (up to `body_limit`), so the bodies
//! read at once bound the memory they take: [`MAX_BODIES_READ_AT_ONCE`]. A
//! slow client holds its permit until `body_read_timeout`; with only that
//! global bound, 64 slow POSTs from two addresses held every sale on the
//! node. So each peer address (an IPv4 address, or an IPv6 /64, as the rate
//! limit keys them: addresses cost, keys do not) may hold at most
//! [`MAX_BODIES_PER_PEER`] of them, and one over that is answered 429 at
//! once rather than queued. What a caller may not buy at all is refused
//! (403) before it takes any permit (`http::read_body`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};

use tokio::sync::{Semaphore, SemaphorePermit};

use crate::error::ApiError;
use crate::rate_limit::peer_key;

/// Most request bodies buffered at once: with `body_limit` (1 MiB by
/// default) a bound on the memory bodies take, whatever the connections.
pub(crate) const MAX_BODIES_READ_AT_ONCE: usize = 64;
/// Most bodies one peer address may have buffered at once (a consumer
/// sends one reserve or purchase at a time per Solver).
pub(crate) const MAX_BODIES_PER_PEER: usize = 4;

/// The permits of one gateway.
pub(crate) struct BodyPermits {
    global: Semaphore,
    per_peer: usize,
    /// Bodies being read per peer key; an entry lives while one is.
    reading: Mutex<HashMap<IpAddr, usize>>,
}

/// A body's permit: released, in all and for its peer, when dropped.
pub(crate) struct BodyPermit<'a> {
    _global: Option<SemaphorePermit<'a>>,
    _peer: PeerSlot<'a>,
}

/// One of a peer's slots, given back when dropped (also when the wait for
/// a global permit is abandoned on a timeout).
struct PeerSlot<'a> {
    owner: &'a BodyPermits,
    peer: Option<IpAddr>,
}

impl Drop for PeerSlot<'_> {
    fn drop(&mut self) {
        let Some(peer) = self.peer else { return };
        let mut reading = self
            .owner
            .reading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = reading.get_mut(&peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                reading.remove(&peer);
            }
        }
    }
}

impl BodyPermits {
    pub(crate) fn new(global: usize, per_peer: usize) -> Self {
        BodyPermits {
            global: Semaphore::new(global.max(1)),
            per_peer: per_peer.max(1),
            reading: Mutex::new(HashMap::new()),
        }
    }

    /// A permit for a body from `peer` (`None`: called in-process, counted
    /// in all only): 429 at once when that peer already reads its share,
    /// else waits for one of the global permits.
    pub(crate) async fn acquire(&self, peer: Option<IpAddr>) -> Result<BodyPermit<'_>, ApiError> {
        let key = peer.map(peer_key);
        if let Some(key) = key {
            let mut reading = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
            let n = reading.entry(key).or_insert(0);
            if *n >= self.per_peer {
                return Err(ApiError::too_many_requests(
                    format!(
                        "too many request bodies in flight from this address (at most {} at once)",
                        self.per_peer
                    ),
                    1,
                ));
            }
            *n += 1;
        }
        let slot = PeerSlot {
            owner: self,
            peer: key,
        };
        // A closed semaphore never happens; without one the body is read
        // under the per-peer bound alone.
        let global = self.global.acquire().await.ok();
        Ok(BodyPermit {
            _global: global,
            _peer: slot,
        })
    }

    /// Bodies being read from `peer`'s key now.
    #[cfg(test)]
    fn reading(&self, peer: IpAddr) -> usize {
        self.reading
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&peer_key(peer))
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn a_peer_gets_its_share_and_gives_it_back() {
        let permits = BodyPermits::new(8, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let a6: IpAddr = "2001:db8::1".parse().unwrap();
        let a6_same64: IpAddr = "2001:db8::ffff".parse().unwrap();
        let first = permits.acquire(Some(a)).await.unwrap();
        let second = permits.acquire(Some(a)).await.unwrap();
        let e = permits.acquire(Some(a)).await.err().unwrap();
        assert_eq!(e.status.as_u16(), 429);
        // Another address, and in-process calls, are not held up.
        let _b = permits
            .acquire(Some("10.0.0.2".parse().unwrap()))
            .await
            .unwrap();
        let _local = permits.acquire(None).await.unwrap();
        // An IPv6 /64 is one peer.
        let _x = permits.acquire(Some(a6)).await.unwrap();
        let _y = permits.acquire(Some(a6_same64)).await.unwrap();
        assert!(permits.acquire(Some(a6)).await.is_err());
        drop(first);
        assert_eq!(permits.reading(a), 1);
        let _third = permits.acquire(Some(a)).await.unwrap();
        drop(second);
        drop(_third);
        assert_eq!(permits.reading(a), 0);
        assert!(permits.reading.lock().unwrap().get(&a).is_none());
    }

    #[tokio::test]
    async fn a_wait_given_up_returns_the_peers_slot() {
        let permits = BodyPermits::new(1, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let _all = permits
            .acquire(Some("10.0.0.9".parse().unwrap()))
            .await
            .unwrap();
        let waiting = permits.acquire(Some(a));
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), waiting)
                .await
                .is_err()
        );
        assert_eq!(permits.reading(a), 0);
    }
}
