//! Pure builders of the Liqo v1.0.0 networking objects a consumer creates to
//! connect with a provider as `liqoctl peer` (`liqoctl network connect`,
//! server on the provider) does (`liqo-peering.md` §2.1; Liqo's
//! `pkg/liqo-controller-manager/networking/forge`): same names, labels and
//! specs, with the Go FLUIDOS node's defaults (MTU 1340, port 51840, UDP).
//!
//! | object | cluster | name | namespace |
//! |---|---|---|---|
//! | Configuration (the provider's CIDRs) | consumer | `<P>` | `liqo-tenant-<P>` |
//! | Configuration (the consumer's CIDRs) | provider | `<C>` | `liqo-tenant-<C>` |
//! | GatewayServer | provider | `<C>` | `liqo-tenant-<C>` |
//! | GatewayClient | consumer | `<P>` | `liqo-tenant-<P>` |
//! | PublicKey (the server's key) | consumer | `<P>` | `liqo-tenant-<P>` |
//! | PublicKey (the client's key) | provider | `<C>` | `liqo-tenant-<C>` |

use std::collections::BTreeMap;

use base64::Engine as _;
use fluidos_liqo_api::generated::configuration::{ConfigurationRemote, ConfigurationRemoteCidr};
use fluidos_liqo_api::generated::gateway_client::{
    GatewayClientEndpoint, GatewayClientEndpointProtocol, GatewayClientSecretRef,
};
use fluidos_liqo_api::generated::gateway_server::{
    GatewayServerEndpoint, GatewayServerEndpointServiceType, GatewayServerSecretRef,
};
use fluidos_liqo_api::{
    Configuration, ConfigurationSpec, GatewayClient, GatewayClientSpec, GatewayServer,
    GatewayServerSpec, PublicKey, PublicKeySpec,
};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::ObjectMeta;

use crate::objects::{LIQO_NAMESPACE, REMOTE_CLUSTER_ID, tenant_namespace};

/// Liqo's `DefaultMTU`, the Go node's too.
pub const MTU: i64 = 1340;
/// Liqo's `DefaultGwServerPort`.
pub const SERVER_PORT: i32 = 51840;
/// The WireGuard server template Liqo's chart installs.
pub const SERVER_TEMPLATE: &str = "wireguard-server";
/// The WireGuard client template Liqo's chart installs.
pub const CLIENT_TEMPLATE: &str = "wireguard-client";
/// Label Liqo puts on PublicKeys meant for a gateway.
pub const GATEWAY_RESOURCE_LABEL: &str = "networking.liqo.io/gateway-resource";
/// Key of a gateway's key Secret holding its WireGuard public key.
pub const PUBLIC_KEY: &str = "publicKey";
/// Label of the IPAM Networks holding a cluster's CIDRs.
pub const NETWORK_TYPE_LABEL: &str = "ipam.liqo.io/network-type";
/// `status.value` of a Connection whose tunnel is up.
pub const CONNECTED: &str = "Connected";

const API_VERSION: &str = "networking.liqo.io/v1beta1";

/// A cluster's pod and external CIDRs, from its Liqo IPAM Networks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterCidrs {
    /// The `pod-cidr` Network's `status.cidr`.
    pub pod: String,
    /// The `external-cidr` Network's `status.cidr`.
    pub external: String,
}

/// Where the provider's GatewayServer can be reached (its `status.endpoint`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerEndpoint {
    /// Addresses of the server.
    pub addresses: Vec<String>,
    /// Its port.
    pub port: i32,
    /// `TCP` or `UDP` (WireGuard: `UDP`).
    pub tcp: bool,
}

fn meta(name: &str, namespace: String, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

/// The Configuration telling the cluster it is created in the CIDRs of
/// `peer`: name `<peer>` in `liqo-tenant-<peer>`.
pub fn configuration(peer: &str, cidrs: &ClusterCidrs) -> Configuration {
    let mut c = Configuration::new(
        peer,
        ConfigurationSpec {
            local: None,
            remote: Some(ConfigurationRemote {
                cidr: Some(ConfigurationRemoteCidr {
                    external: Some(vec![cidrs.external.clone()]),
                    pod: Some(vec![cidrs.pod.clone()]),
                }),
            }),
        },
    );
    c.metadata = meta(peer, tenant_namespace(peer), &[(REMOTE_CLUSTER_ID, peer)]);
    c
}

fn template_ref(kind: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(API_VERSION.to_owned()),
        kind: Some(kind.to_owned()),
        name: Some(name.to_owned()),
        namespace: Some(LIQO_NAMESPACE.to_owned()),
        ..Default::default()
    }
}

/// Service type of a Liqo GatewayServer (`spec.endpoint.serviceType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatewayServiceType {
    /// `NodePort` (the Go node's choice).
    NodePort,
    /// `LoadBalancer` (liqoctl's default).
    LoadBalancer,
    /// `ClusterIP`.
    ClusterIp,
}

/// The GatewayServer the consumer `consumer` creates on the provider: name
/// `<C>` in `liqo-tenant-<C>`, WireGuard template, exposed as `service_type`.
pub fn gateway_server(consumer: &str, service_type: GatewayServiceType) -> GatewayServer {
    let mut s = GatewayServer::new(
        consumer,
        GatewayServerSpec {
            endpoint: Some(GatewayServerEndpoint {
                port: Some(SERVER_PORT),
                service_type: Some(match service_type {
                    GatewayServiceType::NodePort => GatewayServerEndpointServiceType::NodePort,
                    GatewayServiceType::LoadBalancer => {
                        GatewayServerEndpointServiceType::LoadBalancer
                    }
                    GatewayServiceType::ClusterIp => GatewayServerEndpointServiceType::ClusterIp,
                }),
                ..Default::default()
            }),
            mtu: Some(MTU),
            // As liqoctl sends it (Go's non-pointer struct): no Secret of
            // our own, Liqo makes the keys.
            secret_ref: Some(GatewayServerSecretRef {
                name: Some(String::new()),
            }),
            server_template_ref: Some(template_ref("WgGatewayServerTemplate", SERVER_TEMPLATE)),
        },
    );
    s.metadata = meta(
        consumer,
        tenant_namespace(consumer),
        &[(REMOTE_CLUSTER_ID, consumer)],
    );
    s
}

/// At most this many server addresses are taken from a provider.
pub const MAX_ADDRESSES: usize = 8;

/// Whether `address` can be a gateway server's address: an IP, or a DNS
/// name of at most 253 characters.
fn valid_address(address: &str) -> bool {
    address.parse::<std::net::IpAddr>().is_ok()
        || (!address.is_empty()
            && address.len() <= 253
            && address.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            }))
}

/// The provider's GatewayServer's endpoint, once Liqo published it; `None`
/// also when the provider's status is not a usable endpoint (no address, an
/// address that is neither an IP nor a DNS name, more than
/// [`MAX_ADDRESSES`], a port outside 1–65535): the consumer's gateway would
/// be handed it.
pub fn server_endpoint(server: &GatewayServer) -> Option<ServerEndpoint> {
    use fluidos_liqo_api::generated::gateway_server::GatewayServerStatusEndpointProtocol as P;
    let e = server.status.as_ref()?.endpoint.as_ref()?;
    let addresses = e.addresses.clone().filter(|a| {
        !a.is_empty() && a.len() <= MAX_ADDRESSES && a.iter().all(|x| valid_address(x))
    })?;
    let port = e.port.filter(|p| (1..=65_535).contains(p))?;
    Some(ServerEndpoint {
        addresses,
        port,
        tcp: matches!(e.protocol, Some(P::Tcp)),
    })
}

/// The endpoint a GatewayClient is set to connect to (its spec).
pub fn client_endpoint(client: &GatewayClient) -> Option<ServerEndpoint> {
    let e = client.spec.endpoint.as_ref()?;
    Some(ServerEndpoint {
        addresses: e.addresses.clone()?,
        port: e.port?,
        tcp: matches!(e.protocol, Some(GatewayClientEndpointProtocol::Tcp)),
    })
}

/// Length of a WireGuard (Curve25519) public key.
pub const WIREGUARD_KEY_LEN: usize = 32;

/// `bytes` if they can be a WireGuard public key: Liqo's gateway converts a
/// PublicKey with `wgtypes.Key(...)`, which panics on a shorter slice, so a
/// provider's key of another length must never reach a PublicKey here.
pub fn wireguard_key(bytes: &[u8]) -> Option<Vec<u8>> {
    (bytes.len() == WIREGUARD_KEY_LEN).then(|| bytes.to_vec())
}

/// The key a PublicKey carries (`spec.publicKey`, base64 in JSON).
pub fn key_of(k: &PublicKey) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(k.spec.public_key.as_deref()?)
        .ok()
}

/// Whether `cidr` is an IPv4 or IPv6 network no broader than /8 (IPv4) or
/// /16 (IPv6): what a provider names as its pod or external CIDR is routed
/// to its gateway, so `0.0.0.0/0` or a huge range is refused.
pub fn valid_cidr(cidr: &str) -> bool {
    let Some((ip, prefix)) = cidr.split_once('/') else {
        return false;
    };
    let Ok(prefix) = prefix.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => (8..=32).contains(&prefix),
        Ok(std::net::IpAddr::V6(_)) => (16..=128).contains(&prefix),
        Err(_) => false,
    }
}

/// The gateway a PublicKey belongs to (its owner, as liqoctl sets it: the
/// key goes with the gateway).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayOwner {
    /// `GatewayClient` or `GatewayServer`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// Its `metadata.uid`.
    pub uid: String,
}

/// The GatewayClient the consumer creates for provider `provider`: name
/// `<P>` in `liqo-tenant-<P>`, connecting to the server's endpoint.
pub fn gateway_client(provider: &str, server: &ServerEndpoint) -> GatewayClient {
    let mut c = GatewayClient::new(
        provider,
        GatewayClientSpec {
            client_template_ref: Some(template_ref("WgGatewayClientTemplate", CLIENT_TEMPLATE)),
            endpoint: Some(GatewayClientEndpoint {
                addresses: Some(server.addresses.clone()),
                port: Some(server.port),
                protocol: Some(if server.tcp {
                    GatewayClientEndpointProtocol::Tcp
                } else {
                    GatewayClientEndpointProtocol::Udp
                }),
            }),
            mtu: Some(MTU),
            // As liqoctl sends it (see `gateway_server`).
            secret_ref: Some(GatewayClientSecretRef {
                name: Some(String::new()),
            }),
        },
    );
    c.metadata = meta(
        provider,
        tenant_namespace(provider),
        &[(REMOTE_CLUSTER_ID, provider)],
    );
    c
}

/// The PublicKey carrying `peer`'s gateway key to the other side: name
/// `<peer>` in `liqo-tenant-<peer>`; `key` as the key Secret holds it;
/// owned by the gateway of this side, as liqoctl makes it.
pub fn public_key(peer: &str, key: &[u8], owner: &GatewayOwner) -> PublicKey {
    let mut k = PublicKey::new(
        peer,
        PublicKeySpec {
            public_key: Some(base64::engine::general_purpose::STANDARD.encode(key)),
        },
    );
    k.metadata = meta(
        peer,
        tenant_namespace(peer),
        &[(REMOTE_CLUSTER_ID, peer), (GATEWAY_RESOURCE_LABEL, "true")],
    );
    k.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: API_VERSION.to_owned(),
            kind: owner.kind.to_owned(),
            name: owner.name.clone(),
            uid: owner.uid.clone(),
            ..Default::default()
        },
    ]);
    k
}

/// Whether a Configuration's remote CIDRs were taken in by the local IPAM
/// (`status.remote` set): Liqo's completion signal.
pub fn configuration_ready(c: &Configuration) -> bool {
    c.status
        .as_ref()
        .and_then(|s| s.remote.as_ref())
        .and_then(|r| r.cidr.as_ref())
        .is_some_and(|cidr| {
            cidr.pod.as_ref().is_some_and(|p| !p.is_empty())
                && cidr.external.as_ref().is_some_and(|e| !e.is_empty())
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn json<T: serde::Serialize>(o: &T) -> serde_json::Value {
        serde_json::to_value(o).unwrap()
    }

    #[test]
    fn configuration_is_liqoctls() {
        let c = configuration(
            "prov",
            &ClusterCidrs {
                pod: "10.1.0.0/16".into(),
                external: "10.71.0.0/16".into(),
            },
        );
        assert_eq!(
            json(&c),
            serde_json::json!({
                "apiVersion": "networking.liqo.io/v1beta1", "kind": "Configuration",
                "metadata": {"name": "prov", "namespace": "liqo-tenant-prov",
                    "labels": {"liqo.io/remote-cluster-id": "prov"}},
                "spec": {"remote": {"cidr": {"pod": ["10.1.0.0/16"], "external": ["10.71.0.0/16"]}}},
            })
        );
    }

    #[test]
    fn gateway_server_has_the_go_nodes_defaults() {
        let s = gateway_server("cons", GatewayServiceType::NodePort);
        assert_eq!(
            json(&s),
            serde_json::json!({
                "apiVersion": "networking.liqo.io/v1beta1", "kind": "GatewayServer",
                "metadata": {"name": "cons", "namespace": "liqo-tenant-cons",
                    "labels": {"liqo.io/remote-cluster-id": "cons"}},
                "spec": {
                    "mtu": 1340,
                    "endpoint": {"port": 51840, "serviceType": "NodePort"},
                    "secretRef": {"name": ""},
                    "serverTemplateRef": {"apiVersion": "networking.liqo.io/v1beta1",
                        "kind": "WgGatewayServerTemplate", "name": "wireguard-server",
                        "namespace": "liqo"},
                },
            })
        );
        let lb = gateway_server("cons", GatewayServiceType::ClusterIp);
        assert_eq!(json(&lb)["spec"]["endpoint"]["serviceType"], "ClusterIP");
    }

    #[test]
    fn gateway_client_connects_to_the_servers_endpoint() {
        let mut server = gateway_server("cons", GatewayServiceType::NodePort);
        assert_eq!(server_endpoint(&server), None, "no status yet");
        server.status = Some(
            serde_json::from_value(serde_json::json!({
                "endpoint": {"addresses": ["192.0.2.7"], "port": 31000, "protocol": "UDP"}
            }))
            .unwrap(),
        );
        let endpoint = server_endpoint(&server).unwrap();
        assert_eq!(
            endpoint,
            ServerEndpoint {
                addresses: vec!["192.0.2.7".into()],
                port: 31000,
                tcp: false
            }
        );
        let c = gateway_client("prov", &endpoint);
        assert_eq!(
            json(&c),
            serde_json::json!({
                "apiVersion": "networking.liqo.io/v1beta1", "kind": "GatewayClient",
                "metadata": {"name": "prov", "namespace": "liqo-tenant-prov",
                    "labels": {"liqo.io/remote-cluster-id": "prov"}},
                "spec": {
                    "mtu": 1340,
                    "endpoint": {"addresses": ["192.0.2.7"], "port": 31000, "protocol": "UDP"},
                    "secretRef": {"name": ""},
                    "clientTemplateRef": {"apiVersion": "networking.liqo.io/v1beta1",
                        "kind": "WgGatewayClientTemplate", "name": "wireguard-client",
                        "namespace": "liqo"},
                },
            })
        );
        server.status = Some(
            serde_json::from_value(serde_json::json!({
                "endpoint": {"addresses": [], "port": 31000}
            }))
            .unwrap(),
        );
        assert_eq!(server_endpoint(&server), None, "no address yet");
    }

    #[test]
    fn public_key_carries_the_secrets_bytes_base64() {
        let owner = GatewayOwner {
            kind: "GatewayClient",
            name: "prov".into(),
            uid: "u-1".into(),
        };
        let k = public_key("prov", &[1, 2, 3], &owner);
        assert_eq!(key_of(&k), Some(vec![1, 2, 3]));
        assert_eq!(
            json(&k),
            serde_json::json!({
                "apiVersion": "networking.liqo.io/v1beta1", "kind": "PublicKey",
                "metadata": {"name": "prov", "namespace": "liqo-tenant-prov",
                    "labels": {"liqo.io/remote-cluster-id": "prov",
                        "networking.liqo.io/gateway-resource": "true"},
                    "ownerReferences": [{"apiVersion": "networking.liqo.io/v1beta1",
                        "kind": "GatewayClient", "name": "prov", "uid": "u-1"}]},
                "spec": {"publicKey": "AQID"},
            })
        );
    }

    #[test]
    fn a_configuration_is_ready_once_its_remote_status_has_a_pod_cidr() {
        let mut c = configuration(
            "p",
            &ClusterCidrs {
                pod: "10.1.0.0/16".into(),
                external: "10.2.0.0/16".into(),
            },
        );
        assert!(!configuration_ready(&c));
        c.status = Some(serde_json::from_value(serde_json::json!({"remote": {}})).unwrap());
        assert!(!configuration_ready(&c));
        c.status = Some(
            serde_json::from_value(
                serde_json::json!({"remote": {"cidr": {"pod": ["10.9.0.0/16"]}}}),
            )
            .unwrap(),
        );
        assert!(!configuration_ready(&c), "Liqo sets both");
        c.status = Some(
            serde_json::from_value(serde_json::json!({"remote": {"cidr": {
                "pod": ["10.9.0.0/16"], "external": ["10.8.0.0/16"]}}}))
            .unwrap(),
        );
        assert!(configuration_ready(&c));
    }

    #[test]
    fn what_a_provider_says_is_bounded_before_it_reaches_a_gateway() {
        let mut server = gateway_server("c", GatewayServiceType::NodePort);
        let mut with = |endpoint: serde_json::Value| {
            server.status =
                Some(serde_json::from_value(serde_json::json!({ "endpoint": endpoint })).unwrap());
            server_endpoint(&server)
        };
        assert!(
            with(serde_json::json!({"addresses": ["gw.example.org"], "port": 51840})).is_some()
        );
        assert!(with(serde_json::json!({"addresses": ["2001:db8::1"], "port": 1})).is_some());
        for bad in [
            serde_json::json!({"addresses": ["a b"], "port": 51840}),
            serde_json::json!({"addresses": ["-x.org"], "port": 51840}),
            serde_json::json!({"addresses": ["10.0.0.1"], "port": 0}),
            serde_json::json!({"addresses": ["10.0.0.1"], "port": 70000}),
            serde_json::json!({"addresses": vec!["10.0.0.1"; 9], "port": 51840}),
            serde_json::json!({"addresses": ["x".repeat(254)], "port": 51840}),
        ] {
            assert_eq!(with(bad.clone()), None, "{bad}");
        }
        assert!(wireguard_key(&[7; 32]).is_some());
        assert!(
            wireguard_key(&[7; 31]).is_none(),
            "Liqo's gateway would panic"
        );
        assert!(wireguard_key(&[7; 33]).is_none());
        for good in ["10.1.0.0/16", "192.168.0.0/24", "10.0.0.0/8", "fd00::/64"] {
            assert!(valid_cidr(good), "{good}");
        }
        for bad in [
            "0.0.0.0/0",
            "10.0.0.0/7",
            "10.0.0.0",
            "10.0.0.0/33",
            "x/16",
            "::/0",
        ] {
            assert!(!valid_cidr(bad), "{bad}");
        }
    }
}
