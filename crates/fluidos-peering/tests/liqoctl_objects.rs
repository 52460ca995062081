//! The objects our peering driver creates are the ones `liqoctl peer` creates.
//!
//! Two fresh control planes with the real Liqo v1.0.0 controllers are peered
//! by the real `liqoctl peer --networking-disabled`; then each object liqoctl
//! made is compared with what `fluidos_peering::objects` builds from the same
//! inputs (the consumer's keys, the signature, the provider's grant): same
//! kind, namespace, name, labels, annotations, Secret type and spec.
//! Generated values (the nonce, the signature, the certificates) are taken
//! from liqoctl's objects, since they cannot be equal. What the API server
//! or Liqo's controllers add to any object after creation is applied to
//! ours or removed from liqoctl's, each at its comparison: CRD defaults, the
//! namespace's `kubernetes.io/metadata.name` label, the data Liqo fills into
//! the nonce Secrets (not compared), the slice's `consumerClusterID` and
//! `csr`. The differences we make on purpose are in `EXPECTED_DIFFERENCES`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fluidos_liqo_api::{Identity, ResourceSlice, Tenant};
use fluidos_peering::network_objects;
use fluidos_peering::objects::{self, ClusterKeys, TenantGrant};
use fluidos_testenv::liqo_gateway::GatewayStandIn;
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, Liqo, LiqoBinaries, LiqoOptions};
use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

const CONSUMER_ID: &str = "fluidos-consumer";
const PROVIDER_ID: &str = "fluidos-provider";

/// Where we differ from liqoctl on purpose: (object, field, why).
const EXPECTED_DIFFERENCES: &[(&str, &str, &str)] = &[
    (
        "ResourceSlice",
        "metadata.name, spec.class, spec.resources",
        "named after the Contract (one slice per Contract, as the Go node), class \
         `fluidos` when the provider names it, and exactly the contracted resources; \
         the comparison builds ours with liqoctl's name, class and resources",
    ),
    (
        "tenant Namespace",
        "metadata.labels[app.kubernetes.io/managed-by]",
        "`fluidos-peering`: the REAR gateway never adopts a namespace managed by \
         anyone for a Go consumer, whose Liqo rights there list Secrets; the \
         comparison removes the label from ours",
    ),
];

fn say(line: &str) {
    println!("[liqoctl-objects] {line}");
}

/// The parts of an object liqoctl and we decide: namespace, name, labels,
/// annotations, spec.
fn decided(object: &impl serde::Serialize) -> Value {
    let v = serde_json::to_value(object).unwrap();
    let meta = |key: &str| v.pointer(&format!("/metadata/{key}")).cloned();
    let map = |key: &str| meta(key).unwrap_or_else(|| json!({}));
    json!({
        "namespace": meta("namespace"),
        "name": meta("name"),
        "labels": map("labels"),
        "annotations": map("annotations"),
        // A Secret without a type is stored as Opaque.
        "type": v.get("type").cloned().or_else(|| {
            (v.get("kind") == Some(&json!("Secret"))).then(|| json!("Opaque"))
        }),
        "spec": v.get("spec").cloned().unwrap_or(Value::Null),
    })
}

/// Fails with both objects when they differ.
fn assert_same(kind: &str, liqoctl: &Value, ours: &Value) {
    assert_eq!(
        liqoctl,
        ours,
        "{kind}: liqoctl's (left) and ours (right) differ\nliqoctl: {}\nours:    {}",
        serde_json::to_string_pretty(liqoctl).unwrap(),
        serde_json::to_string_pretty(ours).unwrap()
    );
    say(&format!("{kind}: same as liqoctl's"));
}

/// The one object in `api` whose label `label` is `true`.
async fn labelled(api: &Api<Secret>, label: &str) -> Secret {
    let found = api
        .list(&ListParams::default().labels(&format!("{label}=true")))
        .await
        .unwrap()
        .items;
    assert_eq!(found.len(), 1, "one Secret labelled {label}: {found:?}");
    found.into_iter().next().unwrap()
}

/// Polls until `f` is `Some`, for at most a minute.
async fn wait_for<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `decided` with the defaults the API server gives the spec's top-level
/// fields, read from CRD `crd` as served (ours is built locally, liqoctl's
/// was read back after the server defaulted it).
async fn with_crd_defaults(client: &kube::Client, crd: &str, mut decided: Value) -> Value {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get(crd)
        .await
        .unwrap();
    let schema = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == "v1beta1")
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| s.properties.as_ref())
        .and_then(|p| p.get("spec"))
        .and_then(|s| s.properties.clone())
        .unwrap_or_default();
    let spec = decided["spec"].as_object_mut().unwrap();
    for (field, property) in schema {
        if let Some(default) = property.default {
            spec.entry(field).or_insert(default.0);
        }
    }
    decided
}

/// Two fresh control planes with the real Liqo, peered by the real
/// `liqoctl peer`: with Liqo's networking module and its phase when
/// `networking` (the gateway server exposed as ClusterIP: kwok's nodes have
/// no ports to offer; the gateway pods played by kwok on a node made for
/// them and by the testenv's stand-in), else `--networking-disabled`.
struct Peered {
    consumer: ControlPlane,
    provider: ControlPlane,
    c_liqo: Liqo,
    p_liqo: Liqo,
    _stand_ins: Vec<GatewayStandIn>,
}

async fn peered_by_liqoctl(networking: bool) -> Peered {
    let binaries = LiqoBinaries::from_env().unwrap();
    let workloads = || ControlPlaneOptions {
        workloads: true,
        ..Default::default()
    };
    let (consumer, provider) = tokio::join!(
        ControlPlane::start(workloads()),
        ControlPlane::start(workloads())
    );
    let (consumer, provider) = (consumer.unwrap(), provider.unwrap());
    let mut stand_ins = Vec::new();
    if networking {
        for cp in [&consumer, &provider] {
            Api::<k8s_openapi::api::core::v1::Node>::all(cp.client())
                .create(
                    &kube::api::PostParams::default(),
                    &fluidos_testenv::liqo::kwok_node("gateway-node"),
                )
                .await
                .unwrap();
        }
    }
    let options = |id: &str| LiqoOptions {
        cluster_id: id.to_owned(),
        networking,
        ..Default::default()
    };
    let (c_liqo, p_liqo) = tokio::join!(
        Liqo::start_with(&consumer, &binaries, options(CONSUMER_ID)),
        Liqo::start_with(&provider, &binaries, options(PROVIDER_ID))
    );
    let (c_liqo, p_liqo) = (c_liqo.unwrap(), p_liqo.unwrap());
    if networking {
        stand_ins.push(GatewayStandIn::start(consumer.client()));
        stand_ins.push(GatewayStandIn::start(provider.client()));
    }
    let home = tempfile::tempdir().unwrap();
    let output = if networking {
        binaries
            .liqoctl_peer_with_networking(&consumer, &provider, home.path())
            .await
    } else {
        binaries
            .liqoctl_peer(&consumer, &provider, home.path())
            .await
    }
    .unwrap();
    assert!(
        output.status.success(),
        "liqoctl peer failed: {}\n{}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout),
        c_liqo.log_tails(),
        p_liqo.log_tails()
    );
    Peered {
        consumer,
        provider,
        c_liqo,
        p_liqo,
        _stand_ins: stand_ins,
    }
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one comparison per object, in the order liqoctl makes them"
)]
async fn our_peering_objects_are_the_ones_liqoctl_peer_creates() {
    if let Some(reason) = fluidos_testenv::liqo::skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    for (object, field, why) in EXPECTED_DIFFERENCES {
        say(&format!("expected difference: {object} {field}: {why}"));
    }
    let Peered {
        consumer,
        provider,
        c_liqo,
        p_liqo,
        ..
    } = peered_by_liqoctl(false).await;
    say("liqoctl peer --networking-disabled succeeded");

    let (c, p) = (consumer.client(), provider.client());
    let c_tenant = objects::tenant_namespace(PROVIDER_ID);
    let p_tenant = objects::tenant_namespace(CONSUMER_ID);

    // The tenant namespace on the consumer (liqoctl has Liqo make it).
    let theirs = Api::<k8s_openapi::api::core::v1::Namespace>::all(c.clone())
        .get(&c_tenant)
        .await
        .unwrap();
    let mut theirs = decided(&theirs);
    // The API server labels every namespace with its name.
    theirs["labels"]
        .as_object_mut()
        .unwrap()
        .remove("kubernetes.io/metadata.name");
    theirs["spec"] = Value::Null;
    let mut ours = decided(&objects::tenant_namespace_object(PROVIDER_ID));
    ours["spec"] = Value::Null;
    let ours_managed = ours["labels"]
        .as_object_mut()
        .unwrap()
        .remove(objects::MANAGED_BY.0);
    assert_eq!(ours_managed, Some(json!(objects::MANAGED_BY.1)));
    assert_same("tenant Namespace", &theirs, &ours);

    // The nonce Secret on the provider: liqoctl's carries the nonce Liqo
    // generated; ours is created empty for Liqo to fill.
    let theirs = labelled(
        &Api::<Secret>::namespaced(p.clone(), &p_tenant),
        objects::NONCE_LABEL,
    )
    .await;
    let nonce = objects::secret_value(&theirs, objects::NONCE_KEY)
        .unwrap()
        .to_vec();
    assert_same(
        "nonce Secret",
        &decided(&theirs),
        &decided(&objects::nonce_secret(CONSUMER_ID)),
    );

    // The signed-nonce Secret on the consumer, with that nonce.
    let theirs = labelled(
        &Api::<Secret>::namespaced(c.clone(), &c_tenant),
        objects::SIGNED_NONCE_LABEL,
    )
    .await;
    assert_eq!(
        objects::secret_value(&theirs, objects::NONCE_KEY),
        Some(nonce.as_slice()),
        "the signed nonce is the provider's"
    );
    assert_same(
        "signed-nonce Secret",
        &decided(&theirs),
        &decided(&objects::signed_nonce_secret(PROVIDER_ID, &nonce)),
    );

    // The Tenant on the provider, from the consumer's keys and liqoctl's
    // signature. Ed25519 signatures are deterministic, so even the CSR is
    // byte for byte the same when the subject and encoding are.
    let theirs = Api::<Tenant>::namespaced(p.clone(), &p_tenant)
        .get(CONSUMER_ID)
        .await
        .unwrap();
    let keys = ClusterKeys::from_secret(
        &Api::<Secret>::namespaced(c.clone(), objects::LIQO_NAMESPACE)
            .get(objects::AUTH_KEYS_SECRET)
            .await
            .unwrap(),
    )
    .unwrap();
    let signature = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(theirs.spec.signature.clone().unwrap())
            .unwrap()
    };
    let ours = objects::tenant(CONSUMER_ID, &keys, &signature).unwrap();
    assert_same(
        "Tenant",
        &decided(&theirs),
        &with_crd_defaults(&p, "tenants.authentication.liqo.io", decided(&ours)).await,
    );

    // The control-plane Identity on the consumer, from the Tenant's grant.
    let grant = wait_for("the Tenant's grant", || async {
        let t = Api::<Tenant>::namespaced(p.clone(), &p_tenant)
            .get(CONSUMER_ID)
            .await
            .ok()?;
        TenantGrant::of(&t)
    })
    .await;
    let theirs = Api::<Identity>::namespaced(c.clone(), &c_tenant)
        .get(&objects::control_plane_identity_name(PROVIDER_ID))
        .await
        .unwrap();
    let ours = decided(&objects::control_plane_identity(PROVIDER_ID, &grant));
    assert_same(
        "control-plane Identity",
        &decided(&theirs),
        &with_crd_defaults(&c, "identities.authentication.liqo.io", ours).await,
    );

    // The ResourceSlice on the consumer: ours with liqoctl's name, class and
    // resources (see EXPECTED_DIFFERENCES).
    let slices = Api::<ResourceSlice>::namespaced(c.clone(), &c_tenant)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(slices.len(), 1, "liqoctl makes one ResourceSlice");
    let theirs = &slices[0];
    let resources: BTreeMap<String, String> = theirs
        .spec
        .resources
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s,
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
            };
            (k, v)
        })
        .collect();
    let ours = objects::resource_slice(
        &theirs.name_any(),
        PROVIDER_ID,
        theirs.spec.class.as_deref().unwrap_or_default(),
        &resources,
    );
    let mut ours = decided(&ours);
    if resources.is_empty() {
        // liqoctl without --cpu/--memory/--pods asks for nothing in
        // particular; we always ask for what was bought.
        ours["spec"].as_object_mut().unwrap().remove("resources");
    }
    // Liqo's local ResourceSlice controller fills these in on any slice,
    // liqoctl's or ours, after it is created.
    let liqo_filled = decided(theirs);
    for field in ["consumerClusterID", "csr"] {
        if let Some(v) = liqo_filled["spec"].get(field) {
            ours["spec"][field] = v.clone();
        }
    }
    assert_same(
        "ResourceSlice",
        &decided(theirs),
        &with_crd_defaults(&c, "resourceslices.authentication.liqo.io", ours).await,
    );

    c_liqo.stop().await;
    p_liqo.stop().await;
    consumer.stop().await;
    provider.stop().await;
}

/// One cluster's pod and external CIDRs, from its Liqo IPAM Networks.
async fn cluster_cidrs(client: &kube::Client) -> network_objects::ClusterCidrs {
    let networks = Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        objects::LIQO_NAMESPACE,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("ipam.liqo.io", "v1alpha1", "Network"),
            "networks",
        ),
    );
    let cidr = |kind: &'static str| {
        let networks = networks.clone();
        async move {
            let found = networks
                .list(
                    &ListParams::default()
                        .labels(&format!("{}={kind}", network_objects::NETWORK_TYPE_LABEL)),
                )
                .await
                .unwrap();
            found.items[0].data["status"]["cidr"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    network_objects::ClusterCidrs {
        pod: cidr("pod-cidr").await,
        external: cidr("external-cidr").await,
    }
}

/// The WireGuard public key in Secret `gw-<gateway>` of `ns`.
async fn gateway_key(client: &kube::Client, ns: &str, gateway: &str) -> Vec<u8> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get(&format!("gw-{gateway}"))
        .await
        .unwrap();
    objects::secret_value(&secret, network_objects::PUBLIC_KEY)
        .unwrap()
        .to_vec()
}

/// The networking phase: `liqoctl peer` with networking on (the gateway
/// server exposed as ClusterIP: kwok's nodes have no ports to offer), the
/// gateway pods played by the testenv's stand-in; then each networking
/// object liqoctl made is compared with what `network_objects` builds from
/// the same inputs (each cluster's CIDRs as its IPAM publishes them, the
/// server's endpoint, the gateways' keys).
#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one comparison per object, in the order liqoctl makes them"
)]
async fn our_networking_objects_are_the_ones_liqoctl_peer_creates() {
    use fluidos_liqo_api::{Configuration, GatewayClient, GatewayServer, PublicKey};
    if let Some(reason) = fluidos_testenv::liqo::skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    let Peered {
        consumer,
        provider,
        c_liqo,
        p_liqo,
        _stand_ins,
    } = peered_by_liqoctl(true).await;
    say("liqoctl peer (networking on) succeeded");
    let (c, p) = (consumer.client(), provider.client());
    let c_tenant = objects::tenant_namespace(PROVIDER_ID);
    let p_tenant = objects::tenant_namespace(CONSUMER_ID);
    let (c_cidrs, p_cidrs) = (cluster_cidrs(&c).await, cluster_cidrs(&p).await);

    // The Configurations: each cluster is told the other's CIDRs.
    for (client, ns, peer, cidrs, crd_client) in [
        (&c, &c_tenant, PROVIDER_ID, &p_cidrs, &c),
        (&p, &p_tenant, CONSUMER_ID, &c_cidrs, &p),
    ] {
        let theirs = Api::<Configuration>::namespaced(client.clone(), ns)
            .get(peer)
            .await
            .unwrap();
        // Liqo's configuration controller adds this cluster's own CIDRs
        // and a label once it took the Configuration in, on any.
        let mut theirs = decided(&theirs);
        theirs["spec"].as_object_mut().unwrap().remove("local");
        theirs["labels"]
            .as_object_mut()
            .unwrap()
            .remove("configuration.liqo.io/configured");
        assert_same(
            &format!("Configuration {ns}/{peer}"),
            &theirs,
            &with_crd_defaults(
                crd_client,
                "configurations.networking.liqo.io",
                decided(&network_objects::configuration(peer, cidrs)),
            )
            .await,
        );
    }

    // The GatewayServer on the provider.
    let server = Api::<GatewayServer>::namespaced(p.clone(), &p_tenant)
        .get(CONSUMER_ID)
        .await
        .unwrap();
    assert_same(
        "GatewayServer",
        &decided(&server),
        &with_crd_defaults(
            &p,
            "gatewayservers.networking.liqo.io",
            decided(&network_objects::gateway_server(
                CONSUMER_ID,
                fluidos_peering::GatewayServiceType::ClusterIp,
            )),
        )
        .await,
    );

    // The GatewayClient on the consumer, to the server's endpoint.
    let endpoint = network_objects::server_endpoint(&server).unwrap();
    let theirs = Api::<GatewayClient>::namespaced(c.clone(), &c_tenant)
        .get(PROVIDER_ID)
        .await
        .unwrap();
    assert_same(
        "GatewayClient",
        &decided(&theirs),
        &with_crd_defaults(
            &c,
            "gatewayclients.networking.liqo.io",
            decided(&network_objects::gateway_client(PROVIDER_ID, &endpoint)),
        )
        .await,
    );

    // The PublicKeys: the server's key here, the client's there, each
    // owned by the gateway of its side.
    let client_gateway = network_objects::GatewayOwner {
        kind: "GatewayClient",
        name: PROVIDER_ID.to_owned(),
        uid: theirs.metadata.uid.clone().unwrap(),
    };
    let server_gateway = network_objects::GatewayOwner {
        kind: "GatewayServer",
        name: CONSUMER_ID.to_owned(),
        uid: server.metadata.uid.clone().unwrap(),
    };
    for (client, ns, peer, key, owner) in [
        (
            &c,
            &c_tenant,
            PROVIDER_ID,
            gateway_key(&p, &p_tenant, CONSUMER_ID).await,
            &client_gateway,
        ),
        (
            &p,
            &p_tenant,
            CONSUMER_ID,
            gateway_key(&c, &c_tenant, PROVIDER_ID).await,
            &server_gateway,
        ),
    ] {
        let theirs = Api::<PublicKey>::namespaced(client.clone(), ns)
            .get(peer)
            .await
            .unwrap();
        let ours = network_objects::public_key(peer, &key, owner);
        let with_owners = |k: &PublicKey| {
            let mut d = decided(k);
            d["ownerReferences"] = serde_json::to_value(&k.metadata.owner_references).unwrap();
            d
        };
        assert_same(
            &format!("PublicKey {ns}/{peer}"),
            &with_owners(&theirs),
            &with_owners(&ours),
        );
    }

    c_liqo.stop().await;
    p_liqo.stop().await;
    consumer.stop().await;
    provider.stop().await;
}
