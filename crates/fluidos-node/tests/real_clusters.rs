//! Two real clusters, each with one real node (`fluidos_testenv::RealNode`:
//! kubelet, containerd, runc, bridge CNI, kube-proxy) and fluidos-node
//! installed by `helm install` from the image built of the static binary, as
//! an operator installs them; nothing runs as a host process.
//!
//! A Service sale end to end, delivered without Liqo (the chart's default):
//! the consumer knows the provider only by the chart's `rearManager.peers`
//! (address and pinned key), a Solver there buys the provider's Service
//! flavor, the provider runs the blueprint's workload as a real container on
//! its node, and a pod on the consumer's cluster opens a connection to the
//! delivered endpoint with the delivered credentials and gets an answer, while
//! wrong credentials are refused.
//!
//! Needs what `tests/image.rs` needs (`FLUIDOS_STATIC_BINARY`, root,
//! `FLUIDOS_HELM_BIN_DIR`) and the packages of `tools/node-runtime/install.sh`;
//! without them it prints `SKIP: ...`, except in CI, where it fails
//! (`fluidos_testenv::skip`). Without the binary in CI (the first pass,
//! `cargo test --workspace`, before the static build) it prints
//! `DEFERRED: ...` and passes; `.ci/run` runs this file again after the
//! static build and fails if it did not run then.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// in tests a panic is the failure report

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fluidos_api::{Flavor, ServiceBlueprint, Solver};
use fluidos_testenv::real_cluster::samples;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::PostParams;

mod support;

use support::real_cluster::Prerequisites;
use support::{NS, real_cluster};

fn decoded(secret: Secret) -> BTreeMap<String, String> {
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect()
}

/// A client pod on the consumer's cluster connects to the delivered endpoint:
/// answered with the delivered credentials, refused with a wrong password.
async fn connect_as_buyer(
    consumer: &fluidos_testenv::ControlPlane,
    endpoint: &str,
    data: &BTreeMap<String, String>,
) {
    let fetch = |password: String| async move {
        samples::fetch_from_client_pod(consumer, endpoint, &data["username"], &password)
            .await
            .unwrap()
    };
    let answer = fetch(data["password"].clone()).await;
    assert!(
        answer.status.success(),
        "{}",
        String::from_utf8_lossy(&answer.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&answer.stdout),
        format!("{} is served\n", data["database"])
    );
    let refused = fetch("not-the-password".to_owned()).await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[tokio::test]
async fn a_service_bought_between_two_real_clusters_answers_its_buyer() {
    let Some(Prerequisites {
        bin,
        layout,
        helm_bin,
    }) = real_cluster::prerequisites()
    else {
        return;
    };
    let started = Instant::now();
    let (provider, consumer) = tokio::join!(
        real_cluster::start(&bin, &layout, Vec::new()),
        real_cluster::start(&bin, &layout, Vec::new()),
    );
    let clusters_up = started.elapsed();
    let provider_ip = provider.real_node().unwrap().node_ip().to_string();

    let no_liqo = ["peering.enabled=false".to_owned()];
    real_cluster::install_pair(&helm_bin, &provider, &consumer, &no_liqo).await;
    let installed = started.elapsed();

    Api::<ServiceBlueprint>::namespaced(provider.client(), NS)
        .create(&PostParams::default(), &samples::kv_blueprint(NS).unwrap())
        .await
        .unwrap();
    real_cluster::first_matching(
        Api::<Flavor>::namespaced(provider.client(), NS),
        None,
        "Service flavor of the blueprint",
        Duration::from_secs(60),
        |f: &Flavor| f.spec.flavor_type.type_identifier == "Service",
    )
    .await;

    let bought = Instant::now();
    Api::<Solver>::namespaced(consumer.client(), NS)
        .create(&PostParams::default(), &samples::kv_solver(NS).unwrap())
        .await
        .unwrap();
    let secret = real_cluster::first_matching(
        Api::<Secret>::namespaced(consumer.client(), NS),
        Some("nodecore.fluidos.eu/flavor-service-credentials=true"),
        "credentials Secret on the consumer",
        Duration::from_secs(180),
        |_| true,
    )
    .await;
    let delivered = bought.elapsed();
    let data = decoded(secret);
    let endpoint = data["endpoints"].split(',').next().unwrap().to_owned();
    assert!(
        endpoint.starts_with(&format!("{provider_ip}:")),
        "the endpoint names the provider's node: {endpoint}"
    );

    // The blueprint's workload is a real container on the provider's node.
    let provider_pods = Api::<Pod>::all(provider.client())
        .list(&kube::api::ListParams::default().labels("app=kv"))
        .await
        .unwrap();
    assert_eq!(provider_pods.items.len(), 1);
    let kv = &provider_pods.items[0];
    assert_eq!(
        kv.spec.as_ref().unwrap().node_name.as_deref(),
        Some(provider.real_node().unwrap().name())
    );

    connect_as_buyer(&consumer, &endpoint, &data).await;
    println!(
        "real clusters: two clusters with a real node each up in {clusters_up:.1?}, both charts installed and rolled out at {installed:.1?}; Solver -> credentials on the consumer in {delivered:.1?}; a consumer pod reached {endpoint} with them"
    );
}
