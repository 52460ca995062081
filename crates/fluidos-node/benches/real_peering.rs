//! `cargo bench -p fluidos-node --bench real_peering`: the K8Slice sale on
//! two real clusters (`tests/real_peering.rs`'s: one real node each, Liqo
//! v1.0.0 and fluidos-node installed by their charts from local images),
//! timed phase by phase from the Solver: to the Contract, to a Ready virtual
//! node, to both Allocations `Active`, and to the first pod of a namespace
//! offloaded then (namespace, NamespaceOffloading, pod) Running on the
//! provider's kubelet. Every wait watches.
//!
//! Every run is a first sale on a fresh pair of clusters (started, Liqo
//! and fluidos-node installed, torn down after): the first run is the cold
//! one (page cache, images imported for the first time), the others warm.
//! A second sale between the same two clusters after a release found no
//! candidate when this was written (the Solver `Failed`, "Solver has not
//! found any candidate", with the Flavor for sale again): not yet
//! diagnosed, so runs do not reuse clusters. `FLUIDOS_BENCH_RUNS` sets the
//! number of runs (default 5). Needs what `tests/real_peering.rs` needs
//! (`FLUIDOS_STATIC_BINARY` among them); skips, saying why, without.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark's failure is a panic

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use fluidos_api::allocation::AllocationState;
use fluidos_api::{Allocation, Contract, Solver};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::PostParams;
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use support::NS;
use support::real_cluster::{self, Prerequisites};

/// The phases of one run, each measured from the end of the previous one.
const PHASES: [&str; 4] = [
    "Solver -> Contract",
    "-> virtual node Ready",
    "-> Allocations Active on both sides",
    "-> offloaded pod Running on the provider",
];

const WAIT: Duration = Duration::from_secs(180);

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Watches until the Allocation of `contract` on `cp` is Active.
async fn active(cp: &fluidos_testenv::ControlPlane, contract: &str) {
    real_cluster::first_matching(
        Api::<Allocation>::namespaced(cp.client(), NS),
        None,
        "Active Allocation",
        WAIT,
        |a: &Allocation| {
            a.spec.contract.as_ref().and_then(|c| c.name.as_deref()) == Some(contract)
                && a.status.as_ref().and_then(|s| s.status.as_ref())
                    == Some(&AllocationState::Active)
        },
    )
    .await;
}

#[expect(clippy::too_many_lines, reason = "setup, then the runs, in order")]
async fn bench(runs: usize, prerequisites: Prerequisites, reference: std::path::PathBuf) {
    let Prerequisites {
        bin,
        layout,
        helm_bin,
    } = prerequisites;
    let liqo = fluidos_testenv::LiqoBinaries::from_env().unwrap();
    let sample = real_cluster::upstream_k8slice_solver(&reference);
    println!("real peering bench: {runs} runs, each a first sale on two fresh real clusters");
    let mut table: Vec<[Duration; 4]> = Vec::new();
    let mut to_active = Vec::new();
    let mut to_pod = Vec::new();
    let mut setups = Vec::new();
    for run in 0..runs {
        let setup = Instant::now();
        let (provider, consumer) = tokio::join!(
            real_cluster::start(&bin, &layout, liqo.chart_images().unwrap()),
            real_cluster::start(&bin, &layout, liqo.chart_images().unwrap()),
        );
        tokio::join!(
            real_cluster::install_liqo(&helm_bin, &provider, &liqo, "real-provider"),
            real_cluster::install_liqo(&helm_bin, &consumer, &liqo, "real-consumer"),
        );
        real_cluster::install_pair(&helm_bin, &provider, &consumer, &[]).await;
        let t_setup = setup.elapsed();
        let solvers: Api<Solver> = Api::namespaced(consumer.client(), NS);
        let started = Instant::now();
        let mut last = started;
        let mut lap = || {
            let took = last.elapsed();
            last = Instant::now();
            took
        };
        solvers
            .create(&PostParams::default(), &sample)
            .await
            .unwrap();
        let contract = tokio::time::timeout(
            WAIT,
            real_cluster::first_matching(
                Api::<Contract>::namespaced(consumer.client(), NS),
                None,
                "Contract",
                WAIT + WAIT,
                |_: &Contract| true,
            ),
        )
        .await;
        let Ok(contract) = contract else {
            panic!(
                "run {run}: no Contract after {WAIT:?}\n{}\n{}",
                real_cluster::dump(&consumer, "consumer").await,
                real_cluster::dump(&provider, "provider").await
            );
        };
        let contract = contract.name_any();
        let t_contract = lap();
        real_cluster::first_matching(
            Api::<Node>::all(consumer.client()),
            Some("liqo.io/type=virtual-node"),
            "Ready virtual node",
            WAIT,
            ready,
        )
        .await;
        let t_node = lap();
        tokio::join!(active(&consumer, &contract), active(&provider, &contract));
        let t_active = lap();
        let total_active = started.elapsed();
        let remote_ns = real_cluster::offload_namespace(&consumer, "offloaded").await;
        Api::<Pod>::namespaced(consumer.client(), "offloaded")
            .create(
                &PostParams::default(),
                &real_cluster::offloaded_pod("offloaded"),
            )
            .await
            .unwrap();
        tokio::time::timeout(
            WAIT,
            await_condition(
                Api::<Pod>::namespaced(provider.client(), &remote_ns),
                "web",
                real_cluster::running,
            ),
        )
        .await
        .expect("the offloaded pod never ran on the provider")
        .unwrap();
        let t_pod = lap();
        let total_pod = started.elapsed();
        println!(
            "run {run}{}: -> Active {total_active:>8.2?}, -> pod Running {total_pod:>8.2?} (contract {t_contract:>8.2?}, node {t_node:>8.2?}, active {t_active:>8.2?}, pod {t_pod:>8.2?}); clusters and charts {t_setup:>6.1?}",
            if run == 0 { " (cold)" } else { "       " }
        );
        table.push([t_contract, t_node, t_active, t_pod]);
        to_active.push(total_active);
        to_pod.push(total_pod);
        setups.push(t_setup);
        consumer.stop().await;
        provider.stop().await;
    }
    let summary = |label: &str, mut v: Vec<Duration>| {
        v.sort();
        println!(
            "{label:<48} p50 {:>8.2?}  max {:>8.2?}",
            percentile(&v, 50.0),
            v[v.len() - 1]
        );
    };
    for (i, phase) in PHASES.iter().enumerate() {
        summary(phase, table.iter().map(|r| r[i]).collect());
    }
    summary("Solver -> both Allocations Active", to_active.clone());
    summary("Solver -> first offloaded pod Running", to_pod.clone());
    summary("two clusters up, Liqo and fluidos-node installed", setups);
    if runs > 1 {
        summary(
            "Solver -> both Allocations Active (warm)",
            to_active[1..].to_vec(),
        );
        summary(
            "Solver -> first offloaded pod Running (warm)",
            to_pod[1..].to_vec(),
        );
    }
}

fn main() {
    // Says why itself where something is missing.
    let Some(prerequisites) = real_cluster::prerequisites() else {
        return;
    };
    let Some(reference) = fluidos_testenv::shared_reference_dir() else {
        fluidos_testenv::skip::unavailable(
            "real peering bench: ../shared/reference is absent (the Solver sample)",
        );
        return;
    };
    let runs = std::env::var("FLUIDOS_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(5);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench(runs, prerequisites, reference));
}
