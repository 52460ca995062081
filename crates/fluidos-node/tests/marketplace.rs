//! End to end: two real control planes (a provider cluster and a consumer
//! cluster) and two `fluidos-node` processes talking REAR over loopback HTTP.
//!
//! The provider runs the local resource manager and the REAR gateway; the
//! consumer runs the REAR manager (Solver, Discovery, Reservation). Peering is
//! the next issue: these Solvers have `establishPeering: false`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::collections::BTreeMap;
use std::time::Duration;

use fluidos_api::network::KnownClusterSpec;
use fluidos_api::reservation::ReservationSpec;
use fluidos_api::solver::{Selector, SolverSpec};
use fluidos_api::{
    Contract, Flavor, GenericRef, KnownCluster, NodeIdentity, PeeringCandidate, Phase, Reservation,
    ServiceBlueprint, Solver, Transaction,
};
use fluidos_testenv::{ControlPlane, fixtures};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

mod support;

use support::{NS, NodeProcess, cluster, eventually, free_port, prepare};

fn solver(name: &str, flavor_type: &str, filters: serde_json::Value, buy: bool) -> Solver {
    let mut s = Solver::new(
        name,
        SolverSpec {
            selector: Some(Selector {
                flavor_type: flavor_type.into(),
                filters: Some(filters),
            }),
            intent_id: format!("intent-{name}"),
            find_candidate: Some(true),
            reserve_and_buy: Some(buy),
            establish_peering: Some(false),
        },
    );
    s.metadata.namespace = Some(NS.into());
    s
}

async fn solver_phase(api: &Api<Solver>, name: &str) -> (Phase, String) {
    let s = api.get(name).await.unwrap();
    let p = s.status.and_then(|s| s.solver_phase).unwrap_or_default();
    (p.phase, p.message.unwrap_or_default())
}

async fn wait_terminal(api: &Api<Solver>, name: &str, logs: &[&NodeProcess]) -> (Phase, String) {
    eventually(
        &format!("Solver {name} to finish"),
        Duration::from_secs(60),
        logs,
        || async {
            let (phase, msg) = solver_phase(api, name).await;
            // `Solved` with a final message, or a failure.
            let done = matches!(phase, Phase::Failed | Phase::TimedOut)
                || (phase == Phase::Solved && msg.starts_with("No need to"));
            done.then_some((phase, msg))
        },
    )
    .await
}

struct Market {
    provider: ControlPlane,
    consumer: ControlPlane,
    provider_node: NodeProcess,
    consumer_node: NodeProcess,
    rear: String,
}

async fn market() -> Market {
    let (provider, consumer) = tokio::join!(cluster(), cluster());
    let (pport, cport) = (free_port(), free_port());
    let provider_key = prepare(&provider, "provider01", pport).await;
    prepare(&consumer, "consumer01", cport).await;
    fixtures::worker_node(&provider, "worker-1", "8", "16Gi")
        .await
        .unwrap();
    let rear = format!("127.0.0.1:{pport}");
    let known = KnownCluster::new(
        "knowncluster-provider01",
        KnownClusterSpec {
            address: rear.clone(),
            fingerprint: Some(provider_key),
        },
    );
    Api::<KnownCluster>::namespaced(consumer.client(), NS)
        .create(&PostParams::default(), &known)
        .await
        .unwrap();
    let provider_node = NodeProcess::spawn(
        &provider,
        pport,
        "local-resource-manager,rear-gateway",
        "0",
        &["--liqo-cluster-id", "liqo-provider"],
    );
    let consumer_node = NodeProcess::spawn(
        &consumer,
        cport,
        "rear-manager",
        "0",
        &[
            "--liqo-cluster-id",
            "liqo-consumer",
            "--peer-timeout-ms",
            "1000",
        ],
    );
    // The provider publishes its flavor before anyone asks.
    let flavors: Api<Flavor> = Api::namespaced(provider.client(), NS);
    eventually(
        "the provider's K8Slice flavor",
        Duration::from_secs(30),
        &[&provider_node],
        || async {
            (!flavors
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty())
            .then_some(())
        },
    )
    .await;
    Market {
        provider,
        consumer,
        provider_node,
        consumer_node,
        rear,
    }
}

/// The consumer objects behind a Solver, for failure messages.
async fn explain(cp: &ControlPlane, solver: &str) -> String {
    let d = Api::<fluidos_api::Discovery>::namespaced(cp.client(), NS)
        .get_opt(&format!("discovery-{solver}"))
        .await
        .unwrap();
    let r = Api::<Reservation>::namespaced(cp.client(), NS)
        .get_opt(&format!("reservation-{solver}"))
        .await
        .unwrap();
    format!(
        "discovery status: {:?}\nreservation status: {:?}",
        d.and_then(|d| d.status),
        r.and_then(|r| r.status)
    )
}

async fn contracts(cp: &ControlPlane) -> Vec<Contract> {
    Api::<Contract>::namespaced(cp.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// Waits until no Transaction is left on `cp`: a spent one is deleted after
/// the step that spent it reports (the provider's in the background after
/// answering, the consumer's after the Reservation's status).
async fn transactions_spent(cp: &ControlPlane, logs: &[&NodeProcess]) {
    eventually(
        "the spent Transactions to be deleted",
        Duration::from_secs(10),
        logs,
        || async { (transactions(cp).await == 0).then_some(()) },
    )
    .await;
}

async fn transactions(cp: &ControlPlane) -> usize {
    Api::<Transaction>::namespaced(cp.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len()
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one market, several purchases in sequence: the scenario reads top to bottom"
)]
async fn k8slice_and_service_solvers_buy_across_two_clusters() {
    let m = market().await;
    let logs = [&m.provider_node, &m.consumer_node];

    // A Service to sell too: the upstream blueprint sample, when available.
    let blueprint = fluidos_testenv::shared_reference_dir()
        .map(|d| d.join("fluidos-samples/service-blueprint-db.yaml"))
        .filter(|p| p.exists());
    if let Some(path) = &blueprint {
        let bp: ServiceBlueprint =
            serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        Api::<ServiceBlueprint>::namespaced(m.provider.client(), NS)
            .create(&PostParams::default(), &bp)
            .await
            .unwrap();
    } else {
        fluidos_testenv::skip::unavailable(
            "the Service part: ../shared/reference is absent; the blueprint sample comes from there",
        );
    }

    let solvers: Api<Solver> = Api::namespaced(m.consumer.client(), NS);
    let k8s = solver(
        "solver-k8s",
        "K8Slice",
        json!({
            "architectureFilter": {"name": "Match", "data": {"value": "amd64"}},
            "cpuFilter": {"name": "Range", "data": {"min": "1000m"}},
            "memoryFilter": {"name": "Range", "data": {"min": "1Gi", "max": "100Gi"}},
            "podsFilter": {"name": "Match", "data": {"value": 110}}
        }),
        true,
    );
    solvers.create(&PostParams::default(), &k8s).await.unwrap();
    let (phase, msg) = wait_terminal(&solvers, "solver-k8s", &logs).await;
    assert_eq!(
        (phase, msg.as_str()),
        (Phase::Solved, "No need to establish a peering"),
        "{}\n{}",
        explain(&m.consumer, "solver-k8s").await,
        m.consumer_node.log()
    );
    let s = solvers.get("solver-k8s").await.unwrap().status.unwrap();
    assert_eq!(s.find_candidate, Some(Phase::Solved));
    assert_eq!(s.reserve_and_buy, Some(Phase::Solved));
    assert!(s.chosen_candidate.is_some_and(|c| !c.reason.is_empty()));

    // Matching Contracts on both sides, same name, same transaction.
    let (pc, cc) = (contracts(&m.provider).await, contracts(&m.consumer).await);
    assert_eq!(pc.len(), 1);
    assert_eq!(cc.len(), 1);
    assert_eq!(pc[0].name_any(), cc[0].name_any());
    assert_eq!(pc[0].spec.transaction_id, cc[0].spec.transaction_id);
    assert_eq!(cc[0].spec.buyer.node_id, "consumer01");
    assert_eq!(cc[0].spec.seller.node_id, "provider01");
    assert_eq!(cc[0].spec.buyer_cluster_id, "liqo-consumer");
    let bought = cc[0].spec.configuration.as_ref().unwrap();
    // Asked as 1000m; the provider stores (and the Contract carries) the
    // canonical spelling.
    assert_eq!(bought.data["cpu"], "1");
    assert_eq!(bought.data["memory"], "1Gi");
    // Transactions are spent on both sides.
    let logs = [&m.provider_node, &m.consumer_node];
    transactions_spent(&m.provider, &logs).await;
    transactions_spent(&m.consumer, &logs).await;
    // The provider's flavor now records the sale, so less remains for others.
    let flavors = Api::<Flavor>::namespaced(m.provider.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    let sold: Vec<_> = flavors
        .iter()
        .flat_map(|f| f.status.iter().flat_map(|s| s.ledger.iter().flatten()))
        .filter(|e| e.state == fluidos_api::ledger::LedgerState::Sold)
        .collect();
    assert_eq!(sold.len(), 1, "one sale in the provider's ledger");

    if blueprint.is_some() {
        // The provider must have published the Service flavor first.
        let flavors: Api<Flavor> = Api::namespaced(m.provider.client(), NS);
        eventually(
            "the provider's Service flavor",
            Duration::from_secs(30),
            &logs,
            || async {
                flavors
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .iter()
                    .any(|f| f.spec.flavor_type.type_identifier == "Service")
                    .then_some(())
            },
        )
        .await;
        let svc = solver(
            "solver-svc",
            "Service",
            json!({"categoryFilter": {"name": "Match", "data": {"value": "database"}},
                   "tagsFilter": {"name": "Match", "data": {"value": "mysql"}}}),
            true,
        );
        solvers.create(&PostParams::default(), &svc).await.unwrap();
        let (phase, msg) = wait_terminal(&solvers, "solver-svc", &logs).await;
        assert_eq!(
            (phase, msg.as_str()),
            (Phase::Solved, "No need to establish a peering"),
            "{}\n{}",
            explain(&m.consumer, "solver-svc").await,
            m.provider_node.log()
        );
        let (pc, cc) = (contracts(&m.provider).await, contracts(&m.consumer).await);
        assert_eq!((pc.len(), cc.len()), (2, 2));
        let svc_contract = cc
            .iter()
            .find(|c| c.spec.flavor.spec.flavor_type.type_identifier == "Service")
            .unwrap();
        assert!(pc.iter().any(|p| p.name_any() == svc_contract.name_any()));
        assert_eq!(
            svc_contract.spec.configuration.as_ref().unwrap().data["configurationData"]["database"],
            "mydb"
        );
        transactions_spent(&m.consumer, &[&m.provider_node, &m.consumer_node]).await;
    }

    // Filters that match nothing end Failed, and say so.
    let none = solver(
        "solver-none",
        "K8Slice",
        json!({"cpuFilter": {"name": "Range", "data": {"min": "1000"}}}),
        true,
    );
    solvers.create(&PostParams::default(), &none).await.unwrap();
    let (phase, msg) = wait_terminal(&solvers, "solver-none", &logs).await;
    assert_eq!(phase, Phase::Failed);
    assert_eq!(msg, "Solver has not found any candidate");
    let d = Api::<fluidos_api::Discovery>::namespaced(m.consumer.client(), NS)
        .get("discovery-solver-none")
        .await
        .unwrap();
    let dmsg = d.status.unwrap().phase.message.unwrap_or_default();
    assert!(dmsg.starts_with("No Flavors found"), "{dmsg}");
    let _ = m.rear;
}

#[tokio::test]
async fn one_provider_down_of_three_does_not_stop_the_solver() {
    let m = market().await;
    let logs = [&m.provider_node, &m.consumer_node];
    let known: Api<KnownCluster> = Api::namespaced(m.consumer.client(), NS);
    // A port nobody listens on, and a port that answers HTTP but not REAR.
    let dead = format!("127.0.0.1:{}", free_port());
    let junk = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let junk_addr = junk.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let app =
            axum::Router::new().fallback(|| async { (axum::http::StatusCode::OK, "not json") });
        axum::serve(junk, app).await.unwrap();
    });
    for (name, address) in [
        ("knowncluster-dead", dead.clone()),
        ("knowncluster-junk", junk_addr.clone()),
    ] {
        known
            .create(
                &PostParams::default(),
                &KnownCluster::new(
                    name,
                    KnownClusterSpec {
                        address,
                        fingerprint: None,
                    },
                ),
            )
            .await
            .unwrap();
    }
    let solvers: Api<Solver> = Api::namespaced(m.consumer.client(), NS);
    let s = solver(
        "solver-k8s",
        "K8Slice",
        json!({"cpuFilter": {"name": "Range", "data": {"min": "1"}}}),
        true,
    );
    solvers.create(&PostParams::default(), &s).await.unwrap();
    let (phase, msg) = wait_terminal(&solvers, "solver-k8s", &logs).await;
    assert_eq!(
        (phase, msg.as_str()),
        (Phase::Solved, "No need to establish a peering"),
        "{}",
        explain(&m.consumer, "solver-k8s").await
    );
    let d = Api::<fluidos_api::Discovery>::namespaced(m.consumer.client(), NS)
        .get("discovery-solver-k8s")
        .await
        .unwrap();
    let providers: BTreeMap<String, String> = d
        .status
        .unwrap()
        .providers
        .unwrap()
        .into_iter()
        .map(|p| (p.address, p.outcome.to_string()))
        .collect();
    assert_eq!(providers.get(&m.rear).map(String::as_str), Some("Answered"));
    assert_eq!(providers.get(&dead).map(String::as_str), Some("Failed"));
    assert_eq!(
        providers.get(&junk_addr).map(String::as_str),
        Some("Failed")
    );
    assert_eq!(contracts(&m.consumer).await.len(), 1);
}

#[tokio::test]
async fn consumer_killed_between_reserve_and_purchase_buys_exactly_once() {
    let m = market().await;
    let solvers: Api<Solver> = Api::namespaced(m.consumer.client(), NS);
    // Discovery only, to get a candidate.
    let s = solver(
        "solver-find",
        "K8Slice",
        json!({"cpuFilter": {"name": "Range", "data": {"min": "1"}}}),
        false,
    );
    solvers.create(&PostParams::default(), &s).await.unwrap();
    wait_terminal(&solvers, "solver-find", &[&m.consumer_node]).await;
    let pcs = Api::<PeeringCandidate>::namespaced(m.consumer.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    let pc = &pcs.items[0];
    let owner = pc.spec.flavor.spec.owner.clone();

    // Reserve only.
    let reservations: Api<Reservation> = Api::namespaced(m.consumer.client(), NS);
    let mut r = Reservation::new(
        "reservation-manual",
        ReservationSpec {
            solver_id: "manual".into(),
            buyer: NodeIdentity {
                domain: "fluidos.eu".into(),
                node_id: "consumer01".into(),
                ip: "127.0.0.1:1".into(),
                additional_information: None,
            },
            seller: owner,
            configuration: Some(fluidos_api::Configuration {
                type_: "K8Slice".into(),
                data: json!({"cpu": "2", "memory": "2Gi", "pods": "10"}),
            }),
            reserve: Some(true),
            purchase: Some(false),
            peering_candidate: Some(GenericRef::named(NS, pc.name_any())),
            ingress_telemetry_endpoint: None,
        },
    );
    r.metadata.namespace = Some(NS.into());
    reservations
        .create(&PostParams::default(), &r)
        .await
        .unwrap();
    let tx = eventually(
        "the reservation to hold a transaction",
        Duration::from_secs(30),
        &[&m.consumer_node],
        || async {
            let r = reservations.get("reservation-manual").await.unwrap();
            r.status
                .filter(|s| s.phase.phase == Phase::Solved)
                .and_then(|s| s.transaction_id)
        },
    )
    .await;
    assert_eq!(transactions(&m.consumer).await, 1);
    assert!(contracts(&m.provider).await.is_empty());

    // Kill the consumer hard, ask for the purchase, start it again.
    let Market {
        provider,
        consumer,
        provider_node,
        consumer_node,
        ..
    } = m;
    consumer_node.kill().await;
    reservations
        .patch(
            "reservation-manual",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"purchase": true}})),
        )
        .await
        .unwrap();
    let cport = free_port();
    let restarted = NodeProcess::spawn(
        &consumer,
        cport,
        "rear-manager",
        "0",
        &["--liqo-cluster-id", "liqo-consumer"],
    );
    let contract = eventually(
        "the purchase after restart",
        Duration::from_secs(30),
        &[&restarted, &provider_node],
        || async {
            let r = reservations.get("reservation-manual").await.unwrap();
            r.status
                .filter(|s| s.purchase_phase == Some(Phase::Solved))
                .and_then(|s| s.contract)
                .and_then(|c| c.name)
        },
    )
    .await;
    let (pc, cc) = (contracts(&provider).await, contracts(&consumer).await);
    assert_eq!(pc.len(), 1, "exactly one Contract on the provider");
    assert_eq!(cc.len(), 1, "exactly one Contract on the consumer");
    assert_eq!(pc[0].name_any(), contract);
    assert_eq!(cc[0].spec.transaction_id, tx);
    transactions_spent(&consumer, &[&restarted, &provider_node]).await;
}

/// The chosen candidate of a finished Solver.
async fn chosen(api: &Api<Solver>, name: &str) -> fluidos_api::solver::ChosenCandidate {
    api.get(name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.chosen_candidate)
        .unwrap_or_default()
}

#[tokio::test]
async fn identical_solvers_in_a_row_all_buy_and_a_refused_candidate_is_not_the_end() {
    let m = market().await;
    let logs = [&m.provider_node, &m.consumer_node];
    // Three flavors; the biggest ranks first, and one sale leaves it too
    // small for the same request.
    for (node, cpu) in [("worker-2", "6"), ("worker-3", "6")] {
        fixtures::worker_node(&m.provider, node, cpu, "16Gi")
            .await
            .unwrap();
    }
    let flavors: Api<Flavor> = Api::namespaced(m.provider.client(), NS);
    eventually("three flavors", Duration::from_secs(30), &logs, || async {
        (flavors
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len()
            == 3)
            .then_some(())
    })
    .await;
    let solvers: Api<Solver> = Api::namespaced(m.consumer.client(), NS);
    let wants = json!({"cpuFilter": {"name": "Range", "data": {"min": "5"}}});
    let mut bought = Vec::new();
    for name in ["solver-1", "solver-2"] {
        solvers
            .create(
                &PostParams::default(),
                &solver(name, "K8Slice", wants.clone(), true),
            )
            .await
            .unwrap();
        let (phase, msg) = wait_terminal(&solvers, name, &logs).await;
        assert_eq!(
            (phase, msg.as_str()),
            (Phase::Solved, "No need to establish a peering"),
            "{}",
            explain(&m.consumer, name).await
        );
        bought.push(chosen(&solvers, name).await.name);
    }
    assert_ne!(
        bought[0], bought[1],
        "the sold candidate is not offered again as it was"
    );

    // Make the first sale's candidate look available with its old amounts
    // (as a stale listing would): the provider refuses it, and the Solver
    // moves on to the remaining flavor instead of failing.
    Api::<PeeringCandidate>::namespaced(m.consumer.client(), NS)
        .patch(
            &bought[0],
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"available": true}})),
        )
        .await
        .unwrap();
    solvers
        .create(
            &PostParams::default(),
            &solver("solver-3", "K8Slice", wants, true),
        )
        .await
        .unwrap();
    let (phase, msg) = wait_terminal(&solvers, "solver-3", &logs).await;
    assert_eq!(
        (phase, msg.as_str()),
        (Phase::Solved, "No need to establish a peering"),
        "{}",
        explain(&m.consumer, "solver-3").await
    );
    let third = chosen(&solvers, "solver-3").await;
    assert!(!bought.contains(&third.name), "{third:?}");
    assert!(
        third.reason.starts_with(&format!(
            "{} was refused (Reservation failed: PeeringCandidate not available: ",
            bought[0]
        )),
        "{third:?}"
    );
    assert_eq!(contracts(&m.consumer).await.len(), 3);
    assert_eq!(contracts(&m.provider).await.len(), 3);
}
