//! Phase setters with the Go node's semantics, at a given time so that the
//! state machines stay pure.

use fluidos_api::{Phase, PhaseStatus};

pub use fluidos_controller::time::{format, now_string, seconds_between};

/// Upstream's `SetPhase`: phase, message, lastChangeTime and endTime, at `now`.
pub fn set_phase_at(s: &mut PhaseStatus, phase: Phase, message: &str, now: &str) {
    s.phase = phase;
    s.message = Some(message.to_owned());
    s.last_change_time = Some(now.to_owned());
    s.end_time = Some(now.to_owned());
}

/// Upstream's sub-phase setters also bump `lastChangeTime`.
pub fn touch_at(s: &mut PhaseStatus, now: &str) {
    s.last_change_time = Some(now.to_owned());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_phase_moves_both_times() {
        let mut p = PhaseStatus::default();
        set_phase_at(&mut p, Phase::TimedOut, "x", "2026-12-01T00:00:00Z");
        assert_eq!(p.phase, Phase::TimedOut);
        assert_eq!(p.message.as_deref(), Some("x"));
        assert_eq!(p.end_time, p.last_change_time);
        touch_at(&mut p, "2026-12-01T00:00:05Z");
        assert_eq!(p.last_change_time.as_deref(), Some("2026-12-01T00:00:05Z"));
        assert_eq!(p.end_time.as_deref(), Some("2026-12-01T00:00:00Z"));
    }
}
