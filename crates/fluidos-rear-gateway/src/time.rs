//! Wall-clock timestamps in the one RFC 3339 shape the ledger compares as strings.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// `YYYY-MM-DDTHH:MM:SSZ`: fixed width, UTC, so string order is time order
/// (`fluidos_api::ledger::committed` relies on that).
const FORMAT: &str = "%Y-%m-%dT%H:%M:%SZ";

/// The current time.
pub(crate) fn now() -> Timestamp {
    Timestamp::now()
}

/// `t` formatted for the ledger and the wire, truncated to the second.
pub(crate) fn format(t: Timestamp) -> String {
    t.strftime(FORMAT).to_string()
}

/// `now` in ledger format.
pub(crate) fn now_string() -> String {
    format(now())
}

/// `now + ttl`, rounded *up* to the second so a short TTL is never cut short.
pub(crate) fn expiry_after(ttl: Duration) -> String {
    let ttl = SignedDuration::try_from(ttl).unwrap_or(SignedDuration::MAX);
    let t = now().saturating_add(ttl).unwrap_or(Timestamp::MAX);
    let t = if t.subsec_nanosecond() != 0 {
        t.saturating_add(SignedDuration::from_secs(1))
            .unwrap_or(Timestamp::MAX)
    } else {
        t
    };
    format(t)
}

/// True when an RFC 3339 expiry is at or before now; unparsable means expired.
pub(crate) fn is_past(expiry: &str) -> bool {
    expiry
        .parse::<Timestamp>()
        .map(|t| t <= now())
        .unwrap_or(true)
}

/// True when an RFC 3339 expiry passed more than `grace` ago; unparsable means so.
pub(crate) fn is_past_by(expiry: &str, grace: Duration) -> bool {
    let grace = SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX);
    expiry
        .parse::<Timestamp>()
        .map(|t| t.saturating_add(grace).unwrap_or(Timestamp::MAX) <= now())
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_width_utc() {
        let s = now_string();
        assert_eq!(s.len(), 20, "{s}");
        assert!(s.ends_with('Z'));
        let later = expiry_after(Duration::from_secs(3600));
        assert!(later > s);
        assert!(!is_past(&later));
        assert!(is_past("2000-01-01T00:00:00Z"));
        assert!(is_past("garbage"));
        assert!(is_past_by("2000-01-01T00:00:00Z", Duration::from_secs(600)));
        assert!(!is_past_by(&now_string(), Duration::from_secs(600)));
    }
}
