//! Issue 11's limits as attacks that must fail, against a real API server
//! over loopback HTTP: oversized fields, names that would bend the
//! API-server URL, zero-size and fractional-pod partitions, a buyer hogging capacity, a hold
//! renewed forever, a peer flooding requests, slow-drip and idle
//! connections, more connections than allowed (in all and per peer), and an
//! API server failing
//! in the middle of a sale.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "an integration scenario reads top to bottom as one story; its steps share one running cluster"
)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use fluidos_api::flavor::FlavorType;
use fluidos_rear_gateway::RateLimit;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// `n` K8Slice flavors `<prefix>-<i>` of 8 CPUs, 16Gi and 100 pods, partitionable by 1/1Gi/1.
async fn flavors(client: &kube::Client, ns: &str, prefix: &str, n: usize) {
    for i in 0..n {
        let p = partition(("1", "1"), ("1Gi", "1Gi"), ("1", "1"));
        let k = k8slice("amd64", "8", "16Gi", "100", None, None, p);
        create_flavor(
            client,
            ns,
            &format!("{prefix}-{i}"),
            spec(FlavorType::k8slice(&k), true),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_fields_and_bad_names_are_refused_before_anything_is_stored() {
    const NS: &str = "limits-fields";
    let cp = control_plane().await;
    let client = cp.client();
    namespace(&client, NS).await;
    flavors(&client, NS, "f", 1).await;
    let gw = serve(&client, config(&cp, NS)).await;
    let c = http();
    let reserve = gw.url("/api/v2/reservations");
    let long = "x".repeat(300);
    let cases = [
        (
            serde_json::json!({"flavorID": "?watch=true", "buyerID": buyer("b")}),
            "flavorID",
        ),
        (
            serde_json::json!({"flavorID": "a/status", "buyerID": buyer("b")}),
            "flavorID",
        ),
        (
            serde_json::json!({"flavorID": "../../secrets", "buyerID": buyer("b")}),
            "flavorID",
        ),
        (
            serde_json::json!({"flavorID": "F-0", "buyerID": buyer("b")}),
            "flavorID",
        ),
        (
            serde_json::json!({"flavorID": "f".repeat(254), "buyerID": buyer("b")}),
            "flavorID",
        ),
        (
            k8s_reserve("f-0", &"b".repeat(64), "1", "1Gi", "1"),
            "buyerID.ID",
        ),
        (k8s_reserve("f-0", "b\nc", "1", "1Gi", "1"), "buyerID.ID"),
        (
            serde_json::json!({"flavorID": "f-0", "buyerID": {"ID": "b", "IP": long, "domain": "d",
                "additionalInformation": {"liqoID": "l"}}}),
            "buyerID.IP",
        ),
        (
            serde_json::json!({"flavorID": "f-0", "buyerID": {"ID": "b", "IP": "1.2.3.4:5", "domain": "x".repeat(254),
                "additionalInformation": {"liqoID": "l"}}}),
            "buyerID.domain",
        ),
        (
            serde_json::json!({"flavorID": "f-0", "buyerID": {"ID": "b", "IP": "1.2.3.4:5", "domain": "d",
                "additionalInformation": {"liqoID": "l".repeat(64)}}}),
            "buyerID.additionalInformation.liqoID",
        ),
        (
            serde_json::json!({"flavorID": "f-0", "buyerID": {"ID": "b", "IP": "1.2.3.4:5", "domain": "d",
                "additionalInformation": {"liqoID": "l", "kubeconfig": "k".repeat(200_000)}}}),
            "buyerID.additionalInformation.kubeconfig",
        ),
        (
            serde_json::json!({"flavorID": "f-0", "buyerID": buyer("b"),
                "configuration": {"type": "k8slice", "data": {"cpu": "1", "memory": "1Gi", "pods": "1",
                    "padding": "p".repeat(20_000)}}}),
            "configuration.data",
        ),
        (
            k8s_reserve("f-0", "b", "0", "1Gi", "1"),
            "configuration.data.cpu",
        ),
        (
            k8s_reserve("f-0", "b", "1", "0", "1"),
            "configuration.data.memory",
        ),
        (
            k8s_reserve("f-0", "b", "1", "1Gi", "0"),
            "configuration.data.pods",
        ),
        (
            k8s_reserve("f-0", "b", &"9".repeat(5000), "1Gi", "1"),
            "configuration.data.cpu",
        ),
    ];
    for (body, field) in cases {
        let (s, answer) = post(&c, &reserve, &body).await;
        assert_eq!(s, 400, "{answer}");
        let v = json(&answer);
        assert_eq!(v["field"], field, "{answer}");
        assert!(
            answer.len() < 2048,
            "error bodies are bounded: {} bytes",
            answer.len()
        );
    }
    // Deep nesting is a 400, not a stack overflow.
    let mut deep = String::new();
    for _ in 0..100_000 {
        deep.push('[');
    }
    let (s, answer) = {
        let r = c
            .post(&reserve)
            .body(format!(
                r#"{{"flavorID":"f-0","buyerID":{},"configuration":{{"type":"service","data":{deep}"#,
                buyer("b")
            ))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(s, 400, "{answer}");

    // Bad names in paths never reach the API server: the answer of an unknown object.
    for path in [
        "/api/v2/transactions/%3Fwatch=true/purchase",
        "/api/v2/transactions/a%2Fstatus/purchase",
        "/api/v2/transactions/..%2F..%2Fflavors%2Ff-0/purchase",
    ] {
        let (s, answer) = post(&c, &gw.url(path), &serde_json::json!({})).await;
        assert_eq!(s, 404, "{path}: {answer}");
        assert_eq!(json(&answer)["field"], "transactionID");
    }
    for path in [
        "/api/v2/contracts/%3Fwatch=true/service?buyerID=b",
        "/api/v2/contracts/a%2Fstatus/service?buyerID=b",
    ] {
        let r = c
            .get(gw.url(path))
            .header("X-Fluidos-Transaction-Id", "t")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 404, "{path}");
    }

    // A purchase's stored fields are bounded too.
    let (s, answer) = post(&c, &reserve, &k8s_reserve("f-0", "b", "1", "1Gi", "1")).await;
    assert_eq!(s, 200, "{answer}");
    let tx = json(&answer)["transactionID"].as_str().unwrap().to_owned();
    let purchase = gw.url(&format!("/api/v2/transactions/{tx}/purchase"));
    for (body, field) in [
        (
            serde_json::json!({"ingressTelemetryEndpoint": {"endpoint": "e".repeat(3000)}}),
            "ingressTelemetryEndpoint.endpoint",
        ),
        (
            serde_json::json!({"ingressTelemetryEndpoint": {"endpoint": "http://t", "intents": vec!["i"; 100]}}),
            "ingressTelemetryEndpoint.intents",
        ),
        (
            serde_json::json!({"liqoCredentials": {"clusterID": "c/../x", "kubeconfig": ""}}),
            "liqoCredentials.clusterID",
        ),
    ] {
        let (s, answer) = post(&c, &purchase, &body).await;
        assert_eq!(s, 400, "{answer}");
        assert_eq!(json(&answer)["field"], field, "{answer}");
    }
    // Only the one valid reservation was stored.
    assert_eq!(transactions(&client, NS).await.len(), 1);
    gw.shutdown().await;
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buyer_cannot_hog_capacity_or_renew_a_hold_forever() {
    const NS: &str = "limits-holds";
    let cp = control_plane().await;
    let client = cp.client();
    namespace(&client, NS).await;
    flavors(&client, NS, "f", 6).await;
    let mut cfg = config(&cp, NS);
    cfg.max_holds_per_buyer = 3;
    let gw = serve(&client, cfg).await;
    let c = http();
    let reserve = gw.url("/api/v2/reservations");

    // ---- Capacity hog: three holds, then a clear refusal naming the buyer.
    let mut txs = Vec::new();
    for i in 0..3 {
        let (s, body) = post(
            &c,
            &reserve,
            &k8s_reserve(&format!("f-{i}"), "hog", "1", "1Gi", "1"),
        )
        .await;
        assert_eq!(s, 200, "{body}");
        txs.push(json(&body)["transactionID"].as_str().unwrap().to_owned());
    }
    // 429, not 409: the flavor is not sold out (a 409 would make a consumer
    // drop the candidate).
    let (s, body) = post(&c, &reserve, &k8s_reserve("f-3", "hog", "1", "1Gi", "1")).await;
    assert_eq!(s, 429, "{body}");
    let v = json(&body);
    assert_eq!(v["field"], "buyerID.ID");
    assert!(
        v["error"].as_str().unwrap().contains("already holds 3"),
        "{body}"
    );
    // Renewing a hold it has is not a new hold, however the same amounts
    // are spelled: what is stored is their canonical spelling.
    let (s, body) = post(&c, &reserve, &k8s_reserve("f-0", "hog", "1", "1Gi", "1")).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(json(&body)["transactionID"], txs[0].as_str());
    let respelled = k8s_reserve("f-0", "hog", " 1000m", "1024Mi", "1");
    let (s, body) = post(&c, &reserve, &respelled).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(json(&body)["transactionID"], txs[0].as_str());
    // The same amount in another notation (bytes for 1Gi) is the same too.
    let in_bytes = k8s_reserve("f-0", "hog", "1", "1073741824", "1");
    let (s, body) = post(&c, &reserve, &in_bytes).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(json(&body)["transactionID"], txs[0].as_str());
    let stored = Api::<fluidos_api::Transaction>::namespaced(client.clone(), NS)
        .get(&txs[0])
        .await
        .unwrap()
        .spec
        .configuration
        .unwrap()
        .data;
    assert_eq!(
        stored,
        serde_json::json!({"cpu": "1", "memory": "1Gi", "pods": "1"})
    );
    // Other buyers are not affected; a new hold is answered as it is
    // stored too, whatever the spelling it was asked in.
    let (s, body) = post(
        &c,
        &reserve,
        &k8s_reserve("f-3", "fair", "1000m", "1024Mi", "1"),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        json(&body)["configuration"]["data"],
        serde_json::json!({"cpu": "1", "memory": "1Gi", "pods": "1"})
    );
    // Buying one frees a slot.
    let (s, body) = post(
        &c,
        &gw.url(&format!("/api/v2/transactions/{}/purchase", txs[1])),
        &serde_json::json!({}),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let (s, body) = post(&c, &reserve, &k8s_reserve("f-4", "hog", "1", "1Gi", "1")).await;
    assert_eq!(s, 200, "{body}");

    // Concurrent reserves of a fresh buyer on six flavors: at most three hold.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (c, url) = (c.clone(), reserve.clone());
        tasks.push(tokio::spawn(async move {
            post(
                &c,
                &url,
                &k8s_reserve(&format!("f-{i}"), "rush", "1", "1Gi", "1"),
            )
            .await
        }));
    }
    let mut held = 0;
    for t in tasks {
        let (s, body) = t.await.unwrap();
        match s {
            200 => held += 1,
            429 => assert_eq!(json(&body)["field"], "buyerID.ID", "{body}"),
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!(held, 3, "the cap holds under concurrency");
    gw.shutdown().await;

    // ---- Invented buyer IDs (or keys, which cost nothing) from one
    // address: that address's cap, whatever IDs it writes.
    const PEER_NS: &str = "limits-peer-holds";
    namespace(&client, PEER_NS).await;
    flavors(&client, PEER_NS, "p", 4).await;
    let mut cfg = config(&cp, PEER_NS);
    cfg.max_holds_per_buyer = 2;
    cfg.max_holds_per_address = 3;
    let gw = serve(&client, cfg).await;
    let reserve = gw.url("/api/v2/reservations");
    for (flavor, buyer) in [("p-0", "id-1"), ("p-1", "id-1"), ("p-2", "id-2")] {
        let (s, body) = post(&c, &reserve, &k8s_reserve(flavor, buyer, "1", "1Gi", "1")).await;
        assert_eq!(s, 200, "{body}");
    }
    let (s, body) = post(&c, &reserve, &k8s_reserve("p-3", "id-3", "1", "1Gi", "1")).await;
    assert_eq!(s, 429, "{body}");
    assert!(
        json(&body)["error"]
            .as_str()
            .unwrap()
            .contains("held from 127.0.0.1"),
        "{body}"
    );
    // Renewing a hold from there is not a new hold.
    let (s, body) = post(&c, &reserve, &k8s_reserve("p-0", "id-1", "1", "1Gi", "1")).await;
    assert_eq!(s, 200, "{body}");
    let ledger = Api::<fluidos_api::Flavor>::namespaced(client.clone(), PEER_NS)
        .get("p-0")
        .await
        .unwrap()
        .status
        .unwrap()
        .ledger
        .unwrap();
    assert_eq!(ledger[0].source_peer.as_deref(), Some("127.0.0.1"));
    gw.shutdown().await;

    // ---- Hold age: renewed every half second, a 2 s hold capped at 4 s of age.
    let mut cfg = config(&cp, NS);
    cfg.transaction_ttl = Duration::from_secs(2);
    cfg.max_hold_age = Duration::from_secs(4);
    let gw = serve(&client, cfg).await;
    let reserve = gw.url("/api/v2/reservations");
    let body = k8s_reserve("f-5", "renewer", "1", "1Gi", "1");
    let (s, first) = post(&c, &reserve, &body).await;
    assert_eq!(s, 200, "{first}");
    let first_tx = json(&first)["transactionID"].as_str().unwrap().to_owned();
    let created = Api::<fluidos_api::Transaction>::namespaced(client.clone(), NS)
        .get(&first_tx)
        .await
        .unwrap()
        .metadata
        .creation_timestamp
        .unwrap()
        .0;
    let cap = created + jiff::SignedDuration::from_secs(4);
    let started = Instant::now();
    let mut renewals = 0;
    let replaced = loop {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the hold was renewed past its maximum age"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (s, answer) = post(&c, &reserve, &body).await;
        assert_eq!(s, 200, "{answer}");
        let v = json(&answer);
        let expiry: jiff::Timestamp = v["expirationTime"].as_str().unwrap().parse().unwrap();
        if v["transactionID"] != first_tx.as_str() {
            break v;
        }
        renewals += 1;
        assert!(
            expiry <= cap,
            "renewal {renewals} set the expiry to {expiry}, past creation {created} + 4 s"
        );
    };
    assert!(
        renewals >= 3,
        "the hold was renewed while young ({renewals} renewals)"
    );
    assert_ne!(replaced["transactionID"], first_tx.as_str());
    gw.shutdown().await;
    cp.stop().await;
}

/// Reads from `tcp` until the server closes it (or `limit` passes); returns
/// what was read and when the connection ended.
async fn read_until_closed(tcp: &mut TcpStream, limit: Duration) -> (Vec<u8>, Option<Duration>) {
    let started = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = limit.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, tcp.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return (out, Some(started.elapsed())),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (out, None),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_slow_drips_and_connection_hogs_are_cut_off() {
    const NS: &str = "limits-conn";
    let cp = control_plane().await;
    let client = cp.client();
    namespace(&client, NS).await;
    flavors(&client, NS, "f", 1).await;

    // ---- Rate limit: 5 at once, then 2/s; 429 with Retry-After and JSON.
    let mut cfg = config(&cp, NS);
    cfg.rate_limit = Some(RateLimit {
        per_second: 2,
        burst: 5,
    });
    let gw = serve(&client, cfg).await;
    let c = http();
    let list = gw.url("/api/v2/flavors");
    let mut statuses = Vec::new();
    let mut limited = None;
    for _ in 0..12 {
        let r = c.get(&list).send().await.unwrap();
        statuses.push(r.status().as_u16());
        if r.status() == 429 && limited.is_none() {
            let retry: u64 = r.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            limited = Some((retry, r.text().await.unwrap()));
        }
    }
    assert_eq!(&statuses[..5], [200; 5], "{statuses:?}");
    assert!(statuses[5..].contains(&429), "{statuses:?}");
    let (retry, body) = limited.unwrap();
    assert!((1..=2).contains(&retry), "Retry-After {retry}");
    assert!(
        json(&body)["error"]
            .as_str()
            .unwrap()
            .contains("too many requests"),
        "{body}"
    );
    // Per peer: another loopback address is not limited.
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    assert_eq!(other.get(&list).send().await.unwrap().status(), 200);
    // After waiting as told, the peer is served again.
    tokio::time::sleep(Duration::from_secs(retry)).await;
    assert_eq!(c.get(&list).send().await.unwrap().status(), 200);
    gw.shutdown().await;

    // ---- Timeouts: 1 s for a request head, 1 s for a body.
    let mut cfg = config(&cp, NS);
    cfg.header_read_timeout = Duration::from_secs(1);
    cfg.body_read_timeout = Duration::from_secs(1);
    cfg.max_connections = 4;
    let gw = serve(&client, cfg).await;
    let addr = gw.base.trim_start_matches("http://").to_owned();

    // Slow drip: a header byte every 200 ms, never finishing.
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    let started = Instant::now();
    let drip =
        b"GET /api/v2/flavors HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut closed_after = None;
    for byte in drip {
        if tcp.write_all(&[*byte]).await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        let mut probe = [0u8; 1024];
        match tokio::time::timeout(Duration::from_millis(200), tcp.read(&mut probe)).await {
            Ok(Ok(0) | Err(_)) => {
                closed_after = Some(started.elapsed());
                break;
            }
            Ok(Ok(n)) => panic!(
                "answered a request that never finished: {:?}",
                String::from_utf8_lossy(&probe[..n])
            ),
            Err(_) => {}
        }
    }
    let closed_after = closed_after.expect("the slow-drip connection was never closed");
    assert!(
        closed_after < Duration::from_millis(2500),
        "closed after {closed_after:?}, header timeout 1 s"
    );

    // Idle: a connection that sends nothing is closed too.
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    let (read, closed) = read_until_closed(&mut idle, Duration::from_secs(5)).await;
    assert!(read.is_empty());
    assert!(
        closed.is_some_and(|d| d < Duration::from_millis(2500)),
        "{closed:?}"
    );

    // Slow body: headers at once, then a byte every 200 ms: 408, JSON, closed.
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(b"POST /api/v2/reservations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        .await
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    for _ in 0..20 {
        let _ = tcp.write_all(b" ").await;
        let mut buf = [0u8; 4096];
        match tokio::time::timeout(Duration::from_millis(200), tcp.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(answer.contains("did not arrive within"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(3));

    // ---- Connection cap: 4 idle connections fill it; a fifth waits for one to close.
    let mut hogs = Vec::new();
    for _ in 0..4 {
        hogs.push(TcpStream::connect(&addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    };
    let waited = Instant::now();
    let r = fresh().get(gw.url("/api/v2/flavors")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        waited.elapsed() >= Duration::from_millis(500),
        "served at once ({:?}) although 4 connections were open",
        waited.elapsed()
    );
    drop(hogs);
    // Many clients at once, over the cap: all served, none refused.
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let url = gw.url("/api/v2/flavors");
        let c = fresh();
        tasks.push(tokio::spawn(async move {
            c.get(&url).send().await.map(|r| r.status().as_u16())
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), 200);
    }
    gw.shutdown().await;

    // ---- Per peer: one address holds at most 3 connections; one more is
    // closed at once, while another address is served.
    let mut cfg = config(&cp, NS);
    cfg.max_connections_per_peer = 3;
    let gw = serve(&client, cfg).await;
    let addr = gw.base.trim_start_matches("http://").to_owned();
    let mut hogs = Vec::new();
    for _ in 0..3 {
        hogs.push(TcpStream::connect(&addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut fourth = TcpStream::connect(&addr).await.unwrap();
    let (read, closed) = read_until_closed(&mut fourth, Duration::from_secs(5)).await;
    assert!(read.is_empty(), "{:?}", String::from_utf8_lossy(&read));
    assert!(
        closed.is_some_and(|d| d < Duration::from_secs(1)),
        "the peer's fourth connection was not closed at once: {closed:?}"
    );
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    assert_eq!(
        other
            .get(gw.url("/api/v2/flavors"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    drop(hogs);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        fresh()
            .get(gw.url("/api/v2/flavors"))
            .send()
            .await
            .unwrap()
            .status(),
        200,
        "closed connections give the peer its slots back"
    );
    gw.shutdown().await;

    // ---- Write timeout: a client that asks and does not read its answers
    // (so the socket buffers fill) is cut off once a write stalls for 1 s,
    // instead of keeping its connection as long as it likes.
    const BIG: &str = "limits-write";
    namespace(&client, BIG).await;
    flavors(&client, BIG, "w", 150).await;
    let mut cfg = config(&cp, BIG);
    cfg.write_timeout = Duration::from_secs(1);
    cfg.rate_limit = None;
    let gw = serve(&client, cfg).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut tcp = socket
        .connect(gw.base.trim_start_matches("http://").parse().unwrap())
        .await
        .unwrap();
    // 64 lists of 150 flavors: megabytes, well over what the buffers hold.
    let asked = 64;
    let requests = "GET /api/v2/flavors HTTP/1.1\r\nHost: x\r\n\r\n".repeat(asked);
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.write_all(requests.as_bytes())).await;
    // Not reading for three write timeouts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (read, closed) = read_until_closed(&mut tcp, Duration::from_secs(10)).await;
    let answered = String::from_utf8_lossy(&read)
        .matches("HTTP/1.1 200")
        .count();
    assert!(
        closed.is_some(),
        "the connection stayed open after its writes stalled ({answered} answers read)"
    );
    assert!(
        answered < asked,
        "all {asked} answers were written: the stalled connection was not cut"
    );
    gw.shutdown().await;
    cp.stop().await;
}

/// A connection from `local` (a loopback address) to `addr`.
async fn connect_from(local: [u8; 4], addr: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::from((local, 0))).unwrap();
    socket.connect(addr.parse().unwrap()).await.unwrap()
}

/// The head of a RESERVE whose 100-byte body is still to come.
const HEAD_ONLY: &[u8] = b"POST /api/v2/reservations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{";

/// The answer on `tcp` within `limit`: its status line (empty if none came).
async fn status_line(tcp: &mut TcpStream, limit: Duration) -> String {
    let mut buf = [0u8; 4096];
    match tokio::time::timeout(limit, tcp.read(&mut buf)).await {
        Ok(Ok(n)) => String::from_utf8_lossy(&buf[..n])
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

/// Issue 28 finding 6: slow POST bodies take permits of their own address
/// only, and a caller that may not buy is told so before its body is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_hold_only_their_peers_permits_and_refused_callers_are_told_first() {
    const NS: &str = "limits-bodies";
    let cp = control_plane().await;
    let client = cp.client();
    namespace(&client, NS).await;
    flavors(&client, NS, "f", 1).await;
    let mut cfg = config(&cp, NS);
    // Plain-HTTP sales from two of the three loopback addresses used.
    cfg.plain_http_sales = "127.0.0.1,127.0.0.2".parse().unwrap();
    cfg.body_read_timeout = Duration::from_secs(20);
    cfg.rate_limit = None;
    let gw = serve(&client, cfg).await;
    let addr = gw.base.trim_start_matches("http://").to_owned();

    // 127.0.0.1 drips five bodies: four (its share) are held, whichever
    // the gateway took first, and one is refused at once, not queued.
    let started = Instant::now();
    let mut drips = Vec::new();
    for _ in 0..5 {
        let mut tcp = connect_from([127, 0, 0, 1], &addr).await;
        tcp.write_all(HEAD_ONLY).await.unwrap();
        drips.push(tcp);
    }
    let lines = futures::future::join_all(
        drips
            .iter_mut()
            .map(|tcp| status_line(tcp, Duration::from_secs(3))),
    )
    .await;
    let refused_at = lines
        .iter()
        .position(|l| l.starts_with("HTTP/1.1 429"))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(
        lines
            .iter()
            .enumerate()
            .all(|(i, l)| i == refused_at || l.is_empty()),
        "{lines:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    drips.remove(refused_at);
    // Another address buys meanwhile.
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let (s, answer) = post(
        &other,
        &gw.url("/api/v2/reservations"),
        &k8s_reserve("f-0", "b", "1", "1Gi", "1"),
    )
    .await;
    assert_eq!(s, 200, "{answer}");
    // An address that may not buy gets 403 before it sends its body.
    let started = Instant::now();
    let mut refused = connect_from([127, 0, 0, 3], &addr).await;
    refused.write_all(HEAD_ONLY).await.unwrap();
    let line = status_line(&mut refused, Duration::from_secs(5)).await;
    assert!(line.starts_with("HTTP/1.1 403"), "{line:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // The dripping bodies are still waiting, none answered yet.
    for tcp in &mut drips {
        assert_eq!(status_line(tcp, Duration::from_millis(50)).await, "");
    }
    drop(drips);
    gw.shutdown().await;
    cp.stop().await;
}

/// A validating webhook that nothing serves, with `failurePolicy: Fail`: the
/// real API server then answers every Contract (and ConfigMap) create in
/// `ns` with 500 InternalError.
fn failing_webhook(ns: &str, port: u16) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some("limits-failing-webhook".into()),
            ..Default::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "fail.limits.fluidos.eu".into(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some("Fail".into()),
            timeout_seconds: Some(2),
            client_config: WebhookClientConfig {
                url: Some(format!("https://127.0.0.1:{port}/validate")),
                ..Default::default()
            },
            namespace_selector: Some(LabelSelector {
                match_labels: Some(labels(&[("kubernetes.io/metadata.name", ns)])),
                ..Default::default()
            }),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec!["reservation.fluidos.eu".into(), String::new()]),
                api_versions: Some(vec!["v1alpha1".into(), "v1".into()]),
                operations: Some(vec!["CREATE".into()]),
                resources: Some(vec!["contracts".into(), "configmaps".into()]),
                scope: Some("Namespaced".into()),
            }]),
            ..Default::default()
        }]),
    }
}

/// Whether creating a probe ConfigMap in `ns` fails (the webhook is in force).
async fn creates_fail(client: &kube::Client, ns: &str, i: usize) -> bool {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("probe-{i}")),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_failure_during_a_sale_is_a_503_to_retry() {
    const NS: &str = "limits-kube";
    let cp = control_plane().await;
    let client = cp.client();
    namespace(&client, NS).await;
    flavors(&client, NS, "f", 1).await;
    let gw = serve(&client, config(&cp, NS)).await;
    let c = http();
    let (s, body) = post(
        &c,
        &gw.url("/api/v2/reservations"),
        &k8s_reserve("f-0", "b", "1", "1Gi", "1"),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let tx = json(&body)["transactionID"].as_str().unwrap().to_owned();

    let hooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let port = fluidos_testenv::fixtures::free_port().unwrap();
    hooks
        .create(&PostParams::default(), &failing_webhook(NS, port))
        .await
        .unwrap();
    let mut probe = 0;
    wait_until(
        "the webhook to be in force",
        Duration::from_secs(20),
        || {
            probe += 1;
            creates_fail(&client, NS, probe)
        },
    )
    .await;

    let purchase = gw.url(&format!("/api/v2/transactions/{tx}/purchase"));
    let r = c
        .post(&purchase)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    let body = r.text().await.unwrap();
    let error = json(&body)["error"].as_str().unwrap().to_owned();
    assert!(error.contains("creating the Contract"), "{body}");
    assert!(error.contains("retry"), "{body}");
    assert!(
        !error.contains("webhook") && !error.contains("127.0.0.1"),
        "the API server's own text stays in the provider's log: {body}"
    );

    // The API server recovers; the buyer's retry of the same purchase completes the sale.
    hooks
        .delete("limits-failing-webhook", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the webhook to be gone", Duration::from_secs(20), || {
        probe += 1;
        let client = client.clone();
        async move { !creates_fail(&client, NS, probe).await }
    })
    .await;
    let (s, body) = post(&c, &purchase, &serde_json::json!({})).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(json(&body)["transactionID"], tx.as_str());
    gw.shutdown().await;
    cp.stop().await;
}
