//! The FLUIDOS network manager's LAN discovery: nodes multicast their
//! identity, and every advertisement heard creates or refreshes the
//! `knowncluster-<nodeID>` object that the consumer's Discovery queries.
//!
//! Wire-compatible with the Go `network-manager` (group, port, JSON, period),
//! with its bugs fixed; see `docs/network-manager.md`. Decisions live in
//! [`advertisement`] (what a datagram is worth) and [`lifecycle`] (when to
//! write, what expiry, when to delete); [`multicast`] and [`known_clusters`]
//! are the socket and API-server edges; [`NetworkManager`] ties them.
//! [`broker`] is the AMQP broker client, which feeds the same KnownCluster
//! writer through [`PeerSink`].

pub mod advertisement;
pub mod broker;
pub mod config;
pub mod known_clusters;
pub mod lifecycle;
mod manager;
pub mod metrics;
pub mod multicast;

use std::net::{Ipv4Addr, SocketAddrV4};

pub use advertisement::Advertisement;
pub use config::{MulticastSettings, Settings, SettingsError};
pub use known_clusters::KnownClusters;
pub use manager::{NetworkManager, PeerSink};
pub use metrics::NetworkMetrics;

/// Why the network manager could not start, or one of its API calls failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The settings cannot work.
    #[error("settings: {0}")]
    Settings(#[from] SettingsError),
    /// The host's interfaces could not be listed.
    #[error("listing network interfaces: {0}")]
    ListInterfaces(#[source] std::io::Error),
    /// `--cni-interface` names no interface with an IPv4 address.
    #[error("interface {0:?} does not exist or has no IPv4 address")]
    NoSuchInterface(String),
    /// The receiving socket could not bind or join the group.
    #[error(
        "joining multicast group {group} on {interface}: {source} (name the LAN interface with \
         --cni-interface, or switch LAN discovery off with --enable-local-discovery=false)"
    )]
    OpenReceiver {
        /// Group and port.
        group: SocketAddrV4,
        /// Interface address (`0.0.0.0`: routing decides).
        interface: Ipv4Addr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// The sending socket could not be set up.
    #[error("opening the multicast sender on {interface}: {source}")]
    OpenSender {
        /// Interface address.
        interface: Ipv4Addr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// Server-side apply of a KnownCluster's spec failed.
    #[error("applying the spec of KnownCluster {name}: {source}")]
    ApplySpec {
        /// Object name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Server-side apply of a KnownCluster's status failed.
    #[error("applying the status of KnownCluster {name}: {source}")]
    ApplyStatus {
        /// Object name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Listing KnownClusters failed.
    #[error("listing KnownClusters: {0}")]
    List(#[source] kube::Error),
    /// Reading one KnownCluster failed.
    #[error("reading KnownCluster {name}: {source}")]
    Get {
        /// Object name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Deleting an expired KnownCluster failed.
    #[error("deleting KnownCluster {name}: {source}")]
    Delete {
        /// Object name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// Short, fixed name of the failing step, for metrics.
    pub fn step(&self) -> &'static str {
        match self {
            Error::Settings(_) => "settings",
            Error::ListInterfaces(_) => "list_interfaces",
            Error::NoSuchInterface(_) => "interface",
            Error::OpenReceiver { .. } => "open_receiver",
            Error::OpenSender { .. } => "open_sender",
            Error::ApplySpec { .. } => "apply_spec",
            Error::ApplyStatus { .. } => "apply_status",
            Error::List(_) => "list",
            Error::Get { .. } => "get",
            Error::Delete { .. } => "delete",
        }
    }
}
