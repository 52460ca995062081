//! End to end without `--peers` or a hand-made KnownCluster: two real
//! control planes and two `fluidos-node` processes whose network managers
//! find each other by multicast on loopback (interface 127.0.0.1), or, with
//! LAN discovery off, through a real RabbitMQ named by the Go sample's
//! Broker; the consumer's Solver then buys from the provider it discovered.
//! The multicast test also sees the provider's KnownCluster go once it stops
//! advertising.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use fluidos_api::network::{Broker, BrokerSpec};
use fluidos_api::solver::{Selector, SolverSpec};
use fluidos_api::{Contract, KnownCluster, Phase, Solver};
use fluidos_testenv::rabbitmq::{self, RabbitMq};
use fluidos_testenv::{ControlPlane, fixtures};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

mod support;

use support::{NS, NodeProcess, cluster, eventually, free_port, prepare};

/// TTL 3 s: the KnownCluster test below waits for an expiry.
fn discovery_flags(group: &str) -> Vec<String> {
    [
        "--cni-interface",
        "127.0.0.1",
        "--multicast-address",
        group,
        "--multicast-interval-ms",
        "300",
        "--known-cluster-ttl-ms",
        "3000",
        "--known-cluster-housekeeping-ms",
        "200",
    ]
    .map(str::to_owned)
    .to_vec()
}

#[tokio::test]
async fn a_consumer_finds_a_provider_by_multicast_and_buys() {
    let (provider, consumer) = tokio::join!(cluster(), cluster());
    let (pport, cport) = (free_port(), free_port());
    prepare(&provider, "provider01", pport).await;
    prepare(&consumer, "consumer01", cport).await;
    fixtures::worker_node(&provider, "worker-1", "8", "16Gi")
        .await
        .unwrap();
    // A group port no other test uses.
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let group = format!("239.11.11.1:{port}");
    let flags = discovery_flags(&group);
    let mut provider_args: Vec<&str> = vec!["--liqo-cluster-id", "liqo-provider"];
    provider_args.extend(flags.iter().map(String::as_str));
    let mut consumer_args: Vec<&str> = vec![
        "--liqo-cluster-id",
        "liqo-consumer",
        "--peer-timeout-ms",
        "1000",
    ];
    consumer_args.extend(flags.iter().map(String::as_str));
    let provider_node = NodeProcess::spawn(
        &provider,
        pport,
        "local-resource-manager,rear-gateway,network-manager",
        "0",
        &provider_args,
    );
    let consumer_node = NodeProcess::spawn(
        &consumer,
        cport,
        "rear-manager,network-manager",
        "0",
        &consumer_args,
    );
    let logs = [&provider_node, &consumer_node];

    // Each finds the other; nobody typed a peer in.
    let known: Api<KnownCluster> = Api::namespaced(consumer.client(), NS);
    // Spec and status are two writes: wait for the expiry too (a
    // KnownCluster made from one advertisement gets it, unlike upstream's).
    let found = eventually(
        "knowncluster-provider01 on the consumer, with its expiry",
        Duration::from_secs(60),
        &logs,
        || async {
            known
                .get_opt("knowncluster-provider01")
                .await
                .unwrap()
                .filter(has_expiry)
        },
    )
    .await;
    assert_eq!(found.spec.address, format!("127.0.0.1:{pport}"));
    let provider_known: Api<KnownCluster> = Api::namespaced(provider.client(), NS);
    eventually(
        "knowncluster-consumer01 on the provider",
        Duration::from_secs(30),
        &logs,
        || async {
            provider_known
                .get_opt("knowncluster-consumer01")
                .await
                .unwrap()
        },
    )
    .await;

    // A Solver buys from the discovered provider.
    let phase = buy_a_k8slice(&consumer, &logs).await;
    assert_eq!(phase, Phase::Solved, "{}", consumer_node.log());
    let contracts = Api::<Contract>::namespaced(consumer.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(contracts.items.len(), 1, "{}", consumer_node.log());

    // The provider stops advertising: its KnownCluster goes within the TTL
    // (3 s, plus a second of rounding and a sweep).
    provider_node.kill().await;
    let stopped = Instant::now();
    eventually(
        "knowncluster-provider01 to expire",
        Duration::from_secs(8),
        &[&consumer_node],
        || async {
            known
                .get_opt("knowncluster-provider01")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(
        stopped.elapsed() >= Duration::from_millis(1000),
        "removed after {:?}: before its expiry",
        stopped.elapsed()
    );
    consumer_node.kill().await;
    provider.stop().await;
    consumer.stop().await;
}

/// The Go sample's Broker (`broker.yaml`) on `cp`, pointed at `rabbit`, with
/// its two Secrets: the broker's CA and a client certificate for `cn`.
async fn broker_for(cp: &ControlPlane, rabbit: &RabbitMq, cn: &str) {
    let (crt, key) = rabbit.ca.sign(cn, false).unwrap();
    let secrets: Api<Secret> = Api::namespaced(cp.client(), NS);
    for (name, data) in [
        (
            "brokera-ca",
            vec![("CA_cert.pem", rabbit.ca.cert_pem.clone())],
        ),
        ("brokera-cl", vec![("tls.crt", crt), ("tls.key", key)]),
    ] {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.data = Some(
            data.into_iter()
                .map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes())))
                .collect(),
        );
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }
    let broker = Broker::new(
        "broker-sample",
        BrokerSpec {
            name: "broker-sample".into(),
            address: format!("127.0.0.1:{}", rabbit.port),
            role: "both".into(),
            rule: r#"{"MAXlatency":1000,"MINbandwidth":1}"#.into(),
            metric: r#"{"bandwidth":1,"latency":10}"#.into(),
            cacert: "brokera-ca".into(),
            clcert: "brokera-cl".into(),
        },
    );
    Api::<Broker>::namespaced(cp.client(), NS)
        .create(&PostParams::default(), &broker)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_consumer_finds_a_provider_through_a_broker_and_buys() {
    if !RabbitMq::installed() {
        let msg = format!(
            "{} not installed (tools/rabbitmq/install.sh installs it)",
            rabbitmq::SERVER
        );
        fluidos_testenv::skip::unavailable(msg);
        return;
    }
    let (rabbit, provider, consumer) = tokio::join!(
        async {
            RabbitMq::start(&["provider01", "consumer01"])
                .await
                .unwrap()
        },
        cluster(),
        cluster()
    );
    let (pport, cport) = (free_port(), free_port());
    let provider_key = prepare(&provider, "provider01", pport).await;
    prepare(&consumer, "consumer01", cport).await;
    fixtures::worker_node(&provider, "worker-1", "8", "16Gi")
        .await
        .unwrap();
    broker_for(&provider, &rabbit, "provider01").await;
    broker_for(&consumer, &rabbit, "consumer01").await;
    // LAN discovery off: whatever is found came through the broker. Broker
    // discovery is on by default, as in Go.
    let provider_node = NodeProcess::spawn(
        &provider,
        pport,
        "local-resource-manager,rear-gateway,network-manager",
        "0",
        &[
            "--liqo-cluster-id",
            "liqo-provider",
            "--enable-local-discovery=false",
        ],
    );
    let consumer_node = NodeProcess::spawn(
        &consumer,
        cport,
        "rear-manager,network-manager",
        "0",
        &[
            "--liqo-cluster-id",
            "liqo-consumer",
            "--peer-timeout-ms",
            "1000",
            "--enable-local-discovery=false",
        ],
    );
    let logs = [&provider_node, &consumer_node];

    let known: Api<KnownCluster> = Api::namespaced(consumer.client(), NS);
    let found = eventually(
        "knowncluster-provider01 on the consumer, through the broker",
        Duration::from_secs(60),
        &logs,
        || async {
            known
                .get_opt("knowncluster-provider01")
                .await
                .unwrap()
                .filter(has_expiry)
        },
    )
    .await;
    assert_eq!(found.spec.address, format!("127.0.0.1:{pport}"));
    assert_eq!(
        found.spec.fingerprint.as_deref(),
        Some(provider_key.as_str()),
        "the consumer pins the key the provider announced"
    );
    let phase = buy_a_k8slice(&consumer, &logs).await;
    assert_eq!(phase, Phase::Solved, "{}", consumer_node.log());
    let contracts = Api::<Contract>::namespaced(consumer.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(contracts.items.len(), 1, "{}", consumer_node.log());
    assert!(
        consumer_node.log().contains("broker discovery up: ready"),
        "{}",
        consumer_node.log()
    );
    consumer_node.kill().await;
    provider_node.kill().await;
    drop(rabbit);
    provider.stop().await;
    consumer.stop().await;
}

/// Creates a buying K8Slice Solver on `consumer` and returns its final phase.
async fn buy_a_k8slice(consumer: &ControlPlane, logs: &[&NodeProcess]) -> Phase {
    let solvers: Api<Solver> = Api::namespaced(consumer.client(), NS);
    let mut s = Solver::new(
        "solver-lan",
        SolverSpec {
            selector: Some(Selector {
                flavor_type: "K8Slice".into(),
                filters: Some(json!({"cpuFilter": {"name": "Range", "data": {"min": "1000m"}}})),
            }),
            intent_id: "intent-lan".into(),
            find_candidate: Some(true),
            reserve_and_buy: Some(true),
            establish_peering: Some(false),
        },
    );
    s.metadata.namespace = Some(NS.into());
    solvers.create(&PostParams::default(), &s).await.unwrap();
    eventually(
        "Solver solver-lan to finish",
        Duration::from_secs(60),
        logs,
        || async {
            let p = solvers
                .get("solver-lan")
                .await
                .unwrap()
                .status
                .and_then(|s| s.solver_phase)
                .unwrap_or_default();
            matches!(p.phase, Phase::Solved | Phase::Failed | Phase::TimedOut).then_some(p.phase)
        },
    )
    .await
}

/// Whether the KnownCluster's status carries its expiry.
fn has_expiry(k: &KnownCluster) -> bool {
    k.status
        .as_ref()
        .is_some_and(|s| !s.expiration_time.is_empty())
}
