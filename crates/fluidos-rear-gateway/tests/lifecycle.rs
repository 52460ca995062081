//! Reservations live in the cluster: expiry returns capacity, two replicas
//! share them, and a gateway restart between RESERVE and PURCHASE is harmless.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "an integration scenario reads top to bottom as one story; its steps share one running cluster"
)]

mod common;

use std::time::Duration;

use common::*;
use fluidos_api::Flavor;
use fluidos_api::flavor::FlavorType;
use kube::Api;

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn listed(body: &str) -> Vec<String> {
    if body.is_empty() {
        return Vec::new();
    }
    json(body)
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["flavorID"].as_str().unwrap().to_owned())
        .collect()
}

async fn two_cpu_flavor(client: &kube::Client, ns: &str, name: &str) {
    let p = partition(("1", "1"), ("0", "0"), ("0", "0"));
    let k = k8slice("amd64", "2", "4Gi", "20", None, None, p);
    create_flavor(client, ns, name, spec(FlavorType::k8slice(&k), true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_replicas_and_restart() {
    let cp = control_plane().await;
    let client = cp.client();
    let c = http();

    // ---------------- Expiry with a 2 s TTL, on two replicas.
    let ns = "rear-life";
    namespace(&client, ns).await;
    two_cpu_flavor(&client, ns, "f1").await;
    two_cpu_flavor(&client, ns, "f2").await;
    let mut cfg = config(&cp, ns);
    cfg.transaction_ttl = Duration::from_secs(2);
    // Replica A never sweeps on its own; replica B sweeps often.
    cfg.sweep_interval = Duration::from_secs(3600);
    let a = serve(&client, cfg.clone()).await;
    cfg.sweep_interval = Duration::from_millis(300);
    let b = serve(&client, cfg.clone()).await;
    let reserve = |g: &Served| g.url("/api/v2/reservations");

    let (s, body) = post(&c, &reserve(&a), &k8s_reserve("f1", "b1", "2", "1Gi", "1")).await;
    assert_eq!(s, 200, "{body}");
    let tx1 = json(&body)["transactionID"].as_str().unwrap().to_owned();
    // Replica B sees A's hold: nothing left on f1.
    let (s, body) = post(&c, &reserve(&b), &k8s_reserve("f1", "b2", "1", "1Gi", "1")).await;
    assert_eq!(s, 409, "{body}");
    assert!(
        json(&body)["error"].as_str().unwrap().contains("cpu"),
        "{body}"
    );
    wait_until("f1 to leave the list", Duration::from_secs(5), || async {
        listed(&get(&c, &a.url("/api/v2/flavors")).await.1) == ["f2"]
    })
    .await;

    // After the TTL the capacity is back, with no API write needed to list it...
    tokio::time::sleep(Duration::from_millis(2600)).await;
    wait_until("f1 to be listed again", Duration::from_secs(5), || async {
        listed(&get(&c, &a.url("/api/v2/flavors")).await.1) == ["f1", "f2"]
    })
    .await;
    let (_, body) = get(&c, &a.url("/api/v2/flavors/k8slice?filter[cpu][match]=2")).await;
    assert_eq!(
        listed(&body),
        ["f1", "f2"],
        "the full 2 CPUs are offered again"
    );
    // ...and the sweeper (replica B) removes the hold and the Transaction.
    wait_until(
        "the sweeper to clean up",
        Duration::from_secs(10),
        || async {
            let txs = transactions(&client, ns).await;
            let f1 = Api::<Flavor>::namespaced(client.clone(), ns)
                .get("f1")
                .await
                .unwrap();
            let ledger = f1.status.and_then(|s| s.ledger).unwrap_or_default();
            txs.iter()
                .all(|t| t.metadata.name.as_deref() != Some(tx1.as_str()))
                && ledger.iter().all(|e| e.transaction_id != tx1)
        },
    )
    .await;
    let (s, body) = post(&c, &reserve(&b), &k8s_reserve("f1", "b2", "1", "1Gi", "1")).await;
    assert_eq!(s, 200, "the returned capacity is reservable: {body}");

    // Reserve on A, purchase on B: the Transaction is shared state.
    let (s, body) = post(&c, &reserve(&a), &k8s_reserve("f2", "b5", "1", "1Gi", "1")).await;
    assert_eq!(s, 200, "{body}");
    let tx5 = json(&body)["transactionID"].as_str().unwrap().to_owned();
    let (s, body) = post(
        &c,
        &b.url(&format!("/api/v2/transactions/{tx5}/purchase")),
        &serde_json::json!({}),
    )
    .await;
    assert_eq!(s, 200, "{body}");

    // 408 for an expired transaction (B stopped, so nobody sweeps it first).
    b.stop();
    let (s, body) = post(&c, &reserve(&a), &k8s_reserve("f2", "b3", "1", "1Gi", "1")).await;
    assert_eq!(s, 200, "{body}");
    let tx3 = json(&body)["transactionID"].as_str().unwrap().to_owned();
    // Expiry times have whole-second precision (RFC 3339, as upstream), so a
    // 2 s TTL can take up to 3 s to pass.
    tokio::time::sleep(Duration::from_millis(3600)).await;
    let (s, body) = post(
        &c,
        &a.url(&format!("/api/v2/transactions/{tx3}/purchase")),
        &serde_json::json!({}),
    )
    .await;
    assert_eq!(s, 408, "{body}");
    assert!(json(&body)["error"].as_str().unwrap().contains("Timeout"));
    // The expired Transaction is being removed: a retry is a 404 once the
    // delete has landed, and still the 408 until then; never a sale.
    let (s, body) = post(
        &c,
        &a.url(&format!("/api/v2/transactions/{tx3}/purchase")),
        &serde_json::json!({}),
    )
    .await;
    assert!(s == 404 || s == 408, "{s} {body}");
    a.shutdown().await;

    // ---------------- Restart between RESERVE and PURCHASE.
    let ns = "rear-restart";
    namespace(&client, ns).await;
    two_cpu_flavor(&client, ns, "r1").await;
    let first = serve(&client, config(&cp, ns)).await;
    let (s, body) = post(
        &c,
        &first.url("/api/v2/reservations"),
        &k8s_reserve("r1", "b1", "1", "1Gi", "1"),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let tx = json(&body)["transactionID"].as_str().unwrap().to_owned();
    first.stop();
    let second = serve(&client, config(&cp, ns)).await;
    // The restarted gateway knows the buyer's reservation (idempotent re-reserve)...
    let (s, body) = post(
        &c,
        &second.url("/api/v2/reservations"),
        &k8s_reserve("r1", "b1", "1", "1Gi", "1"),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(json(&body)["transactionID"], tx.as_str());
    // ...and sells it.
    let (s, body) = post(
        &c,
        &second.url(&format!("/api/v2/transactions/{tx}/purchase")),
        &serde_json::json!({}),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(json(&body)["transactionID"], tx.as_str());
    // The remaining CPU is still for sale, the sold one is not.
    let (_, body) = get(&c, &second.url("/api/v2/flavors/k8slice")).await;
    assert_eq!(json(&body)[0]["type"]["data"]["charateristics"]["cpu"], "1");
    second.shutdown().await;
    cp.stop().await;
}
