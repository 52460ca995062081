//! `Reservation`, `Transaction` and `Contract` (reservation.fluidos.eu/v1alpha1).

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{
    Configuration, GenericRef, LiqoCredentials, NodeIdentity, Phase, PhaseStatus, TelemetryServer,
};
use crate::embedded::EmbeddedFlavor;

/// The consumer's intent to reserve (and maybe buy) one PeeringCandidate.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "reservation.fluidos.eu",
    version = "v1alpha1",
    kind = "Reservation",
    namespaced,
    status = "ReservationStatus",
    shortname = "res",
    doc = "Reservation is the Schema for the reservations API.",
    printcolumn(name = "Solver ID", type_ = "string", json_path = ".spec.solverID"),
    printcolumn(name = "Reserve", type_ = "boolean", json_path = ".spec.reserve"),
    printcolumn(name = "Purchase", type_ = "boolean", json_path = ".spec.purchase"),
    printcolumn(
        name = "Seller Name",
        type_ = "string",
        json_path = ".spec.seller.nodeID"
    ),
    printcolumn(
        name = "Seller Domain",
        type_ = "string",
        json_path = ".spec.seller.domain",
        priority = 1
    ),
    printcolumn(
        name = "Peering Candidate",
        type_ = "string",
        json_path = ".spec.peeringCandidate.name",
        priority = 1
    ),
    printcolumn(
        name = "Transaction ID",
        type_ = "string",
        json_path = ".status.transactionID"
    ),
    printcolumn(
        name = "Reserve Phase",
        type_ = "string",
        json_path = ".status.reservePhase",
        priority = 1
    ),
    printcolumn(
        name = "Purchase Phase",
        type_ = "string",
        json_path = ".status.purchasePhase",
        priority = 1
    ),
    printcolumn(
        name = "Contract Name",
        type_ = "string",
        json_path = ".status.contract.name"
    ),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.phase.phase"),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.phase.message",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.peeringCandidate) && has(self.peeringCandidate.name) && self.peeringCandidate.name != ''").message("spec.peeringCandidate.name is required: the PeeringCandidate to reserve"))]
pub struct ReservationSpec {
    /// Name of the Solver behind this reservation.
    #[serde(rename = "solverID")]
    pub solver_id: String,
    /// This node.
    pub buyer: NodeIdentity,
    /// The flavor's owner; `seller.ip` is the REAR endpoint called.
    pub seller: NodeIdentity,
    /// What to buy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<Configuration>,
    /// Perform RESERVE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<bool>,
    /// Perform PURCHASE after RESERVE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purchase: Option<bool>,
    /// The PeeringCandidate to reserve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peering_candidate: Option<GenericRef>,
    /// Forwarded into the Contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_telemetry_endpoint: Option<TelemetryServer>,
}

/// Reservation progress.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationStatus {
    /// Overall phase and message.
    pub phase: PhaseStatus,
    /// Phase of RESERVE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve_phase: Option<Phase>,
    /// Phase of PURCHASE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purchase_phase: Option<Phase>,
    /// Transaction ID from the provider.
    #[serde(
        rename = "transactionID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub transaction_id: Option<String>,
    /// The Contract bought.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<GenericRef>,
    /// When the first PURCHASE of the transaction was sent (beyond
    /// upstream). Written before the call: after a crash or an unanswered
    /// call, the provider may have sold the transaction, so a later refusal
    /// is not taken as proof that nothing was sold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purchase_attempted_at: Option<String>,
}

/// A reservation held by a provider for a buyer, until it expires or is bought.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "reservation.fluidos.eu",
    version = "v1alpha1",
    kind = "Transaction",
    namespaced,
    status = "TransactionStatus",
    shortname = "tr",
    doc = "Transaction is the Schema for the transactions API.",
    printcolumn(name = "Flavor ID", type_ = "string", json_path = ".spec.flavorID"),
    printcolumn(
        name = "Buyer Name",
        type_ = "string",
        json_path = ".spec.buyer.nodeID"
    ),
    printcolumn(
        name = "Buyer IP",
        type_ = "string",
        json_path = ".spec.buyer.ip",
        priority = 1
    ),
    printcolumn(
        name = "Buyer Domain",
        type_ = "string",
        json_path = ".spec.buyer.domain",
        priority = 1
    ),
    printcolumn(name = "Cluster ID", type_ = "string", json_path = ".spec.clusterID"),
    printcolumn(
        name = "Expiration Time",
        type_ = "string",
        json_path = ".spec.expirationTime"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TransactionSpec {
    /// The flavor reserved.
    #[serde(rename = "flavorID")]
    pub flavor_id: String,
    /// Who reserved it.
    pub buyer: NodeIdentity,
    /// The buyer's Liqo cluster ID (may be empty, as upstream consumers write it).
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// What was reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<Configuration>,
    /// RFC 3339 expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
}

/// Transaction status (never written upstream).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransactionStatus {
    /// Phase and message.
    pub phase: PhaseStatus,
}

/// `ContractSpec.extraInformation` key by which a provider names the Liqo
/// ResourceSlice class its consumer must ask for (a Go provider sets none
/// and serves Liqo's `default` class).
pub const RESOURCE_SLICE_CLASS_KEY: &str = "fluidos.eu/resourceslice-class";

/// Label (value `"true"`) a provider's REAR gateway puts on the Liqo tenant
/// namespace of an unmodified Go consumer it granted peering rights to
/// (`--rear-go-peering-grant`): the ResourceSlice class policy does not apply
/// there, since a Go consumer asks for Liqo's `default` class.
pub const GO_PEERING_NAMESPACE_LABEL: &str = "fluidos.eu/go-peering-grant";
/// The ResourceSlice class a FLUIDOS Rust provider serves: sized by the
/// Contract, not by the consumer's request.
pub const FLUIDOS_RESOURCE_SLICE_CLASS: &str = "fluidos";

/// A sale: the flavor snapshot, both parties and the peering credentials.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "reservation.fluidos.eu",
    version = "v1alpha1",
    kind = "Contract",
    namespaced,
    status = "ContractStatus",
    shortname = "contr",
    doc = "Contract is the Schema for the contracts API.",
    printcolumn(
        name = "Flavor ID",
        type_ = "string",
        json_path = ".spec.flavor.metadata.name"
    ),
    printcolumn(
        name = "Buyer Name",
        type_ = "string",
        json_path = ".spec.buyer.nodeID"
    ),
    printcolumn(
        name = "Buyer Domain",
        type_ = "string",
        json_path = ".spec.buyer.domain",
        priority = 1
    ),
    printcolumn(
        name = "Seller Name",
        type_ = "string",
        json_path = ".spec.seller.nodeID"
    ),
    printcolumn(
        name = "Seller Domain",
        type_ = "string",
        json_path = ".spec.seller.domain",
        priority = 1
    ),
    printcolumn(
        name = "Transaction ID",
        type_ = "string",
        json_path = ".spec.transactionID",
        priority = 1
    ),
    printcolumn(
        name = "Buyer Liqo ID",
        type_ = "string",
        json_path = ".spec.buyerClusterID",
        priority = 1
    ),
    printcolumn(
        name = "Expiration Time",
        type_ = "string",
        json_path = ".spec.expirationTime",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ContractSpec {
    /// Snapshot of the sold flavor.
    pub flavor: EmbeddedFlavor,
    /// The transaction that led here.
    #[serde(rename = "transactionID")]
    pub transaction_id: String,
    /// What was bought.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<Configuration>,
    /// The buyer, with its Liqo ID.
    pub buyer: NodeIdentity,
    /// The buyer's Liqo cluster ID.
    #[serde(rename = "buyerClusterID")]
    pub buyer_cluster_id: String,
    /// The seller, with its Liqo ID.
    pub seller: NodeIdentity,
    /// The provider's cluster ID and a kubeconfig for peering.
    pub peering_target_credentials: LiqoCredentials,
    /// RFC 3339 end of the contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    /// Free-form extra information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_information: Option<BTreeMap<String, String>>,
    /// Network requests (upstream: always empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_requests: Option<String>,
    /// The consumer's telemetry ingress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_telemetry_endpoint: Option<TelemetryServer>,
}

/// Contract status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContractStatus {
    /// Phase and message.
    pub phase: PhaseStatus,
}
