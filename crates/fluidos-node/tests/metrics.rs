//! `/metrics` of a running provider node (with its network manager) during a sale: one real control
//! plane, one `fluidos-node` process (local resource manager + REAR gateway),
//! a RESERVE and a PURCHASE over loopback REAR, and the exposition read the
//! way Prometheus reads it: over HTTP, through a real OpenMetrics parser.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use fluidos_api::rear::{PurchaseRequest, ReserveRequest};
use fluidos_rear_client::{ClientConfig, NodeKey, ProviderAddress, RearClient};
use fluidos_testenv::fixtures;
use openmetrics_parser::{
    MetricsExposition, OpenMetricsType, OpenMetricsValue, openmetrics::parse_openmetrics,
};
use serde_json::json;
use support::{NodeProcess, cluster, free_port, prepare};

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const RESERVE_ROUTE: &str = "/api/v2/reservations";
const PURCHASE_ROUTE: &str = "/api/v2/transactions/{transactionID}/purchase";
const LIMIT: Duration = Duration::from_secs(60);

type Exposition = MetricsExposition<OpenMetricsType, OpenMetricsValue>;

/// GETs `/metrics` at `addr`: the content type and the parsed exposition.
async fn scrape(http: &reqwest::Client, addr: SocketAddr) -> Option<(String, Exposition)> {
    let response = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .ok()?;
    assert!(response.status().is_success(), "{}", response.status());
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)?
        .to_str()
        .unwrap()
        .to_owned();
    let text = response.text().await.unwrap();
    let parsed = parse_openmetrics(&text)
        .unwrap_or_else(|e| panic!("/metrics is not valid OpenMetrics: {e:?}\n{text}"));
    Some((content_type, parsed))
}

/// The samples of `family` whose labels satisfy `wanted`, with their values.
fn samples<'a>(
    exp: &'a Exposition,
    family: &str,
    wanted: impl Fn(&dyn Fn(&str) -> Option<String>) -> bool + 'a,
) -> Vec<&'a OpenMetricsValue> {
    let Some(f) = exp.families.get(family) else {
        return Vec::new();
    };
    f.iter_samples()
        .filter(|s| {
            let labels = s.get_labelset().unwrap();
            wanted(&|name| labels.get_label_value(name).map(str::to_owned))
        })
        .map(|s| &s.value)
        .collect()
}

/// Sum of the counter `family` over the samples `wanted` accepts.
fn counter_sum(
    exp: &Exposition,
    family: &str,
    wanted: impl Fn(&dyn Fn(&str) -> Option<String>) -> bool,
) -> f64 {
    samples(exp, family, wanted)
        .into_iter()
        .map(|v| match v {
            OpenMetricsValue::Counter(c) => c.value.as_f64(),
            other => panic!("{family} is not a counter: {other:?}"),
        })
        .sum()
}

/// 2xx answers of `route` (a route template) to POST.
fn successes(exp: &Exposition, route: &str) -> f64 {
    counter_sum(exp, "fluidos_rear_requests", |l| {
        l("route").as_deref() == Some(route)
            && l("method").as_deref() == Some("POST")
            && l("status").is_some_and(|s| s.starts_with('2'))
    })
}

/// The gauge `family` (unlabelled), if exposed.
fn gauge(exp: &Exposition, family: &str) -> Option<f64> {
    match samples(exp, family, |_| true).first()? {
        OpenMetricsValue::Gauge(n) => Some(n.as_f64()),
        other => panic!("{family} is not a gauge: {other:?}"),
    }
}

/// Asserts `family` is a histogram with at least one observation in every
/// sample `wanted` accepts, and cumulative buckets ending at +Inf.
fn assert_histogram_observed(
    exp: &Exposition,
    family: &str,
    wanted: impl Fn(&dyn Fn(&str) -> Option<String>) -> bool,
) {
    let found = samples(exp, family, wanted);
    assert!(!found.is_empty(), "{family}: no sample");
    for v in found {
        let OpenMetricsValue::Histogram(h) = v else {
            panic!("{family} is not a histogram: {v:?}");
        };
        assert!(h.buckets.len() > 1, "{family}: buckets {:?}", h.buckets);
        let last = h.buckets.last().unwrap();
        assert!(
            last.upper_bound.is_infinite(),
            "{family}: last bucket {last:?}"
        );
        assert!(last.count.as_f64() >= 1.0, "{family}: nothing observed");
        assert!(
            h.buckets
                .windows(2)
                .all(|w| w[0].count.as_f64() <= w[1].count.as_f64()),
            "{family}: buckets not cumulative: {:?}",
            h.buckets
        );
        assert_eq!(h.count.map(|c| c as f64), Some(last.count.as_f64()));
    }
}

#[tokio::test]
async fn metrics_move_during_a_sale() {
    let cp = cluster().await;
    let rear_port = free_port();
    let provider_key = prepare(&cp, "provider01", rear_port).await;
    fixtures::worker_node(&cp, "worker-1", "8", "16Gi")
        .await
        .unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    // With the network manager advertising on a group port of its own.
    let group = format!("239.11.11.1:{}", free_port());
    let node = NodeProcess::spawn(
        &cp,
        rear_port,
        "local-resource-manager,rear-gateway,network-manager",
        &metrics.to_string(),
        &[
            "--liqo-cluster-id",
            "liqo-provider",
            "--cni-interface",
            "127.0.0.1",
            "--multicast-address",
            &group,
            "--multicast-interval-ms",
            "200",
        ],
    );
    let rear_address = format!("127.0.0.1:{rear_port}");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();

    // Before the sale: served as OpenMetrics, no REAR call counted yet.
    let (content_type, before) = support::eventually("/metrics to answer", LIMIT, &[&node], || {
        scrape(&http, metrics)
    })
    .await;
    assert_eq!(content_type, OPENMETRICS);
    let (reserves_before, purchases_before) = (
        successes(&before, RESERVE_ROUTE),
        successes(&before, PURCHASE_ROUTE),
    );

    // The sale, as a consumer node makes it.
    // Over TLS, pinned to the provider's key, with a buyer key of its own.
    let buyer_key = std::sync::Arc::new(NodeKey::generate("consumer01").unwrap());
    let rear = RearClient::with_key(ClientConfig::default(), buyer_key).unwrap();
    let rear_address = ProviderAddress::pinned(rear_address.clone(), provider_key.parse().unwrap());
    let flavor = support::eventually("the provider's flavor on REAR", LIMIT, &[&node], || async {
        rear.list_flavors(&rear_address, None)
            .await
            .ok()?
            .flavors
            .into_iter()
            .next()
    })
    .await;
    let buyer = json!({"ID": "consumer01", "IP": "127.0.0.1:30001", "domain": "fluidos.eu",
        "additionalInformation": {"liqoID": "liqo-consumer"}});
    let reserve: ReserveRequest = serde_json::from_value(json!({
        "flavorID": flavor.flavor_id,
        "buyerID": buyer,
        "configuration": {"type": "k8slice", "data": {"cpu": "1", "memory": "1Gi", "pods": "1"}},
    }))
    .unwrap();
    let tx = rear.reserve(&rear_address, &reserve).await.unwrap();
    let purchase: PurchaseRequest = serde_json::from_value(json!({})).unwrap();
    let contract = rear
        .purchase(&rear_address, &tx.transaction_id, &purchase)
        .await
        .unwrap();
    assert_eq!(contract.transaction_id, tx.transaction_id);

    let (content_type, after) = scrape(&http, metrics).await.unwrap();
    assert_eq!(content_type, OPENMETRICS);
    // Per route template (never the raw path with the transaction id).
    assert_eq!(successes(&after, RESERVE_ROUTE), reserves_before + 1.0);
    assert_eq!(successes(&after, PURCHASE_ROUTE), purchases_before + 1.0);
    let raw_paths = counter_sum(&after, "fluidos_rear_requests", |l| {
        l("route").is_some_and(|r| r.contains(&tx.transaction_id))
    });
    assert_eq!(raw_paths, 0.0, "a raw path became a label");
    assert_histogram_observed(&after, "fluidos_rear_request_duration_seconds", |l| {
        l("route").as_deref() == Some(PURCHASE_ROUTE)
    });

    // The network manager's counters are on the same /metrics.
    let sent = counter_sum(&after, "fluidos_multicast_advertisements_sent", |_| true);
    assert!(sent > 0.0, "multicast advertisements sent: {sent}");

    // The local resource manager's controllers reconciled the worker node.
    let reconciles = counter_sum(&after, "fluidos_controller_reconciles", |l| {
        l("controller").as_deref() == Some("node")
    });
    assert!(reconciles > 0.0, "node controller reconciles: {reconciles}");
    assert_histogram_observed(
        &after,
        "fluidos_controller_reconcile_duration_seconds",
        |l| l("controller").as_deref() == Some("node"),
    );

    // The sweeper's market gauges catch up with the sale.
    support::eventually("the sale on the market gauges", LIMIT, &[&node], || async {
        let (_, m) = scrape(&http, metrics).await?;
        (gauge(&m, "fluidos_ledger_sales")? >= 1.0).then_some(())
    })
    .await;
}
