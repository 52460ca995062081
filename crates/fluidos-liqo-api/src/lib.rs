//! Rust types of the Liqo v1.0.0 custom resources a FLUIDOS node creates or
//! watches to peer two clusters (see `../shared/reference/liqo-peering.md`).
//!
//! Every module under [`generated`] is kopium's output for one CRD file of
//! Liqo v1.0.0; regenerate them all with `tools/liqo/gen-types.sh` (the
//! `generated_fresh` test fails when they are stale). Do not edit them by hand:
//! put conveniences in modules of this crate outside `generated`.
//!
//! Fields with `format: byte` in the CRDs (Tenant `publicKey`/`csr`/`signature`,
//! `authParams.ca`/`signedCRT`, ResourceSlice `csr`, PublicKey `publicKey`)
//! are `String`s holding the base64 text, as kopium maps them; int-or-string
//! resource quantities are `IntOrString`.

/// kopium's output, one module per Liqo kind, rewritten by `tools/liqo/gen-types.sh`.
// The allow sits here, not in the files, because the script overwrites them.
#[allow(
    clippy::doc_lazy_continuation,
    rustdoc::invalid_html_tags,
    rustdoc::broken_intra_doc_links,
    reason = "doc comments are the CRDs' descriptions verbatim: plain text, not Markdown"
)]
pub mod generated {
    /// `Configuration` (networking.liqo.io/v1beta1): a peer's pod and external CIDRs.
    pub mod configuration;
    /// `Connection` (networking.liqo.io/v1beta1): the tunnel state reported by a gateway.
    pub mod connection;
    /// `ForeignCluster` (core.liqo.io/v1beta1, cluster-scoped): Liqo's view of one peer.
    pub mod foreign_cluster;
    /// `GatewayClient` (networking.liqo.io/v1beta1): the WireGuard client end of a tunnel.
    pub mod gateway_client;
    /// `GatewayServer` (networking.liqo.io/v1beta1): the WireGuard server end of a tunnel.
    pub mod gateway_server;
    /// `Identity` (authentication.liqo.io/v1beta1): credentials for a provider, on the consumer.
    pub mod identity;
    /// `NamespaceOffloading` (offloading.liqo.io/v1beta1): extends a consumer namespace to peers.
    pub mod namespace_offloading;
    /// `PublicKey` (networking.liqo.io/v1beta1, plural `publickeies`): a peer's WireGuard key.
    pub mod public_key;
    /// `ResourceSlice` (authentication.liqo.io/v1beta1): resources a consumer asks of a provider.
    pub mod resource_slice;
    /// `Tenant` (authentication.liqo.io/v1beta1): a consumer's authentication request, on the provider.
    pub mod tenant;
    /// `VirtualNode` (offloading.liqo.io/v1beta1): the consumer-side node backed by a provider.
    pub mod virtual_node;
}

pub use generated::configuration::{Configuration, ConfigurationSpec, ConfigurationStatus};
pub use generated::connection::{Connection, ConnectionSpec, ConnectionStatus, ConnectionType};
pub use generated::foreign_cluster::{
    ForeignCluster, ForeignClusterSpec, ForeignClusterStatus, ForeignClusterStatusRole,
};
pub use generated::gateway_client::{GatewayClient, GatewayClientSpec, GatewayClientStatus};
pub use generated::gateway_server::{GatewayServer, GatewayServerSpec, GatewayServerStatus};
pub use generated::identity::{Identity, IdentitySpec, IdentityStatus, IdentityType};
pub use generated::namespace_offloading::{
    NamespaceOffloading, NamespaceOffloadingSpec, NamespaceOffloadingStatus,
};
pub use generated::public_key::{PublicKey, PublicKeySpec};
pub use generated::resource_slice::{ResourceSlice, ResourceSliceSpec, ResourceSliceStatus};
pub use generated::tenant::{Tenant, TenantSpec, TenantStatus};
pub use generated::virtual_node::{VirtualNode, VirtualNodeSpec, VirtualNodeStatus};
