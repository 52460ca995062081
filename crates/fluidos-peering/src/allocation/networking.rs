//! The executor's part of Liqo's networking phase: what it reads of the
//! networking objects on both clusters, and the writes of
//! [`super::machine`]'s networking effects (create-or-adopt, like the rest).

use fluidos_controller::api_error;
use fluidos_liqo_api::{Configuration, Connection, GatewayClient, GatewayServer, PublicKey};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};

use super::machine::{Effect, GatewayView, NetworkView, RemoteNetwork};
use super::{Error, NetworkingConfig, create, local, remote};
use crate::network_objects::{
    self, CONNECTED, ClusterCidrs, NETWORK_TYPE_LABEL, PUBLIC_KEY, configuration_ready, key_of,
    valid_cidr, wireguard_key,
};
use crate::objects::{self, LIQO_NAMESPACE, REMOTE_CLUSTER_ID};

fn ipam_networks() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ipam.liqo.io", "v1alpha1", "Network"),
        "networks",
    )
}

/// The `status.cidr` of the one Network of `network_type` in `liqo`
/// (Liqo's `GetUniqueNetworkByLabel`: none, or several, is no answer).
async fn cidr_of(c: &kube::Client, network_type: &str) -> Result<Option<String>, kube::Error> {
    let found = Api::<DynamicObject>::namespaced_with(c.clone(), LIQO_NAMESPACE, &ipam_networks())
        .list(
            &ListParams::default()
                .labels(&format!("{NETWORK_TYPE_LABEL}={network_type}"))
                .limit(2),
        )
        .await?;
    let [network] = found.items.as_slice() else {
        return Ok(None);
    };
    Ok(network
        .data
        .pointer("/status/cidr")
        .and_then(serde_json::Value::as_str)
        .filter(|s| {
            let usable = valid_cidr(s);
            if !usable {
                tracing::warn!(cidr = %s, network_type, "a Liqo IPAM Network's CIDR is not usable");
            }
            usable
        })
        .map(str::to_owned))
}

/// A cluster's pod and external CIDRs, once its IPAM published both.
async fn cidrs_of(c: &kube::Client) -> Result<Option<ClusterCidrs>, kube::Error> {
    let pod = cidr_of(c, "pod-cidr").await?;
    let external = cidr_of(c, "external-cidr").await?;
    Ok(pod
        .zip(external)
        .map(|(pod, external)| ClusterCidrs { pod, external }))
}

/// The WireGuard public key in the key Secret a gateway's status names,
/// if it is one (32 bytes).
async fn gateway_key(
    c: &kube::Client,
    ns: &str,
    secret: Option<&str>,
) -> Result<Option<Vec<u8>>, kube::Error> {
    let Some(name) = secret else {
        return Ok(None);
    };
    let secret = Api::<Secret>::namespaced(c.clone(), ns)
        .get_opt(name)
        .await?;
    Ok(secret
        .as_ref()
        .and_then(|s| objects::secret_value(s, PUBLIC_KEY))
        .and_then(wireguard_key))
}

/// Whether a Connection with `peer` in `ns` is `Connected`.
async fn connected(c: &kube::Client, ns: &str, peer: &str) -> Result<bool, kube::Error> {
    let connections = Api::<Connection>::namespaced(c.clone(), ns)
        .list(
            &ListParams::default()
                .labels(&format!("{REMOTE_CLUSTER_ID}={peer}"))
                .limit(16),
        )
        .await?;
    Ok(connections.items.iter().any(|c| {
        c.status
            .as_ref()
            .and_then(|s| s.value.as_deref())
            .is_some_and(|v| v == CONNECTED)
    }))
}

/// The networking objects for `provider` on this cluster.
pub(super) async fn observe_local(c: &kube::Client, provider: &str) -> Result<NetworkView, Error> {
    let ns = objects::tenant_namespace(provider);
    let local_cidrs = cidrs_of(c).await.map_err(local("get_ipam_networks"))?;
    let configuration = Api::<Configuration>::namespaced(c.clone(), &ns)
        .get_opt(provider)
        .await
        .map_err(local("get_configuration"))?;
    let client = Api::<GatewayClient>::namespaced(c.clone(), &ns)
        .get_opt(provider)
        .await
        .map_err(local("get_gateway_client"))?;
    let client = match client {
        None => None,
        Some(g) => {
            let secret = g
                .status
                .as_ref()
                .and_then(|s| s.secret_ref.as_ref())
                .and_then(|r| r.name.as_deref());
            Some(GatewayView {
                name: provider.to_owned(),
                uid: g.metadata.uid.clone().unwrap_or_default(),
                endpoint: network_objects::client_endpoint(&g),
                key: gateway_key(c, &ns, secret)
                    .await
                    .map_err(local("get_gateway_client_key"))?,
            })
        }
    };
    let public_key = Api::<PublicKey>::namespaced(c.clone(), &ns)
        .get_opt(provider)
        .await
        .map_err(local("get_public_key"))?
        .map(|k| key_of(&k).unwrap_or_default());
    let connected = connected(c, &ns, provider)
        .await
        .map_err(local("list_connections"))?;
    let reverse_tunnel = Api::<GatewayServer>::namespaced(c.clone(), &ns)
        .get_opt(provider)
        .await
        .map_err(local("get_gateway_server"))?
        .is_some();
    Ok(NetworkView {
        reverse_tunnel,
        local_cidrs,
        configuration: configuration.as_ref().map(configuration_ready),
        client,
        public_key,
        connected,
        remote: None,
    })
}

/// The networking objects for this cluster (`me`) on the provider `p`. A
/// provider that does not let this cluster read its IPAM (a fluidos-rs
/// provider of an earlier version grants no read in its Liqo namespace) is
/// waited on, with a warning.
pub(super) async fn observe_remote(p: &kube::Client, me: &str) -> Result<RemoteNetwork, Error> {
    let ns = objects::tenant_namespace(me);
    let (cidrs, cidrs_forbidden) = match cidrs_of(p).await {
        Ok(cidrs) => (cidrs, false),
        // Said in the Allocation's status.
        Err(e) if api_error::is_forbidden(&e) => (None, true),
        Err(e) => return Err(remote("get_ipam_networks")(e)),
    };
    let configuration = Api::<Configuration>::namespaced(p.clone(), &ns)
        .get_opt(me)
        .await
        .map_err(remote("get_configuration"))?;
    let server = Api::<GatewayServer>::namespaced(p.clone(), &ns)
        .get_opt(me)
        .await
        .map_err(remote("get_gateway_server"))?;
    let server = match server {
        None => None,
        Some(s) => {
            let secret = s
                .status
                .as_ref()
                .and_then(|st| st.secret_ref.as_ref())
                .and_then(|r| r.name.as_deref());
            Some(GatewayView {
                name: me.to_owned(),
                uid: s.metadata.uid.clone().unwrap_or_default(),
                endpoint: network_objects::server_endpoint(&s),
                key: gateway_key(p, &ns, secret)
                    .await
                    .map_err(remote("get_gateway_server_key"))?,
            })
        }
    };
    let public_key = Api::<PublicKey>::namespaced(p.clone(), &ns)
        .get_opt(me)
        .await
        .map_err(remote("get_public_key"))?
        .map(|k| key_of(&k).unwrap_or_default());
    let connected = connected(p, &ns, me)
        .await
        .map_err(remote("list_connections"))?;
    let reverse_tunnel = Api::<GatewayClient>::namespaced(p.clone(), &ns)
        .get_opt(me)
        .await
        .map_err(remote("get_gateway_client"))?
        .is_some();
    Ok(RemoteNetwork {
        reverse_tunnel,
        cidrs,
        cidrs_forbidden,
        configuration: configuration.as_ref().map(configuration_ready),
        server,
        public_key,
        connected,
    })
}

/// Makes one networking effect; `false` when `effect` is not one.
pub(super) async fn apply(
    c: &kube::Client,
    p: Option<&kube::Client>,
    cfg: Option<&NetworkingConfig>,
    me: &str,
    provider: &str,
    effect: &Effect,
) -> Result<bool, Error> {
    let here = objects::tenant_namespace(provider);
    let there = objects::tenant_namespace(me);
    let provider_client = || {
        p.cloned().ok_or_else(|| {
            Error::Build(objects::BuildError::NotK8Slice("no provider client".into()))
        })
    };
    match effect {
        Effect::CreateLocalConfiguration(cidrs) => create(
            &Api::<Configuration>::namespaced(c.clone(), &here),
            &network_objects::configuration(provider, cidrs),
        )
        .await
        .map_err(local("create_configuration"))?,
        Effect::CreateRemoteConfiguration(cidrs) => create(
            &Api::<Configuration>::namespaced(provider_client()?, &there),
            &network_objects::configuration(me, cidrs),
        )
        .await
        .map_err(remote("create_configuration"))?,
        Effect::CreateGatewayServer => {
            let service_type = cfg
                .map_or(crate::network_objects::GatewayServiceType::NodePort, |n| {
                    n.server_service_type
                });
            create(
                &Api::<GatewayServer>::namespaced(provider_client()?, &there),
                &network_objects::gateway_server(me, service_type),
            )
            .await
            .map_err(remote("create_gateway_server"))?;
        }
        Effect::CreateGatewayClient(endpoint) => create(
            &Api::<GatewayClient>::namespaced(c.clone(), &here),
            &network_objects::gateway_client(provider, endpoint),
        )
        .await
        .map_err(local("create_gateway_client"))?,
        Effect::UpdateGatewayClientEndpoint(endpoint) => {
            // Locally this node may patch; only the endpoint changes, so
            // the client keeps its key.
            let wanted = network_objects::gateway_client(provider, endpoint);
            Api::<GatewayClient>::namespaced(c.clone(), &here)
                .patch(
                    provider,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"endpoint": wanted.spec.endpoint}})),
                )
                .await
                .map(drop)
                .map_err(local("update_gateway_client"))?;
        }
        Effect::CreateLocalPublicKey(key, owner) => create(
            &Api::<PublicKey>::namespaced(c.clone(), &here),
            &network_objects::public_key(provider, key, owner),
        )
        .await
        .map_err(local("create_public_key"))?,
        Effect::CreateRemotePublicKey(key, owner) => create(
            &Api::<PublicKey>::namespaced(provider_client()?, &there),
            &network_objects::public_key(me, key, owner),
        )
        .await
        .map_err(remote("create_public_key"))?,
        Effect::DeleteLocalPublicKey => {
            delete(Api::<PublicKey>::namespaced(c.clone(), &here), provider)
                .await
                .map_err(local("delete_stale_public_key"))?;
        }
        Effect::DeleteRemotePublicKey => {
            delete(Api::<PublicKey>::namespaced(provider_client()?, &there), me)
                .await
                .map_err(remote("delete_stale_public_key"))?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Whether any networking object for `provider` is left here. A node that
/// may not read them (deployed without `peering.networking`, whose chart
/// grants nothing on them) made none: nothing is left of its own.
pub(super) async fn any_left(c: &kube::Client, provider: &str) -> Result<bool, kube::Error> {
    match any_left_readable(c, provider).await {
        Err(e) if api_error::is_forbidden(&e) => Ok(false),
        other => other,
    }
}

async fn any_left_readable(c: &kube::Client, provider: &str) -> Result<bool, kube::Error> {
    let ns = objects::tenant_namespace(provider);
    Ok(Api::<GatewayClient>::namespaced(c.clone(), &ns)
        .get_opt(provider)
        .await?
        .is_some()
        || Api::<PublicKey>::namespaced(c.clone(), &ns)
            .get_opt(provider)
            .await?
            .is_some()
        || Api::<Configuration>::namespaced(c.clone(), &ns)
            .get_opt(provider)
            .await?
            .is_some())
}

/// Deletes `name` with `api`; one already gone (or a kind this cluster
/// does not serve) counts as deleted.
async fn delete<K>(api: Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(e) if api_error::is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Liqo's network reset here: the GatewayClient, the provider's PublicKey,
/// then the Configuration (Liqo removes the gateway's Deployment, key
/// Secret and Connection with the GatewayClient they belong to).
pub(super) async fn delete_local(c: &kube::Client, provider: &str) -> Result<(), kube::Error> {
    let ns = objects::tenant_namespace(provider);
    delete(Api::<GatewayClient>::namespaced(c.clone(), &ns), provider).await?;
    delete(Api::<PublicKey>::namespaced(c.clone(), &ns), provider).await?;
    delete(Api::<Configuration>::namespaced(c.clone(), &ns), provider).await
}

/// The same on the provider: our GatewayServer, PublicKey and
/// Configuration there; each result, so that a refusal of one does not
/// hide the others.
pub(super) async fn delete_remote(p: &kube::Client, me: &str) -> [Result<(), kube::Error>; 3] {
    let ns = objects::tenant_namespace(me);
    [
        delete(Api::<GatewayServer>::namespaced(p.clone(), &ns), me).await,
        delete(Api::<PublicKey>::namespaced(p.clone(), &ns), me).await,
        delete(Api::<Configuration>::namespaced(p.clone(), &ns), me).await,
    ]
}
