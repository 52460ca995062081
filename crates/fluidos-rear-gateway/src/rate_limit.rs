//! Per-peer request rate limit (GCRA, the `governor` crate), keyed by the
//! peer's network address: an IPv4 address, or the /64 of an IPv6 one (a
//! host is usually given a whole /64, so keying by /128 would let it take a
//! fresh quota per address). Not by the peer's key: keys cost nothing to
//! make, addresses do.
//!
//! A peer over its rate gets 429 with `Retry-After` (whole seconds, at
//! least 1) and a JSON error; it costs the gateway one map lookup.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::error::ApiError;

/// A per-peer request rate: `per_second` sustained, `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per second a peer may sustain.
    pub per_second: u32,
    /// Requests a peer may send at once after being quiet.
    pub burst: u32,
}

impl RateLimit {
    /// The default: 50 requests/s, bursts of 200. A FLUIDOS consumer sends a
    /// few requests per Solver and a listing per discovery round, so this
    /// only stops floods.
    pub const DEFAULT: RateLimit = RateLimit {
        per_second: 50,
        burst: 200,
    };
}

/// The limiter of one gateway: one GCRA state per peer address.
pub(crate) struct PeerLimiter {
    limiter: DefaultKeyedRateLimiter<IpAddr>,
}

/// The rate-limit key of a peer address: IPv4 (also when IPv4-mapped in
/// IPv6) as is, IPv6 cut to its /64 (pure).
pub(crate) fn peer_key(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                v6.to_bits() & !((1u128 << 64) - 1),
            )),
        },
    }
}

/// Whole seconds to wait, rounded up, at least 1 (pure).
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

impl PeerLimiter {
    /// A limiter for `limit`; zero rates or bursts count as 1.
    pub(crate) fn new(limit: RateLimit) -> Self {
        let per_second = NonZeroU32::new(limit.per_second).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(limit.burst).unwrap_or(NonZeroU32::MIN);
        PeerLimiter {
            limiter: RateLimiter::keyed(Quota::per_second(per_second).allow_burst(burst)),
        }
    }

    /// Counts one request of `peer` against its [`peer_key`]: `Err` (429
    /// with `Retry-After`) when over its rate.
    pub(crate) fn check(&self, peer: IpAddr) -> Result<(), ApiError> {
        self.limiter
            .check_key(&peer_key(peer))
            .map_err(|not_until| {
                let wait = not_until.wait_time_from(self.limiter.clock().now());
                let secs = retry_after_secs(wait);
                ApiError::too_many_requests(
                    format!("too many requests from {peer}; retry in {secs} s"),
                    secs,
                )
            })
    }

    /// Forgets peers that have been quiet long enough to be back at a full
    /// burst, so the map holds only recent peers (called by the sweeper).
    pub(crate) fn forget_quiet_peers(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }

    /// Peers currently remembered.
    #[cfg(test)]
    pub(crate) fn peers(&self) -> usize {
        self.limiter.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_over_its_burst_is_told_when_to_retry() {
        let l = PeerLimiter::new(RateLimit {
            per_second: 1,
            burst: 3,
        });
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        for _ in 0..3 {
            assert!(l.check(a).is_ok());
        }
        let e = l
            .check(a)
            .err()
            .unwrap_or_else(|| panic!("4th request passed"));
        assert_eq!(e.status, 429);
        assert_eq!(e.retry_after, Some(1));
        assert!(l.check(b).is_ok(), "peers are limited separately");
        assert_eq!(l.peers(), 2);
    }

    #[test]
    fn ipv6_peers_are_limited_per_64() {
        let key = |s: &str| peer_key(s.parse().unwrap_or_else(|e| panic!("{s}: {e}")));
        assert_eq!(key("10.0.0.1"), key("10.0.0.1"));
        assert_ne!(key("10.0.0.1"), key("10.0.0.2"));
        assert_eq!(key("::ffff:10.0.0.1"), key("10.0.0.1"));
        assert_eq!(
            key("2001:db8:1:2::1"),
            key("2001:db8:1:2:ffff:ffff:ffff:ffff")
        );
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2::"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        let l = PeerLimiter::new(RateLimit {
            per_second: 1,
            burst: 2,
        });
        assert!(l.check(key("2001:db8::1")).is_ok());
        assert!(
            l.check("2001:db8::2".parse().unwrap_or(IpAddr::from([0; 4])))
                .is_ok()
        );
        assert!(
            l.check("2001:db8::3".parse().unwrap_or(IpAddr::from([0; 4])))
                .is_err(),
            "a third address of the same /64 shares its quota"
        );
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(3)), 3);
    }
}
