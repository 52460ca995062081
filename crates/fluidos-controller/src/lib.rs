//! Controller plumbing shared by the node's controllers (the LRM, the REAR
//! gateway's sweeper, the consumer): what an API error means, per-object
//! backoff and outcome logging, a readiness gate, event recorder setup,
//! ledger-order timestamps, and every metric the node exports.

pub mod api_error;
pub mod events;
pub mod metrics;
pub mod peer_kubeconfig;
pub mod readiness;
pub mod reconcile;
pub mod time;
pub mod warm_up;

pub use metrics::Metrics;
pub use readiness::ReadinessGate;
pub use reconcile::{ReconcileError, Reconciler};
