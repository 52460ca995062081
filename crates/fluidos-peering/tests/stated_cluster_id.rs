//! A Liqo cluster ID is the provider's word: on a real API server with
//! FLUIDOS' and Liqo's CRDs, the consumer's Allocation controller does not
//! peer through a tenant namespace another seller's key peered under (it
//! says why, and waits), nor with a provider that states this cluster's own
//! ID (Error). No Liqo controller is needed: both are refused before any.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::time::Duration;

use fluidos_api::allocation::AllocationState;
use fluidos_api::{Allocation, Contract, NodeIdentity};
use fluidos_controller::Metrics;
use fluidos_controller::readiness::ReadinessGate;
use fluidos_peering::objects;
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, LiqoBinaries};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;

const NS: &str = "fluidos";
const ME: &str = "consumer-1";
const WAIT: Duration = Duration::from_secs(30);

fn identity() -> NodeIdentity {
    serde_json::from_value(json!({"domain": "d", "nodeID": "cons1", "ip": "192.0.2.5"})).unwrap()
}

/// A K8Slice Contract bought by this node from `liqo_id`, sold under `key`.
fn contract(name: &str, liqo_id: &str, key: &str) -> Contract {
    serde_json::from_value(json!({
        "apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Contract",
        "metadata": {"name": name, "namespace": NS,
            "annotations": {fluidos_api::PROVIDER_FINGERPRINT_ANNOTATION: key}},
        "spec": {
            "flavor": {"metadata": {"name": "f1"}, "spec": {
                "providerID": "p",
                "flavorType": {"typeIdentifier": "K8Slice", "typeData": {
                    "characteristics": {"architecture": "amd64", "cpu": "2",
                        "memory": "4Gi", "pods": "110"},
                    "properties": {}, "policies": {"partitionability": {
                        "cpuMin": "0", "memoryMin": "0", "podsMin": "0",
                        "cpuStep": "1", "memoryStep": "1Gi", "podsStep": "0"}}}},
                "owner": {"domain": "d", "nodeID": "prov1", "ip": "192.0.2.4"},
                "price": {"amount": "1", "currency": "EUR", "period": "hourly"},
                "availability": true}},
            "transactionID": format!("tx-{name}"),
            "buyer": {"domain": "d", "nodeID": "cons1", "ip": "192.0.2.5"},
            "buyerClusterID": ME,
            "seller": {"domain": "d", "nodeID": "prov1", "ip": "192.0.2.4"},
            "peeringTargetCredentials": {"liqoID": liqo_id, "kubeconfig": ""}
        }
    }))
    .unwrap()
}

fn allocation(name: &str, contract: &str) -> Allocation {
    serde_json::from_value(json!({
        "apiVersion": "nodecore.fluidos.eu/v1alpha1", "kind": "Allocation",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"contract": {"name": contract, "namespace": NS}}
    }))
    .unwrap()
}

async fn until_status(
    api: &Api<Allocation>,
    name: &str,
    what: &str,
    f: impl Fn(AllocationState, &str) -> bool,
) -> String {
    let done = tokio::time::timeout(
        WAIT,
        await_condition(api.clone(), name, |a: Option<&Allocation>| {
            a.and_then(|a| a.status.as_ref())
                .and_then(|s| Some((s.status.clone()?, s.message.clone().unwrap_or_default())))
                .is_some_and(|(state, message)| f(state, &message))
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("{what} within {WAIT:?}"))
    .unwrap()
    .unwrap();
    done.status.unwrap().message.unwrap_or_default()
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario against one API server, step by step"
)]
async fn a_provider_may_not_state_another_providers_or_this_clusters_id() {
    if let Some(reason) = fluidos_testenv::liqo::skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    let liqo = LiqoBinaries::from_env().unwrap();
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir(), liqo.crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cp.client();
    let namespaces = Api::<Namespace>::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await
        .unwrap();
    // This node bought from cluster prov-1, sold under key k1, before.
    let k1 = format!("sha256:{}", "1".repeat(64));
    let k2 = format!("sha256:{}", "2".repeat(64));
    namespaces
        .create(
            &PostParams::default(),
            &objects::seller_tenant_namespace_object("prov-1", Some(&k1)),
        )
        .await
        .unwrap();
    let controller = tokio::spawn({
        let client = client.clone();
        async move {
            fluidos_peering::run(
                client,
                fluidos_peering::PeeringConfig {
                    namespace: NS.to_owned(),
                    identity: identity(),
                    local_cluster_id: ME.to_owned(),
                    networking: None,
                    liqo: fluidos_peering::liqo_watch::LiqoPresence::default(),
                },
                &Metrics::new(),
                ReadinessGate::new(),
                std::future::pending(),
            )
            .await;
        }
    });
    let contracts = Api::<Contract>::namespaced(client.clone(), NS);
    let allocations = Api::<Allocation>::namespaced(client.clone(), NS);
    // Another seller (key k2) states prov-1's cluster ID.
    contracts
        .create(
            &PostParams::default(),
            &contract("contract-squat", "prov-1", &k2),
        )
        .await
        .unwrap();
    allocations
        .create(
            &PostParams::default(),
            &allocation("alloc-squat", "contract-squat"),
        )
        .await
        .unwrap();
    let message = until_status(
        &allocations,
        "alloc-squat",
        "the squatter's Allocation to say why",
        |state, m| state == AllocationState::Peering && m.contains("another's cluster ID"),
    )
    .await;
    assert!(message.contains(&k1) && message.contains(&k2), "{message}");
    println!("[stated-cluster-id] another seller's ID: {message}");
    // Nothing of the peering was written there.
    assert!(
        Api::<fluidos_liqo_api::Identity>::namespaced(
            client.clone(),
            &objects::tenant_namespace("prov-1")
        )
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .is_empty()
    );

    // A provider stating this cluster's own ID: Error, final.
    contracts
        .create(&PostParams::default(), &contract("contract-self", ME, &k2))
        .await
        .unwrap();
    allocations
        .create(
            &PostParams::default(),
            &allocation("alloc-self", "contract-self"),
        )
        .await
        .unwrap();
    let message = until_status(
        &allocations,
        "alloc-self",
        "the Allocation naming this cluster to end in Error",
        |state, _| state == AllocationState::Error,
    )
    .await;
    assert!(
        message.contains("this cluster's own Liqo cluster ID"),
        "{message}"
    );
    println!("[stated-cluster-id] this cluster's own ID: {message}");
    assert!(
        namespaces
            .get_opt(&objects::tenant_namespace(ME))
            .await
            .unwrap()
            .is_none()
    );
    controller.abort();
    cp.stop().await;
}
