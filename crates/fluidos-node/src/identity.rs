//! The node's own identity, from the `fluidos-node-identity` ConfigMap.
//!
//! Same keys and result as the Go node's `GetNodeIdentity`; where Go panics
//! (Endpoints without subsets) or carries on with empty values, this returns
//! an error that says what to fix.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;

use fluidos_api::{NODE_IDENTITY_CONFIGMAP, NodeIdentity};
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints};
use kube::{Api, Client};

/// ConfigMap key of the FLUIDOS domain.
pub const KEY_DOMAIN: &str = "domain";
/// ConfigMap key of the node ID.
pub const KEY_NODE_ID: &str = "nodeID";
/// ConfigMap key of the externally reachable host (optional).
pub const KEY_IP: &str = "ip";
/// ConfigMap key of the REAR gateway's externally reachable port.
pub const KEY_PORT: &str = "port";
/// ConfigMap where a node whose identity ConfigMap names no node ID keeps
/// the one it drew for itself. Not the chart's: `helm template` (GitOps)
/// renders the identity ConfigMap anew at every sync, so an ID drawn by the
/// chart would change at each one, and the node with it.
pub const GENERATED_ID_CONFIGMAP: &str = fluidos_api::GENERATED_NODE_ID_CONFIGMAP;
/// Length of a node ID the node draws (as the Go node's and the chart's).
const NODE_ID_LEN: usize = 10;

/// Why the node identity could not be determined.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The ConfigMap does not exist.
    #[error(
        "ConfigMap {namespace}/{NODE_IDENTITY_CONFIGMAP} does not exist; it holds this node's identity. \
         Create it, e.g.: kubectl create configmap {NODE_IDENTITY_CONFIGMAP} -n {namespace} \
         --from-literal={KEY_DOMAIN}=fluidos.eu --from-literal={KEY_NODE_ID}=$(tr -dc a-z0-9 </dev/urandom | head -c 10) \
         --from-literal={KEY_PORT}=<REAR gateway NodePort> [--from-literal={KEY_IP}=<externally reachable IP>] \
         (the Helm chart creates it from common.configMaps.nodeIdentity)"
    )]
    ConfigMapMissing {
        /// Namespace that was searched.
        namespace: String,
    },
    /// Required keys are absent or empty.
    #[error(
        "ConfigMap {namespace}/{NODE_IDENTITY_CONFIGMAP} lacks {}; set them, e.g.: \
         kubectl patch configmap {NODE_IDENTITY_CONFIGMAP} -n {namespace} --type merge -p '{{\"data\":{{{}}}}}'",
        .keys.join(", "),
        .keys.iter().map(|k| format!("\"{k}\":\"{}\"", placeholder(k))).collect::<Vec<_>>().join(",")
    )]
    MissingKeys {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// The missing keys, in ConfigMap order (`domain`, `nodeID`, `port`).
        keys: Vec<&'static str>,
    },
    /// `port` is not a TCP port number.
    #[error(
        "ConfigMap {namespace}/{NODE_IDENTITY_CONFIGMAP} key {KEY_PORT} is {value:?}, not a port number (1-65535)"
    )]
    InvalidPort {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// The value found.
        value: String,
    },
    /// `ip` is empty and the API server address cannot stand in for it.
    #[error(
        "ConfigMap {namespace}/{NODE_IDENTITY_CONFIGMAP} has no {KEY_IP}, and the fallback, the first address of \
         Endpoints default/kubernetes, is unavailable ({reason}); set {KEY_IP} to this node's externally reachable IP: \
         kubectl patch configmap {NODE_IDENTITY_CONFIGMAP} -n {namespace} --type merge -p '{{\"data\":{{\"{KEY_IP}\":\"<IP>\"}}}}'"
    )]
    NoHost {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Why the fallback failed.
        reason: String,
    },
    /// The ConfigMap of the drawn node ID could not be written and holds
    /// no usable one.
    #[error(
        "ConfigMap {namespace}/{GENERATED_ID_CONFIGMAP} holds no usable nodeID (10 lower-case letters and digits) and this node could not write one; delete it (this node then draws its ID anew) or set common.configMaps.nodeIdentity.nodeID"
    )]
    GeneratedIdUnusable {
        /// Namespace of the ConfigMap.
        namespace: String,
    },
    /// The OS gave no randomness to draw a node ID with.
    #[error("no randomness to draw this node's ID with: {0}")]
    NoRandomness(String),
    /// The API server refused or failed a request.
    #[error("reading {what}: {source}")]
    Kube {
        /// What was being read.
        what: String,
        /// The underlying error.
        #[source]
        source: kube::Error,
    },
}

/// A placeholder value for a missing key in the suggested `kubectl patch`.
fn placeholder(key: &str) -> &'static str {
    match key {
        KEY_DOMAIN => "fluidos.eu",
        KEY_NODE_ID => "<10 lower-case alphanumerics>",
        KEY_PORT => "<REAR gateway NodePort>",
        _ => "<value>",
    }
}

/// Builds the identity from ConfigMap data; `fallback_host` stands in for an empty `ip`.
///
/// The namespace in errors is [`fluidos_api::DEFAULT_NAMESPACE`]; use
/// [`identity_from_data_in`] to name another.
pub fn identity_from_data(
    data: &BTreeMap<String, String>,
    fallback_host: Option<&str>,
) -> Result<NodeIdentity, IdentityError> {
    identity_from_data_in(fluidos_api::DEFAULT_NAMESPACE, data, fallback_host)
}

/// [`identity_from_data`] for a ConfigMap in `namespace`.
pub fn identity_from_data_in(
    namespace: &str,
    data: &BTreeMap<String, String>,
    fallback_host: Option<&str>,
) -> Result<NodeIdentity, IdentityError> {
    let fields = Fields::read(namespace, data)?;
    let Some(host) = fields
        .ip
        .or(fallback_host.map(str::trim).filter(|h| !h.is_empty()))
    else {
        return Err(IdentityError::NoHost {
            namespace: namespace.to_owned(),
            reason: "no fallback address given".to_owned(),
        });
    };
    Ok(NodeIdentity {
        domain: fields.domain.to_owned(),
        node_id: fields.node_id.to_owned(),
        ip: join_host_port(host, fields.port),
        additional_information: None,
    })
}

/// The validated keys of the ConfigMap.
struct Fields<'a> {
    domain: &'a str,
    node_id: &'a str,
    port: &'a str,
    ip: Option<&'a str>,
}

impl<'a> Fields<'a> {
    fn read(namespace: &str, data: &'a BTreeMap<String, String>) -> Result<Self, IdentityError> {
        // Helm renders values verbatim, so stray whitespace is plausible and never meaningful.
        let get = |key: &str| data.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let (Some(domain), Some(node_id), Some(port)) =
            (get(KEY_DOMAIN), get(KEY_NODE_ID), get(KEY_PORT))
        else {
            return Err(IdentityError::MissingKeys {
                namespace: namespace.to_owned(),
                keys: [KEY_DOMAIN, KEY_NODE_ID, KEY_PORT]
                    .into_iter()
                    .filter(|k| get(k).is_none())
                    .collect(),
            });
        };
        if !matches!(port.parse::<u16>(), Ok(p) if p != 0) {
            return Err(IdentityError::InvalidPort {
                namespace: namespace.to_owned(),
                value: port.to_owned(),
            });
        }
        Ok(Fields {
            domain,
            node_id,
            port,
            ip: get(KEY_IP),
        })
    }
}

/// `host:port`, bracketing a bare IPv6 address.
// Go concatenates blindly, giving an unusable `fd00::1:30000` on IPv6 clusters;
// peers build `http://<ip>/...` from this value, so it must be a valid authority.
fn join_host_port(host: &str, port: &str) -> String {
    if host.parse::<Ipv6Addr>().is_ok() {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The first address of an Endpoints object, as upstream picks it.
pub fn first_endpoint_address(endpoints: &Endpoints) -> Option<&str> {
    endpoints
        .subsets
        .as_deref()?
        .iter()
        .flat_map(|s| s.addresses.as_deref().unwrap_or_default())
        .map(|a| a.ip.as_str())
        .find(|ip| !ip.is_empty())
}

/// Reads `<namespace>/fluidos-node-identity` and returns this node's identity.
pub async fn load(client: &Client, namespace: &str) -> Result<NodeIdentity, IdentityError> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = configmaps
        .get_opt(NODE_IDENTITY_CONFIGMAP)
        .await
        .map_err(|source| IdentityError::Kube {
            what: format!("ConfigMap {namespace}/{NODE_IDENTITY_CONFIGMAP}"),
            source,
        })?
        .ok_or_else(|| IdentityError::ConfigMapMissing {
            namespace: namespace.to_owned(),
        })?;
    let mut data = cm.data.unwrap_or_default();
    if data.get(KEY_NODE_ID).is_none_or(|v| v.trim().is_empty()) {
        data.insert(
            KEY_NODE_ID.to_owned(),
            drawn_node_id(client, namespace).await?,
        );
    }

    // Missing keys are reported before the Endpoints fallback is tried: they
    // are the likelier mistake, and the fallback may be forbidden by RBAC.
    let fallback = match Fields::read(namespace, &data)?.ip {
        Some(_) => None,
        None => Some(
            api_server_address(client)
                .await
                .map_err(|reason| IdentityError::NoHost {
                    namespace: namespace.to_owned(),
                    reason,
                })?,
        ),
    };
    identity_from_data_in(namespace, &data, fallback.as_deref())
}

/// The node ID kept in [`GENERATED_ID_CONFIGMAP`], drawn and written first
/// if there is none. Components starting at once each draw one and write it
/// with a server-side apply of their own (never forced): the first to land
/// wins, the others are refused a conflict and read the winner's.
async fn drawn_node_id(client: &Client, namespace: &str) -> Result<String, IdentityError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let what = || format!("ConfigMap {namespace}/{GENERATED_ID_CONFIGMAP}");
    let kept = |cm: Option<ConfigMap>| {
        cm.and_then(|c| c.data)
            .and_then(|d| d.get(KEY_NODE_ID).map(|v| v.trim().to_owned()))
            .filter(|id| valid_node_id(id))
    };
    let read = || async {
        api.get_opt(GENERATED_ID_CONFIGMAP)
            .await
            .map_err(|source| IdentityError::Kube {
                what: what(),
                source,
            })
    };
    if let Some(id) = kept(read().await?) {
        return Ok(id);
    }
    let id = draw_node_id().map_err(|e| IdentityError::NoRandomness(e.to_string()))?;
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(GENERATED_ID_CONFIGMAP.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                "fluidos-node".to_owned(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(KEY_NODE_ID.to_owned(), id.clone())])),
        ..Default::default()
    };
    let manager = format!("fluidos-node-draw-{id}");
    match api
        .patch(
            GENERATED_ID_CONFIGMAP,
            &kube::api::PatchParams::apply(&manager),
            &kube::api::Patch::Apply(&cm),
        )
        .await
    {
        Ok(_) => {
            tracing::info!(node_id = %id, "the identity ConfigMap names no node ID: drew one, kept in {GENERATED_ID_CONFIGMAP}");
            Ok(id)
        }
        // Another component's landed first.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            kept(read().await?).ok_or_else(|| IdentityError::GeneratedIdUnusable {
                namespace: namespace.to_owned(),
            })
        }
        Err(source) => Err(IdentityError::Kube {
            what: what(),
            source,
        }),
    }
}

/// Ten lower-case letters and digits, from the OS's randomness.
fn draw_node_id() -> Result<String, getrandom::Error> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; NODE_ID_LEN];
    getrandom::fill(&mut bytes)?;
    // 252 = 7 × 36: a byte below it maps to the alphabet without bias.
    let mut id = String::with_capacity(NODE_ID_LEN);
    let mut pool = bytes.to_vec();
    while id.len() < NODE_ID_LEN {
        if pool.is_empty() {
            let mut more = [0u8; NODE_ID_LEN];
            getrandom::fill(&mut more)?;
            pool.extend_from_slice(&more);
        }
        let b = pool.remove(0);
        if b < 252 {
            id.push(char::from(ALPHABET[usize::from(b % 36)]));
        }
    }
    Ok(id)
}

/// Whether `id` is one a node would draw (or a Kubernetes name part).
fn valid_node_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 63
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// First address of Endpoints `default/kubernetes`, or why there is none.
async fn api_server_address(client: &Client) -> Result<String, String> {
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ep = endpoints
        .get_opt("kubernetes")
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "it does not exist".to_owned())?;
    first_endpoint_address(&ep)
        .map(str::to_owned)
        .ok_or_else(|| "it lists no addresses".to_owned())
}

/// Liqo's cluster-ID ConfigMap: namespace, name and key.
const LIQO_CLUSTER_ID: (&str, &str, &str) = ("liqo", "liqo-clusterid-configmap", "CLUSTER_ID");

/// This cluster's Liqo ID: the flag, else Liqo's ConfigMap, else (only
/// without peering) `fluidos-<nodeID>`; `None` while Liqo has not published
/// it and the node peers ([`wait_for_liqo_cluster_id`]).
///
/// Upstream refuses to serve until Liqo publishes its ID, and so do we when
/// peering: an invented ID would be handed to buyers in Contracts.
pub async fn liqo_cluster_id(
    client: &Client,
    flag: Option<&str>,
    peering: bool,
    identity: &NodeIdentity,
) -> Option<String> {
    if let Some(id) = flag.filter(|s| !s.is_empty()) {
        return Some(id.to_owned());
    }
    let (ns, name, _) = LIQO_CLUSTER_ID;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    match api.get_opt(name).await {
        Ok(Some(cm)) => {
            if let Some(id) = cluster_id_of(&cm) {
                return Some(id);
            }
        }
        Ok(None) => {}
        // Without peering Liqo is optional, and least-privilege RBAC (the
        // Helm chart with peering off) grants no read of its namespace.
        Err(kube::Error::Api(e)) if !peering && e.code == 403 => {
            tracing::debug!(error = %e, "not allowed to read Liqo's cluster ID ConfigMap; peering is off");
        }
        Err(e) => tracing::warn!(error = %e, "cannot read Liqo's cluster ID ConfigMap"),
    }
    (!peering).then(|| default_liqo_id(&identity.node_id))
}

/// Why a peering node is not ready yet without Liqo's cluster ID.
pub const WAITING_FOR_LIQO: &str = "waiting for Liqo's cluster ID (ConfigMap liqo/liqo-clusterid-configmap, key CLUSTER_ID: is Liqo installed?); or pass --liqo-cluster-id, or --peering=false to run without Liqo";

fn cluster_id_of(cm: &ConfigMap) -> Option<String> {
    cm.data
        .as_ref()
        .and_then(|d| d.get(LIQO_CLUSTER_ID.2).cloned())
        .filter(|s| !s.is_empty())
}

/// Watches Liqo's cluster-ID ConfigMap until it holds an ID (Liqo installed
/// after this node started).
pub async fn wait_for_liqo_cluster_id(
    client: &Client,
) -> Result<String, kube::runtime::wait::Error> {
    let (ns, name, _) = LIQO_CLUSTER_ID;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let found = kube::runtime::wait::await_condition(api, name, |cm: Option<&ConfigMap>| {
        cm.and_then(cluster_id_of).is_some()
    })
    .await?;
    Ok(found.as_ref().and_then(cluster_id_of).unwrap_or_default())
}

/// The fallback Liqo ID for a node.
pub fn default_liqo_id(node_id: &str) -> String {
    format!("fluidos-{node_id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EndpointAddress, EndpointSubset};

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn drawn_node_ids_are_ten_lower_case_letters_and_digits() {
        let ids: Vec<String> = (0..50).map(|_| draw_node_id().unwrap()).collect();
        for id in &ids {
            assert_eq!(id.len(), NODE_ID_LEN, "{id}");
            assert!(valid_node_id(id), "{id}");
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
                "{id}"
            );
        }
        let distinct: std::collections::BTreeSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        assert!(!valid_node_id("Not-Lower"));
        assert!(!valid_node_id(""));
    }

    #[test]
    fn full_configmap_gives_ip_and_port() {
        let id = identity_from_data(
            &data(&[
                ("domain", "fluidos.eu"),
                ("nodeID", "abcdefghij"),
                ("ip", "172.18.0.2"),
                ("port", "30000"),
            ]),
            Some("10.0.0.1"),
        )
        .unwrap();
        assert_eq!(
            id,
            NodeIdentity {
                domain: "fluidos.eu".into(),
                node_id: "abcdefghij".into(),
                ip: "172.18.0.2:30000".into(),
                additional_information: None,
            }
        );
    }

    #[test]
    fn empty_ip_falls_back_to_the_given_host() {
        let d = data(&[
            ("domain", "fluidos.eu"),
            ("nodeID", "n1"),
            ("ip", ""),
            ("port", "30000"),
        ]);
        assert_eq!(
            identity_from_data(&d, Some("10.0.0.1")).unwrap().ip,
            "10.0.0.1:30000"
        );
        assert_eq!(
            identity_from_data(&d, Some("fd00::1")).unwrap().ip,
            "[fd00::1]:30000"
        );
        let err = identity_from_data(&d, None).unwrap_err();
        assert!(matches!(err, IdentityError::NoHost { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("kubectl patch configmap fluidos-node-identity")
        );
    }

    #[test]
    fn missing_keys_are_all_named() {
        let err = identity_from_data_in(
            "fl",
            &data(&[("domain", "fluidos.eu"), ("nodeID", "  ")]),
            Some("h"),
        )
        .unwrap_err();
        match &err {
            IdentityError::MissingKeys { keys, namespace } => {
                assert_eq!(keys, &vec!["nodeID", "port"]);
                assert_eq!(namespace, "fl");
            }
            other => panic!("unexpected {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains("fl/fluidos-node-identity lacks nodeID, port"),
            "{msg}"
        );
        assert!(
            msg.contains(r#"-p '{"data":{"nodeID":"<10 lower-case alphanumerics>","port":"<REAR gateway NodePort>"}}'"#),
            "{msg}"
        );

        let err = identity_from_data(&BTreeMap::new(), Some("h")).unwrap_err();
        assert!(
            err.to_string().contains("lacks domain, nodeID, port"),
            "{err}"
        );
    }

    #[test]
    fn port_must_be_a_port() {
        for bad in ["http", "0", "70000", "-1"] {
            let err = identity_from_data(
                &data(&[
                    ("domain", "d"),
                    ("nodeID", "n"),
                    ("ip", "1.2.3.4"),
                    ("port", bad),
                ]),
                None,
            )
            .unwrap_err();
            assert!(
                matches!(err, IdentityError::InvalidPort { .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn missing_configmap_message_says_how_to_create_it() {
        let msg = IdentityError::ConfigMapMissing {
            namespace: "fluidos".into(),
        }
        .to_string();
        assert!(msg.contains("ConfigMap fluidos/fluidos-node-identity does not exist"));
        assert!(msg.contains("kubectl create configmap fluidos-node-identity -n fluidos"));
    }

    #[test]
    fn endpoints_without_subsets_yield_none_instead_of_panicking() {
        assert_eq!(first_endpoint_address(&Endpoints::default()), None);
        let empty = Endpoints {
            subsets: Some(vec![EndpointSubset::default()]),
            ..Default::default()
        };
        assert_eq!(first_endpoint_address(&empty), None);
        let ep = Endpoints {
            subsets: Some(vec![
                EndpointSubset::default(),
                EndpointSubset {
                    addresses: Some(vec![
                        EndpointAddress {
                            ip: "192.168.1.10".into(),
                            ..Default::default()
                        },
                        EndpointAddress {
                            ip: "192.168.1.11".into(),
                            ..Default::default()
                        },
                    ]),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        assert_eq!(first_endpoint_address(&ep), Some("192.168.1.10"));
    }
}
