//! The typed values of flags that other modules read too: which
//! components run, and how logs are written. Apart from [`crate::cli`] so
//! that the Go flag translation ([`crate::go_flags`]) and the flags share
//! them without importing each other.

use std::fmt;

use clap::ValueEnum;

/// One of the controllers/servers this binary can run.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    /// Publishes this node's resources as flavors (Go `local-resource-manager`).
    LocalResourceManager,
    /// Serves the REAR HTTP API to other nodes (Go `rear-controller` gateway).
    RearGateway,
    /// Drives solvers, reservations and allocations (Go `rear-manager`).
    RearManager,
    /// Discovers other nodes (Go `network-manager`).
    NetworkManager,
}

impl Component {
    /// Every component, in start order.
    pub const ALL: [Component; 4] = [
        Component::LocalResourceManager,
        Component::RearGateway,
        Component::RearManager,
        Component::NetworkManager,
    ];

    /// The flag spelling, e.g. `rear-gateway`.
    pub fn as_str(self) -> &'static str {
        match self {
            Component::LocalResourceManager => "local-resource-manager",
            Component::RearGateway => "rear-gateway",
            Component::RearManager => "rear-manager",
            Component::NetworkManager => "network-manager",
        }
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How log lines are written.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}
