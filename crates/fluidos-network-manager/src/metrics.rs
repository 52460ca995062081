//! Counters of the network manager, in prometheus-client form so that they
//! can be registered in the node's registry; readable directly by tests and
//! the benchmark.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// A single `reason` label (why a datagram was dropped).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// [`crate::advertisement::Rejection::reason`], `own` or `backlog`.
    pub reason: String,
}

/// A single `kind` label (which KnownCluster write).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `spec`, `status` or `delete`.
    pub kind: String,
}

/// A single `step` label (which API call failed).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    /// [`crate::Error::step`].
    pub step: String,
}

/// A single `exchange` label (where a broker message was published).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExchangeLabels {
    /// `announcements_exchange` or `rules_exchange`.
    pub exchange: String,
}

/// A single `result` label (how a broker connection attempt ended).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `connected`, or the reason it failed (`crate::broker::BrokerError::reason`).
    pub result: String,
}

/// Network manager counters; clones share values.
#[derive(Clone, Debug, Default)]
pub struct NetworkMetrics {
    received: Counter,
    dropped: Family<ReasonLabels, Counter>,
    sent: Counter,
    send_failures: Counter,
    writes: Family<KindLabels, Counter>,
    failures: Family<StepLabels, Counter>,
    broker_connects: Family<ResultLabels, Counter>,
    broker_published: Family<ExchangeLabels, Counter>,
    broker_publish_failures: Family<ExchangeLabels, Counter>,
    broker_received: Counter,
    broker_dropped: Family<ReasonLabels, Counter>,
    broker_status_writes: Counter,
    broker_status_failures: Counter,
}

impl NetworkMetrics {
    /// Registers every counter in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "fluidos_multicast_datagrams_received",
            "Multicast datagrams received",
            self.received.clone(),
        );
        registry.register(
            "fluidos_multicast_datagrams_dropped",
            "Multicast datagrams not acted on, per reason",
            self.dropped.clone(),
        );
        registry.register(
            "fluidos_multicast_advertisements_sent",
            "Advertisements this node multicast",
            self.sent.clone(),
        );
        registry.register(
            "fluidos_multicast_send_failures",
            "Advertisements that could not be sent",
            self.send_failures.clone(),
        );
        registry.register(
            "fluidos_knowncluster_writes",
            "API writes of KnownClusters, per kind (spec, status, delete)",
            self.writes.clone(),
        );
        registry.register(
            "fluidos_knowncluster_api_failures",
            "Failed KnownCluster API calls, per step (retried later)",
            self.failures.clone(),
        );
        registry.register(
            "fluidos_broker_connects",
            "AMQP broker connection attempts, per result (connected, or why not)",
            self.broker_connects.clone(),
        );
        registry.register(
            "fluidos_broker_messages_published",
            "Broker messages published and confirmed, per exchange",
            self.broker_published.clone(),
        );
        registry.register(
            "fluidos_broker_publish_failures",
            "Broker messages not confirmed (nack, timeout, connection lost), per exchange",
            self.broker_publish_failures.clone(),
        );
        registry.register(
            "fluidos_broker_messages_received",
            "Messages received from brokers",
            self.broker_received.clone(),
        );
        registry.register(
            "fluidos_broker_messages_dropped",
            "Broker messages not acted on, per reason",
            self.broker_dropped.clone(),
        );
        registry.register(
            "fluidos_broker_status_writes",
            "Writes of Broker statuses",
            self.broker_status_writes.clone(),
        );
        registry.register(
            "fluidos_broker_status_failures",
            "Failed writes of Broker statuses (retried)",
            self.broker_status_failures.clone(),
        );
    }

    /// Counts one broker connection attempt ending in `result`.
    pub fn broker_connect(&self, result: &str) {
        self.broker_connects
            .get_or_create(&ResultLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Counts one broker message confirmed (`ok`) or not, on `exchange`.
    pub fn broker_published(&self, exchange: &str, ok: bool) {
        let family = if ok {
            &self.broker_published
        } else {
            &self.broker_publish_failures
        };
        family
            .get_or_create(&ExchangeLabels {
                exchange: exchange.to_owned(),
            })
            .inc();
    }

    /// Counts one message received from a broker.
    pub fn broker_received(&self) {
        self.broker_received.inc();
    }

    /// Counts one broker message dropped for `reason`.
    pub fn broker_dropped(&self, reason: &str) {
        self.broker_dropped
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts one Broker status write, or a failed one.
    pub fn broker_status_written(&self, ok: bool) {
        if ok {
            self.broker_status_writes.inc();
        } else {
            self.broker_status_failures.inc();
        }
    }

    /// Broker connection attempts that ended in `result` so far.
    pub fn broker_connect_count(&self, result: &str) -> u64 {
        self.broker_connects
            .get_or_create(&ResultLabels {
                result: result.to_owned(),
            })
            .get()
    }

    /// Broker messages confirmed on `exchange` so far.
    pub fn broker_published_count(&self, exchange: &str) -> u64 {
        self.broker_published
            .get_or_create(&ExchangeLabels {
                exchange: exchange.to_owned(),
            })
            .get()
    }

    /// Messages received from brokers so far.
    pub fn broker_received_count(&self) -> u64 {
        self.broker_received.get()
    }

    /// Broker messages dropped for `reason` so far.
    pub fn broker_dropped_count(&self, reason: &str) -> u64 {
        self.broker_dropped
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .get()
    }

    /// Broker status writes so far.
    pub fn broker_status_write_count(&self) -> u64 {
        self.broker_status_writes.get()
    }

    /// Counts one datagram received.
    pub fn received(&self) {
        self.received.inc();
    }

    /// Counts one datagram dropped for `reason`.
    pub fn dropped(&self, reason: &str) {
        self.dropped
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts one advertisement sent.
    pub fn sent(&self) {
        self.sent.inc();
    }

    /// Counts one advertisement that could not be sent.
    pub fn send_failed(&self) {
        self.send_failures.inc();
    }

    /// Counts one API write of `kind`.
    pub fn wrote(&self, kind: &str) {
        self.writes
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts one failed API call at `step`.
    pub fn failed(&self, step: &str) {
        self.failures
            .get_or_create(&StepLabels {
                step: step.to_owned(),
            })
            .inc();
    }

    /// Datagrams received so far.
    pub fn received_count(&self) -> u64 {
        self.received.get()
    }

    /// Datagrams dropped for `reason` so far.
    pub fn dropped_count(&self, reason: &str) -> u64 {
        self.dropped
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .get()
    }

    /// Advertisements sent so far.
    pub fn sent_count(&self) -> u64 {
        self.sent.get()
    }

    /// API writes of `kind` so far.
    pub fn write_count(&self, kind: &str) -> u64 {
        self.writes
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .get()
    }

    /// Every API write so far (spec, status and delete).
    pub fn total_writes(&self) -> u64 {
        ["spec", "status", "delete"]
            .into_iter()
            .map(|k| self.write_count(k))
            .sum()
    }

    /// Failed API calls at `step` so far.
    pub fn failure_count(&self, step: &str) -> u64 {
        self.failures
            .get_or_create(&StepLabels {
                step: step.to_owned(),
            })
            .get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_register_and_encode() {
        let m = NetworkMetrics::default();
        let mut r = Registry::default();
        m.register(&mut r);
        m.received();
        m.dropped("too_large");
        m.wrote("status");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap_or_default();
        assert!(
            text.contains(r#"fluidos_multicast_datagrams_dropped_total{reason="too_large"} 1"#),
            "{text}"
        );
        assert!(
            text.contains("fluidos_multicast_datagrams_received_total 1"),
            "{text}"
        );
        assert_eq!(m.clone().dropped_count("too_large"), 1);
        assert_eq!(m.total_writes(), 1);
    }
}
