//! FLUIDOS custom resource types (groups `nodecore`, `advertisement`,
//! `reservation`, `network` `.fluidos.eu`, `v1alpha1`) and the REAR wire models.
//!
//! Compatible with the Go FLUIDOS node: its YAML decodes here and what these
//! types write is accepted by its CRDs. This crate does no I/O.

// kube's `printcolumn(type_ = ...)` repeats keys across columns by design.
#![allow(clippy::duplicated_attributes)]

pub mod advertisement;
pub mod allocation;
pub mod common;
pub mod configuration;
pub mod embedded;
pub mod error;
pub mod flavor;
pub mod ledger;
pub mod naming;
pub mod network;
pub mod peering_credentials;
pub mod probe;
pub mod quantity;
pub mod raw;
pub mod rear;
pub mod reservation;
pub mod service_blueprint;
pub mod service_delivery;
pub mod solver;
mod string_enum;

pub use advertisement::{Discovery, PeeringCandidate};
pub use allocation::Allocation;
pub use common::*;
pub use error::DecodeError;
pub use flavor::Flavor;
pub use network::{Broker, KnownCluster};
pub use reservation::{Contract, Reservation, Transaction};
pub use service_blueprint::ServiceBlueprint;
pub use solver::Solver;

/// The namespace the Go node hard-codes; ours is configurable with this default.
pub const DEFAULT_NAMESPACE: &str = "fluidos";

/// Name of the ConfigMap holding the node identity (keys `domain`, `nodeID`, `ip`, `port`).
pub const NODE_IDENTITY_CONFIGMAP: &str = "fluidos-node-identity";
/// ConfigMap where a node whose [`NODE_IDENTITY_CONFIGMAP`] names no node ID
/// keeps the one it drew for itself (same namespace, key `nodeID`).
pub const GENERATED_NODE_ID_CONFIGMAP: &str = "fluidos-node-generated-identity";

/// Label (value `"true"`) marking the Kubernetes nodes that produce K8Slice flavors.
pub const DEFAULT_NODE_RESOURCE_LABEL: &str = "node-role.fluidos.eu/resources";

/// Annotation carrying the provider's REAR key fingerprint
/// (`sha256:<64 hex>`) on objects made from a pinned provider's answer
/// (PeeringCandidates, the consumer's Contracts), so that every later call
/// to that provider is pinned to the same key.
pub const PROVIDER_FINGERPRINT_ANNOTATION: &str = "fluidos.eu/provider-fingerprint";

/// Annotation on a provider's Transactions and Contracts: the fingerprint
/// of the key the buyer reserved with over TLS (`sha256:<64 hex>`).
pub const BUYER_KEY_ANNOTATION: &str = "fluidos.eu/buyer-key";

/// Every custom resource definition, in a stable order.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    vec![
        Discovery::crd(),
        PeeringCandidate::crd(),
        KnownCluster::crd(),
        Broker::crd(),
        Allocation::crd(),
        Flavor::crd(),
        ServiceBlueprint::crd(),
        Solver::crd(),
        Contract::crd(),
        Reservation::crd(),
        Transaction::crd(),
    ]
}
