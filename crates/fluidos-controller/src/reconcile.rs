//! Reconcile bookkeeping shared by every controller: metrics, per-object
//! backoff, and log lines that name the object.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::api_error::{self, ApiErrorKind};
use crate::metrics::Metrics;

/// Implemented by each controller's error type: which step failed (snake_case, also the metric label `reason`), and the API error underneath if any.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    /// The step that failed, snake_case (e.g. `apply_flavor`).
    fn step(&self) -> &'static str;
    /// The API error underneath, when the step was an API call.
    fn api_error(&self) -> Option<&kube::Error> {
        None
    }
}

/// Delay before retrying after a conflict: the read was stale, a fresh one
/// will most likely succeed, so neither wait long nor grow the backoff.
pub const CONFLICT_RETRY: Duration = Duration::from_millis(20);
/// First retry delay after a failure.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// The retry delay after the `attempt`-th consecutive failure (1-based):
/// 1 s, 2 s, 4 s, ... capped at 5 min (pure).
pub fn backoff_delay(attempt: u32) -> Duration {
    let exp = attempt.saturating_sub(1).min(16);
    BACKOFF_BASE.saturating_mul(1 << exp).min(BACKOFF_MAX)
}

/// `delay` lengthened by up to 10 % according to `noise` (pure), so objects
/// failing together do not all retry in the same instant.
pub fn with_jitter(delay: Duration, noise: u64) -> Duration {
    let per_mille = noise % 101;
    delay + delay * u32::try_from(per_mille).unwrap_or(0) / 1000
}

/// How a failed reconcile is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Soon, without growing the object's backoff (a stale read).
    Conflict,
    /// After the object's next backoff delay.
    Backoff,
}

/// Conflicts in a row retried at once before the object backs off like any
/// other failure (sustained contention must not become a busy loop).
pub const CONFLICTS_BEFORE_BACKOFF: u32 = 5;

/// How to retry the `attempt`-th failure in a row of an object, whose API
/// cause is `kind` (pure).
pub fn retry_for(kind: Option<ApiErrorKind>, attempt: u32) -> Retry {
    match kind {
        Some(ApiErrorKind::Conflict) if attempt <= CONFLICTS_BEFORE_BACKOFF => Retry::Conflict,
        _ => Retry::Backoff,
    }
}

/// `err` and its sources, joined by `: `, skipping a source whose text the
/// message before it already contains (thiserror's `"kube: {0}"` style) (pure).
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// `kind/namespace/name` (or `kind/name` when cluster-scoped): the backoff key and log name.
fn object_key<K>(obj: &K) -> String
where
    K: Resource,
    K::DynamicType: Default,
{
    let dt = K::DynamicType::default();
    let kind = K::kind(&dt);
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// Per-controller reconcile bookkeeping: metrics, per-object backoff, log lines naming the object.
#[derive(Clone, Debug)]
pub struct Reconciler {
    controller: &'static str,
    metrics: Metrics,
    failures: Arc<Mutex<HashMap<String, u32>>>,
    noise: RandomState,
}

impl Reconciler {
    /// Bookkeeping for the controller named `controller` (a metric label).
    pub fn new(controller: &'static str, metrics: &Metrics) -> Self {
        Reconciler {
            controller,
            metrics: metrics.clone(),
            failures: Arc::default(),
            noise: RandomState::new(),
        }
    }

    /// The controller's name.
    pub fn controller(&self) -> &'static str {
        self.controller
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        // A panic while holding the lock leaves only a counter map behind: keep using it.
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs one reconcile: counts it, times it into the duration histogram, resets the object's backoff on success, counts failures by `reason = err.step()`.
    pub async fn observe<K, E, F>(&self, obj: &K, reconcile: F) -> Result<Action, E>
    where
        K: Resource,
        K::DynamicType: Default,
        E: ReconcileError,
        F: Future<Output = Result<Action, E>>,
    {
        let started = Instant::now();
        let result = reconcile.await;
        self.metrics
            .controllers
            .reconciled(self.controller, started.elapsed());
        match &result {
            Ok(_) => {
                self.failures().remove(&object_key(obj));
            }
            Err(e) => self.metrics.controllers.failed(self.controller, e.step()),
        }
        result
    }

    /// Error policy for kube's Controller::run: a conflict (409) retries after ~20 ms without growing the backoff (the read was stale); otherwise backoff grows per object 1 s, 2 s, 4 s… capped at 5 min, with jitter; one warn line naming the object, the step and the error with its source chain.
    pub fn error_policy<K, E>(&self, obj: &K, err: &E) -> Action
    where
        K: Resource,
        K::DynamicType: Default,
        E: ReconcileError,
    {
        let key = object_key(obj);
        let kind = err.api_error().map(api_error::classify);
        let attempt = {
            let mut failures = self.failures();
            let n = failures.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        let retry_in = match retry_for(kind, attempt) {
            Retry::Conflict => CONFLICT_RETRY,
            Retry::Backoff => {
                let noise = self.noise.hash_one((&key, attempt));
                with_jitter(backoff_delay(attempt), noise)
            }
        };
        tracing::warn!(
            controller = self.controller,
            object = key,
            step = err.step(),
            api_error = kind.map(ApiErrorKind::as_str),
            attempt,
            ?retry_in,
            error = error_chain(err),
            "reconcile failed"
        );
        Action::requeue(retry_in)
    }
}

/// Drains a controller's output stream, logging each outcome at debug level with the object (errors were already logged by error_policy); never ends early on error. A deleted object's backoff is forgotten.
pub async fn drain<K, E, S>(reconciler: Reconciler, stream: S)
where
    S: Stream<Item = Result<(ObjectRef<K>, Action), controller::Error<E, watcher::Error>>>,
    K: Resource,
    E: std::error::Error + 'static,
{
    let controller = reconciler.controller;
    let reconciler = &reconciler;
    stream
        .for_each(|r| async move {
            match r {
                Ok((obj, action)) => tracing::debug!(controller, %obj, ?action, "reconciled"),
                // A deleted object's last event.
                Err(controller::Error::ObjectNotFound(obj)) => {
                    let key = match obj.namespace.as_deref() {
                        Some(ns) => format!("{}/{ns}/{}", obj.dyntype.kind, obj.name),
                        None => format!("{}/{}", obj.dyntype.kind, obj.name),
                    };
                    reconciler.failures().remove(&key);
                    tracing::debug!(controller, %obj, "object gone");
                }
                // Already logged by the error policy.
                Err(controller::Error::ReconcilerFailed(_, obj)) => {
                    tracing::debug!(controller, %obj, "reconcile failed");
                }
                Err(controller::Error::QueueError(e)) => {
                    tracing::warn!(
                        controller,
                        error = error_chain(&e),
                        "watch failed; retrying"
                    );
                }
                Err(e) => tracing::warn!(controller, error = error_chain(&e), "controller error"),
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Node};
    use kube::core::Status;

    #[derive(Debug, thiserror::Error)]
    enum TestError {
        #[error("writing the flavor: {0}")]
        Write(#[source] kube::Error),
        #[error("building")]
        Build,
    }

    impl ReconcileError for TestError {
        fn step(&self) -> &'static str {
            match self {
                TestError::Write(_) => "write_flavor",
                TestError::Build => "build",
            }
        }
        fn api_error(&self) -> Option<&kube::Error> {
            match self {
                TestError::Write(e) => Some(e),
                TestError::Build => None,
            }
        }
    }

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Status::failure("stale", reason).with_code(code).boxed())
    }

    fn cm(name: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c
    }

    #[test]
    fn backoff_grows_and_caps() {
        let secs: Vec<u64> = (1..=10).map(|a| backoff_delay(a).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
        assert_eq!(backoff_delay(0), BACKOFF_BASE);
        assert_eq!(backoff_delay(u32::MAX), BACKOFF_MAX);
    }

    #[test]
    fn jitter_adds_at_most_ten_percent() {
        let d = Duration::from_secs(10);
        assert_eq!(with_jitter(d, 0), d);
        assert_eq!(with_jitter(d, 100), Duration::from_secs(11));
        for noise in [1, 57, 999, u64::MAX] {
            let j = with_jitter(d, noise);
            assert!(j >= d && j <= Duration::from_secs(11), "{j:?}");
        }
    }

    #[test]
    fn retry_classification() {
        assert_eq!(retry_for(Some(ApiErrorKind::Conflict), 1), Retry::Conflict);
        assert_eq!(
            retry_for(Some(ApiErrorKind::Conflict), CONFLICTS_BEFORE_BACKOFF),
            Retry::Conflict
        );
        assert_eq!(
            retry_for(Some(ApiErrorKind::Conflict), CONFLICTS_BEFORE_BACKOFF + 1),
            Retry::Backoff,
            "sustained contention backs off"
        );
        for k in [
            ApiErrorKind::Throttled,
            ApiErrorKind::Unavailable,
            ApiErrorKind::NotFound,
            ApiErrorKind::AlreadyExists,
        ] {
            assert_eq!(retry_for(Some(k), 1), Retry::Backoff, "{k}");
        }
        assert_eq!(retry_for(None, 1), Retry::Backoff);
    }

    #[test]
    fn chain_skips_repeated_sources() {
        let e = TestError::Write(api(500, "InternalError"));
        let chain = error_chain(&e);
        assert!(
            chain.starts_with("writing the flavor: ApiError: stale"),
            "{chain}"
        );
        assert_eq!(chain.matches("stale").count(), 2, "{chain}"); // Display + Debug of Status, once
    }

    #[test]
    fn keys_name_kind_namespace_and_name() {
        assert_eq!(object_key(&cm("a")), "ConfigMap/ns/a");
        let mut n = Node::default();
        n.metadata.name = Some("w1".into());
        assert_eq!(object_key(&n), "Node/w1");
    }

    fn requeue_secs(a: &Action) -> f64 {
        // Action exposes its delay only through Debug.
        let text = format!("{a:?}");
        let start = text.find("Some(").map(|i| i + 5).unwrap_or(0);
        let end = text[start..]
            .find(')')
            .map(|i| i + start)
            .unwrap_or(text.len());
        let d = &text[start..end];
        if let Some(ms) = d.strip_suffix("ms") {
            ms.parse::<f64>().unwrap_or(f64::NAN) / 1000.0
        } else {
            d.trim_end_matches('s').parse().unwrap_or(f64::NAN)
        }
    }

    #[tokio::test]
    async fn policy_grows_per_object_resets_on_success_and_bounds_conflict_retries() {
        let metrics = Metrics::new();
        let r = Reconciler::new("test", &metrics);
        let (a, b) = (cm("a"), cm("b"));
        let build = TestError::Build;
        let d1 = requeue_secs(&r.error_policy(&a, &build));
        let d2 = requeue_secs(&r.error_policy(&a, &build));
        let d3 = requeue_secs(&r.error_policy(&a, &build));
        assert!((1.0..=1.1).contains(&d1), "{d1}");
        assert!((2.0..=2.2).contains(&d2), "{d2}");
        assert!((4.0..=4.4).contains(&d3), "{d3}");
        // Another object has its own backoff.
        assert!((1.0..=1.1).contains(&requeue_secs(&r.error_policy(&b, &build))));
        // A conflict is retried at once, but counts: sustained contention
        // ends up backing off too.
        let conflict = TestError::Write(api(409, "Conflict"));
        assert_eq!(requeue_secs(&r.error_policy(&a, &conflict)), 0.02);
        assert!((16.0..=17.6).contains(&requeue_secs(&r.error_policy(&a, &build))));
        let c = cm("contended");
        for _ in 0..CONFLICTS_BEFORE_BACKOFF {
            assert_eq!(requeue_secs(&r.error_policy(&c, &conflict)), 0.02);
        }
        assert!(requeue_secs(&r.error_policy(&c, &conflict)) >= 32.0);
        // Success resets.
        let ok: Result<Action, TestError> =
            r.observe(&a, async { Ok(Action::await_change()) }).await;
        assert!(ok.is_ok());
        assert!((1.0..=1.1).contains(&requeue_secs(&r.error_policy(&a, &build))));
        let failed: Result<Action, TestError> =
            r.observe(&a, async { Err(TestError::Build) }).await;
        assert!(failed.is_err());
        let text = metrics.encode();
        assert!(
            text.contains(r#"fluidos_controller_reconciles_total{controller="test"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"fluidos_controller_reconcile_failures_total{controller="test",reason="build"} 1"#
            ),
            "{text}"
        );
    }
}
