//! `cargo bench -p fluidos-node --bench real_peering`: the K8Slice sale on
//! two real clusters (`tests/real_peering.rs`'s: one real node each, Liqo
//! v1.0.0 and fluidos-node installed by their charts from local images),
//! timed phase by phase from the Solver: to the Contract, to a Ready virtual
//! node, to both Allocations `Active`, and to the first pod of a namespace
//! offloaded then (namespace, NamespaceOffloading, pod) Running on the
//! provider's kubelet. Every wait watches.
//!
//! The first run is the cold one (the first sale after both charts rolled
//! out); after each run the buyer deletes its Solver and the seller its
//! Contract (`kubectl fluidos release` on both sides), and the next run
//! starts once the provider sells the capacity again, so every run
//! authenticates and peers from scratch. `FLUIDOS_BENCH_RUNS` sets the
//! number of runs (default 5). Needs what `tests/real_peering.rs` needs
//! (`FLUIDOS_STATIC_BINARY` among them); skips, saying why, without.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark's failure is a panic

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use fluidos_api::allocation::AllocationState;
use fluidos_api::{Allocation, Contract, Flavor, Solver};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
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

/// Deletes `name` in `api` and watches until it is gone.
async fn delete_and_wait<K>(api: Api<K>, name: &str)
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let uid = match api.get_opt(name).await.unwrap() {
        Some(o) => o.uid().unwrap_or_default(),
        None => return,
    };
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return,
        Err(e) => panic!("deleting {name}: {e}"),
    }
    tokio::time::timeout(
        WAIT,
        await_condition(api, name, conditions::is_deleted(&uid)),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} not gone after {WAIT:?}"))
    .unwrap();
}

/// Both sides give the sale up, as `kubectl fluidos release` does on each:
/// the pod and its namespace, the Solver and the Allocation (the peering's
/// teardown), the virtual node gone; then the provider's Allocation and
/// Contract; returns once the provider's Flavor is for sale again.
async fn release(
    consumer: &fluidos_testenv::ControlPlane,
    provider: &fluidos_testenv::ControlPlane,
    solver: &str,
    contract: &str,
    offloaded: &str,
    virtual_node: &str,
) {
    delete_and_wait(Api::<Pod>::namespaced(consumer.client(), offloaded), "web").await;
    delete_and_wait(Api::<Namespace>::all(consumer.client()), offloaded).await;
    delete_and_wait(Api::<Solver>::namespaced(consumer.client(), NS), solver).await;
    let allocations = Api::<Allocation>::namespaced(consumer.client(), NS);
    for side in [consumer, provider] {
        let allocations = Api::<Allocation>::namespaced(side.client(), NS);
        for a in allocations
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
        {
            if a.spec.contract.as_ref().and_then(|c| c.name.as_deref()) == Some(contract) {
                delete_and_wait(allocations.clone(), &a.name_any()).await;
            }
        }
    }
    drop(allocations);
    // The teardown's: Liqo removes the virtual node with the ResourceSlice.
    assert!(
        real_cluster::until_gone(Api::<Node>::all(consumer.client()), virtual_node, WAIT).await,
        "virtual node {virtual_node} not gone after {WAIT:?}"
    );
    delete_and_wait(Api::<Contract>::namespaced(consumer.client(), NS), contract).await;
    delete_and_wait(Api::<Contract>::namespaced(provider.client(), NS), contract).await;
    real_cluster::first_matching(
        Api::<Flavor>::namespaced(provider.client(), NS),
        None,
        "Flavor for sale again",
        WAIT,
        |f: &Flavor| f.spec.availability,
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
    let setup = Instant::now();
    let (provider, consumer) = tokio::join!(
        real_cluster::start(&bin, &layout, liqo.chart_images().unwrap()),
        real_cluster::start(&bin, &layout, liqo.chart_images().unwrap()),
    );
    let clusters_up = setup.elapsed();
    tokio::join!(
        real_cluster::install_liqo(&helm_bin, &provider, &liqo, "real-provider"),
        real_cluster::install_liqo(&helm_bin, &consumer, &liqo, "real-consumer"),
    );
    let liqo_up = setup.elapsed();
    real_cluster::install_pair(&helm_bin, &provider, &consumer, &[]).await;
    println!(
        "real peering bench: {runs} runs on two real clusters; clusters up in {clusters_up:.1?}, Liqo by its chart at {liqo_up:.1?}, fluidos-node by its chart at {:.1?}",
        setup.elapsed()
    );
    let sample = real_cluster::upstream_k8slice_solver(&reference);
    let solvers: Api<Solver> = Api::namespaced(consumer.client(), NS);
    let mut table: Vec<[Duration; 4]> = Vec::new();
    let mut to_active = Vec::new();
    let mut to_pod = Vec::new();
    let mut releases = Vec::new();
    for run in 0..runs {
        let mut solver = sample.clone();
        let name = format!("{}-{run}", sample.name_any());
        solver.metadata.name = Some(name.clone());
        let known: Vec<String> = Api::<Node>::all(consumer.client())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
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
        let contract = real_cluster::first_matching(
            Api::<Contract>::namespaced(consumer.client(), NS),
            None,
            "Contract",
            WAIT,
            |_: &Contract| true,
        )
        .await
        .name_any();
        let t_contract = lap();
        let virtual_node = real_cluster::first_matching(
            Api::<Node>::all(consumer.client()),
            Some("liqo.io/type=virtual-node"),
            "Ready virtual node",
            WAIT,
            |n: &Node| ready(n) && !known.contains(&n.name_any()),
        )
        .await
        .name_any();
        let t_node = lap();
        tokio::join!(active(&consumer, &contract), active(&provider, &contract));
        let t_active = lap();
        let total_active = started.elapsed();
        let offloaded = format!("offloaded-{run}");
        let remote_ns = real_cluster::offload_namespace(&consumer, &offloaded).await;
        Api::<Pod>::namespaced(consumer.client(), &offloaded)
            .create(
                &PostParams::default(),
                &real_cluster::offloaded_pod(&offloaded),
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
        let releasing = Instant::now();
        release(
            &consumer,
            &provider,
            &name,
            &contract,
            &offloaded,
            &virtual_node,
        )
        .await;
        let t_release = releasing.elapsed();
        println!(
            "run {run}{}: -> Active {total_active:>8.2?}, -> pod Running {total_pod:>8.2?} (contract {t_contract:>8.2?}, node {t_node:>8.2?}, active {t_active:>8.2?}, pod {t_pod:>8.2?}); release {t_release:>8.2?}",
            if run == 0 { " (cold)" } else { "       " }
        );
        table.push([t_contract, t_node, t_active, t_pod]);
        to_active.push(total_active);
        to_pod.push(total_pod);
        releases.push(t_release);
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
    summary("release on both sides -> for sale again", releases);
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
    consumer.stop().await;
    provider.stop().await;
}

fn main() {
    let Some(prerequisites) = real_cluster::prerequisites() else {
        println!("real peering bench SKIPPED (see above)");
        return;
    };
    let Some(reference) = fluidos_testenv::shared_reference_dir() else {
        println!("real peering bench SKIPPED: ../shared/reference is absent (the Solver sample)");
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
