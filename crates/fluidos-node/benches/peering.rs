//! `cargo bench -p fluidos-node --bench peering`: a Solver with
//! `establishPeering: true` to both Allocations `Active`, against the real
//! Liqo v1.0.0 on two control planes, with the time of each phase.
//!
//! Each run buys a fresh flavor (the provider has one worker per run) and is
//! unpeered afterwards (its Solver deleted, waited until nothing of it is
//! left), so every run authenticates from scratch. `FLUIDOS_BENCH_RUNS` sets
//! the number of runs (default 10); `FLUIDOS_BENCH_NETWORKING=1` runs Liqo's
//! networking module and the consumer's networking phase (`--liqo-networking`,
//! the gateway pods played by the testenv's stand-in), counted in the
//! authentication phase. The virtual-kubelet pod is played by its
//! stand-in, the real binary started as a process; its start is counted.
//! Skips, saying why, without the Liqo and control-plane binaries or
//! `../shared/reference`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark's failure is a panic

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use fluidos_api::Solver;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use support::NS;
use support::peering::{
    PROVIDER_ID, TwoClusters, new_contract, ready_virtual_node, skip_reason, unpeer, until,
    wait_active, wait_authenticated,
};

/// The phases of one run, each measured from the end of the previous one.
const PHASES: [&str; 4] = [
    "Solver -> Contract",
    "authenticated (Identity kubeconfig)",
    "slice accepted, virtual Node Ready",
    "Allocations Active on both sides",
];

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[expect(clippy::too_many_lines, reason = "setup, then the runs, in order")]
async fn bench(runs: usize, networking: bool) {
    let setup = Instant::now();
    let (stage, mut c_liqo, mut p_liqo) = TwoClusters::start_with(runs, networking).await;
    let provider_node = stage.provider_node();
    let consumer_node = stage.consumer_node();
    stage
        .wait_serving(&provider_node, &consumer_node, runs)
        .await;
    let nodes = [&provider_node, &consumer_node];
    let (provider, consumer) = (&stage.provider, &stage.consumer);
    println!(
        "peering bench: {runs} runs, real Liqo v1.0.0 (networking {}), setup {:.1?}",
        if networking {
            "on: the auth phase includes it"
        } else {
            "off"
        },
        setup.elapsed()
    );
    let sample = TwoClusters::sample_solver();
    let solvers: Api<Solver> = Api::namespaced(consumer.client(), NS);
    let c_tenant = format!("liqo-tenant-{PROVIDER_ID}");
    let mut known: Vec<String> = Vec::new();
    let mut table: Vec<[Duration; 4]> = Vec::new();
    let mut totals = Vec::new();
    let mut unpeers = Vec::new();
    for run in 0..runs {
        let mut solver = sample.clone();
        let name = format!("{}-{run}", sample.name_any());
        solver.metadata.name = Some(name.clone());
        let started = Instant::now();
        let mut last = started;
        let mut lap = || {
            let took = last.elapsed();
            last = Instant::now();
            took
        };
        solvers
            .create(&PostParams::default(), &solver)
            .await
            .unwrap();
        let contract = until(
            "the Contract",
            &nodes,
            &mut [&mut c_liqo, &mut p_liqo],
            || async { new_contract(consumer, &known).await },
        )
        .await;
        let slice = contract.name_any();
        known.push(slice.clone());
        let t_contract = lap();
        wait_authenticated(consumer, &nodes, &mut [&mut c_liqo, &mut p_liqo]).await;
        let t_auth = lap();
        let (_, deployment) = ready_virtual_node(
            consumer,
            &mut c_liqo,
            &mut p_liqo,
            &nodes,
            &c_tenant,
            &slice,
        )
        .await;
        let t_node = lap();
        for cp in [consumer, provider] {
            wait_active(cp, &slice, &nodes, &mut [&mut c_liqo, &mut p_liqo]).await;
        }
        let t_active = lap();
        let total = started.elapsed();
        let unpeer_started = Instant::now();
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
        let t_unpeer = unpeer_started.elapsed();
        println!(
            "run {run:>2}: total {total:>9.2?} (contract {t_contract:>9.2?}, auth {t_auth:>9.2?}, \
             node {t_node:>9.2?}, active {t_active:>9.2?}); unpeer {t_unpeer:>9.2?}"
        );
        table.push([t_contract, t_auth, t_node, t_active]);
        totals.push(total);
        unpeers.push(t_unpeer);
    }
    let summary = |label: &str, mut v: Vec<Duration>| {
        v.sort();
        println!(
            "{label:<40} p50 {:>9.2?}  p90 {:>9.2?}  max {:>9.2?}",
            percentile(&v, 50.0),
            percentile(&v, 90.0),
            v[v.len() - 1]
        );
    };
    for (i, phase) in PHASES.iter().enumerate() {
        summary(phase, table.iter().map(|r| r[i]).collect());
    }
    summary("Solver -> Active on both sides", totals);
    summary("unpeer (Solver deleted -> all gone)", unpeers);
    println!("target: Solver -> Active on both sides p50 < 5 s");
    c_liqo.stop().await;
    p_liqo.stop().await;
}

fn main() {
    if let Some(reason) = skip_reason() {
        fluidos_testenv::skip::unavailable(format!("peering bench: {reason}"));
        return;
    }
    let runs = std::env::var("FLUIDOS_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(10);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench(
            runs,
            std::env::var("FLUIDOS_BENCH_NETWORKING").is_ok_and(|v| v == "1"),
        ));
}
