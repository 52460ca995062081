//! Benchmark: 500 labelled nodes with 10 pods each on a real kube-apiserver.
//!
//! Prints (1) the time from starting the manager until all 500 flavors exist,
//! (2) the latency from one pod change to the updated flavor (p50/p90/max
//! over 20 changes on different nodes), and (3) the manager's resident memory.
//!
//! The manager runs in a child process (this binary re-executed), so its RSS
//! is its own: no control-plane client, fixtures or bookkeeping of the
//! benchmark are counted.
//!
//! `cargo bench -p fluidos-lrm --bench flavors` (FLUIDOS_CP_BIN_DIR as for the tests;
//! `BENCH_NODES`, `BENCH_PODS_PER_NODE`, `BENCH_CHANGES` override the sizes,
//! `BENCH_CONCURRENCY` the reconcile concurrency; `BENCH_COLD=1` starts the
//! manager without first waiting for the API server's flavor cache).

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "an integration scenario reads top to bottom as one story; its steps share one running cluster"
)]

use std::collections::HashMap;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fluidos_api::flavor::FlavorTypeData;
use fluidos_api::quantity::{Amount, Format};
use fluidos_api::{Flavor, NodeIdentity};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;

const CHILD_ENV: &str = "FLUIDOS_LRM_BENCH_CHILD_KUBECONFIG";
const NS: &str = "fluidos";
const LABEL: &str = "node-role.fluidos.eu/resources";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Ok(kubeconfig) = std::env::var(CHILD_ENV) {
        rt.block_on(child(kubeconfig));
    } else if std::env::args().any(|a| a == "--bench") || std::env::var("BENCH_FORCE").is_ok() {
        rt.block_on(parent());
    } else {
        // `cargo test --benches` runs bench targets without `--bench`: nothing to do.
        println!("flavors benchmark: run with `cargo bench -p fluidos-lrm --bench flavors`");
    }
}

/// The manager alone, shut down when stdin closes.
async fn child(kubeconfig: String) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();
    let mut cfg = fluidos_lrm::LrmConfig::new(identity());
    if let Ok(c) = std::env::var("BENCH_CONCURRENCY") {
        cfg.concurrency = c.parse().unwrap();
    }
    let readiness = fluidos_lrm::Readiness::new();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for _ in stdin.lock().lines() {}
        let _ = tx.send(());
    });
    let r = readiness.clone();
    tokio::spawn(async move {
        r.wait().await;
        println!("READY");
    });
    fluidos_lrm::run_with_readiness(client, cfg, readiness, async move {
        let _ = rx.await;
    })
    .await
    .unwrap();
}

fn identity() -> NodeIdentity {
    NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: "benchnode1".into(),
        ip: "127.0.0.1:30000".into(),
        additional_information: None,
    }
}

fn node(i: usize) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": format!("node-{i:04}"), "labels": {LABEL: "true"}},
        "status": {
            "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "bootID": "", "containerRuntimeVersion": "",
                "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "", "machineID": "",
                "osImage": "", "systemUUID": ""}
        }
    }))
    .unwrap()
}

fn pod(name: &str, node: &str, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "bench"}},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}]}
    }))
    .unwrap()
}

fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The canonical spelling of `m` millicpus (`15000m` is `15`).
fn millicpu(m: i128) -> String {
    Amount {
        nanos: m * 1_000_000,
        format: Format::DecimalSI,
    }
    .to_string()
}

fn cpu_of(f: &Flavor) -> Option<String> {
    match f.spec.flavor_type.parse().ok()? {
        FlavorTypeData::K8Slice(k) => Some(k.characteristics.cpu.0),
        FlavorTypeData::Service(_) => None,
    }
}

/// node name → published cpu, kept by a watch in this (parent) process.
#[derive(Default)]
struct Seen {
    cpu: Mutex<HashMap<String, String>>,
    changed: Notify,
    listed: Notify,
}

impl Seen {
    async fn wait(
        &self,
        deadline: Duration,
        mut done: impl FnMut(&HashMap<String, String>) -> bool,
    ) -> bool {
        let until = Instant::now() + deadline;
        loop {
            let notified = self.changed.notified();
            if done(&self.cpu.lock().unwrap()) {
                return true;
            }
            if tokio::time::timeout_at(until.into(), notified)
                .await
                .is_err()
            {
                return done(&self.cpu.lock().unwrap());
            }
        }
    }
}

async fn parent() {
    let nodes = env_usize("BENCH_NODES", 500);
    let per_node = env_usize("BENCH_PODS_PER_NODE", 10);
    let changes = env_usize("BENCH_CHANGES", 20);
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cp.client();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await
        .unwrap();

    let t = Instant::now();
    let node_api = Api::<Node>::all(client.clone());
    stream::iter(0..nodes)
        .for_each_concurrent(32, |i| {
            let api = node_api.clone();
            async move {
                api.create(&PostParams::default(), &node(i)).await.unwrap();
            }
        })
        .await;
    let pod_api = Api::<Pod>::namespaced(client.clone(), "default");
    stream::iter(0..nodes * per_node)
        .for_each_concurrent(32, |k| {
            let api = pod_api.clone();
            async move {
                let (n, j) = (k / per_node, k % per_node);
                api.create(
                    &PostParams::default(),
                    &pod(&format!("p-{n:04}-{j:02}"), &format!("node-{n:04}"), "100m"),
                )
                .await
                .unwrap();
            }
        })
        .await;
    println!(
        "setup: {nodes} labelled nodes (16 cpu, 64Gi, 110 pods) and {} pods (100m, 128Mi) in {:.1?}",
        nodes * per_node,
        t.elapsed()
    );

    // Watch flavors from here, independent of the manager.
    let seen = Arc::new(Seen::default());
    let watch = tokio::spawn({
        let seen = seen.clone();
        let api = Api::<Flavor>::namespaced(client.clone(), NS);
        async move {
            let mut s = watcher(api, watcher::Config::default())
                .inspect_ok(|e| {
                    if matches!(e, watcher::Event::InitDone) {
                        seen.listed.notify_one();
                    }
                })
                .applied_objects()
                .boxed();
            while let Ok(Some(f)) = s.try_next().await {
                let node = f
                    .owner_references()
                    .iter()
                    .find(|o| o.kind == "Node")
                    .map(|o| o.name.clone());
                if let (Some(node), Some(cpu)) = (node, cpu_of(&f)) {
                    seen.cpu.lock().unwrap().insert(node, cpu);
                    seen.changed.notify_waiters();
                }
            }
        }
    });

    // The API server answers the very first lists of a new CRD with 429 +
    // Retry-After: 1 while its watch cache initialises; start measuring once
    // our own flavor list went through.
    // (`BENCH_COLD=1` skips this, to see the stall.)
    if std::env::var("BENCH_COLD").is_err() {
        seen.listed.notified().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // (1) Start the manager; time until every node has its flavor.
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let mut child: Child = Command::new(exe)
        .env(CHILD_ENV, cp.kubeconfig_path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let ready_at = Arc::new(Mutex::new(None));
    std::thread::spawn({
        let ready_at = ready_at.clone();
        move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if line == "READY" {
                    *ready_at.lock().unwrap() = Some(started.elapsed());
                }
            }
        }
    });
    let expected = millicpu(16_000 - 100 * per_node as i128);
    let all = seen
        .wait(Duration::from_secs(120), |m| {
            m.len() >= nodes && m.values().all(|c| *c == expected)
        })
        .await;
    let all_flavors = started.elapsed();
    assert!(all, "not all {nodes} flavors appeared within 120 s");
    let (rss_start, _) = rss_kib(pid);
    println!(
        "all {nodes} flavors (cpu {expected} each) exist {:.0} ms after the manager started \
         (manager ready, i.e. caches synced, at {:.0} ms)",
        all_flavors.as_secs_f64() * 1e3,
        ready_at
            .lock()
            .unwrap()
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    );

    // (2) One pod change at a time; time until its node's flavor shows it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut latencies = Vec::new();
    for c in 0..changes {
        let n = (c * 37) % nodes;
        let node_name = format!("node-{n:04}");
        let want = millicpu(16_000 - 100 * per_node as i128 - 250);
        let t = Instant::now();
        pod_api
            .create(
                &PostParams::default(),
                &pod(&format!("extra-{c:03}"), &node_name, "250m"),
            )
            .await
            .unwrap();
        let ok = seen
            .wait(Duration::from_secs(10), |m| {
                m.get(&node_name) == Some(&want)
            })
            .await;
        assert!(ok, "flavor of {node_name} did not reach {want}");
        latencies.push(t.elapsed());
    }
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "pod change → flavor updated over {changes} changes: p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms, min {:.1} ms",
        ms(pct(0.5)),
        ms(pct(0.9)),
        ms(latencies[latencies.len() - 1]),
        ms(latencies[0])
    );
    let (rss, hwm) = rss_kib(pid);
    println!(
        "manager process RSS: {:.1} MiB after the initial sync, {:.1} MiB now, peak {:.1} MiB",
        rss_start as f64 / 1024.0,
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    println!(
        "targets (2 cores): all flavors ≤ 5000 ms: {}; update p50 ≤ 100 ms: {}; RSS < 40 MiB: {}",
        if all_flavors <= Duration::from_secs(5) {
            "met"
        } else {
            "MISSED"
        },
        if pct(0.5) <= Duration::from_millis(100) {
            "met"
        } else {
            "MISSED"
        },
        if hwm < 40 * 1024 { "met" } else { "MISSED" },
    );

    drop(child.stdin.take());
    let _ = child.wait();
    watch.abort();
    cp.stop().await;
}
