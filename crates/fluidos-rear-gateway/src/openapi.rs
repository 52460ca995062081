//! OpenAPI schemas of the REAR wire models.
//!
//! `fluidos-api` stays free of HTTP/OpenAPI dependencies, so its wire types do
//! not derive `ToSchema`; these mirrors carry the same JSON keys (a test
//! checks them against the real types' serialization).

#![allow(dead_code)] // the structs exist only for their derived schemas

use serde::Serialize;
use utoipa::ToSchema;

/// `additionalInformation` of a node identity.
#[derive(Serialize, ToSchema)]
#[schema(as = AdditionalInformation)]
pub struct AdditionalInformationDoc {
    /// Liqo cluster ID.
    #[serde(rename = "liqoID")]
    liqo_id: Option<String>,
    /// Base64 kubeconfig (RESERVE only).
    kubeconfig: Option<String>,
}

/// A node identity on the wire.
#[derive(Serialize, ToSchema)]
#[schema(as = NodeIdentity)]
pub struct NodeIdentityDoc {
    /// Node ID.
    #[serde(rename = "ID")]
    id: String,
    /// `host:port` of its REAR gateway.
    #[serde(rename = "IP")]
    ip: String,
    /// FLUIDOS domain.
    domain: String,
    /// Liqo ID (and kubeconfig at RESERVE).
    #[serde(rename = "additionalInformation")]
    additional_information: Option<AdditionalInformationDoc>,
}

/// `type` of a flavor: lower-case name and payload.
#[derive(Serialize, ToSchema)]
#[schema(as = FlavorType)]
pub struct FlavorTypeDoc {
    /// `k8slice` or `service`.
    name: String,
    /// K8Slice (`charateristics`, `properties`, `policies`) or Service payload.
    #[schema(value_type = Object)]
    data: serde_json::Value,
}

/// Price of a flavor.
#[derive(Serialize, ToSchema)]
#[schema(as = Price)]
pub struct PriceDoc {
    /// Amount.
    amount: String,
    /// Currency.
    currency: String,
    /// Period.
    period: String,
}

/// A flavor as listed; K8Slice amounts are what remains for sale.
#[derive(Serialize, ToSchema)]
#[schema(as = Flavor)]
pub struct FlavorDoc {
    /// Flavor ID.
    #[serde(rename = "flavorID")]
    flavor_id: String,
    /// Seller's node ID.
    #[serde(rename = "providerID")]
    provider_id: String,
    /// Type and payload.
    #[serde(rename = "type")]
    type_: FlavorTypeDoc,
    /// Network property type.
    #[serde(rename = "networkPropertyType")]
    network_property_type: Option<String>,
    /// Creation time (RFC 3339).
    timestamp: String,
    /// Location; the country travels under `altitude`.
    #[schema(value_type = Option<Object>)]
    location: Option<serde_json::Value>,
    /// Price.
    price: PriceDoc,
    /// Owner.
    owner: NodeIdentityDoc,
    /// Can be sold.
    availability: bool,
}

/// A configuration: lower-case type and payload.
#[derive(Serialize, ToSchema)]
#[schema(as = Configuration)]
pub struct ConfigurationDoc {
    /// `k8slice` or `service`.
    #[serde(rename = "type")]
    type_: String,
    /// `{cpu, memory, pods, gpu?, storage?}` or `{hostingPolicy?, configurationData}`.
    #[schema(value_type = Object)]
    data: serde_json::Value,
}

/// RESERVE body.
#[derive(Serialize, ToSchema)]
#[schema(as = ReserveRequest)]
pub struct ReserveRequestDoc {
    /// Flavor to reserve.
    #[serde(rename = "flavorID")]
    flavor_id: String,
    /// The buyer; `additionalInformation.liqoID` is required.
    #[serde(rename = "buyerID")]
    buyer: NodeIdentityDoc,
    /// What to reserve; absent = the whole K8Slice, or the service defaults.
    configuration: Option<ConfigurationDoc>,
}

/// RESERVE answer.
#[derive(Serialize, ToSchema)]
#[schema(as = Transaction)]
pub struct TransactionDoc {
    /// `<32 hex>-<unix nanos>`.
    #[serde(rename = "transactionID")]
    transaction_id: String,
    /// Flavor reserved.
    #[serde(rename = "flavorID")]
    flavor_id: String,
    /// What was reserved.
    configuration: Option<ConfigurationDoc>,
    /// The buyer as sent.
    buyer: NodeIdentityDoc,
    /// Buyer's Liqo ID.
    #[serde(rename = "clusterID")]
    cluster_id: String,
    /// RFC 3339 expiry.
    #[serde(rename = "expirationTime")]
    expiration_time: String,
}

/// Liqo credentials on the wire.
#[derive(Serialize, ToSchema)]
#[schema(as = LiqoCredentials)]
pub struct LiqoCredentialsDoc {
    /// Liqo cluster ID.
    #[serde(rename = "clusterID")]
    cluster_id: String,
    /// Base64 kubeconfig.
    kubeconfig: String,
}

/// Telemetry endpoint.
#[derive(Serialize, ToSchema)]
#[schema(as = TelemetryServer)]
pub struct TelemetryServerDoc {
    /// URL.
    endpoint: String,
    /// Intents (`null` when unset).
    intents: Option<Vec<String>>,
}

/// PURCHASE body (may be `{}` or empty for a K8Slice).
#[derive(Serialize, ToSchema)]
#[schema(as = PurchaseRequest)]
pub struct PurchaseRequestDoc {
    /// Buyer's credentials; required for Service flavors (as upstream).
    #[serde(rename = "liqoCredentials")]
    liqo_credentials: Option<LiqoCredentialsDoc>,
    /// Copied into the Contract.
    #[serde(rename = "ingressTelemetryEndpoint")]
    ingress_telemetry_endpoint: Option<TelemetryServerDoc>,
}

/// PURCHASE answer.
#[derive(Serialize, ToSchema)]
#[schema(as = Contract)]
pub struct ContractDoc {
    /// Contract name.
    #[serde(rename = "contractID")]
    contract_id: String,
    /// Transaction bought.
    #[serde(rename = "transactionID")]
    transaction_id: String,
    /// Flavor snapshot.
    flavor: FlavorDoc,
    /// The buyer.
    #[serde(rename = "buyerID")]
    buyer: NodeIdentityDoc,
    /// Buyer's Liqo ID.
    #[serde(rename = "buyerClusterID")]
    buyer_cluster_id: String,
    /// The seller.
    seller: NodeIdentityDoc,
    /// Provider's Liqo ID and a kubeconfig for peering.
    #[serde(rename = "peeringTargetCredentials")]
    peering_target_credentials: LiqoCredentialsDoc,
    /// RFC 3339 end.
    #[serde(rename = "expirationTime")]
    expiration_time: Option<String>,
    /// Extra information.
    #[serde(rename = "extraInformation")]
    extra_information: Option<std::collections::BTreeMap<String, String>>,
    /// What was bought.
    configuration: Option<ConfigurationDoc>,
    /// Network requests.
    #[serde(rename = "networkAuthorizations")]
    network_authorizations: Option<String>,
    /// Telemetry endpoint.
    #[serde(rename = "ingressTelemetryEndpoint")]
    ingress_telemetry_endpoint: Option<TelemetryServerDoc>,
}

/// How the buyer reaches a Service contract's service: the answer of
/// `GET /api/v2/contracts/{contractID}/service?buyerID=`, given only to the
/// contract's buyer sending the contract's `transactionID` in the
/// `X-Fluidos-Transaction-Id` header (an unknown contract, another buyer and
/// a wrong or missing transaction ID all get the same 404).
#[derive(Serialize, ToSchema)]
#[schema(as = ServiceAccess)]
pub struct ServiceAccessDoc {
    /// The contract.
    #[serde(rename = "contractID")]
    contract_id: String,
    /// `host:port` addresses reachable from outside the provider's cluster, comma-joined.
    endpoints: String,
    /// In-cluster addresses (`<svc>.<ns>.svc.cluster.local:<port>`), comma-joined.
    #[serde(rename = "clusterEndpoints")]
    cluster_endpoints: String,
    /// The credentials (e.g. `username`, `password`, `database`).
    credentials: std::collections::BTreeMap<String, String>,
}
