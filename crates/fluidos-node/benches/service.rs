//! `cargo bench -p fluidos-node --bench service`: a Service Solver (the
//! upstream `solver-service.yaml`) to the consumer's `credentials-<contract>`
//! Secret holding the provider's endpoints, delivery without Liqo (mode b),
//! on two control planes with `fluidos-node` processes.
//!
//! The provider cluster runs kube-controller-manager, kube-scheduler and
//! kwok, so every run's Deployment really becomes available before the
//! provider hands out the endpoints. Each run buys a new instance of the
//! upstream database blueprint (a new Contract, namespace and Deployment);
//! runs are sequential. `FLUIDOS_BENCH_RUNS` sets the number of runs
//! (default 20). Polls every 20 ms, so figures are at most 20 ms late. Skips,
//! saying why, without the control-plane binaries or `../shared/reference`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark's failure is a panic

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fluidos_api::allocation::AllocationState;
use fluidos_api::{Allocation, Solver};
use fluidos_testenv::ControlPlane;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use support::service::ServiceStage;
use support::{NS, NodeProcess};

const LIMIT: Duration = Duration::from_secs(120);
const CREDENTIALS_LABEL: &str = "nodecore.fluidos.eu/flavor-service-credentials=true";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn poll<T, F, Fut>(what: &str, nodes: &[&NodeProcess], mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match poll_for(LIMIT, &mut f).await {
        Some(v) => v,
        None => {
            let logs: Vec<String> = nodes.iter().map(|n| n.log()).collect();
            panic!(
                "timed out waiting for {what}\n--- logs\n{}",
                logs.join("\n---\n")
            );
        }
    }
}

async fn poll_for<T, F, Fut>(limit: Duration, f: &mut F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if start.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every Allocation's and Solver's state on both sides, for a failure report.
async fn states(provider: &ControlPlane, consumer: &ControlPlane) -> String {
    let mut out = String::new();
    for (side, cp) in [("provider", provider), ("consumer", consumer)] {
        if let Ok(list) = Api::<Allocation>::namespaced(cp.client(), NS)
            .list(&ListParams::default())
            .await
        {
            for a in list.items {
                let st = a.status.clone().unwrap_or_default();
                out.push_str(&format!(
                    "{side} Allocation {}: {:?} {:?}\n",
                    a.name_any(),
                    st.status,
                    st.message
                ));
            }
        }
    }
    if let Ok(list) = Api::<Solver>::namespaced(consumer.client(), NS)
        .list(&ListParams::default())
        .await
    {
        for s in list.items {
            out.push_str(&format!(
                "Solver {}: {}\n",
                s.name_any(),
                serde_json::to_string(&s.status).unwrap_or_default()
            ));
        }
    }
    out
}

fn skip_reason() -> Option<String> {
    if std::env::var_os("FLUIDOS_CP_BIN_DIR").is_none_or(|v| v.is_empty()) {
        return Some(
            "FLUIDOS_CP_BIN_DIR is not set (build with tools/control-plane/build.sh and set it \
             to the directory the script prints)"
                .into(),
        );
    }
    if fluidos_testenv::shared_reference_dir().is_none() {
        return Some(
            "../shared/reference is absent (the blueprint and Solver samples come from there)"
                .into(),
        );
    }
    None
}

/// The endpoints the provider exposes for a contract's service: its node
/// port(s) on the provider's address, as the consumer's Secret must hold.
async fn provider_endpoints(provider: &ControlPlane, contract: &str) -> Option<String> {
    let services = Api::<Service>::namespaced(provider.client(), contract)
        .list(&ListParams::default().labels("nodecore.fluidos.eu/flavor-service-endpoint=true"))
        .await
        .ok()?;
    let ports = services.items.first()?.spec.clone()?.ports?;
    let endpoints: Option<Vec<String>> = ports
        .iter()
        .map(|p| p.node_port.map(|n| format!("127.0.0.1:{n}")))
        .collect();
    Some(endpoints?.join(","))
}

async fn bench(runs: usize) {
    let setup = Instant::now();
    let stage = ServiceStage::start("64", "256Gi")
        .await
        .expect("../shared/reference was checked by skip_reason");
    let (provider, consumer, sample) = (&stage.provider, &stage.consumer, &stage.solver);
    let provider_node = stage.provider_node();
    let consumer_node = stage.consumer_node();
    let nodes = [&provider_node, &consumer_node];
    stage.wait_service_flavor(&nodes).await;
    println!(
        "service bench: {runs} runs, delivery without Liqo, upstream database blueprint, \
         setup {:.1?}",
        setup.elapsed()
    );

    let solvers: Api<Solver> = Api::namespaced(consumer.client(), NS);
    let secrets: Api<Secret> = Api::namespaced(consumer.client(), NS);
    let allocations: Api<Allocation> = Api::namespaced(consumer.client(), NS);
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut to_secret = Vec::new();
    let mut to_active = Vec::new();
    for run in 0..runs {
        let mut solver = sample.clone();
        solver.metadata.name = Some(format!("{}-{run}", sample.name_any()));
        let started = Instant::now();
        solvers
            .create(&PostParams::default(), &solver)
            .await
            .unwrap();
        let found = poll_for(LIMIT, &mut || async {
            let list = secrets
                .list(&ListParams::default().labels(CREDENTIALS_LABEL))
                .await
                .ok()?;
            list.items
                .into_iter()
                .find(|s| !seen.contains(&s.name_any()))
        })
        .await;
        let Some(secret) = found else {
            let logs: Vec<String> = nodes.iter().map(|n| n.log()).collect();
            panic!(
                "run {run}: no new credentials Secret within {LIMIT:?}\n{}--- logs\n{}",
                states(provider, consumer).await,
                logs.join("\n---\n")
            );
        };
        let t_secret = started.elapsed();
        let name = secret.name_any();
        seen.insert(name.clone());
        let contract = name.trim_start_matches("credentials-").to_owned();
        // Working endpoints: the Secret names the node ports the provider
        // opened for this contract's Service.
        let endpoints = secret
            .data
            .as_ref()
            .and_then(|d| d.get("endpoints"))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .unwrap_or_default();
        let expected = poll("the provider's endpoint Service", &nodes, || {
            provider_endpoints(provider, &contract)
        })
        .await;
        assert_eq!(endpoints, expected, "run {run}: endpoints of {contract}");
        poll("the consumer Allocation Active", &nodes, || async {
            let list = allocations.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|a| {
                    a.spec.contract.as_ref().and_then(|c| c.name.as_deref())
                        == Some(contract.as_str())
                        && a.status.as_ref().and_then(|s| s.status.as_ref())
                            == Some(&AllocationState::Active)
                })
                .then_some(())
        })
        .await;
        let t_active = started.elapsed();
        println!(
            "run {run:>2}: Solver -> Secret {t_secret:>9.2?}; -> consumer Allocation Active {t_active:>9.2?} ({contract})"
        );
        to_secret.push(t_secret);
        to_active.push(t_active);
    }
    let summary = |label: &str, mut v: Vec<Duration>| {
        v.sort();
        println!(
            "{label:<52} p50 {:>9.2?}  p90 {:>9.2?}  max {:>9.2?}",
            percentile(&v, 50.0),
            percentile(&v, 90.0),
            v[v.len() - 1]
        );
    };
    println!("cold (first run): Solver -> Secret {:.2?}", to_secret[0]);
    if runs > 1 {
        summary("warm: Solver -> Secret (runs 2..)", to_secret[1..].to_vec());
    }
    summary("all: Solver -> Secret with working endpoints", to_secret);
    summary("all: Solver -> consumer Allocation Active", to_active);
    println!("target: Solver -> Secret p50 < 2 s (mode b)");
}

fn main() {
    if let Some(reason) = skip_reason() {
        fluidos_testenv::skip::unavailable(format!("service bench: {reason}"));
        return;
    }
    let runs = std::env::var("FLUIDOS_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(20);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench(runs));
}
