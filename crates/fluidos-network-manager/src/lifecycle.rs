//! KnownCluster lifecycle decisions, free of I/O: when an advertisement
//! costs an API write, what expiry it writes, and when an entry is removed.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// What this node last saw of a KnownCluster (from the API or its own write).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// `spec.address`.
    pub address: String,
    /// `spec.fingerprint`: the REAR key pinned for the peer, if any.
    pub fingerprint: Option<String>,
    /// `status.expirationTime`, when present and parseable.
    pub expiry: Option<Timestamp>,
}

/// What an advertisement requires of its KnownCluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refresh {
    /// Nothing: the object exists with this address (and key) and its
    /// expiry is far enough away.
    Skip,
    /// Write the status (new expiry); `spec` too when the object is missing
    /// or its expired entry is taken over (address and key as advertised).
    Write {
        /// Whether `spec.address` and `spec.fingerprint` must be written first.
        spec: bool,
    },
    /// Write the spec with the advertised key, then the status: a live
    /// entry without a key (created from a Go node, or by hand) pins the
    /// first key its node advertises.
    Adopt,
    /// Nothing: a live entry of this node ID holds another address. The
    /// first stays until it expires (Go never moves a live one), so a
    /// datagram claiming a known node's ID cannot repoint its peers, nor
    /// make writes by alternating addresses.
    Conflict,
    /// Nothing: a live entry of this node ID has pinned another key (or
    /// the advertisement carries none). The first key stays until the entry
    /// expires, for the same reason as the address: flipping a pinned key is
    /// what a spoofer would do. After expiry a new key may come (rotation).
    KeyConflict,
    /// Nothing: a new peer, and no room for another entry.
    Full,
}

/// Decides whether an advertisement of `address` and `fingerprint` costs an
/// API write.
///
/// A refresh is written only once less than half the TTL remains, so a peer
/// that advertises every interval costs one status write per TTL/2 instead
/// of one per advertisement (Go), and the object never gets closer than
/// TTL/2 to expiring while its node keeps advertising.
///
/// A new peer is refused when there is no `room` (entries are capped, so a
/// flood of invented node IDs cannot grow the API server's objects and the
/// consumer's discovery fan-out without bound). An entry without a known
/// expiry (hand-made) keeps its address.
///
/// The key fingerprint follows the address's rule: a live entry keeps the
/// key it was created with. An advertisement with another key, or with
/// none, for a live pinned entry is a [`Refresh::KeyConflict`] (anyone on
/// the LAN can send advertisements, and dropping or flipping a pinned key is
/// what a spoofer would do); it does not refresh the entry either, so a
/// forged key can only hold an entry while its sender keeps advertising.
/// Once the entry has expired, the next advertisement takes it over with
/// whatever key (or none) it carries: key rotation.
///
/// One exception: a live entry *without* a key adopts the first key its
/// node advertises ([`Refresh::Adopt`]), e.g. a node upgraded from Go, or
/// one of several replicas already sending it. Pinning only narrows what
/// the consumer accepts: without a key it talks plain HTTP to the address,
/// which whoever can intercept that address can answer anyway, and with a
/// key it accepts only that key at the same address. A forged key can thus
/// make a keyless (Go) peer unreachable while the forger keeps advertising
/// (the Go peer's own keyless advertisements then conflict and no longer
/// refresh the entry, so once the forger stops it expires and comes back
/// keyless), but never lets anyone impersonate it beyond what plain HTTP
/// already allowed; refusing adoption instead would cut a node that gains
/// a key off for up to a TTL (its keyed advertisements would not refresh
/// the keyless entry), or leave it unpinned for good if they did.
pub fn plan_refresh(
    current: Option<&Observed>,
    address: &str,
    fingerprint: Option<&str>,
    now: Timestamp,
    ttl: Duration,
    room: bool,
) -> Refresh {
    let Some(current) = current else {
        return if room {
            Refresh::Write { spec: true }
        } else {
            Refresh::Full
        };
    };
    let expired = current.expiry.is_some_and(|expiry| expiry <= now);
    if current.address != address {
        return if expired {
            Refresh::Write { spec: true }
        } else {
            Refresh::Conflict
        };
    }
    match (current.fingerprint.as_deref(), fingerprint) {
        (Some(pinned), Some(advertised)) if pinned == advertised => {}
        (Some(_), _) if expired => return Refresh::Write { spec: true },
        (Some(_), _) => return Refresh::KeyConflict,
        (None, Some(_)) if expired => return Refresh::Write { spec: true },
        (None, Some(_)) => return Refresh::Adopt,
        (None, None) => {}
    }
    let Some(expiry) = current.expiry else {
        return Refresh::Write { spec: false };
    };
    let remaining = expiry.duration_since(now);
    if remaining < half(ttl) {
        Refresh::Write { spec: false }
    } else {
        Refresh::Skip
    }
}

/// The expiry written now: `now + ttl`, rounded up to the whole second the
/// RFC 3339 form keeps (so the entry never lives shorter than `ttl`).
pub fn expiry(now: Timestamp, ttl: Duration) -> Timestamp {
    let exact = now.saturating_add(signed(ttl)).unwrap_or(Timestamp::MAX);
    let whole = exact.as_second();
    let up = if exact.subsec_nanosecond() > 0 {
        whole.saturating_add(1)
    } else {
        whole
    };
    Timestamp::from_second(up).unwrap_or(exact)
}

/// RFC 3339 with second precision in UTC, as Go writes it:
/// `2024-01-01T09:00:10Z`.
pub fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parses an RFC 3339 time; `None` when empty or malformed.
pub fn parse_time(s: &str) -> Option<Timestamp> {
    s.parse().ok()
}

/// What housekeeping does with one KnownCluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Still fresh, or not ours to judge.
    Keep,
    /// Expired: delete it.
    Delete,
}

/// Facts housekeeping judges a KnownCluster by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// `status.expirationTime` as stored ("" when there is no status).
    pub expiration_time: Option<&'a str>,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// Whether this network manager's field manager wrote the object.
    pub ours: bool,
}

/// Decides whether housekeeping deletes `entry` at `now`.
///
/// As in Go, an expiry in the past deletes, and an unparseable one from
/// someone else (a hand-made KnownCluster) keeps it. Unlike Go, an object
/// this manager created but whose status write never landed is not kept
/// forever: it is deleted once it is older than the TTL.
pub fn judge(entry: Entry<'_>, now: Timestamp, ttl: Duration) -> Verdict {
    match entry.expiration_time.and_then(parse_time) {
        Some(expiry) if expiry <= now => Verdict::Delete,
        Some(_) => Verdict::Keep,
        None => match entry.created {
            Some(created) if entry.ours && created.duration_until(now) > signed(ttl) => {
                Verdict::Delete
            }
            _ => Verdict::Keep,
        },
    }
}

fn half(ttl: Duration) -> SignedDuration {
    signed(ttl / 2)
}

fn signed(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TTL: Duration = Duration::from_secs(30);

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn observed(address: &str, expiry: Option<&str>) -> Observed {
        Observed {
            address: address.into(),
            fingerprint: None,
            expiry: expiry.map(at),
        }
    }

    fn pinned(address: &str, fingerprint: &str, expiry: Option<&str>) -> Observed {
        Observed {
            fingerprint: Some(fingerprint.into()),
            ..observed(address, expiry)
        }
    }

    const KEY_1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const KEY_2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn a_new_peer_writes_spec_and_status() {
        let now = at("2026-01-01T00:00:00Z");
        assert_eq!(
            plan_refresh(None, "10.0.0.1:1", None, now, TTL, true),
            Refresh::Write { spec: true }
        );
        assert_eq!(
            plan_refresh(None, "10.0.0.1:1", None, now, TTL, false),
            Refresh::Full
        );
    }

    #[test]
    fn a_refresh_writes_only_when_less_than_half_the_ttl_remains() {
        let cur = observed("a:1", Some("2026-01-01T00:00:30Z"));
        for (now, want) in [
            ("2026-01-01T00:00:00Z", Refresh::Skip),
            ("2026-01-01T00:00:15Z", Refresh::Skip),
            ("2026-01-01T00:00:15.5Z", Refresh::Write { spec: false }),
            ("2026-01-01T00:00:29Z", Refresh::Write { spec: false }),
            ("2026-01-01T00:01:00Z", Refresh::Write { spec: false }),
        ] {
            assert_eq!(
                plan_refresh(Some(&cur), "a:1", None, at(now), TTL, false),
                want,
                "{now}"
            );
        }
    }

    #[test]
    fn a_live_entry_keeps_its_address_an_expired_one_is_taken_over() {
        let now = at("2026-01-01T00:00:00Z");
        assert_eq!(
            plan_refresh(Some(&observed("a:1", None)), "a:1", None, now, TTL, true),
            Refresh::Write { spec: false }
        );
        let fresh = observed("a:1", Some("2026-01-01T00:00:30Z"));
        assert_eq!(
            plan_refresh(Some(&fresh), "b:2", None, now, TTL, true),
            Refresh::Conflict
        );
        assert_eq!(
            plan_refresh(Some(&observed("a:1", None)), "b:2", None, now, TTL, true),
            Refresh::Conflict,
            "a hand-made entry keeps its address"
        );
        let expired = observed("a:1", Some("2025-12-31T23:59:59Z"));
        assert_eq!(
            plan_refresh(Some(&expired), "b:2", None, now, TTL, false),
            Refresh::Write { spec: true }
        );
    }

    #[test]
    fn a_new_peer_is_created_with_its_key_or_without() {
        let now = at("2026-01-01T00:00:00Z");
        for key in [Some(KEY_1), None] {
            assert_eq!(
                plan_refresh(None, "a:1", key, now, TTL, true),
                Refresh::Write { spec: true },
                "{key:?}"
            );
        }
    }

    #[test]
    fn a_live_entry_keeps_its_first_key() {
        let now = at("2026-01-01T00:00:00Z");
        let live = pinned("a:1", KEY_1, Some("2026-01-01T00:00:30Z"));
        assert_eq!(
            plan_refresh(Some(&live), "a:1", Some(KEY_1), now, TTL, true),
            Refresh::Skip,
            "the same key refreshes as usual"
        );
        assert_eq!(
            plan_refresh(
                Some(&live),
                "a:1",
                Some(KEY_1),
                at("2026-01-01T00:00:20Z"),
                TTL,
                true
            ),
            Refresh::Write { spec: false }
        );
        for (other, when) in [
            (Some(KEY_2), "2026-01-01T00:00:00Z"),
            (None, "2026-01-01T00:00:00Z"),
            // Not even a refresh when the expiry nears: a forged key cannot
            // keep a real entry alive, nor a keyless one drop its key.
            (Some(KEY_2), "2026-01-01T00:00:29Z"),
            (None, "2026-01-01T00:00:29Z"),
        ] {
            assert_eq!(
                plan_refresh(Some(&live), "a:1", other, at(when), TTL, true),
                Refresh::KeyConflict,
                "{other:?} at {when}"
            );
        }
        let hand_made = pinned("a:1", KEY_1, None);
        assert_eq!(
            plan_refresh(Some(&hand_made), "a:1", Some(KEY_2), now, TTL, true),
            Refresh::KeyConflict,
            "a hand-pinned entry keeps its key"
        );
        // Another address is an address conflict whatever the key.
        assert_eq!(
            plan_refresh(Some(&live), "b:2", Some(KEY_1), now, TTL, true),
            Refresh::Conflict
        );
    }

    #[test]
    fn an_expired_entry_takes_a_new_key_or_none() {
        let now = at("2026-01-01T00:01:00Z");
        let expired = pinned("a:1", KEY_1, Some("2026-01-01T00:00:30Z"));
        for key in [Some(KEY_2), None] {
            assert_eq!(
                plan_refresh(Some(&expired), "a:1", key, now, TTL, false),
                Refresh::Write { spec: true },
                "rotation to {key:?}"
            );
        }
        assert_eq!(
            plan_refresh(Some(&expired), "a:1", Some(KEY_1), now, TTL, false),
            Refresh::Write { spec: false },
            "the same key only refreshes"
        );
        let keyless = observed("a:1", Some("2026-01-01T00:00:30Z"));
        assert_eq!(
            plan_refresh(Some(&keyless), "a:1", Some(KEY_1), now, TTL, false),
            Refresh::Write { spec: true }
        );
    }

    #[test]
    fn a_live_entry_without_a_key_adopts_the_first_one_advertised() {
        let now = at("2026-01-01T00:00:00Z");
        for keyless in [
            observed("a:1", Some("2026-01-01T00:00:30Z")),
            observed("a:1", None),
        ] {
            assert_eq!(
                plan_refresh(Some(&keyless), "a:1", Some(KEY_1), now, TTL, false),
                Refresh::Adopt,
                "{keyless:?}"
            );
            assert_eq!(
                plan_refresh(Some(&keyless), "b:2", Some(KEY_1), now, TTL, true),
                Refresh::Conflict,
                "but not at another address"
            );
        }
        // Once adopted, the key is pinned like any other.
        let adopted = pinned("a:1", KEY_1, Some("2026-01-01T00:00:30Z"));
        assert_eq!(
            plan_refresh(Some(&adopted), "a:1", None, now, TTL, true),
            Refresh::KeyConflict
        );
    }

    #[test]
    fn expiry_is_now_plus_ttl_rounded_up_to_the_second() {
        assert_eq!(
            format_time(expiry(at("2026-01-01T00:00:00Z"), TTL)),
            "2026-01-01T00:00:30Z"
        );
        assert_eq!(
            format_time(expiry(at("2026-01-01T00:00:00.2Z"), TTL)),
            "2026-01-01T00:00:31Z"
        );
    }

    #[test]
    fn go_timestamps_parse_and_garbage_does_not() {
        assert_eq!(
            parse_time("2024-01-01T09:00:10Z"),
            Some(at("2024-01-01T09:00:10Z"))
        );
        assert!(parse_time("2024-01-01T10:00:10+01:00").is_some());
        assert_eq!(parse_time(""), None);
        assert_eq!(parse_time("tomorrow"), None);
    }

    #[test]
    fn housekeeping_deletes_expired_and_orphaned_entries_only() {
        let now = at("2026-01-01T00:01:00Z");
        let old = Some(at("2026-01-01T00:00:00Z"));
        let young = Some(at("2026-01-01T00:00:50Z"));
        let e = |exp, created, ours| Entry {
            expiration_time: exp,
            created,
            ours,
        };
        let cases = [
            (e(Some("2026-01-01T00:00:59Z"), old, false), Verdict::Delete),
            (e(Some("2026-01-01T00:01:00Z"), old, true), Verdict::Delete),
            (e(Some("2026-01-01T00:01:01Z"), old, true), Verdict::Keep),
            // Hand-made without status: kept, as in Go.
            (e(None, old, false), Verdict::Keep),
            (e(Some("garbage"), old, false), Verdict::Keep),
            // Ours without status: deleted once older than the TTL.
            (e(None, old, true), Verdict::Delete),
            (e(Some(""), young, true), Verdict::Keep),
        ];
        for (entry, want) in cases {
            assert_eq!(judge(entry, now, TTL), want, "{entry:?}");
        }
    }
}
