//! Broker clients against a real RabbitMQ (TLS only, client certificates,
//! SASL EXTERNAL) and a real kube-apiserver: two nodes learn each other
//! (and each other's REAR key fingerprint) through the broker; a node whose client Secret is missing says so until
//! it appears; a certificate the broker does not trust is refused and its
//! Broker says why; a broker crash and restart is survived; each node's
//! readiness follows its Broker's connection. Multicast is
//! off, so every KnownCluster here came through the broker.
//!
//! Needs Debian's `rabbitmq-server` (`tools/rabbitmq/install.sh`); without
//! it the test prints `SKIP: ...` and passes, except in CI, where it fails.

// A failed setup step is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fluidos_api::network::{Broker, BrokerSpec};
use fluidos_api::{KnownCluster, NodeIdentity};
use fluidos_network_manager::broker::{self, BrokerConnections, BrokerSettings, LocalNode};
use fluidos_network_manager::{NetworkManager, NetworkMetrics, Settings};
use fluidos_rear_identity::Fingerprint;
use fluidos_testenv::rabbitmq::{self, Ca, RabbitMq};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use tokio_util::sync::CancellationToken;

const TTL: Duration = Duration::from_secs(3);
const WAIT: Duration = Duration::from_secs(60);

/// The REAR key fingerprint node `node_id` announces.
fn key(node_id: &str) -> Fingerprint {
    Fingerprint::of_public_key(node_id.as_bytes())
}

fn identity(node_id: &str, port: u16) -> NodeIdentity {
    NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: node_id.into(),
        ip: format!("127.0.0.1:{port}"),
        additional_information: None,
    }
}

fn broker_settings(namespace: &str) -> BrokerSettings {
    BrokerSettings {
        interval: Duration::from_millis(500),
        message_ttl: Duration::from_secs(5),
        confirm_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        heartbeat: 2,
        backoff_min: Duration::from_millis(200),
        backoff_max: Duration::from_secs(1),
        ..BrokerSettings::new(namespace)
    }
}

/// A node's network manager (LAN discovery off) and broker controller,
/// announcing [`key`] of its node ID; its metrics and broker connections.
fn start_node(
    cp: &ControlPlane,
    namespace: &str,
    me: NodeIdentity,
    stop: &CancellationToken,
) -> (NetworkMetrics, BrokerConnections) {
    let fingerprint = Some(key(&me.node_id));
    let metrics = NetworkMetrics::default();
    let settings = Settings {
        namespace: namespace.into(),
        multicast: None,
        ttl: TTL,
        housekeeping_interval: Duration::from_millis(200),
    };
    let manager = NetworkManager::bind(settings, me.clone(), fingerprint, metrics.clone()).unwrap();
    let peers = manager.peer_sink();
    let connections = BrokerConnections::new();
    tokio::spawn(manager.run(cp.client(), stop.clone()));
    tokio::spawn(broker::run(
        cp.client(),
        broker_settings(namespace),
        LocalNode {
            identity: me,
            fingerprint,
        },
        metrics.clone(),
        peers,
        connections.clone(),
        stop.clone(),
    ));
    (metrics, connections)
}

/// Waits until the node's broker discovery is up (`None`) or down for a
/// reason containing `want` (`Some`), as its readiness would report.
async fn wait_readiness(connections: &BrokerConnections, want: Option<&str>) {
    let mut rx = connections.subscribe();
    let reached = tokio::time::timeout(WAIT, async {
        loop {
            let reason = rx.borrow_and_update().not_ready_reason();
            let done = match (want, &reason) {
                (None, None) => true,
                (Some(w), Some(r)) => r.contains(w),
                _ => false,
            };
            if done || rx.changed().await.is_err() {
                return reason;
            }
        }
    })
    .await;
    let last = connections.snapshot().not_ready_reason();
    assert!(
        reached.is_ok(),
        "readiness not {want:?} within {WAIT:?}; last {last:?}"
    );
}

async fn secret(cp: &ControlPlane, namespace: &str, name: &str, data: &[(&str, &str)]) {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    s.data = Some(
        data.iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect::<BTreeMap<_, _>>(),
    );
    Api::<Secret>::namespaced(cp.client(), namespace)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

/// The client certificate Secret of `cn`, signed by `ca`.
async fn client_secret(cp: &ControlPlane, namespace: &str, ca: &Ca, cn: &str) {
    let (crt, key) = ca.sign(cn, false).unwrap();
    secret(
        cp,
        namespace,
        "broker-cl",
        &[("tls.crt", &crt), ("tls.key", &key)],
    )
    .await;
}

/// The Go sample's Broker (`broker.yaml`), pointed at the test broker.
async fn create_broker(cp: &ControlPlane, namespace: &str, port: u16) {
    let b = Broker::new(
        "broker-sample",
        BrokerSpec {
            name: "broker-sample".into(),
            address: format!("127.0.0.1:{port}"),
            role: "both".into(),
            rule: r#"{"MAXlatency":1000,"MINbandwidth":1,"locations":["K","J","Z"],"example":"aAbB12"}"#.into(),
            metric: r#"{"bandwidth":1,"latency":10,"location":"K","foo":"bar"}"#.into(),
            cacert: "broker-ca".into(),
            clcert: "broker-cl".into(),
        },
    );
    Api::<Broker>::namespaced(cp.client(), namespace)
        .create(&PostParams::default(), &b)
        .await
        .unwrap();
}

async fn condition(cp: &ControlPlane, namespace: &str) -> Option<Condition> {
    let b = Api::<Broker>::namespaced(cp.client(), namespace)
        .get("broker-sample")
        .await
        .unwrap();
    b.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Connected")
}

/// Waits until the Broker's `Connected` condition satisfies `want`.
async fn wait_condition(
    cp: &ControlPlane,
    namespace: &str,
    what: &str,
    want: impl Fn(&Condition) -> bool,
) -> Condition {
    let deadline = Instant::now() + WAIT;
    loop {
        let c = condition(cp, namespace).await;
        if let Some(c) = &c
            && want(c)
        {
            return c.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{namespace}: Broker not {what} within {WAIT:?}; last condition {c:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for `node_id`'s KnownCluster, then checks its address and that
/// it pinned the key `node_id` announces.
async fn wait_known(cp: &ControlPlane, namespace: &str, node_id: &str, address: &str) {
    let api = Api::<KnownCluster>::namespaced(cp.client(), namespace);
    let name = format!("knowncluster-{node_id}");
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(kc) = api.get_opt(&name).await.unwrap()
            && kc.status.is_some_and(|s| !s.expiration_time.is_empty())
        {
            assert_eq!(kc.spec.address, address);
            assert_eq!(kc.spec.fingerprint, Some(key(node_id).to_string()));
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{namespace}/{name} not created within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn known_names(cp: &ControlPlane, namespace: &str) -> Vec<String> {
    Api::<KnownCluster>::namespaced(cp.client(), namespace)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|k| k.metadata.name)
        .collect()
}

/// The broker crashes: the Brokers say so, and the clients come back with
/// it. The KnownClusters are deleted meanwhile, so only announcements after
/// the restart can bring them back.
async fn survive_a_restart(
    cp: &ControlPlane,
    rabbit: &mut RabbitMq,
    (ma, a): (&NetworkMetrics, &NodeIdentity),
    (mb, b): (&NetworkMetrics, &NodeIdentity),
    ready_a: &BrokerConnections,
) {
    rabbit.kill();
    let lost = wait_condition(cp, "ns-a", "disconnected", |c| c.status == "False").await;
    eprintln!("broker down: {}: {}", lost.reason, lost.message);
    wait_readiness(ready_a, Some("broker-sample (")).await;
    assert!(
        ["ConnectionLost", "Unreachable"].contains(&lost.reason.as_str()),
        "{lost:?}"
    );
    for (ns, peer) in [("ns-a", "node-b"), ("ns-b", "node-a")] {
        Api::<KnownCluster>::namespaced(cp.client(), ns)
            .delete(&format!("knowncluster-{peer}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    let received = mb.broker_received_count();
    rabbit.boot().await.unwrap();
    for ns in ["ns-a", "ns-b"] {
        wait_condition(cp, ns, "reconnected", |c| c.status == "True").await;
    }
    wait_readiness(ready_a, None).await;
    wait_known(cp, "ns-a", "node-b", &b.ip).await;
    wait_known(cp, "ns-b", "node-a", &a.ip).await;
    assert!(mb.broker_received_count() > received);
    assert!(ma.broker_connect_count("connected") >= 2);
}

/// A broker for node-a, node-b and node-c, and a control plane with their
/// three namespaces, each holding the broker's CA Secret.
async fn start_broker_and_cluster() -> (RabbitMq, ControlPlane) {
    let (rabbit, cp) = tokio::join!(
        async {
            RabbitMq::start(&["node-a", "node-b", "node-c"])
                .await
                .unwrap()
        },
        async {
            ControlPlane::start(ControlPlaneOptions {
                workloads: false,
                crd_dirs: vec![fluidos_testenv::crds_dir()],
                ..Default::default()
            })
            .await
            .unwrap()
        }
    );
    for ns in ["ns-a", "ns-b", "ns-c"] {
        fluidos_testenv::fixtures::namespace(&cp, ns).await.unwrap();
        secret(
            &cp,
            ns,
            "broker-ca",
            &[("CA_cert.pem", &rabbit.ca.cert_pem)],
        )
        .await;
    }
    (rabbit, cp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_learn_each_other_through_a_real_rabbitmq() {
    if !RabbitMq::installed() {
        let msg = format!(
            "{} not installed (tools/rabbitmq/install.sh installs it)",
            rabbitmq::SERVER
        );
        fluidos_testenv::skip::unavailable(msg);
        return;
    }
    let started = Instant::now();
    let (mut rabbit, cp) = start_broker_and_cluster().await;
    let port = rabbit.port;
    let (a, b, c) = (
        identity("node-a", 30001),
        identity("node-b", 30002),
        identity("node-c", 30003),
    );
    let stop = CancellationToken::new();
    let (ma, ready_a) = start_node(&cp, "ns-a", a.clone(), &stop);
    let (mb, ready_b) = start_node(&cp, "ns-b", b.clone(), &stop);
    let (_mc, ready_c) = start_node(&cp, "ns-c", c, &stop);
    // No Broker yet: nothing to connect to, ready once the list is read.
    wait_readiness(&ready_a, None).await;

    // ns-a's Broker comes before its client Secret: its status says so.
    create_broker(&cp, "ns-a", port).await;
    let missing = wait_condition(&cp, "ns-a", "SecretMissing", |c| {
        c.reason == "SecretMissing"
    })
    .await;
    assert_eq!(missing.status, "False");
    assert!(missing.message.contains("broker-cl"), "{}", missing.message);
    wait_readiness(&ready_a, Some("broker-sample (SecretMissing)")).await;
    client_secret(&cp, "ns-a", &rabbit.ca, "node-a").await;

    client_secret(&cp, "ns-b", &rabbit.ca, "node-b").await;
    create_broker(&cp, "ns-b", port).await;

    // node-c's certificate is signed by a CA the broker does not know.
    let rogue = Ca::new("rogue-ca").unwrap();
    client_secret(&cp, "ns-c", &rogue, "node-c").await;
    create_broker(&cp, "ns-c", port).await;

    for ns in ["ns-a", "ns-b"] {
        wait_condition(&cp, ns, "connected", |c| c.status == "True").await;
    }
    wait_readiness(&ready_a, None).await;
    wait_readiness(&ready_b, None).await;
    wait_known(&cp, "ns-a", "node-b", &b.ip).await;
    wait_known(&cp, "ns-b", "node-a", &a.ip).await;
    eprintln!("a and b know each other after {:?}", started.elapsed());
    assert!(
        ma.broker_dropped_count("own") > 0,
        "a hears its own announcements and ignores them"
    );
    assert!(ma.broker_published_count("announcements_exchange") > 0);
    assert!(ma.broker_published_count("rules_exchange") > 0);
    assert_eq!(known_names(&cp, "ns-a").await, ["knowncluster-node-b"]);

    let refused = wait_condition(&cp, "ns-c", "refused", |c| c.status == "False").await;
    eprintln!("untrusted client: {}: {}", refused.reason, refused.message);
    assert!(
        ["TlsRefused", "ClosedByBroker"].contains(&refused.reason.as_str()),
        "{refused:?}"
    );
    wait_readiness(
        &ready_c,
        Some(&format!("broker-sample ({})", refused.reason)),
    )
    .await;
    assert!(
        known_names(&cp, "ns-c").await.is_empty(),
        "c learned nothing"
    );

    survive_a_restart(&cp, &mut rabbit, (&ma, &a), (&mb, &b), &ready_a).await;

    // The node never deletes a Broker, failing or not.
    for ns in ["ns-a", "ns-b", "ns-c"] {
        assert!(
            condition(&cp, ns).await.is_some(),
            "{ns}/broker-sample still there"
        );
    }
    stop.cancel();
    eprintln!("done after {:?}", started.elapsed());
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(rabbit);
    cp.stop().await;
}
