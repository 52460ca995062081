//! Liqo's networking module on a test control plane: what Liqo's chart
//! installs for it, and a **stand-in** for the WireGuard gateway pods.
//!
//! With `--networking-enabled`, `liqo-controller-manager` renders each
//! GatewayServer and GatewayClient into a `gw-<name>` Deployment (and, for
//! a server, a Service) and creates the gateway's key Secret; everything of
//! that is real here. What the gateway pod would then do cannot run (no
//! kubelet, no WireGuard): [`GatewayStandIn`] does, on one control plane,
//! the two things of it the rest of Liqo sees, and says it is a stand-in:
//!
//! 1. it labels each gateway pod `networking.liqo.io/active=true` (the pod's
//!    leader election among its replicas does so);
//! 2. once the peer's PublicKey is in a gateway's namespace, it creates the
//!    Connection `gw-<gateway>` and reports it `Connected` (the pod's
//!    WireGuard container does, after its connection checker's pings
//!    answer).
//!
//! Nothing carries traffic: `Connected` here means only that both sides
//! exchanged their keys through Liqo's objects.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::task::JoinHandle;

use crate::Error;

const LIQO_NAMESPACE: &str = "liqo";
const FIELD_MANAGER: &str = "fluidos-testenv";
const REMOTE_CLUSTER_ID: &str = "liqo.io/remote-cluster-id";
const GATEWAY_POD_SELECTOR: &str = "networking.liqo.io/component=gateway";
const ACTIVE_LABEL: &str = "networking.liqo.io/active";

fn networking(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("networking.liqo.io", "v1beta1", kind),
        plural,
    )
}

/// The objects Liqo's chart installs for the networking module, as the
/// chart renders them by default (`liqo-ipam-networks.yaml`, the WireGuard
/// gateway templates without the parts only a real pod uses), and the
/// `liqo-proxy` Service the controller manager reads the IP of.
pub fn network_prerequisites() -> Vec<serde_json::Value> {
    let network = |name: &str, kind: &str, cidr: &str, remapped: bool| {
        let mut labels = serde_json::json!({"ipam.liqo.io/network-type": kind});
        if !remapped {
            labels["ipam.liqo.io/network-not-remapped"] = "true".into();
        }
        let mut o = serde_json::json!({
            "apiVersion": "ipam.liqo.io/v1alpha1", "kind": "Network",
            "metadata": {"name": name, "namespace": LIQO_NAMESPACE, "labels": labels,
                "annotations": {"liqo.io/preinstalled": "true"}},
            "spec": {"cidr": cidr},
        });
        if kind == "external-cidr" {
            // The chart reserves the first IP for traffic of unknown source.
            o["spec"]["preAllocated"] = 1.into();
        }
        o
    };
    let selector = serde_json::json!({
        "networking.liqo.io/component": "gateway",
        "networking.liqo.io/gateway-name": "{{ .Name }}",
        "networking.liqo.io/gateway-namespace": "{{ .Namespace }}",
    });
    let meta = serde_json::json!({"name": "{{ .Name }}", "namespace": "{{ .Namespace }}", "labels": selector});
    let deployment = serde_json::json!({
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {"metadata": meta, "spec": {
                "serviceAccountName": "{{ .Name }}",
                // Never pulled: kwok plays the pod (see GatewayStandIn).
                "containers": [{"name": "gateway", "image": "ghcr.io/liqotech/gateway:v1.0.0"}],
            }},
        },
    });
    let mut service_selector = selector.clone();
    service_selector[ACTIVE_LABEL] = "true".into();
    vec![
        network("pod-cidr", "pod-cidr", "10.100.0.0/16", false),
        network("service-cidr", "service-cidr", "10.0.0.0/24", false),
        network("external-cidr", "external-cidr", "10.70.0.0/16", true),
        network("internal-cidr", "internal-cidr", "10.80.0.0/16", true),
        serde_json::json!({
            "apiVersion": "networking.liqo.io/v1beta1", "kind": "WgGatewayServerTemplate",
            "metadata": {"name": "wireguard-server", "namespace": LIQO_NAMESPACE},
            "spec": {
                "objectKind": {"apiVersion": "networking.liqo.io/v1beta1", "kind": "WgGatewayServer"},
                "template": {"metadata": meta, "spec": {
                    "service": {"metadata": meta, "spec": {
                        "selector": service_selector,
                        "type": "{{ .Spec.Endpoint.ServiceType }}",
                        "ports": [{"port": "{{ .Spec.Endpoint.Port }}", "protocol": "UDP",
                            "targetPort": "{{ .Spec.Endpoint.Port }}",
                            "?nodePort": "{{ .Spec.Endpoint.NodePort }}"}],
                    }},
                    "deployment": deployment,
                }},
            },
        }),
        serde_json::json!({
            "apiVersion": "networking.liqo.io/v1beta1", "kind": "WgGatewayClientTemplate",
            "metadata": {"name": "wireguard-client", "namespace": LIQO_NAMESPACE},
            "spec": {
                "objectKind": {"apiVersion": "networking.liqo.io/v1beta1", "kind": "WgGatewayClient"},
                "template": {"metadata": meta, "spec": {"deployment": deployment}},
            },
        }),
        serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "liqo-proxy", "namespace": LIQO_NAMESPACE,
                "labels": {"app.kubernetes.io/name": "proxy"}},
            "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 8118, "protocol": "TCP"}]},
        }),
    ]
}

/// Applies [`network_prerequisites`] (server-side apply; the `liqo`
/// namespace and Liqo's CRDs must exist).
pub async fn install_network_prerequisites(client: &kube::Client) -> Result<(), Error> {
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    for object in network_prerequisites() {
        let o: DynamicObject = serde_json::from_value(object)
            .map_err(|e| Error::Fixture(format!("a networking prerequisite: {e}")))?;
        let types = o
            .types
            .clone()
            .ok_or_else(|| Error::Fixture("a networking prerequisite without a kind".into()))?;
        let (group, version) = types
            .api_version
            .split_once('/')
            .unwrap_or(("", types.api_version.as_str()));
        let plural = match types.kind.as_str() {
            "Service" => "services".to_owned(),
            kind => format!("{}s", kind.to_lowercase()),
        };
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, &types.kind),
            &plural,
        );
        Api::<DynamicObject>::namespaced_with(client.clone(), LIQO_NAMESPACE, &resource)
            .patch(&o.name_any(), &apply, &Patch::Apply(&o))
            .await?;
    }
    Ok(())
}

/// The **stand-in** for the gateway pods of one control plane (module
/// docs); stops when dropped.
pub struct GatewayStandIn {
    task: JoinHandle<()>,
}

impl GatewayStandIn {
    /// Starts playing the gateway pods of the cluster `client` reaches.
    pub fn start(client: kube::Client) -> GatewayStandIn {
        GatewayStandIn {
            task: tokio::spawn(stand_in(client)),
        }
    }
}

impl Drop for GatewayStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Acts on every change of a gateway pod or a PublicKey, and every second
/// (an object it needs may come after the event that named it).
async fn stand_in(client: kube::Client) {
    let pods = watcher(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().labels(GATEWAY_POD_SELECTOR),
    )
    .default_backoff()
    .touched_objects()
    .map(|_| ());
    let keys = watcher(
        Api::<DynamicObject>::all_with(client.clone(), &networking("PublicKey", "publickeies")),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects()
    .map(|_| ());
    let ticks = tokio_stream_interval(Duration::from_secs(1));
    let events = futures::stream::select(futures::stream::select(pods, keys), ticks);
    let mut events = std::pin::pin!(events);
    while events.next().await.is_some() {
        if let Err(e) = act(&client).await {
            eprintln!("fluidos-testenv: gateway stand-in: {e}");
        }
    }
}

fn tokio_stream_interval(period: Duration) -> impl futures::Stream<Item = ()> {
    futures::stream::unfold(tokio::time::interval(period), |mut interval| async move {
        interval.tick().await;
        Some(((), interval))
    })
}

async fn act(client: &kube::Client) -> Result<(), kube::Error> {
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().labels(GATEWAY_POD_SELECTOR))
        .await?;
    for pod in pods.items {
        let running = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_ref())
            .is_some();
        if running && !pod.labels().contains_key(ACTIVE_LABEL) {
            let ns = pod.namespace().unwrap_or_default();
            Api::<Pod>::namespaced(client.clone(), &ns)
                .patch(
                    &pod.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(
                        serde_json::json!({"metadata": {"labels": {ACTIVE_LABEL: "true"}}}),
                    ),
                )
                .await?;
        }
    }
    let keys =
        Api::<DynamicObject>::all_with(client.clone(), &networking("PublicKey", "publickeies"))
            .list(&ListParams::default())
            .await?;
    for key in keys.items {
        let (Some(ns), Some(remote)) = (
            key.namespace(),
            key.labels().get(REMOTE_CLUSTER_ID).cloned(),
        ) else {
            continue;
        };
        connect(client, &ns, &remote).await?;
    }
    Ok(())
}

/// The Connection the gateway pod for `remote` in `ns` would make, made
/// `Connected`, once its gateway exists.
async fn connect(client: &kube::Client, ns: &str, remote: &str) -> Result<(), kube::Error> {
    let selector = ListParams::default().labels(&format!("{REMOTE_CLUSTER_ID}={remote}"));
    let mut gateway = None;
    for (kind, plural, wg_kind, mode) in [
        (
            "GatewayServer",
            "gatewayservers",
            "WgGatewayServer",
            "Server",
        ),
        (
            "GatewayClient",
            "gatewayclients",
            "WgGatewayClient",
            "Client",
        ),
    ] {
        let found =
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, &networking(kind, plural))
                .list(&selector)
                .await?;
        if let Some(g) = found.items.into_iter().next() {
            gateway = Some((g, kind, wg_kind, mode));
            break;
        }
    }
    let Some((gateway, kind, wg_kind, mode)) = gateway else {
        return Ok(());
    };
    let connections = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        ns,
        &networking("Connection", "connections"),
    );
    let name = format!("gw-{}", gateway.name_any());
    let uid = gateway.uid().unwrap_or_default();
    let existing = connections.get_opt(&name).await?;
    let connected = existing
        .as_ref()
        .and_then(|c| c.data.pointer("/status/value"))
        .and_then(serde_json::Value::as_str)
        == Some("Connected");
    if connected {
        return Ok(());
    }
    if existing.is_none() {
        let connection: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "networking.liqo.io/v1beta1", "kind": "Connection",
            "metadata": {
                "name": name, "namespace": ns,
                "labels": {REMOTE_CLUSTER_ID: remote},
                "ownerReferences": [{"apiVersion": "networking.liqo.io/v1beta1", "kind": kind,
                    "name": gateway.name_any(), "uid": uid}],
            },
            "spec": {"type": mode, "gatewayRef": {"apiVersion": "networking.liqo.io/v1beta1",
                "kind": wg_kind, "name": gateway.name_any(), "namespace": ns, "uid": uid}},
        }))
        .map_err(kube::Error::SerdeError)?;
        connections
            .create(&PostParams::default(), &connection)
            .await?;
        eprintln!("fluidos-testenv: gateway stand-in: Connection {ns}/{name} made for {remote}");
    }
    connections
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"value": "Connected"}})),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn prerequisites_are_the_charts_networks_templates_and_proxy() {
        let objects = network_prerequisites();
        let names: Vec<String> = objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                "Network/pod-cidr",
                "Network/service-cidr",
                "Network/external-cidr",
                "Network/internal-cidr",
                "WgGatewayServerTemplate/wireguard-server",
                "WgGatewayClientTemplate/wireguard-client",
                "Service/liqo-proxy",
            ]
        );
        // Only the pod and service CIDRs are kept as they are (the chart).
        assert_eq!(
            objects[0]["metadata"]["labels"]["ipam.liqo.io/network-not-remapped"],
            "true"
        );
        assert!(
            objects[2]["metadata"]["labels"]
                .get("ipam.liqo.io/network-not-remapped")
                .is_none()
        );
    }
}
