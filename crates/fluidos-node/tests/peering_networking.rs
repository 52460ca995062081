//! K8Slice allocation with Liqo's networking module on (`--liqo-networking`),
//! as the Go node and `liqoctl peer` peer by default: the consumer's driver
//! runs the networking phase (Configurations both ways, the GatewayServer on
//! the provider with the Contract's kubeconfig, the GatewayClient here, the
//! gateways' keys exchanged as PublicKeys, both Connections up) before it
//! authenticates. The real `liqo-controller-manager`s render the gateways
//! and make their keys; the WireGuard gateway pods are played by kwok and by
//! `GatewayStandIn` (test support, named as such: it reports a Connection
//! `Connected` once both keys are exchanged; nothing carries traffic).
//! Deleting the Solver unpeers and resets the network on both sides.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use fluidos_api::Solver;
use fluidos_api::allocation::AllocationState;
use kube::api::{DynamicObject, PostParams};
use kube::{Api, ResourceExt};

mod support;

use support::NS;
use support::peering::{
    CONSUMER_ID, PROVIDER_ID, Phases, TwoClusters, allocation_state, dynamic, new_contract,
    ready_virtual_node, skip_reason, unpeer, until,
};

fn networking(client: &kube::Client, kind: &str, plural: &str, ns: &str) -> Api<DynamicObject> {
    dynamic(client, "networking.liqo.io", kind, plural, ns)
}

/// `NetworkConnectionStatus` of the ForeignCluster `peer` on `client`.
async fn network_status(client: &kube::Client, peer: &str) -> Result<String, String> {
    let fcs = Api::<DynamicObject>::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("core.liqo.io", "v1beta1", "ForeignCluster"),
            "foreignclusters",
        ),
    );
    let fc = fcs
        .get_opt(peer)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no ForeignCluster yet")?;
    fc.data
        .pointer("/status/modules/networking/conditions")
        .and_then(|v| v.as_array())
        .and_then(|cs| cs.iter().find(|c| c["type"] == "NetworkConnectionStatus"))
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| "no NetworkConnectionStatus".to_owned())
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, phase by phase; splitting it hides the order"
)]
async fn solver_with_peering_connects_the_networks_then_releases_them() {
    if let Some(reason) = skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    let mut phases = Phases::new();
    let (stage, mut c_liqo, mut p_liqo) = TwoClusters::start_with(1, true).await;
    phases.mark("two control planes, Liqo with networking on both");
    let provider_node = stage.provider_node();
    let consumer_node = stage.consumer_node();
    stage.wait_serving(&provider_node, &consumer_node, 1).await;
    phases.mark("nodes started, flavors published");
    let (provider, consumer) = (&stage.provider, &stage.consumer);
    let nodes = [&provider_node, &consumer_node];
    let solver = TwoClusters::sample_solver();
    let name = solver.name_any();
    let solvers: Api<Solver> = Api::namespaced(consumer.client(), NS);
    solvers
        .create(&PostParams::default(), &solver)
        .await
        .unwrap();
    let contract = until(
        "the consumer's Contract",
        &nodes,
        &mut [&mut c_liqo, &mut p_liqo],
        || async { new_contract(consumer, &[]).await },
    )
    .await;
    let slice = contract.name_any();
    phases.mark("Solver -> Contract");

    // The network comes first: both ForeignClusters say Established.
    for (cp, peer) in [(consumer, PROVIDER_ID), (provider, CONSUMER_ID)] {
        until(
            "the network connection Established",
            &nodes,
            &mut [&mut c_liqo, &mut p_liqo],
            || async {
                match network_status(&cp.client(), peer).await?.as_str() {
                    "Established" => Ok(()),
                    other => Err(other.to_owned()),
                }
            },
        )
        .await;
    }
    phases.mark("networking: Configurations, gateways, keys, Connections");

    let c_tenant = format!("liqo-tenant-{PROVIDER_ID}");
    let p_tenant = format!("liqo-tenant-{CONSUMER_ID}");
    // What the driver made, by liqoctl's names, on each side.
    let made = [
        (
            consumer,
            "Configuration",
            "configurations",
            &c_tenant,
            PROVIDER_ID,
        ),
        (
            consumer,
            "GatewayClient",
            "gatewayclients",
            &c_tenant,
            PROVIDER_ID,
        ),
        (consumer, "PublicKey", "publickeies", &c_tenant, PROVIDER_ID),
        (
            provider,
            "Configuration",
            "configurations",
            &p_tenant,
            CONSUMER_ID,
        ),
        (
            provider,
            "GatewayServer",
            "gatewayservers",
            &p_tenant,
            CONSUMER_ID,
        ),
        (provider, "PublicKey", "publickeies", &p_tenant, CONSUMER_ID),
    ];
    for (cp, kind, plural, ns, object) in made {
        let o = networking(&cp.client(), kind, plural, ns)
            .get(object)
            .await
            .unwrap_or_else(|e| panic!("{kind} {ns}/{object}: {e}"));
        assert_eq!(
            o.labels()
                .get("liqo.io/remote-cluster-id")
                .map(String::as_str),
            Some(object),
            "{kind} {ns}/{object}"
        );
    }
    let server = networking(
        &provider.client(),
        "GatewayServer",
        "gatewayservers",
        &p_tenant,
    )
    .get(CONSUMER_ID)
    .await
    .unwrap();
    assert_eq!(server.data["spec"]["endpoint"]["serviceType"], "ClusterIP");
    assert_eq!(server.data["spec"]["mtu"], 1340);
    let client = networking(
        &consumer.client(),
        "GatewayClient",
        "gatewayclients",
        &c_tenant,
    )
    .get(PROVIDER_ID)
    .await
    .unwrap();
    assert_eq!(
        client.data["spec"]["endpoint"]["addresses"],
        server.data["status"]["endpoint"]["addresses"],
        "the client connects to the server's endpoint"
    );
    // Each side holds the other's gateway key, byte for byte.
    for (key_cp, key_ns, pk_cp, pk_ns, pk_name, gateway) in [
        (
            provider,
            &p_tenant,
            consumer,
            &c_tenant,
            PROVIDER_ID,
            CONSUMER_ID,
        ),
        (
            consumer,
            &c_tenant,
            provider,
            &p_tenant,
            CONSUMER_ID,
            PROVIDER_ID,
        ),
    ] {
        let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(key_cp.client(), key_ns)
            .get(&format!("gw-{gateway}"))
            .await
            .unwrap();
        let key = secret.data.unwrap().remove("publicKey").unwrap().0;
        let pk = networking(&pk_cp.client(), "PublicKey", "publickeies", pk_ns)
            .get(pk_name)
            .await
            .unwrap();
        use base64::Engine as _;
        assert_eq!(
            pk.data["spec"]["publicKey"].as_str(),
            Some(
                base64::engine::general_purpose::STANDARD
                    .encode(&key)
                    .as_str()
            )
        );
    }

    let (_node, deployment) = ready_virtual_node(
        consumer,
        &mut c_liqo,
        &mut p_liqo,
        &nodes,
        &c_tenant,
        &slice,
    )
    .await;
    for cp in [consumer, provider] {
        until(
            "the Allocation Active",
            &nodes,
            &mut [&mut c_liqo, &mut p_liqo],
            || async {
                let (s, m) = allocation_state(cp, &slice).await?;
                if s == AllocationState::Active {
                    Ok(())
                } else {
                    Err(format!("{s}: {m}"))
                }
            },
        )
        .await;
    }
    phases.mark("authenticated, slice accepted, virtual node Ready, both Active");

    unpeer(
        consumer,
        provider,
        &mut c_liqo,
        &mut p_liqo,
        &nodes,
        &name,
        &slice,
        &deployment,
        false,
    )
    .await;
    // The network reset: nothing of it is left on either side.
    for (cp, kind, plural, ns, object) in made {
        let api = networking(&cp.client(), kind, plural, ns);
        until(
            "the networking objects gone",
            &nodes,
            &mut [&mut c_liqo, &mut p_liqo],
            || async {
                match api.get_opt(object).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(_) => Err(format!("{kind} {ns}/{object} still there")),
                }
            },
        )
        .await;
    }
    phases.mark("unpeered, network reset on both sides");
    phases.summary();
}
