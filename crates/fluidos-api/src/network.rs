//! `KnownCluster` and `Broker` (network.fluidos.eu/v1alpha1): how providers are found.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A remote node's REAR gateway, learned by multicast or written by hand.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "network.fluidos.eu",
    version = "v1alpha1",
    kind = "KnownCluster",
    namespaced,
    status = "KnownClusterStatus",
    shortname = "kclust",
    shortname = "kclusts",
    doc = "KnownCluster is the Schema for the clusters API."
)]
pub struct KnownClusterSpec {
    /// `host:port` of the remote REAR gateway.
    pub address: String,
    /// The provider's REAR key, `sha256:<64 hex>` (the fingerprint of its
    /// public key): when set, the gateway is called over TLS and accepted
    /// only with that key. Absent for unmodified Go nodes (plain HTTP),
    /// whose KnownClusters therefore still read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^sha256:[0-9a-f]{64}$"))]
    pub fingerprint: Option<String>,
}

/// Liveness of a KnownCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KnownClusterStatus {
    /// RFC 3339 time after which the entry is stale.
    pub expiration_time: String,
    /// RFC 3339 time of the last announcement.
    pub last_update_time: String,
}

/// An AMQP broker for WAN discovery.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "network.fluidos.eu",
    version = "v1alpha1",
    kind = "Broker",
    namespaced,
    status = "BrokerStatus",
    shortname = "broker",
    shortname = "brokers",
    doc = "Broker is the Schema for the brokers API."
)]
pub struct BrokerSpec {
    /// Broker host name (must match its certificate).
    pub address: String,
    /// Logical broker name.
    pub name: String,
    /// Secret holding the client certificate (`tls.crt`, `tls.key`).
    pub clcert: String,
    /// Secret holding the broker CA (`CA_cert.pem`).
    pub cacert: String,
    /// `publisher`, `subscriber`, or anything else for both.
    pub role: String,
    /// Routing rule, a JSON document as a string.
    pub rule: String,
    /// This node's metrics, a JSON object as a string.
    pub metric: String,
}

/// Liveness of a Broker connection.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BrokerStatus {
    /// RFC 3339 expiry (the Go node's `UpdateStatus()`: last update + 10 s).
    pub expiration_time: String,
    /// RFC 3339 time the status was last written.
    pub last_update_time: String,
    /// Standard conditions: `Connected` (with the reason it is not, e.g.
    /// `SecretMissing`, `TlsRefused`, `ConnectionLost`), each with
    /// `observedGeneration`. Not in the Go node's schema; Go readers ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // One entry per type, merged by type under server-side apply (an atomic
    // list would let one writer's apply wipe another's conditions).
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_go_known_cluster_without_fingerprint_still_reads() {
        let go = "apiVersion: network.fluidos.eu/v1alpha1\nkind: KnownCluster\n\
                  metadata: {name: knowncluster-a, namespace: fluidos}\n\
                  spec: {address: '10.0.0.1:30000'}\n";
        let k: KnownCluster = serde_yaml::from_str(go).unwrap();
        assert_eq!(k.spec.address, "10.0.0.1:30000");
        assert_eq!(k.spec.fingerprint, None);
        // Written back without the field, as Go writes it.
        let back = serde_json::to_value(&k.spec).unwrap();
        assert_eq!(back, serde_json::json!({"address": "10.0.0.1:30000"}));
    }

    #[test]
    fn a_fingerprint_is_written_under_its_name() {
        let fp = format!("sha256:{}", "ab".repeat(32));
        let spec = KnownClusterSpec {
            address: "10.0.0.1:30000".into(),
            fingerprint: Some(fp.clone()),
        };
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["fingerprint"], fp.as_str());
        let read: KnownClusterSpec = serde_json::from_value(json).unwrap();
        assert_eq!(read, spec);
    }
}
