//! LAN discovery figures against a real kube-apiserver (fluidos-testenv),
//! multicast on loopback (interface 127.0.0.1):
//!
//! 1. time from a node's first advertisement to its KnownCluster on a
//!    listening peer (goal: under one advertisement interval + 100 ms), cold
//!    (first object on a fresh API server) and warm;
//! 2. API-server writes per minute with 200 advertising nodes simulated on
//!    one socket (goal: a refresh costs no write unless the expiry needs
//!    moving), cold (the TTL after they all appear) and warm (steady state).
//!
//! Run: `cargo bench -p fluidos-network-manager` (needs FLUIDOS_CP_BIN_DIR).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use fluidos_api::{KnownCluster, NodeIdentity};
use fluidos_network_manager::multicast::MulticastSockets;
use fluidos_network_manager::{
    Advertisement, MulticastSettings, NetworkManager, NetworkMetrics, Settings, config,
};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use kube::Api;
use tokio_util::sync::CancellationToken;

const WARM_RUNS: usize = 20;
const SIMULATED_NODES: usize = 200;
/// The 200-node run is compressed in time: interval and TTL keep the
/// defaults' 1:6 ratio (5 s : 30 s) so writes per advertisement match.
const SIM_INTERVAL: Duration = Duration::from_secs(1);
const SIM_TTL: Duration = Duration::from_secs(6);
const SIM_WARM_WINDOW: Duration = Duration::from_secs(24);

fn group() -> SocketAddrV4 {
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    SocketAddrV4::new(Ipv4Addr::new(239, 11, 11, 1), port)
}

fn identity(node_id: &str, port: u16) -> NodeIdentity {
    NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: node_id.into(),
        ip: format!("127.0.0.1:{port}"),
        additional_information: None,
    }
}

fn settings(namespace: &str, group: SocketAddrV4, interval: Duration, ttl: Duration) -> Settings {
    Settings {
        namespace: namespace.into(),
        multicast: Some(MulticastSettings {
            group,
            interface: Some("127.0.0.1".into()),
            interval,
        }),
        ttl,
        housekeeping_interval: config::DEFAULT_HOUSEKEEPING_INTERVAL.min(interval),
    }
}

fn start(
    cp: &ControlPlane,
    settings: Settings,
    me: NodeIdentity,
    stop: &CancellationToken,
) -> NetworkMetrics {
    let metrics = NetworkMetrics::default();
    let manager = NetworkManager::bind(settings, me, None, metrics.clone()).unwrap();
    tokio::spawn(manager.run(cp.client(), stop.clone()));
    metrics
}

/// Sends `node_id`'s first advertisement (for a REAR address at
/// 127.0.2.`host`: a host per node, as on a LAN, since the manager keeps
/// at most MAX_PEERS_PER_HOST nodes of one host) from a node's sender
/// socket and returns how long until the listener's KnownCluster exists.
async fn first_advertisement_to_known_cluster(
    cp: &ControlPlane,
    namespace: &str,
    group: SocketAddrV4,
    node_id: &str,
    host: u8,
) -> Duration {
    let (_, sender) = MulticastSockets::open(&MulticastSettings {
        group,
        interface: Some("127.0.0.1".into()),
        interval: config::DEFAULT_INTERVAL,
    })
    .unwrap()
    .split();
    let api = Api::<KnownCluster>::namespaced(cp.client(), namespace);
    let name = fluidos_api::naming::known_cluster_name(node_id);
    let mut node = identity(node_id, 31000);
    node.ip = format!("127.0.2.{host}:31000");
    let datagram = Advertisement::of(&node).to_bytes();
    let sent = Instant::now();
    sender.send(&datagram).await.unwrap();
    loop {
        if api.get_opt(&name).await.unwrap().is_some() {
            return sent.elapsed();
        }
        assert!(
            sent.elapsed() < Duration::from_secs(30),
            "{name} never appeared"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn latency(cp: &ControlPlane) {
    let ns = "bench-latency";
    fluidos_testenv::fixtures::namespace(cp, ns).await.unwrap();
    let g = group();
    let stop = CancellationToken::new();
    start(
        cp,
        settings(ns, g, config::DEFAULT_INTERVAL, config::DEFAULT_TTL),
        identity("listener", 30000),
        &stop,
    );
    // Let the listener's first sweep (an API list) pass.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cold = first_advertisement_to_known_cluster(cp, ns, g, "cold-node", 1).await;
    let mut warm = Vec::new();
    for i in 0..WARM_RUNS {
        let host = u8::try_from(i + 2).unwrap();
        let node = format!("warm-node-{i}");
        warm.push(first_advertisement_to_known_cluster(cp, ns, g, &node, host).await);
    }
    warm.sort();
    let goal = config::DEFAULT_INTERVAL + Duration::from_millis(100);
    println!(
        "first advertisement -> KnownCluster on the peer (goal < {:.0} ms: interval + 100 ms)",
        ms(goal)
    );
    println!("  cold: {:8.1} ms", ms(cold));
    println!(
        "  warm: {:8.1} ms median, {:.1} ms min, {:.1} ms max ({WARM_RUNS} new nodes)",
        ms(warm[warm.len() / 2]),
        ms(warm[0]),
        ms(warm[warm.len() - 1])
    );
    let worst = warm.last().copied().unwrap_or_default().max(cold);
    println!("  goal met: {}", if worst < goal { "yes" } else { "NO" });
    stop.cancel();
}

/// Sends one advertisement for each of `SIMULATED_NODES` nodes every
/// `SIM_INTERVAL` from one socket; returns how many it sent.
async fn simulate(group: SocketAddrV4, stop: CancellationToken) -> u64 {
    let (_, sender) = MulticastSockets::open(&MulticastSettings {
        group,
        interface: Some("127.0.0.1".into()),
        interval: SIM_INTERVAL,
    })
    .unwrap()
    .split();
    // Each at a host of its own, as on a LAN: the manager keeps at most
    // MAX_PEERS_PER_HOST nodes of one host.
    let datagrams: Vec<Vec<u8>> = (0..SIMULATED_NODES)
        .map(|i| {
            let host = u8::try_from(i + 1).unwrap();
            let mut node = identity(&format!("sim-{i:03}"), 40000);
            node.ip = format!("127.0.1.{host}:40000");
            Advertisement::of(&node).to_bytes()
        })
        .collect();
    let mut tick = tokio::time::interval(SIM_INTERVAL);
    let mut sent = 0;
    loop {
        tokio::select! {
            () = stop.cancelled() => return sent,
            _ = tick.tick() => {}
        }
        for d in &datagrams {
            sender.send(d).await.unwrap();
            sent += 1;
        }
    }
}

async fn writes_per_minute(cp: &ControlPlane) {
    let ns = "bench-200";
    fluidos_testenv::fixtures::namespace(cp, ns).await.unwrap();
    let g = group();
    let stop = CancellationToken::new();
    let metrics = start(
        cp,
        settings(ns, g, SIM_INTERVAL, SIM_TTL),
        identity("listener", 30000),
        &stop,
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sim = tokio::spawn(simulate(g, stop.clone()));

    let per_minute = |n: u64, window: Duration| n as f64 * 60.0 / window.as_secs_f64();
    let t0 = Instant::now();
    tokio::time::sleep(SIM_TTL).await;
    let cold_window = t0.elapsed();
    let cold_writes = metrics.total_writes();
    let cold_heard = metrics.received_count();
    let (cold_spec, cold_status) = (metrics.write_count("spec"), metrics.write_count("status"));
    let t1 = Instant::now();
    tokio::time::sleep(SIM_WARM_WINDOW).await;
    let warm_window = t1.elapsed();
    let warm_writes = metrics.total_writes() - cold_writes;
    let warm_heard = metrics.received_count() - cold_heard;
    stop.cancel();
    let sent = sim.await.unwrap();
    let known = Api::<KnownCluster>::namespaced(cp.client(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .len();

    let writes_per_ad = warm_writes as f64 / warm_heard.max(1) as f64;
    let default_ads_per_min =
        SIMULATED_NODES as f64 * 60.0 / config::DEFAULT_INTERVAL.as_secs_f64();
    println!(
        "{SIMULATED_NODES} nodes advertising on one socket (interval {:?}, TTL {:?}; defaults 5 s / 30 s keep the same ratio)",
        SIM_INTERVAL, SIM_TTL
    );
    println!(
        "  cold ({:.0} s, all appear): {:7.0} API writes/min for {:7.0} advertisements/min ({} spec, {} status)",
        cold_window.as_secs_f64(),
        per_minute(cold_writes, cold_window),
        per_minute(cold_heard, cold_window),
        cold_spec,
        cold_status,
    );
    println!(
        "  warm ({:.0} s, steady):     {:7.0} API writes/min for {:7.0} advertisements/min = {:.3} writes per advertisement",
        warm_window.as_secs_f64(),
        per_minute(warm_writes, warm_window),
        per_minute(warm_heard, warm_window),
        writes_per_ad
    );
    println!(
        "  at the default timing (5 s / 30 s): {:.0} writes/min for {:.0} advertisements/min; Go writes on every advertisement: {:.0}/min",
        writes_per_ad * default_ads_per_min,
        default_ads_per_min,
        default_ads_per_min
    );
    println!(
        "  KnownClusters: {known} (want {SIMULATED_NODES}); datagrams sent {sent}, dropped as backlog {}, API failures {}",
        metrics.dropped_count("backlog"),
        ["apply_spec", "apply_status", "list", "delete"]
            .iter()
            .map(|s| metrics.failure_count(s))
            .sum::<u64>()
    );
}

#[tokio::main]
async fn main() {
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    latency(&cp).await;
    writes_per_minute(&cp).await;
    cp.stop().await;
}
