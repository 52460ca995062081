//! Network managers on this host's loopback interface (multicast loopback
//! on, interface 127.0.0.1) against a real kube-apiserver: discovery, the
//! KnownCluster lifecycle, bounded writes, replicas, bad datagrams, and
//! the REAR key fingerprints carried and pinned.

// A failed setup step is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use fluidos_api::{KnownCluster, NodeIdentity};
use fluidos_network_manager::known_clusters::{KnownClusters, Outcome};
use fluidos_network_manager::multicast::MulticastSockets;
use fluidos_network_manager::{
    Advertisement, Error, MulticastSettings, NetworkManager, NetworkMetrics, Settings, config,
};
use fluidos_rear_identity::Fingerprint;
use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use kube::Api;
use tokio_util::sync::CancellationToken;

const INTERVAL: Duration = Duration::from_millis(300);
const TTL: Duration = Duration::from_secs(3);
const HOUSEKEEPING: Duration = Duration::from_millis(200);

async fn control_plane(namespaces: &[&str]) -> ControlPlane {
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    for ns in namespaces {
        fluidos_testenv::fixtures::namespace(&cp, ns).await.unwrap();
    }
    cp
}

/// A multicast group on a port no other test uses.
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

fn settings(namespace: &str, group: SocketAddrV4) -> Settings {
    Settings {
        namespace: namespace.into(),
        multicast: Some(MulticastSettings {
            group,
            interface: Some("127.0.0.1".into()),
            interval: INTERVAL,
        }),
        ttl: TTL,
        housekeeping_interval: HOUSEKEEPING,
    }
}

/// A REAR key fingerprint (of made-up key bytes).
fn key(name: &str) -> Fingerprint {
    Fingerprint::of_public_key(name.as_bytes())
}

/// Binds and runs a manager without a REAR key; cancel the token to stop it.
fn start(
    cp: &ControlPlane,
    settings: Settings,
    identity: NodeIdentity,
) -> (NetworkMetrics, CancellationToken) {
    start_keyed(cp, settings, identity, None)
}

/// Binds and runs a manager advertising `fingerprint`.
fn start_keyed(
    cp: &ControlPlane,
    settings: Settings,
    identity: NodeIdentity,
    fingerprint: Option<Fingerprint>,
) -> (NetworkMetrics, CancellationToken) {
    let metrics = NetworkMetrics::default();
    let manager = NetworkManager::bind(settings, identity, fingerprint, metrics.clone()).unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(manager.run(cp.client(), stop.clone()));
    (metrics, stop)
}

async fn get(cp: &ControlPlane, ns: &str, name: &str) -> Option<KnownCluster> {
    Api::<KnownCluster>::namespaced(cp.client(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

/// Polls until `name` in `ns` exists with an expiry, or panics after `within`.
async fn wait_present(cp: &ControlPlane, ns: &str, name: &str, within: Duration) -> KnownCluster {
    let deadline = Instant::now() + within;
    loop {
        if let Some(kc) = get(cp, ns, name).await
            && kc
                .status
                .as_ref()
                .is_some_and(|s| !s.expiration_time.is_empty())
        {
            return kc;
        }
        assert!(
            Instant::now() < deadline,
            "{ns}/{name} not created with an expiry within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_gone(cp: &ControlPlane, ns: &str, name: &str, within: Duration) -> Duration {
    let start = Instant::now();
    while get(cp, ns, name).await.is_some() {
        assert!(
            start.elapsed() < within,
            "{ns}/{name} still there after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

#[tokio::test]
async fn two_nodes_find_each_other_refresh_sparingly_and_expire() {
    let cp = control_plane(&["node-a", "node-b"]).await;
    let g = group();
    let (a_key, b_key) = (key("node a"), key("node b"));
    let (a_metrics, a_stop) = start_keyed(
        &cp,
        settings("node-a", g),
        identity("nodea", 30001),
        Some(a_key),
    );
    let (_b_metrics, b_stop) = start_keyed(
        &cp,
        settings("node-b", g),
        identity("nodeb", 30002),
        Some(b_key),
    );

    // Each side gets the other's KnownCluster, with an expiry from the very
    // first advertisement (Go left it without one until the second), and
    // the other's REAR key to pin.
    let b_at_a = wait_present(&cp, "node-a", "knowncluster-nodeb", Duration::from_secs(10)).await;
    assert_eq!(b_at_a.spec.address, "127.0.0.1:30002");
    assert_eq!(b_at_a.spec.fingerprint, Some(b_key.to_string()));
    let a_at_b = wait_present(&cp, "node-b", "knowncluster-nodea", Duration::from_secs(10)).await;
    assert_eq!(a_at_b.spec.address, "127.0.0.1:30001");
    assert_eq!(a_at_b.spec.fingerprint, Some(a_key.to_string()));
    // Own advertisements are heard (loopback) and ignored.
    assert!(get(&cp, "node-a", "knowncluster-nodea").await.is_none());
    assert!(a_metrics.dropped_count("own") > 0);

    // Steady state: several advertisements, but a status write only when
    // less than half the TTL remains.
    let (heard0, writes0) = (a_metrics.received_count(), a_metrics.write_count("status"));
    tokio::time::sleep(2 * TTL).await;
    let heard = a_metrics.received_count() - heard0;
    let writes = a_metrics.write_count("status") - writes0;
    // Own and peer datagrams: about 2 * 6 s / 300 ms = 40; refreshes of the
    // one peer: about 6 s / (TTL/2 = 1.5 s) = 4, a couple more for rounding.
    assert!(heard >= 20, "heard only {heard} datagrams in {:?}", 2 * TTL);
    assert!(
        (1..=7).contains(&writes),
        "{writes} status writes for {heard} datagrams"
    );
    assert_eq!(a_metrics.failure_count("apply_status"), 0);
    assert!(
        get(&cp, "node-a", "knowncluster-nodeb").await.is_some(),
        "expired while advertising"
    );

    // B stops advertising: its KnownCluster at A goes within the TTL (plus
    // one second of RFC 3339 rounding and a sweep), and not before half of it.
    b_stop.cancel();
    let gone_after = wait_gone(
        &cp,
        "node-a",
        "knowncluster-nodeb",
        TTL + Duration::from_secs(3),
    )
    .await;
    // The last advertisement left at least TTL/2 to run, and it was sent
    // at most one interval before the stop.
    assert!(
        gone_after >= TTL / 2 - INTERVAL,
        "deleted after {gone_after:?}, too early"
    );
    assert!(a_metrics.write_count("delete") >= 1);
    a_stop.cancel();
    cp.stop().await;
}

#[tokio::test]
async fn garbage_and_huge_datagrams_are_dropped_and_counted() {
    let cp = control_plane(&["fluidos"]).await;
    let g = group();
    let (metrics, stop) = start(&cp, settings("fluidos", g), identity("listener", 30001));

    // A sender socket like a node's, to send whatever bytes we like.
    let (_, raw) = MulticastSockets::open(settings("fluidos", g).multicast.as_ref().unwrap())
        .unwrap()
        .split();
    let huge = {
        let mut ad =
            br#"{"domain":"fluidos.eu","nodeID":"huge","ip":"127.0.0.1:1","pad":""#.to_vec();
        ad.extend(std::iter::repeat_n(b'x', 8000));
        ad.extend(br#""}"#);
        ad
    };
    let bad: Vec<Vec<u8>> = vec![
        b"\x00\xff not json at all".to_vec(),
        b"{\"domain\":\"fluidos.eu\"".to_vec(),
        br#"{"domain":"fluidos.eu","nodeID":"../etc","ip":"127.0.0.1:1"}"#.to_vec(),
        huge,
    ];
    for datagram in &bad {
        raw.send(datagram).await.unwrap();
    }
    // Then a valid one: the loop survived the garbage and acts on it.
    let peer = Advertisement::of(&identity("peer", 30009));
    raw.send(&peer.to_bytes()).await.unwrap();

    let kc = wait_present(&cp, "fluidos", "knowncluster-peer", Duration::from_secs(10)).await;
    assert_eq!(kc.spec.address, "127.0.0.1:30009");
    assert_eq!(
        kc.spec.fingerprint, None,
        "a Go-style advertisement pins no key"
    );
    assert_eq!(metrics.dropped_count("malformed"), 2);
    assert_eq!(metrics.dropped_count("node_id"), 1);
    assert_eq!(metrics.dropped_count("too_large"), 1);
    assert!(get(&cp, "fluidos", "knowncluster-huge").await.is_none());
    stop.cancel();
    cp.stop().await;
}

#[tokio::test]
async fn a_failed_api_call_is_retried_by_the_next_advertisement() {
    // The namespace does not exist yet: every write fails with 404.
    let cp = control_plane(&[]).await;
    let g = group();
    let (metrics, stop) = start(&cp, settings("late", g), identity("listener", 30001));
    let (_peer_metrics, peer_stop) = start(&cp, settings("elsewhere", g), identity("peer", 30002));
    let deadline = Instant::now() + Duration::from_secs(10);
    while metrics.failure_count("apply_spec") < 2 {
        assert!(Instant::now() < deadline, "no failed writes seen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Go's receive loop would be dead now; here the next advertisement
    // creates the KnownCluster once the API accepts it.
    fluidos_testenv::fixtures::namespace(&cp, "late")
        .await
        .unwrap();
    let kc = wait_present(&cp, "late", "knowncluster-peer", Duration::from_secs(10)).await;
    assert_eq!(kc.spec.address, "127.0.0.1:30002");
    stop.cancel();
    peer_stop.cancel();
    cp.stop().await;
}

#[tokio::test]
async fn replicas_share_one_object_without_conflicts() {
    let cp = control_plane(&["fluidos", "peer-ns"]).await;
    let g = group();
    // Two replicas of one node (same identity, same namespace), as the Go
    // DaemonSet runs them.
    let me = identity("me", 30001);
    let (r1, stop1) = start(&cp, settings("fluidos", g), me.clone());
    let (r2, stop2) = start(&cp, settings("fluidos", g), me);
    let (_p, peer_stop) = start(&cp, settings("peer-ns", g), identity("peer", 30002));

    wait_present(&cp, "fluidos", "knowncluster-peer", Duration::from_secs(10)).await;
    tokio::time::sleep(2 * TTL).await;
    for (replica, m) in [("r1", &r1), ("r2", &r2)] {
        for step in ["apply_spec", "apply_status", "list", "delete"] {
            assert_eq!(m.failure_count(step), 0, "{replica} failed at {step}");
        }
    }
    let kc = get(&cp, "fluidos", "knowncluster-peer")
        .await
        .expect("refreshed by both");
    let managers: Vec<_> = kc
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.iter().all(|m| m == config::FIELD_MANAGER),
        "one field manager for all replicas: {managers:?}"
    );
    // Each replica learns the other's refreshes at its sweep, so together
    // they write far less than once per advertisement (~20 in 6 s).
    let writes = r1.write_count("status") + r2.write_count("status");
    assert!(writes <= 12, "{writes} status writes by two replicas");
    for s in [stop1, stop2, peer_stop] {
        s.cancel();
    }
    cp.stop().await;
}

#[tokio::test]
async fn discovery_off_needs_no_socket_and_unknown_interfaces_are_refused() {
    let mut off = settings("fluidos", group());
    off.multicast = None;
    let manager =
        NetworkManager::bind(off, identity("me", 1), None, NetworkMetrics::default()).unwrap();
    assert!(manager.sockets().is_none());

    let mut bad = settings("fluidos", group());
    if let Some(m) = bad.multicast.as_mut() {
        m.interface = Some("nosuchif0".into());
    }
    let err =
        NetworkManager::bind(bad, identity("me", 1), None, NetworkMetrics::default()).unwrap_err();
    assert!(
        matches!(err, Error::NoSuchInterface(ref i) if i == "nosuchif0"),
        "{err}"
    );
}

/// A keyless (Go) advertisement of `node` at `ip`.
fn ad(node: &str, ip: &str) -> Advertisement {
    Advertisement {
        domain: "fluidos.eu".into(),
        node_id: node.into(),
        ip: ip.into(),
        fingerprint: None,
    }
}

/// A datagram claiming a live peer's node ID with another address does not
/// repoint it (nor cost a write), and new node IDs beyond the cap are
/// dropped and counted instead of growing the objects without bound.
#[tokio::test]
async fn a_live_peer_cannot_be_repointed_and_new_peers_are_capped() {
    let cp = control_plane(&["fluidos"]).await;
    let metrics = NetworkMetrics::default();
    let mut known = KnownClusters::new(
        cp.client(),
        "fluidos",
        Duration::from_secs(30),
        metrics.clone(),
    )
    .with_max_peers(2);
    assert_eq!(
        known
            .observe(&ad("provider01", "127.0.0.1:30001"))
            .await
            .unwrap(),
        Outcome::Created
    );
    let writes = metrics.total_writes();
    assert_eq!(
        known
            .observe(&ad("provider01", "10.9.9.9:3004"))
            .await
            .unwrap(),
        Outcome::Ignored("address_conflict")
    );
    assert_eq!(metrics.total_writes(), writes, "a conflict costs no write");
    let kc = get(&cp, "fluidos", "knowncluster-provider01")
        .await
        .unwrap();
    assert_eq!(kc.spec.address, "127.0.0.1:30001");
    assert_eq!(
        known
            .observe(&ad("provider02", "127.0.0.1:30002"))
            .await
            .unwrap(),
        Outcome::Created
    );
    assert_eq!(
        known
            .observe(&ad("spoofed", "127.0.0.1:30003"))
            .await
            .unwrap(),
        Outcome::Ignored("capacity")
    );
    assert!(get(&cp, "fluidos", "knowncluster-spoofed").await.is_none());
    assert_eq!(metrics.dropped_count("address_conflict"), 1);
    assert_eq!(metrics.dropped_count("capacity"), 1);
    cp.stop().await;
}

/// One host announcing node ID after node ID for its own address gets at
/// most the per-host cap of them; other hosts still get in.
#[tokio::test]
async fn new_peers_at_one_host_are_capped() {
    let cp = control_plane(&["fluidos"]).await;
    let metrics = NetworkMetrics::default();
    let mut known = KnownClusters::new(
        cp.client(),
        "fluidos",
        Duration::from_secs(30),
        metrics.clone(),
    )
    .with_max_peers_per_host(2);
    for (node, ip, outcome) in [
        ("squat1", "10.1.1.1:30000", Outcome::Created),
        ("squat2", "10.1.1.1:30001", Outcome::Created),
        (
            "squat3",
            "10.1.1.1:30002",
            Outcome::Ignored("host_capacity"),
        ),
        (
            "squat4",
            "[::ffff:10.1.1.1]:30003",
            Outcome::Ignored("host_capacity"),
        ),
        ("provider01", "10.1.1.2:30000", Outcome::Created),
        // A peer already known is refreshed as ever.
        ("squat1", "10.1.1.1:30000", Outcome::Unchanged),
    ] {
        assert_eq!(
            known.observe(&ad(node, ip)).await.unwrap(),
            outcome,
            "{node}"
        );
    }
    assert!(get(&cp, "fluidos", "knowncluster-squat3").await.is_none());
    assert!(
        get(&cp, "fluidos", "knowncluster-provider01")
            .await
            .is_some()
    );
    assert_eq!(metrics.dropped_count("host_capacity"), 2);
    cp.stop().await;
}

/// Polls until `name`'s `spec.fingerprint` is `want`, or panics after 10 s.
async fn wait_fingerprint(cp: &ControlPlane, ns: &str, name: &str, want: Option<&Fingerprint>) {
    let want = want.map(ToString::to_string);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = get(cp, ns, name).await.map(|kc| kc.spec.fingerprint);
        if got.as_ref() == Some(&want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ns}/{name}: fingerprint {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Over real multicast: a live peer keeps the key it was first seen with
/// (advertisements of its node ID with another key, or none, are dropped
/// and counted without a write); a keyless (Go) peer adopts the first key
/// it advertises; once an entry has expired a new key is taken (rotation).
#[tokio::test]
async fn a_live_peer_keeps_its_first_key_until_it_expires() {
    let cp = control_plane(&["fluidos"]).await;
    let g = group();
    let (metrics, stop) = start(&cp, settings("fluidos", g), identity("listener", 30001));
    let (_, raw) = MulticastSockets::open(settings("fluidos", g).multicast.as_ref().unwrap())
        .unwrap()
        .split();
    let peer = Advertisement::of(&identity("peer", 30009));
    let (first, forged) = (key("first"), key("forged"));
    raw.send(&peer.clone().with_fingerprint(Some(&first)).to_bytes())
        .await
        .unwrap();
    let kc = wait_present(&cp, "fluidos", "knowncluster-peer", Duration::from_secs(10)).await;
    assert_eq!(kc.spec.fingerprint, Some(first.to_string()));

    let specs = metrics.write_count("spec");
    for other in [Some(&forged), None, Some(&forged)] {
        raw.send(&peer.clone().with_fingerprint(other).to_bytes())
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while metrics.dropped_count("fingerprint_conflict") < 3 {
        assert!(Instant::now() < deadline, "conflicting keys not counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kc = get(&cp, "fluidos", "knowncluster-peer").await.unwrap();
    assert_eq!(
        kc.spec.fingerprint,
        Some(first.to_string()),
        "still the first key"
    );
    assert_eq!(
        metrics.write_count("spec"),
        specs,
        "a conflict costs no write"
    );

    // A Go node's entry (no key) adopts the first key its node advertises.
    let go = Advertisement::of(&identity("gonode", 30010));
    raw.send(&go.to_bytes()).await.unwrap();
    let kc = wait_present(
        &cp,
        "fluidos",
        "knowncluster-gonode",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(kc.spec.fingerprint, None);
    raw.send(&go.clone().with_fingerprint(Some(&first)).to_bytes())
        .await
        .unwrap();
    wait_fingerprint(&cp, "fluidos", "knowncluster-gonode", Some(&first)).await;

    // The peer stops; once its entry is gone, a new key is taken.
    wait_gone(
        &cp,
        "fluidos",
        "knowncluster-peer",
        TTL + Duration::from_secs(3),
    )
    .await;
    raw.send(&peer.with_fingerprint(Some(&forged)).to_bytes())
        .await
        .unwrap();
    wait_fingerprint(&cp, "fluidos", "knowncluster-peer", Some(&forged)).await;
    stop.cancel();
    cp.stop().await;
}

/// Key rotation when the expired entry is still cached (no sweep ran): the
/// next advertisement takes it over with its key, or without one, and then
/// the stored key is removed.
#[tokio::test]
async fn an_expired_entry_takes_the_next_key_or_none() {
    let cp = control_plane(&["fluidos"]).await;
    let metrics = NetworkMetrics::default();
    let ttl = Duration::from_secs(1);
    let mut known = KnownClusters::new(cp.client(), "fluidos", ttl, metrics.clone());
    let peer = Advertisement::of(&identity("peer", 30009));
    let (old, new) = (key("old"), key("new"));
    let observe = async |known: &mut KnownClusters, key: Option<&Fingerprint>| {
        let ad = peer.clone().with_fingerprint(key);
        known.observe(&ad).await.unwrap()
    };
    let fingerprint = async || {
        get(&cp, "fluidos", "knowncluster-peer")
            .await
            .unwrap()
            .spec
            .fingerprint
    };
    assert_eq!(observe(&mut known, Some(&old)).await, Outcome::Created);
    assert_eq!(
        observe(&mut known, Some(&new)).await,
        Outcome::Ignored("fingerprint_conflict")
    );
    assert_eq!(fingerprint().await, Some(old.to_string()));
    // The expiry is rounded up to the second: at most 2 s away.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(observe(&mut known, Some(&new)).await, Outcome::Created);
    assert_eq!(fingerprint().await, Some(new.to_string()));
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(observe(&mut known, None).await, Outcome::Created);
    assert_eq!(fingerprint().await, None, "the old key is not left behind");
    assert_eq!(metrics.dropped_count("fingerprint_conflict"), 1);
    cp.stop().await;
}
