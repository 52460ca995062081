//! What a test does when a real component it needs is not on this machine.
//!
//! The tests run real components (the control plane, Liqo, helm, RabbitMQ,
//! kopium, a real node's packages, root for network namespaces, the upstream
//! files in `../shared/reference`), and a developer's machine may lack some:
//! there a test says why and passes ([`unavailable`] prints `SKIP: ...`).
//!
//! CI (`CI` set and non-empty, as `.ci/run`'s callers set it) provides every
//! one of them, so there a missing one is a broken CI setup, and a skip would
//! go unnoticed: `cargo test` captures a passing test's output, and nothing
//! but a failure reaches the CI log. So in CI [`unavailable`] panics instead,
//! naming what is missing.
//!
//! The one legitimate exception is a test that CI runs twice on purpose and
//! whose component only exists for the second run ([`deferred`]).

use std::fmt::Display;

/// The variable that marks a CI run.
pub const CI_ENV: &str = "CI";

/// Whether this is a CI run: `CI` set to a non-empty value.
pub fn in_ci() -> bool {
    std::env::var_os(CI_ENV).is_some_and(|v| !v.is_empty())
}

/// A component the test needs is missing, for `reason` (what it is and how
/// to get it). Outside CI prints `SKIP: {reason}` to stderr and returns, and
/// the caller returns too (the test passes). In CI it panics (the test
/// fails): CI must provide every component, and a skipped test would pass
/// unseen.
///
/// # Panics
///
/// When [`in_ci`].
#[track_caller]
pub fn unavailable(reason: impl Display) {
    unavailable_in(in_ci(), &reason);
}

#[track_caller]
fn unavailable_in(ci: bool, reason: &dyn Display) {
    assert!(
        !ci,
        "{reason}\n(CI is set, so this test fails instead of skipping: \
         CI must provide this component, see .ci/run)"
    );
    eprintln!("SKIP: {reason}");
}

/// The test cannot run in this pass but will in a later one that CI runs
/// for it (e.g. once the static release binary is built): prints
/// `DEFERRED: {reason}` to stderr and returns, in CI too; the caller returns
/// and the test passes. The later pass must check that the test ran there.
pub fn deferred(reason: impl Display) {
    eprintln!("DEFERRED: {reason}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_skips_outside_ci() {
        unavailable_in(false, &"a component");
    }

    #[test]
    fn unavailable_fails_in_ci_naming_the_reason() {
        let failure = std::panic::catch_unwind(|| unavailable_in(true, &"the frobnicator"))
            .expect_err("unavailable must fail in CI");
        let message = failure
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            message.starts_with("the frobnicator\n") && message.contains("CI must provide"),
            "{message}"
        );
    }

    #[test]
    fn deferred_never_fails() {
        deferred("a later pass");
    }
}
