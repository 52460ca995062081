//! What every component shares: API client, identity, settings, readiness.

use std::sync::Arc;

use fluidos_api::NodeIdentity;
use fluidos_controller::Metrics;
use fluidos_rear_identity::{Fingerprint, NodeKey};
use kube::Client;

use crate::cli::Args;
use crate::flavor_config::FlavorConfig;
use crate::health::Readiness;
use crate::leader_election::Leadership;

/// State handed to each component, usually as `Arc<Context>`.
#[derive(Clone)]
pub struct Context {
    /// Client for the local cluster's API server.
    pub client: Client,
    /// This node's identity, from the `fluidos-node-identity` ConfigMap.
    pub identity: NodeIdentity,
    /// The parsed command line.
    pub args: Args,
    /// Where components report readiness for `/readyz`.
    pub readiness: Readiness,
    /// The node's one metrics registry, served on `/metrics`; each component records into it.
    pub metrics: Metrics,
    /// The network manager's counters (registered in `metrics`).
    pub network_metrics: fluidos_network_manager::NetworkMetrics,
    /// Whether this replica may run the leader-only controllers.
    pub leadership: Leadership,
    /// `fluidos_leader` (registered in `metrics`): 1 while this replica leads.
    pub leader: prometheus_client::metrics::gauge::Gauge,
    /// This node's REAR key (Secret `fluidos-node-identity`), loaded when a
    /// component that talks REAR is selected.
    pub node_key: Option<Arc<NodeKey>>,
    /// The key's fingerprint, which the network manager announces: of
    /// `node_key` when loaded, else as the REAR components published it
    /// (ConfigMap `fluidos-node-rear-fingerprint`), so that a network
    /// manager alone never reads the private key.
    pub rear_fingerprint: Option<Fingerprint>,
}

impl Context {
    /// Namespace of the node's own resources.
    pub fn namespace(&self) -> &str {
        &self.args.namespace
    }

    /// The local resource manager's flavor settings.
    pub fn flavor(&self) -> &FlavorConfig {
        &self.args.flavor
    }
}

// Hand-written because kube::Client's Debug says nothing useful and the
// identity is what one wants to see in a log.
impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("namespace", &self.namespace())
            .field("identity", &self.identity)
            .field("readiness", &self.readiness)
            .field("node_key", &self.node_key)
            .field("rear_fingerprint", &self.rear_fingerprint)
            .finish_non_exhaustive()
    }
}
