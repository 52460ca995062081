//! Timestamps and phase setters with the Go node's semantics.

use fluidos_api::{Phase, PhaseStatus};

/// Now, RFC 3339 with second precision in UTC, as upstream writes it.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Seconds elapsed since an RFC 3339 time; `None` when it does not parse.
pub fn seconds_since(rfc3339: &str) -> Option<i64> {
    let t: jiff::Timestamp = rfc3339.parse().ok()?;
    Some(jiff::Timestamp::now().as_second() - t.as_second())
}

/// Upstream's `SetPhase`: phase, message, lastChangeTime and endTime.
pub fn set_phase(s: &mut PhaseStatus, phase: Phase, message: &str) {
    let t = now();
    s.phase = phase;
    s.message = Some(message.to_owned());
    s.last_change_time = Some(t.clone());
    s.end_time = Some(t);
}

/// Upstream's sub-phase setters also bump `lastChangeTime`.
pub fn touch(s: &mut PhaseStatus) {
    s.last_change_time = Some(now());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        let t = now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z'));
        assert!(seconds_since(&t).is_some_and(|s| (0..5).contains(&s)));
        assert_eq!(seconds_since("garbage"), None);
        let mut p = PhaseStatus::default();
        set_phase(&mut p, Phase::TimedOut, "x");
        assert_eq!(p.phase, Phase::TimedOut);
        assert_eq!(p.end_time, p.last_change_time);
    }
}
