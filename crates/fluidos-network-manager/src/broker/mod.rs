//! The AMQP broker client: FLUIDOS nodes beyond the LAN find each other
//! through a RabbitMQ broker, as the Go node's `broker_client.go` does
//! (reference §3.10), with §8.2 bug 28 fixed; see `docs/network-manager.md`.
//!
//! Each `Broker` object of the node's namespace gets one client
//! ([`run`]): it reads the certificate Secrets the Broker names (from the
//! Broker's namespace), connects with AMQP 0-9-1 over TLS presenting the
//! client certificate (SASL EXTERNAL: the broker user is the certificate's
//! CN), enables publisher confirms, and then
//!
//! * as a publisher, every interval publishes this node's announcement
//!   (its identity and `spec.metric`) to `announcements_exchange`;
//! * as a subscriber, every interval publishes `spec.rule` to
//!   `rules_exchange` and consumes the queue named after its CN, where the
//!   broker's router delivers the announcements the rule matches; each
//!   becomes a KnownCluster through the network manager's writer.
//!
//! A lost connection is retried with backoff and the Broker's `Connected`
//! condition says why it is down (missing or wrong Secret, refused
//! certificate, unreachable broker, ...). The node never deletes a Broker.
//!
//! Decisions are pure and unit-tested: [`spec`] (role, address, messages to
//! send), [`message`] (formats, checks of what is received), [`status`]
//! (conditions, backoff), [`tls`] (Secret contents).

mod client;
mod connections;
mod controller;
mod error;
pub mod message;
pub mod spec;
pub mod status;
pub mod tls;

use std::time::Duration;

pub use connections::{BrokerConnections, ConnectionTable, Link};
pub use controller::run;
pub use error::BrokerError;

/// Exchange of announcements (Go).
pub const ANNOUNCEMENTS_EXCHANGE: &str = "announcements_exchange";
/// Exchange of routing rules (Go).
pub const RULES_EXCHANGE: &str = "rules_exchange";

/// The node the broker clients announce.
#[derive(Clone, Debug)]
pub struct LocalNode {
    /// Its identity (the announcement's `domain`, `nodeID` and `ip`).
    pub identity: fluidos_api::NodeIdentity,
    /// Its REAR key, announced so that peers pin it (none: a Go node's
    /// announcement).
    pub fingerprint: Option<fluidos_rear_identity::Fingerprint>,
}

/// How the broker clients behave; [`BrokerSettings::new`] has the Go node's
/// timings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerSettings {
    /// Namespace of the Broker objects, their Secrets and the KnownClusters.
    pub namespace: String,
    /// Period of announcements and rules (Go: 10 s). The KnownCluster TTL
    /// should be at least three periods.
    pub interval: Duration,
    /// Expiration of published messages in the broker (Go: 30 s).
    pub message_ttl: Duration,
    /// Wait for a publisher confirm (Go: 15 s).
    pub confirm_timeout: Duration,
    /// Wait for a connection (TCP, TLS and AMQP handshakes).
    pub connect_timeout: Duration,
    /// AMQP heartbeat, seconds (Go: 5).
    pub heartbeat: u16,
    /// First wait before reconnecting.
    pub backoff_min: Duration,
    /// Longest wait before reconnecting (and how long a session must have
    /// lived for the backoff to start again from `backoff_min`).
    pub backoff_max: Duration,
}

impl BrokerSettings {
    /// The Go node's timings, and reconnection after 1 s doubling to 60 s.
    pub fn new(namespace: &str) -> Self {
        BrokerSettings {
            namespace: namespace.to_owned(),
            interval: Duration::from_secs(10),
            message_ttl: Duration::from_secs(30),
            confirm_timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(10),
            heartbeat: 5,
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
        }
    }
}
