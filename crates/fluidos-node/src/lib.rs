//! The FLUIDOS node as a library: flags, startup checks, health endpoints and
//! the components the `fluidos-node` binary runs.
//!
//! One process replaces the Go node's four binaries (`local-resource-manager`,
//! `rear-controller`, `rear-manager`, `network-manager`); `--components`
//! picks which of them run.

#![warn(missing_docs)]

pub mod cli;
pub mod components;
pub mod context;
pub mod flag_values;
pub mod flavor_config;
pub mod go_flags;
pub mod health;
pub mod identity;
pub mod leader_election;
pub mod peer_api_server;
pub mod preflight;
pub mod startup;
pub mod uninstall;

pub use cli::{Args, Component, LogFormat};
pub use context::Context;
pub use flavor_config::FlavorConfig;
pub use health::Readiness;
