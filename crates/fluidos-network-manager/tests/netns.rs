//! Two nodes in two network namespaces joined by a veth pair find each
//! other by multicast; one that stops advertising disappears after the TTL.
//! Node A advertises a REAR key fingerprint, which B's KnownCluster pins;
//! node B advertises none, as a Go node, and A's KnownCluster has none.
//!
//! How the parts are split, and why: the API server (fluidos-testenv) listens
//! on loopback in the root namespace, which a process inside another network
//! namespace cannot reach. So each node's *network side* runs inside its
//! namespace as the real `fluidos-multicast` binary (the node's own socket
//! code: interface resolved by name, group joined, advertisement sent every
//! interval, datagrams parsed and checked, own ones dropped), printing each
//! advertisement it accepts as a JSON line; and each node's *API side* is the
//! node's own KnownCluster loop ([`known_clusters::maintain`]) running in this
//! test process, fed from those lines and writing to that node's namespace
//! of one real kube-apiserver. The datagrams really cross the veth pair; only
//! the hop from socket loop to API loop is a pipe instead of a channel.
//!
//! Needs root and `ip` (iproute2); skips with a message otherwise, except in
//! CI, where it fails (`fluidos_testenv::skip`). The
//! namespaces and the veth pair are created here and removed on drop.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fluidos_api::KnownCluster;
use fluidos_network_manager::known_clusters::{self, KnownClusters};
use fluidos_network_manager::{NetworkMetrics, advertisement};
use fluidos_rear_identity::Fingerprint;
use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use kube::Api;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const GROUP: &str = "239.11.11.1:4000";
const INTERVAL_MS: u64 = 300;
const TTL: Duration = Duration::from_secs(3);
const HOUSEKEEPING: Duration = Duration::from_millis(200);

/// Why this test cannot run here, if it cannot.
fn missing_prerequisite() -> Option<String> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        });
    if uid.as_deref() != Some("0") {
        return Some("not running as root (network namespaces need CAP_SYS_ADMIN)".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("the `ip` command (iproute2) is missing".into()),
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two namespaces `a` and `b`, with `va` (10.213.0.1/24) in `a` and `vb`
/// (10.213.0.2/24) in `b`, the two ends of one veth pair.
struct Lan {
    a: String,
    b: String,
}

impl Lan {
    fn create() -> Lan {
        let tag = std::process::id() % 100_000;
        let lan = Lan {
            a: format!("fnm-a-{tag}"),
            b: format!("fnm-b-{tag}"),
        };
        let (va, vb) = (format!("fnma{tag}"), format!("fnmb{tag}"));
        ip(&["netns", "add", &lan.a]);
        ip(&["netns", "add", &lan.b]);
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        for (ns, dev, addr) in [
            (&lan.a, &va, "10.213.0.1/24"),
            (&lan.b, &vb, "10.213.0.2/24"),
        ] {
            ip(&["link", "set", dev, "netns", ns]);
            ip(&["-n", ns, "addr", "add", addr, "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        lan
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end inside it, and with it the pair.
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "delete", ns]).status();
        }
    }
}

/// The network side of one node, inside `netns`, advertising `fingerprint`.
fn spawn_network_side(
    netns: &str,
    device: &str,
    (node_id, address): (&str, &str),
    fingerprint: Option<&Fingerprint>,
) -> Child {
    let key: Vec<String> = fingerprint
        .map(|f| vec!["--fingerprint".to_owned(), f.to_string()])
        .unwrap_or_default();
    tokio::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            netns,
            env!("CARGO_BIN_EXE_fluidos-multicast"),
        ])
        .args(["--multicast-address", GROUP, "--interface", device])
        .args(["--node-id", node_id, "--ip", address])
        .args(["--interval-ms", &INTERVAL_MS.to_string()])
        .args(&key)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// The API side of one node: its KnownCluster loop on `namespace`, fed with
/// the advertisements `child` prints.
fn spawn_api_side(
    cp: &ControlPlane,
    namespace: &str,
    child: &mut Child,
    stop: &CancellationToken,
) -> (NetworkMetrics, tokio::task::JoinHandle<()>) {
    let metrics = NetworkMetrics::default();
    let known = KnownClusters::new(cp.client(), namespace, TTL, metrics.clone());
    let (tx, rx) = mpsc::channel(64);
    let stdout = child.stdout.take().unwrap();
    let pipe_stop = stop.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            // The child checked it already; checked again as it crossed a pipe.
            let ad = advertisement::parse(line.as_bytes()).unwrap();
            if tx.send(ad).await.is_err() {
                break;
            }
        }
        // The network side is gone: keep the API loop (and its sweeps) alive.
        pipe_stop.cancelled().await;
        drop(tx);
    });
    let api_side = tokio::spawn(known_clusters::maintain(
        known,
        rx,
        HOUSEKEEPING,
        stop.clone(),
    ));
    (metrics, api_side)
}

async fn wait_for(
    cp: &ControlPlane,
    ns: &str,
    name: &str,
    present: bool,
    within: Duration,
) -> Option<KnownCluster> {
    let api = Api::<KnownCluster>::namespaced(cp.client(), ns);
    let deadline = Instant::now() + within;
    loop {
        let kc = api.get_opt(name).await.unwrap();
        let done = match &kc {
            Some(kc) => {
                present
                    && kc
                        .status
                        .as_ref()
                        .is_some_and(|s| !s.expiration_time.is_empty())
            }
            None => !present,
        };
        if done {
            return kc;
        }
        assert!(
            Instant::now() < deadline,
            "{ns}/{name} {} within {within:?}",
            if present {
                "not created"
            } else {
                "not removed"
            }
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn nodes_in_two_network_namespaces_discover_each_other_over_a_veth_pair() {
    if let Some(why) = missing_prerequisite() {
        fluidos_testenv::skip::unavailable(format!(
            "nodes_in_two_network_namespaces_discover_each_other_over_a_veth_pair: {why}"
        ));
        return;
    }
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    for ns in ["node-a", "node-b"] {
        fluidos_testenv::fixtures::namespace(&cp, ns).await.unwrap();
    }
    let lan = Lan::create();
    let tag = std::process::id() % 100_000;
    let stop = CancellationToken::new();
    let a_key = Fingerprint::of_public_key(b"node a");
    let mut a = spawn_network_side(
        &lan.a,
        &format!("fnma{tag}"),
        ("nodea", "10.213.0.1:30001"),
        Some(&a_key),
    );
    let mut b = spawn_network_side(
        &lan.b,
        &format!("fnmb{tag}"),
        ("nodeb", "10.213.0.2:30001"),
        None,
    );
    let (a_metrics, a_api_side) = spawn_api_side(&cp, "node-a", &mut a, &stop);
    let (_b_metrics, b_api_side) = spawn_api_side(&cp, "node-b", &mut b, &stop);

    let b_at_a = wait_for(
        &cp,
        "node-a",
        "knowncluster-nodeb",
        true,
        Duration::from_secs(15),
    )
    .await
    .unwrap();
    assert_eq!(b_at_a.spec.address, "10.213.0.2:30001");
    assert_eq!(b_at_a.spec.fingerprint, None, "B advertises no key, as Go");
    let a_at_b = wait_for(
        &cp,
        "node-b",
        "knowncluster-nodea",
        true,
        Duration::from_secs(15),
    )
    .await
    .unwrap();
    assert_eq!(a_at_b.spec.address, "10.213.0.1:30001");
    assert_eq!(a_at_b.spec.fingerprint, Some(a_key.to_string()));
    // Own advertisements were dropped in the child: never a KnownCluster.
    assert!(
        Api::<KnownCluster>::namespaced(cp.client(), "node-a")
            .get_opt("knowncluster-nodea")
            .await
            .unwrap()
            .is_none()
    );

    // Still there while B advertises, then gone within the TTL once it stops.
    tokio::time::sleep(TTL).await;
    wait_for(&cp, "node-a", "knowncluster-nodeb", true, Duration::ZERO).await;
    b.kill().await.unwrap();
    let stopped = Instant::now();
    wait_for(
        &cp,
        "node-a",
        "knowncluster-nodeb",
        false,
        TTL + Duration::from_secs(3),
    )
    .await;
    eprintln!(
        "knowncluster-nodeb removed {:?} after node B stopped",
        stopped.elapsed()
    );
    // The watch can see the KnownCluster gone before the DELETE's answer
    // reaches A and is counted: stop both API sides (a sweep under way runs
    // to its end first) and read the counters after.
    stop.cancel();
    a_api_side.await.unwrap();
    b_api_side.await.unwrap();
    assert!(a_metrics.write_count("delete") >= 1);
    assert_eq!(a_metrics.failure_count("apply_status"), 0);

    a.kill().await.unwrap();
    drop(lan);
    cp.stop().await;
}
