//! K8Slice allocation through Liqo v1.0 peering, driven by the Contract.
//!
//! [`objects`] builds, as pure functions, the Liqo objects the declarative
//! peering needs on the consumer side with networking off, exactly as
//! `liqoctl peer --networking-disabled` creates them. [`allocation`] is the
//! Allocation controller for K8Slice contracts, consumer and provider side:
//! its decisions are the pure functions of [`allocation::machine`], the
//! executor reads, creates (create-or-adopt) and writes the status once per
//! reconcile. [`slice_class`] is the provider's ResourceSlice class: a
//! consumer is granted what its Contract sold, not what its slice asks for.
//! [`tenant_cleanup`] removes a consumer's Tenant once nothing is sold to it.
//! [`liqo_watch`] keeps their watches of Liqo's kinds quiet on a cluster
//! without Liqo, saying once what is missing.

pub mod allocation;
pub mod liqo_watch;
pub mod network_objects;
pub mod objects;
pub mod slice_class;
pub mod tenant_cleanup;

pub use allocation::{NetworkingConfig, PeeringConfig, run};
pub use network_objects::GatewayServiceType;
