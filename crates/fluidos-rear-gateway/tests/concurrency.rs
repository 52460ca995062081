//! No oversell: 200 concurrent reservations from 10 clients (over two gateway
//! replicas) against 5 flavors, then purchases of a subset; afterwards the
//! Contracts plus the live Transactions of each flavor fit its capacity.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "an integration scenario reads top to bottom as one story; its steps share one running cluster"
)]

mod common;

use std::collections::{BTreeMap, HashSet};

use common::*;
use fluidos_api::configuration::K8SliceConfiguration;
use fluidos_api::flavor::FlavorType;
use fluidos_api::ledger::{self, LedgerState, Resources};
use fluidos_api::quantity::Amount;
use fluidos_api::{Contract, Flavor};
use kube::Api;

const NS: &str = "rear-conc";
const FLAVORS: usize = 5;
const CLIENTS: usize = 10;
const PER_CLIENT: usize = 20;
/// Each flavor has 10 CPUs and every request asks for 1 (and 1Gi, 1 pod).
const CAPACITY: usize = 10;

fn cpu_of(c: &fluidos_api::Configuration) -> Amount {
    let k: K8SliceConfiguration = serde_json::from_value(c.data.clone()).unwrap();
    Amount::of(&k.cpu).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reservations_never_oversell() {
    let cp = control_plane().await;
    let client = cp.client();
    namespace(&client, NS).await;
    for i in 0..FLAVORS {
        let p = partition(("1", "1"), ("1Gi", "1Gi"), ("1", "1"));
        let k = k8slice("amd64", "10", "20Gi", "110", None, None, p);
        create_flavor(
            &client,
            NS,
            &format!("flavor-{i}"),
            spec(FlavorType::k8slice(&k), true),
        )
        .await;
    }
    let replicas = [
        serve(&client, config(&cp, NS)).await,
        serve(&client, config(&cp, NS)).await,
    ];
    let urls: Vec<String> = replicas
        .iter()
        .map(|r| r.url("/api/v2/reservations"))
        .collect();

    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for client_no in 0..CLIENTS {
        let url = urls[client_no % 2].clone();
        tasks.push(tokio::spawn(async move {
            let c = http();
            let mut out = Vec::new();
            for i in 0..PER_CLIENT {
                let flavor = format!("flavor-{}", (client_no + i) % FLAVORS);
                let buyer = format!("buyer-{client_no}-{i}");
                let (s, body) =
                    post(&c, &url, &k8s_reserve(&flavor, &buyer, "1", "1Gi", "1")).await;
                out.push((flavor, s, body));
            }
            out
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.extend(t.await.unwrap());
    }
    eprintln!(
        "{} reservations in {:.2?}",
        results.len(),
        started.elapsed()
    );
    assert_eq!(results.len(), CLIENTS * PER_CLIENT);

    let mut won: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (flavor, status, body) in &results {
        match status {
            200 => {
                let v: serde_json::Value = serde_json::from_str(body).unwrap();
                won.entry(flavor.clone())
                    .or_default()
                    .push(v["transactionID"].as_str().unwrap().to_owned());
            }
            409 => assert!(body.contains("not enough"), "{body}"),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    let all: HashSet<&String> = won.values().flatten().collect();
    assert_eq!(
        all.len(),
        won.values().map(Vec::len).sum::<usize>(),
        "transaction IDs are unique"
    );
    for i in 0..FLAVORS {
        let n = won.get(&format!("flavor-{i}")).map_or(0, Vec::len);
        // Demand (40 per flavor) exceeds supply: every CPU is held, none twice.
        assert_eq!(n, CAPACITY, "flavor-{i}: {n} holds");
    }

    // Purchase a subset: 3 per flavor, alternating replicas.
    let c = http();
    let mut sold = 0;
    for (f, txs) in &won {
        for (j, tx) in txs.iter().take(3).enumerate() {
            let url = replicas[j % 2].url(&format!("/api/v2/transactions/{tx}/purchase"));
            let (s, body) = post(&c, &url, &serde_json::json!({})).await;
            assert_eq!(s, 200, "{f} {tx}: {body}");
            sold += 1;
        }
    }
    assert_eq!(sold, 3 * FLAVORS);

    // Sum per flavor: Contracts + live Transactions, from the API server.
    let contracts = Api::<Contract>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(contracts.len(), 3 * FLAVORS);
    // Purchases consume their Transaction just after answering.
    wait_until(
        "sold Transactions to be consumed",
        std::time::Duration::from_secs(10),
        || async { transactions(&client, NS).await.len() == FLAVORS * (CAPACITY - 3) },
    )
    .await;
    let txs = transactions(&client, NS).await;
    let now = jiff_now();
    let mut per_flavor: BTreeMap<String, (Amount, usize, usize)> = BTreeMap::new();
    let mut contract_txs = HashSet::new();
    for ct in &contracts {
        assert!(
            contract_txs.insert(ct.spec.transaction_id.clone()),
            "one contract per transaction"
        );
        let e = per_flavor
            .entry(ct.spec.flavor.id().to_owned())
            .or_insert((Amount::ZERO, 0, 0));
        e.0 =
            e.0.saturating_add(cpu_of(ct.spec.configuration.as_ref().unwrap()));
        e.1 += 1;
    }
    for t in &txs {
        assert!(
            !contract_txs.contains(t.metadata.name.as_ref().unwrap()),
            "sold transactions are consumed"
        );
        let e = per_flavor
            .entry(t.spec.flavor_id.clone())
            .or_insert((Amount::ZERO, 0, 0));
        e.0 =
            e.0.saturating_add(cpu_of(t.spec.configuration.as_ref().unwrap()));
        e.2 += 1;
    }
    let ten = Amount::parse("10").unwrap();
    for i in 0..FLAVORS {
        let name = format!("flavor-{i}");
        let (cpu, n_contracts, n_txs) = per_flavor[&name];
        assert!(cpu <= ten, "{name}: {cpu} CPUs sold or held");
        assert_eq!((n_contracts, n_txs), (3, CAPACITY - 3), "{name}");
        // The ledger agrees with the objects.
        let f = Api::<Flavor>::namespaced(client.clone(), NS)
            .get(&name)
            .await
            .unwrap();
        let entries = f.status.unwrap().ledger.unwrap();
        let committed: Resources = ledger::committed(&entries, &now).unwrap();
        assert_eq!(committed.cpu, cpu, "{name}");
        assert_eq!(
            entries
                .iter()
                .filter(|e| e.state == LedgerState::Sold)
                .count(),
            3
        );
    }
    eprintln!("total {:.2?}", started.elapsed());
    let [a, b] = replicas;
    a.shutdown().await;
    b.shutdown().await;
    cp.stop().await;
}

fn jiff_now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
