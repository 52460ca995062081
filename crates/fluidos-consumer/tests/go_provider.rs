//! Buying from a Go provider, played by the test-only stand-in of
//! `fluidos_testenv::go_rear_standin`: its purchase takes 10.5 s and drops the
//! transaction before the slow steps, so a retried purchase gets a 500.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::time::{Duration, Instant};

use fluidos_api::network::KnownClusterSpec;
use fluidos_api::rear::{WireFlavor, WireK8Slice, characteristics};
use fluidos_api::solver::{Selector, SolverSpec};
use fluidos_api::{
    Contract, KnownCluster, NodeIdentity, NodeIdentityAdditionalInfo, Phase, Reservation, Solver,
};
use fluidos_consumer::{ConsumerConfig, Context, Metrics};
use fluidos_rear_client::ClientConfig;
use fluidos_testenv::go_rear_standin::{GO_PURCHASE_DELAY, GoRearStandIn};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, fixtures};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

const NS: &str = "fluidos";

fn go_flavor(address: &str) -> Vec<WireFlavor> {
    let k = WireK8Slice {
        characteristics: characteristics("amd64", "4", "8Gi", "110"),
        ..Default::default()
    };
    vec![
        serde_json::from_value(json!({
            "flavorID": "fluidos.eu-k8slice-a1b2",
            "providerID": "goprovider",
            "type": {"name": "k8slice", "data": serde_json::to_value(&k).unwrap()},
            "timestamp": "2026-11-30T10:00:00Z",
            "price": {"amount": "", "currency": "", "period": ""},
            "owner": {"ID": "goprovider", "IP": address, "domain": "fluidos.eu"},
            "availability": true
        }))
        .unwrap(),
    ]
}

/// A consumer cluster buying from the stand-in with these client settings.
async fn buy(
    purchase_timeout: Duration,
    purchase_delay: Duration,
) -> (ControlPlane, GoRearStandIn) {
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    fixtures::namespace(&cp, NS).await.unwrap();
    let provider = GoRearStandIn::start("goprovider", go_flavor, purchase_delay)
        .await
        .unwrap();
    Api::<KnownCluster>::namespaced(cp.client(), NS)
        .create(
            &PostParams::default(),
            &KnownCluster::new(
                "knowncluster-goprovider",
                KnownClusterSpec {
                    address: provider.address().to_owned(),
                    fingerprint: None,
                },
            ),
        )
        .await
        .unwrap();
    let me = NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: "consumer01".into(),
        ip: "127.0.0.1:1".into(),
        additional_information: Some(NodeIdentityAdditionalInfo {
            liqo_id: Some("liqo-consumer".into()),
        }),
    };
    let ctx = Context::new(
        cp.client(),
        ConsumerConfig::new(NS, me),
        ClientConfig {
            purchase_timeout,
            ..ClientConfig::default()
        },
        Metrics::new(),
    )
    .unwrap();
    tokio::spawn(fluidos_consumer::run(ctx, std::future::pending()));
    let mut s = Solver::new(
        "solver-go",
        SolverSpec {
            selector: Some(Selector {
                flavor_type: "K8Slice".into(),
                filters: Some(json!({"cpuFilter": {"name": "Range", "data": {"min": "1"}}})),
            }),
            intent_id: "intent-go".into(),
            find_candidate: Some(true),
            reserve_and_buy: Some(true),
            establish_peering: Some(false),
        },
    );
    s.metadata.namespace = Some(NS.into());
    Api::<Solver>::namespaced(cp.client(), NS)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
    (cp, provider)
}

async fn solver_end(cp: &ControlPlane, limit: Duration) -> (Phase, String) {
    let api: Api<Solver> = Api::namespaced(cp.client(), NS);
    let start = Instant::now();
    loop {
        let p = api
            .get("solver-go")
            .await
            .unwrap()
            .status
            .and_then(|s| s.solver_phase)
            .unwrap_or_default();
        let message = p.message.clone().unwrap_or_default();
        if matches!(p.phase, Phase::Failed | Phase::TimedOut)
            || (p.phase == Phase::Solved && message.starts_with("No need to"))
        {
            return (p.phase, message);
        }
        assert!(
            start.elapsed() < limit,
            "Solver still {p:?} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_slow_go_purchase_succeeds_with_the_default_timeouts() {
    let started = Instant::now();
    let (cp, provider) = buy(ClientConfig::default().purchase_timeout, GO_PURCHASE_DELAY).await;
    let (phase, message) = solver_end(&cp, Duration::from_secs(45)).await;
    assert_eq!(
        (phase, message.as_str()),
        (Phase::Solved, "No need to establish a peering")
    );
    // One purchase, answered after the Go provider's 10.5 s: no timeout, no
    // second attempt.
    assert_eq!(provider.purchase_requests(), 1);
    assert!(started.elapsed() >= GO_PURCHASE_DELAY);
    let sold = provider.sold();
    assert_eq!(sold.len(), 1);
    let contracts = Api::<Contract>::namespaced(cp.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(contracts.len(), 1);
    assert_eq!(
        contracts[0].metadata.name.as_deref(),
        Some(sold[0].contract_id.as_str())
    );
    cp.stop().await;
}

#[tokio::test]
async fn an_unanswered_go_purchase_is_reported_with_the_transaction_not_silently_failed() {
    // A purchase timeout shorter than the provider's purchase: the consumer
    // asks again, the Go provider has forgotten the transaction (500), and
    // the Reservation says the sale may have happened, naming it.
    let (cp, provider) = buy(Duration::from_secs(1), Duration::from_secs(3)).await;
    let (phase, message) = solver_end(&cp, Duration::from_secs(30)).await;
    assert_eq!(
        (phase, message.as_str()),
        (
            Phase::Failed,
            "Reservation: Flavor reservation and purchase failed"
        )
    );
    let r = Api::<Reservation>::namespaced(cp.client(), NS)
        .get("reservation-solver-go")
        .await
        .unwrap();
    let st = r.status.unwrap();
    let tx = st.transaction_id.clone().unwrap();
    assert!(st.purchase_attempted_at.is_some());
    let msg = st.phase.message.unwrap_or_default();
    for part in [
        format!(
            "an earlier purchase of transaction {tx} from {} got no answer",
            provider.address()
        ),
        "500: Error getting the Transaction".to_owned(),
        format!("look for a Contract with transactionID {tx} on the provider"),
    ] {
        assert!(msg.contains(&part), "{part:?} not in {msg:?}");
    }
    // The provider did sell: exactly the sale the Reservation points at.
    let start = Instant::now();
    while provider.sold().is_empty() && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sold = provider.sold();
    assert_eq!(sold.len(), 1);
    assert_eq!(sold[0].transaction_id, tx);
    cp.stop().await;
}
