//! A provider configured with the Go Helm chart's flavor defaults
//! (`cpuStep: 1000m`, `memoryStep: 100Mi`, minimums `0`) sells the
//! partition the upstream sample Reservation asks for (`1000m`, `1Gi`,
//! `110` pods), although `1Gi` is no multiple of `100Mi`: steps are
//! advertised, not enforced, as by the Go node. Below a minimum is still a
//! 400 naming the resource.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use fluidos_api::flavor::FlavorType;

#[tokio::test]
async fn the_upstream_sample_partition_is_sold_under_the_go_charts_steps() {
    let Some(reference) = fluidos_testenv::shared_reference_dir() else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference is absent (the sample Reservation comes from there)",
        );
        return;
    };
    let sample: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(reference.join("fluidos-samples/reservation.yaml")).unwrap(),
    )
    .unwrap();
    let data = &sample["spec"]["configuration"]["data"];
    let cp = control_plane().await;
    let client = cp.client();
    let ns = "go-chart";
    namespace(&client, ns).await;
    let go_chart = partition(("0", "1000m"), ("0", "100Mi"), ("0", "0"));
    let k = k8slice("amd64", "4", "8Gi", "110", None, None, go_chart);
    create_flavor(&client, ns, "f-go", spec(FlavorType::k8slice(&k), true)).await;
    let served = serve(&client, config(&cp, ns)).await;
    let c = http();

    let reserve = k8s_reserve(
        "f-go",
        "buyer01",
        data["cpu"].as_str().unwrap(),
        data["memory"].as_str().unwrap(),
        data["pods"].as_str().unwrap(),
    );
    let (s, body) = post(&c, &served.url("/api/v2/reservations"), &reserve).await;
    assert_eq!(s, 200, "the sample partition is reserved: {body}");
    let tx: serde_json::Value = serde_json::from_str(&body).unwrap();
    let tx_id = tx["transactionID"].as_str().unwrap();
    let (s, body) = post(
        &c,
        &served.url(&format!("/api/v2/transactions/{tx_id}/purchase")),
        &serde_json::json!({}),
    )
    .await;
    assert_eq!(s, 200, "and bought: {body}");

    // A minimum is still enforced, naming the resource.
    let strict = partition(("2", "0"), ("0", "0"), ("0", "0"));
    let k = k8slice("amd64", "4", "8Gi", "110", None, None, strict);
    create_flavor(&client, ns, "f-min", spec(FlavorType::k8slice(&k), true)).await;
    let (s, body) = post(
        &c,
        &served.url("/api/v2/reservations"),
        &k8s_reserve("f-min", "buyer02", "1", "1Gi", "1"),
    )
    .await;
    assert_eq!(s, 400, "{body}");
    assert!(body.contains("configuration.data.cpu"), "{body}");
    served.shutdown().await;
    cp.stop().await;
}
