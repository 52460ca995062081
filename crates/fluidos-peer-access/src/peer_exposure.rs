//! The ways a peer's workloads may be reached from outside this cluster.
//!
//! What a K8Slice buys is room for pods. Liqo reflects a peer's Services
//! and Ingresses here as they are on the peer (`RemoteServiceSpec` keeps
//! the type), so without more a peer's `NodePort` Service opens its port on
//! every node here (what a `hostPort` would, which `restricted` forbids),
//! a `LoadBalancer` asks this cluster's cloud for an address (and a bill),
//! an `ExternalName` puts a name of the peer's choosing into this cluster's
//! DNS, and an Ingress claims host names and paths on this cluster's
//! ingress controllers. None of them is allowed unless the operator says
//! so (`--peer-exposure`).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// One way of exposure a peer may be allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PeerExposure {
    /// Services of `type: NodePort`.
    NodePort,
    /// Services of `type: LoadBalancer` (and the node ports they open).
    LoadBalancer,
    /// Services of `type: ExternalName`.
    ExternalName,
    /// Ingresses that name their hosts (never a default backend).
    Ingress,
}

impl PeerExposure {
    /// Every kind, in the order the flag lists them.
    pub const ALL: [PeerExposure; 4] = [
        PeerExposure::NodePort,
        PeerExposure::LoadBalancer,
        PeerExposure::ExternalName,
        PeerExposure::Ingress,
    ];

    /// The name the flag takes.
    pub fn as_str(self) -> &'static str {
        match self {
            PeerExposure::NodePort => "node-port",
            PeerExposure::LoadBalancer => "load-balancer",
            PeerExposure::ExternalName => "external-name",
            PeerExposure::Ingress => "ingress",
        }
    }

    /// The Service `spec.type` it allows, if it is one.
    pub fn service_type(self) -> Option<&'static str> {
        match self {
            PeerExposure::NodePort => Some("NodePort"),
            PeerExposure::LoadBalancer => Some("LoadBalancer"),
            PeerExposure::ExternalName => Some("ExternalName"),
            PeerExposure::Ingress => None,
        }
    }
}

impl fmt::Display for PeerExposure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PeerExposure {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PeerExposure::ALL
            .into_iter()
            .find(|e| e.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!(
                    "unknown peer exposure {s:?} (expected {})",
                    PeerExposure::ALL.map(PeerExposure::as_str).join(", ")
                )
            })
    }
}

/// The Service types a peer's Service may have when `allowed` are: always
/// `ClusterIP` (headless ones included), then the allowed ones.
pub fn service_types(allowed: &BTreeSet<PeerExposure>) -> Vec<&'static str> {
    std::iter::once("ClusterIP")
        .chain(allowed.iter().filter_map(|e| e.service_type()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_say_what_is_expected() {
        for e in PeerExposure::ALL {
            assert_eq!(e.as_str().parse::<PeerExposure>(), Ok(e));
            assert_eq!(e.to_string(), e.as_str());
        }
        assert_eq!(
            " Ingress ".parse::<PeerExposure>(),
            Ok(PeerExposure::Ingress)
        );
        let err = "hostport".parse::<PeerExposure>().unwrap_err();
        assert!(
            err.contains("node-port, load-balancer, external-name, ingress"),
            "{err}"
        );
    }

    #[test]
    fn cluster_ip_always_then_the_allowed_types() {
        assert_eq!(service_types(&BTreeSet::new()), ["ClusterIP"]);
        let some = BTreeSet::from([PeerExposure::Ingress, PeerExposure::NodePort]);
        assert_eq!(service_types(&some), ["ClusterIP", "NodePort"]);
    }
}
