//! What a Broker's status says, and when it is written: decisions are pure
//! ([`Connection::condition`], [`next_backoff`]); [`StatusWriter`] writes
//! only when the condition changes, so a broker that stays down costs no
//! write per retry.

use std::time::Duration;

use fluidos_api::network::Broker;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde_json::json;

use crate::lifecycle;
use crate::metrics::NetworkMetrics;

/// The one condition type this client maintains.
pub const CONDITION: &str = "Connected";
/// Field manager of the status writes.
pub const FIELD_MANAGER: &str = "fluidos-broker-client";
/// Longest condition message written (errors can carry long chains).
const MAX_MESSAGE: usize = 1024;

/// The connection state of one Broker, as its status shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Connection {
    /// Connected; the queue is consumed and/or announcements are confirmed.
    Up {
        /// Common name the broker knows this node by.
        user: String,
    },
    /// Not connected (yet, or any more), and why.
    Down {
        /// CamelCase reason (`SecretMissing`, `TlsRefused`, `ConnectionLost`, ...).
        reason: &'static str,
        /// Human-readable detail (the error chain; never secret contents).
        message: String,
    },
}

impl Connection {
    /// The `Connected` condition for this state, keeping
    /// `lastTransitionTime` from `previous` when the status did not flip.
    pub fn condition(
        &self,
        generation: Option<i64>,
        previous: Option<&Condition>,
        now: Timestamp,
    ) -> Condition {
        let (status, reason, message) = match self {
            Connection::Up { user } => ("True", "Connected", format!("connected as {user:?}")),
            Connection::Down { reason, message } => ("False", *reason, truncate(message)),
        };
        let last_transition_time = match previous {
            Some(p) if p.status == status => p.last_transition_time.clone(),
            _ => Time(now),
        };
        Condition {
            type_: CONDITION.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: generation,
            last_transition_time,
        }
    }
}

fn truncate(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// Whether `next` says something `written` did not (the transition time
/// alone is not news).
pub fn changed(written: Option<&Condition>, next: &Condition) -> bool {
    written.is_none_or(|w| {
        w.status != next.status
            || w.reason != next.reason
            || w.message != next.message
            || w.observed_generation != next.observed_generation
    })
}

/// The wait before the next connection attempt: doubling from `min` up to
/// `max`, with up to a quarter of jitter (from `jitter` in `0..1`) so that
/// nodes cut off together do not return together.
pub fn next_backoff(
    previous: Option<Duration>,
    min: Duration,
    max: Duration,
    jitter: f64,
) -> Duration {
    let base = match previous {
        None => min,
        Some(p) => p.saturating_mul(2).clamp(min, max),
    };
    let jitter = jitter.clamp(0.0, 1.0);
    base.mul_f64(1.0 - jitter / 4.0).max(min.min(max))
}

/// Writes one Broker's status.
#[derive(Debug)]
pub struct StatusWriter {
    api: Api<Broker>,
    name: String,
    generation: Option<i64>,
    written: Option<Condition>,
    metrics: NetworkMetrics,
}

impl StatusWriter {
    /// For Broker `name` (whose spec is at `generation`) in `api`'s namespace.
    pub fn new(
        api: Api<Broker>,
        name: &str,
        generation: Option<i64>,
        metrics: NetworkMetrics,
    ) -> Self {
        StatusWriter {
            api,
            name: name.to_owned(),
            generation,
            written: None,
            metrics,
        }
    }

    /// Shows `state` on the Broker unless it already does. A failed write
    /// is logged and counted, and tried again by the next report.
    pub async fn report(&mut self, state: &Connection) {
        let now = Timestamp::now();
        let next = state.condition(self.generation, self.written.as_ref(), now);
        if !changed(self.written.as_ref(), &next) {
            return;
        }
        // Go's `UpdateStatus()` fields, required by its schema: now, now + 10 s.
        let expiry = lifecycle::expiry(now, Duration::from_secs(10));
        let patch = json!({
            "apiVersion": Broker::api_version(&()),
            "kind": Broker::kind(&()),
            "metadata": {"name": self.name},
            "status": {
                "lastUpdateTime": lifecycle::format_time(now),
                "expirationTime": lifecycle::format_time(expiry),
                "conditions": [next],
            },
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match self
            .api
            .patch_status(&self.name, &params, &Patch::Apply(patch))
            .await
        {
            Ok(_) => {
                self.metrics.broker_status_written(true);
                self.written = Some(next);
            }
            // Deleted meanwhile: the controller stops this client.
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                self.metrics.broker_status_written(false);
                tracing::warn!(broker = %self.name, error = %e, "writing the Broker status failed; will retry");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn down(reason: &'static str, message: &str) -> Connection {
        Connection::Down {
            reason,
            message: message.into(),
        }
    }

    #[test]
    fn conditions_and_transitions() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let a =
            down("SecretMissing", "Secret fluidos/cl does not exist").condition(Some(2), None, t0);
        assert_eq!(
            (a.type_.as_str(), a.status.as_str(), a.reason.as_str()),
            ("Connected", "False", "SecretMissing")
        );
        assert_eq!(a.observed_generation, Some(2));
        // Still down for another reason: same transition time, but news.
        let b = down("Unreachable", "refused").condition(Some(2), Some(&a), t1);
        assert_eq!(b.last_transition_time, a.last_transition_time);
        assert!(changed(Some(&a), &b));
        // The same again is not news.
        let b2 = down("Unreachable", "refused").condition(Some(2), Some(&b), t1);
        assert!(!changed(Some(&b), &b2));
        // Up: a transition.
        let c = Connection::Up {
            user: "node-a".into(),
        }
        .condition(Some(2), Some(&b), t1);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "Connected")
        );
        assert_eq!(c.last_transition_time, Time(t1));
        assert!(changed(None, &c));
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_MESSAGE);
        let c = down("X", &long).condition(None, None, Timestamp::UNIX_EPOCH);
        assert!(c.message.len() <= MAX_MESSAGE + 3);
        assert!(c.message.ends_with("..."));
    }

    #[test]
    fn backoff_doubles_to_the_cap_with_bounded_jitter() {
        let (min, max) = (Duration::from_secs(1), Duration::from_secs(60));
        let mut d = None;
        let mut seen = vec![];
        for _ in 0..10 {
            let next = next_backoff(d, min, max, 0.0);
            seen.push(next.as_secs());
            d = Some(next);
        }
        assert_eq!(seen, [1, 2, 4, 8, 16, 32, 60, 60, 60, 60]);
        let j = next_backoff(Some(Duration::from_secs(8)), min, max, 1.0);
        assert_eq!(j, Duration::from_secs(12), "16 s less a quarter");
        assert_eq!(next_backoff(None, min, max, 1.0), min, "never under min");
    }
}
