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

/// Network manager counters; clones share values.
#[derive(Clone, Debug, Default)]
pub struct NetworkMetrics {
    received: Counter,
    dropped: Family<ReasonLabels, Counter>,
    sent: Counter,
    send_failures: Counter,
    writes: Family<KindLabels, Counter>,
    failures: Family<StepLabels, Counter>,
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
