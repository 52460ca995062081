//! Liqo's networking module on two test control planes: `liqoctl peer`
//! with its networking phase (Configurations, GatewayServer and
//! GatewayClient, their key Secrets, PublicKeys, Connections) against the
//! real `liqo-controller-manager`s, the gateway pods played by kwok and by
//! the [`GatewayStandIn`] (test support, named as such), until both
//! ForeignClusters say `NetworkConnectionStatus: Established`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use fluidos_testenv::liqo_gateway::GatewayStandIn;
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, Liqo, LiqoOptions, liqo};
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};

const CONSUMER_ID: &str = "net-consumer";
const PROVIDER_ID: &str = "net-provider";

fn network_status(fc: &DynamicObject) -> Option<String> {
    fc.data
        .pointer("/status/modules/networking/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "NetworkConnectionStatus")
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "start, peer, then check each object: the scenario reads top to bottom"
)]
async fn liqoctl_peer_with_networking_establishes_the_connection() {
    if let Some(reason) = liqo::skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    let start = || async {
        ControlPlane::start(ControlPlaneOptions {
            workloads: true,
            crd_dirs: Vec::new(),
            ..Default::default()
        })
        .await
        .unwrap()
    };
    let (consumer, provider) = tokio::join!(start(), start());
    for cp in [&consumer, &provider] {
        Api::<k8s_openapi::api::core::v1::Node>::all(cp.client())
            .create(&PostParams::default(), &liqo::kwok_node("gateway-node"))
            .await
            .unwrap();
    }
    let opts = |id: &str| LiqoOptions {
        cluster_id: id.to_owned(),
        networking: true,
        ..Default::default()
    };
    let (c, p) = tokio::join!(
        Liqo::start(&consumer, opts(CONSUMER_ID)),
        Liqo::start(&provider, opts(PROVIDER_ID))
    );
    let (mut c, mut p) = (c.unwrap(), p.unwrap());
    let _stand_ins = [
        GatewayStandIn::start(consumer.client()),
        GatewayStandIn::start(provider.client()),
    ];
    let home = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let output = c
        .binaries()
        .liqoctl_peer_with_networking(&consumer, &provider, home.path())
        .await
        .unwrap();
    let took = started.elapsed();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "liqoctl peer failed after {took:?}:\n{text}\n--- consumer Liqo\n{}\n--- provider Liqo\n{}",
        c.problem_lines(40),
        p.problem_lines(40)
    );
    eprintln!("liqoctl peer with networking: {took:?}");
    let fcs = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("core.liqo.io", "v1beta1", "ForeignCluster"),
        "foreignclusters",
    );
    for (cp, peer) in [(&consumer, PROVIDER_ID), (&provider, CONSUMER_ID)] {
        let api = Api::<DynamicObject>::all_with(cp.client(), &fcs);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let fc = api.get_opt(peer).await.unwrap();
            if fc.as_ref().and_then(network_status).as_deref() == Some("Established") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "ForeignCluster {peer}: {fc:#?}\n{}",
                c.problem_lines(20)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // What the real controller manager made: the gateways' Deployments
    // (their pods run by kwok), status endpoint and key Secrets; the keys
    // exchanged as PublicKeys.
    let networking = |kind: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("networking.liqo.io", "v1beta1", kind),
            plural,
        )
    };
    let server_ns = format!("liqo-tenant-{CONSUMER_ID}");
    let server = Api::<DynamicObject>::namespaced_with(
        provider.client(),
        &server_ns,
        &networking("GatewayServer", "gatewayservers"),
    )
    .get(CONSUMER_ID)
    .await
    .unwrap();
    assert!(
        server
            .data
            .pointer("/status/endpoint/addresses/0")
            .is_some(),
        "{server:#?}"
    );
    let secret_name = server.data.pointer("/status/secretRef/name").unwrap();
    assert_eq!(secret_name, &format!("gw-{CONSUMER_ID}"));
    let client_ns = format!("liqo-tenant-{PROVIDER_ID}");
    for (cp, ns, gateway) in [
        (&provider, &server_ns, CONSUMER_ID),
        (&consumer, &client_ns, PROVIDER_ID),
    ] {
        let name = format!("gw-{gateway}");
        let key = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(cp.client(), ns)
            .get(&name)
            .await
            .unwrap();
        assert_eq!(
            key.data.unwrap()["publicKey"].0.len(),
            32,
            "a WireGuard key"
        );
        let deployment = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(cp.client(), ns)
            .get(&name)
            .await
            .unwrap();
        assert_eq!(deployment.status.unwrap().ready_replicas, Some(1), "{name}");
        let keys = Api::<DynamicObject>::namespaced_with(
            cp.client(),
            ns,
            &networking("PublicKey", "publickeies"),
        )
        .list(&Default::default())
        .await
        .unwrap();
        assert_eq!(keys.items.len(), 1, "the peer's key in {ns}");
    }
    c.ensure_running().unwrap();
    p.ensure_running().unwrap();
}
