//! Wall-clock timestamps in the one RFC 3339 shape the ledger compares as strings.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// `YYYY-MM-DDTHH:MM:SSZ`: fixed width, UTC, so string order is time order
/// (`fluidos_api::ledger::committed` relies on that).
const FORMAT: &str = "%Y-%m-%dT%H:%M:%SZ";

/// `YYYY-MM-DDTHH:MM:SSZ`, UTC, second precision: string order is time order (the ledger relies on it).
pub fn format(t: Timestamp) -> String {
    t.strftime(FORMAT).to_string()
}

/// The current time in ledger format.
pub fn now_string() -> String {
    format(Timestamp::now())
}

/// Parses an RFC 3339 timestamp (any offset, any precision).
pub fn parse(rfc3339: &str) -> Option<Timestamp> {
    rfc3339.parse().ok()
}

/// Whole seconds from `rfc3339` to now (negative when it is in the future).
pub fn seconds_since(rfc3339: &str) -> Option<i64> {
    seconds_between(rfc3339, Timestamp::now())
}

/// Whole seconds from `earlier_rfc3339` to `now` (pure).
pub fn seconds_between(earlier_rfc3339: &str, now: Timestamp) -> Option<i64> {
    let earlier = parse(earlier_rfc3339)?;
    Some(now.duration_since(earlier).as_secs())
}

/// `t + ttl`, rounded *up* to the second so a short TTL is never cut short (pure).
pub fn expiry_at(t: Timestamp, ttl: Duration) -> String {
    let ttl = SignedDuration::try_from(ttl).unwrap_or(SignedDuration::MAX);
    let t = t.saturating_add(ttl).unwrap_or(Timestamp::MAX);
    let t = if t.subsec_nanosecond() != 0 {
        t.saturating_add(SignedDuration::from_secs(1))
            .unwrap_or(Timestamp::MAX)
    } else {
        t
    };
    format(t)
}

/// Now + `ttl` in ledger format, rounded up to the second.
pub fn expiry_after(ttl: Duration) -> String {
    expiry_at(Timestamp::now(), ttl)
}

/// True when `expiry` is at or before `now`; unparsable means past (pure).
pub fn is_past_at(expiry: &str, now: Timestamp) -> bool {
    parse(expiry).is_none_or(|t| t <= now)
}

/// True when an RFC 3339 expiry is at or before now; unparsable means past.
pub fn is_past(expiry: &str) -> bool {
    is_past_at(expiry, Timestamp::now())
}

/// True when `expiry` passed more than `grace` ago; unparsable means so.
pub fn is_past_by(expiry: &str, grace: Duration) -> bool {
    let grace = SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX);
    parse(expiry)
        .is_none_or(|t| t.saturating_add(grace).unwrap_or(Timestamp::MAX) <= Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn fixed_width_utc_second_precision() {
        assert_eq!(
            format(ts("2026-01-02T03:04:05.999+02:00")),
            "2026-01-02T01:04:05Z"
        );
        let s = now_string();
        assert_eq!(s.len(), 20, "{s}");
        assert!(s.ends_with('Z'));
        // String order is time order.
        assert!(format(ts("2026-01-02T03:04:05Z")) < format(ts("2026-01-02T03:04:06Z")));
    }

    #[test]
    fn expiry_rounds_up() {
        let t = ts("2026-01-01T00:00:00.200Z");
        assert_eq!(
            expiry_at(t, Duration::from_secs(10)),
            "2026-01-01T00:00:11Z"
        );
        let t = ts("2026-01-01T00:00:00Z");
        assert_eq!(
            expiry_at(t, Duration::from_secs(10)),
            "2026-01-01T00:00:10Z"
        );
        assert_eq!(
            expiry_at(t, Duration::from_millis(1)),
            "2026-01-01T00:00:01Z"
        );
        assert!(!is_past(&expiry_after(Duration::from_secs(3600))));
    }

    #[test]
    fn past_and_seconds() {
        let now = ts("2026-01-01T00:01:00Z");
        assert!(is_past_at("2026-01-01T00:01:00Z", now));
        assert!(!is_past_at("2026-01-01T00:01:01Z", now));
        assert!(is_past_at("garbage", now));
        assert!(is_past("2000-01-01T00:00:00Z"));
        assert!(is_past_by("2000-01-01T00:00:00Z", Duration::from_secs(600)));
        assert!(!is_past_by(&now_string(), Duration::from_secs(600)));
        assert_eq!(seconds_between("2026-01-01T00:00:00Z", now), Some(60));
        assert_eq!(seconds_between("2026-01-01T00:02:00Z", now), Some(-60));
        assert_eq!(seconds_between("nope", now), None);
        assert!(seconds_since("2000-01-01T00:00:00Z").is_some_and(|s| s > 0));
        assert_eq!(
            parse("2026-01-01T00:00:00Z"),
            Some(ts("2026-01-01T00:00:00Z"))
        );
    }
}
