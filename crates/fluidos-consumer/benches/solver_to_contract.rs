//! Time from Solver creation to a Contract present on both sides.
//!
//! Real control planes (one consumer cluster, one provider cluster), real
//! REAR gateways over loopback HTTP, the consumer controllers in this
//! process. Run with `cargo bench -p fluidos-consumer`; prints p50/p90/max for
//! 1 provider and for 20 providers (20 gateways sharing the provider control
//! plane, one namespace each). Targets: p50 < 200 ms (1), < 1 s (20).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench that cannot set up should stop loudly
#![allow(
    clippy::too_many_lines,
    reason = "an integration scenario reads top to bottom as one story; its steps share one running cluster"
)]

use std::time::{Duration, Instant};

use fluidos_api::flavor::{FlavorSpec, FlavorType, K8Slice};
use fluidos_api::network::KnownClusterSpec;
use fluidos_api::solver::{Selector, SolverSpec};
use fluidos_api::{Contract, Flavor, KnownCluster, NodeIdentity, Price, Solver};
use fluidos_consumer::{ConsumerConfig, Context};
use fluidos_controller::readiness::ReadinessGate;
use fluidos_rear_client::ClientConfig;
use fluidos_rear_gateway::GatewayConfig;
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, fixtures};
use futures::StreamExt;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

const CONSUMER_NS: &str = "fluidos";

fn identity(id: &str, ip: &str) -> NodeIdentity {
    NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: id.into(),
        ip: ip.into(),
        additional_information: None,
    }
}

async fn provider(
    cp: &ControlPlane,
    kube_cfg: &kube::Config,
    i: usize,
) -> (String, tokio::task::JoinHandle<()>) {
    let ns = format!("provider-{i}");
    fixtures::namespace(cp, &ns).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let id = identity(&format!("prov{i:02}"), &addr);
    let k = K8Slice {
        characteristics: fluidos_api::rear::characteristics("amd64", "1000", "1000Gi", "10000"),
        ..Default::default()
    };
    let mut f = Flavor::new(
        &format!("fluidos.eu-k8slice-bench{i:02}"),
        FlavorSpec {
            provider_id: id.node_id.clone(),
            flavor_type: FlavorType::k8slice(&k),
            owner: id.clone(),
            price: Price {
                amount: format!("{}", 10 + i),
                currency: "EUR".into(),
                period: "hour".into(),
            },
            availability: true,
            network_property_type: None,
            location: None,
        },
    );
    f.metadata.namespace = Some(ns.clone());
    Api::<Flavor>::namespaced(cp.client(), &ns)
        .create(&PostParams::default(), &f)
        .await
        .unwrap();
    let mut cfg = GatewayConfig::new(&ns, id, "").with_kube_config(kube_cfg);
    cfg.liqo_cluster_id = Some(format!("liqo-prov{i:02}"));
    // The consumer calls without a key (plain HTTP): let it buy.
    cfg.plain_http_sales = fluidos_rear_gateway::PlainHttpSales::All;
    // Started and ready before the consumer is: an operator waits for both
    // nodes' /readyz before the first Solver.
    let gateway = fluidos_rear_gateway::Gateway::start(cp.client(), cfg);
    gateway.wait_ready(Duration::from_secs(30)).await.unwrap();
    let task = tokio::spawn(async move {
        let _ = gateway.serve(listener, std::future::pending()).await;
    });
    (addr, task)
}

async fn scenario(providers: usize, rounds: usize) -> Vec<Duration> {
    let (pcp, ccp) = tokio::join!(
        ControlPlane::start(ControlPlaneOptions {
            workloads: false,
            crd_dirs: vec![fluidos_testenv::crds_dir()],
            ..Default::default()
        }),
        ControlPlane::start(ControlPlaneOptions {
            workloads: false,
            crd_dirs: vec![fluidos_testenv::crds_dir()],
            ..Default::default()
        }),
    );
    let (pcp, ccp) = (pcp.unwrap(), ccp.unwrap());
    let kube_cfg =
        kube::Config::from_custom_kubeconfig(pcp.kubeconfig().clone(), &Default::default())
            .await
            .unwrap();
    fixtures::namespace(&ccp, CONSUMER_NS).await.unwrap();
    let mut tasks = Vec::new();
    let known: Api<KnownCluster> = Api::namespaced(ccp.client(), CONSUMER_NS);
    for i in 0..providers {
        let (addr, task) = provider(&pcp, &kube_cfg, i).await;
        tasks.push(task);
        known
            .create(
                &PostParams::default(),
                &KnownCluster::new(
                    &format!("knowncluster-prov{i:02}"),
                    KnownClusterSpec {
                        address: addr,
                        fingerprint: None,
                    },
                ),
            )
            .await
            .unwrap();
    }
    let mut me = identity("consumer01", "127.0.0.1:1");
    me.additional_information = Some(fluidos_api::NodeIdentityAdditionalInfo {
        liqo_id: Some("liqo-consumer".into()),
    });
    let ctx = Context::new(
        ccp.client(),
        ConsumerConfig::new(CONSUMER_NS, me),
        ClientConfig::default(),
        fluidos_controller::metrics::Metrics::new(),
    )
    .unwrap();
    // Timing starts once the consumer says it is ready, as an operator's
    // client would wait for /readyz.
    let ready = ReadinessGate::new();
    let consumer = tokio::spawn(fluidos_consumer::run_with_readiness(
        ctx,
        ready.clone(),
        std::future::pending(),
    ));
    ready.wait().await;

    let solvers: Api<Solver> = Api::namespaced(ccp.client(), CONSUMER_NS);
    // Contracts are seen through watches, not polled: a list that must be
    // consistent waits for the API server's watch cache to catch up (up to
    // one 100 ms progress-notify period), which timed the bench's own polling
    // rather than the node.
    let (consumer_contracts, consumer_watch) =
        contract_store(Api::namespaced(ccp.client(), CONSUMER_NS)).await;
    let (provider_contracts, provider_watch) = contract_store(Api::all(pcp.client())).await;
    tasks.extend([consumer_watch, provider_watch]);
    let mut times = Vec::new();
    for round in 0..rounds {
        let name = format!("bench-{round}");
        let mut s = Solver::new(
            &name,
            SolverSpec {
                selector: Some(Selector {
                    flavor_type: "K8Slice".into(),
                    filters: Some(json!({"cpuFilter": {"name": "Range", "data": {"min": "1"}},
                        "memoryFilter": {"name": "Range", "data": {"min": "1Gi"}},
                        "podsFilter": {"name": "Range", "data": {"min": "1"}}})),
                }),
                intent_id: name.clone(),
                find_candidate: Some(true),
                reserve_and_buy: Some(true),
                establish_peering: Some(false),
            },
        );
        s.metadata.namespace = Some(CONSUMER_NS.into());
        let before = consumer_contracts.state().len();
        let start = Instant::now();
        solvers.create(&PostParams::default(), &s).await.unwrap();
        loop {
            let c = consumer_contracts.state();
            if c.len() > before {
                let sold: Vec<String> = provider_contracts
                    .state()
                    .iter()
                    .map(|pc| pc.name_any())
                    .collect();
                if c.iter().all(|cc| sold.contains(&cc.name_any())) {
                    break;
                }
            }
            if start.elapsed() > Duration::from_secs(30) {
                panic!("round {round}: no contract after 30 s");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        times.push(start.elapsed());
    }
    consumer.abort();
    for t in tasks {
        t.abort();
    }
    pcp.stop().await;
    ccp.stop().await;
    times
}

/// A store of the Contracts `api` sees, kept by a watch; returned once the
/// first list is in, with the task to abort when the scenario ends.
async fn contract_store(
    api: Api<Contract>,
) -> (reflector::Store<Contract>, tokio::task::JoinHandle<()>) {
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()))
        .default_backoff();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    reader.wait_until_ready().await.unwrap();
    (reader, task)
}

fn report(label: &str, mut t: Vec<Duration>) {
    t.sort();
    let pct = |p: f64| t[((t.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{label}: n={} p50={:.0} ms p90={:.0} ms max={:.0} ms",
        t.len(),
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.9).as_secs_f64() * 1e3,
        t[t.len() - 1].as_secs_f64() * 1e3
    );
}

#[tokio::main]
async fn main() {
    // RUST_LOG=fluidos_consumer=debug shows each reconcile with a timestamp,
    // to see where a slow round spends its time.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    // `cargo bench -p fluidos-consumer -- warm` runs only the scenarios whose
    // label contains "warm" ("cold", "1 provider", "20 providers").
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |label: &str| only.as_deref().is_none_or(|o| label.contains(o));
    // Cold: the first Solver on fresh API servers right after readiness (the
    // first list of a freshly installed CRD type may be answered 429).
    let cold_label = "solver->contract, 1 provider, cold (first Solver after readiness)";
    if wanted(cold_label) {
        let mut cold = Vec::new();
        for _ in 0..5 {
            cold.extend(scenario(1, 1).await);
        }
        report(cold_label, cold);
    }
    let warm_label = "solver->contract, 1 provider, warm";
    if wanted(warm_label) {
        report(warm_label, scenario(1, 20).await);
    }
    let many_label = "solver->contract, 20 providers, warm";
    if wanted(many_label) {
        report(many_label, scenario(20, 10).await);
    }
}
