//! A real cluster (`fluidos_testenv::RealNode`) with the fluidos-node
//! image imported, and the chart installed on it as an operator would.

use std::path::Path;
use std::time::Duration;

use fluidos_testenv::{ControlPlane, ControlPlaneOptions, ImageSpec};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::NS;
use super::helm;
use super::image::{ImageLayout, REAL_IMAGE_REPOSITORY, REAL_IMAGE_TAG, node_image};

/// `--kubeconfig=<admin>` of `cp`, for helm.
pub fn kubeconfig_flag(cp: &ControlPlane) -> String {
    format!("--kubeconfig={}", cp.kubeconfig_path().display())
}

/// `helm install` of the chart as an operator would run it on this real
/// cluster: the local image, never pulled; services only (no Liqo here
/// yet); the node's own address as its identity and the API server URL
/// peers can reach; `extra_sets` after those. Then waits (watching) until
/// every component has rolled out.
pub async fn install_chart(helm_bin: &Path, cp: &ControlPlane, extra_sets: &[String]) {
    let node = cp.real_node().expect("a real-node cluster");
    let chart = helm::chart_dir();
    let kubeconfig = kubeconfig_flag(cp);
    let mut sets = vec![
        format!("image.repository={REAL_IMAGE_REPOSITORY}"),
        format!("tag={REAL_IMAGE_TAG}"),
        "pullPolicy=Never".to_owned(),
        "peering.enabled=false".to_owned(),
        format!("common.configMaps.nodeIdentity.ip={}", node.node_ip()),
        format!("apiServer.address={}", cp.server_url()),
    ];
    sets.extend_from_slice(extra_sets);
    let mut install = vec![
        "install",
        "fluidos",
        chart.to_str().unwrap(),
        "--namespace",
        NS,
        "--create-namespace",
        &kubeconfig,
    ];
    for set in &sets {
        install.extend(["--set", set.as_str()]);
    }
    helm::helm(helm_bin, &install);
    let deployments: Api<Deployment> = Api::namespaced(cp.client(), NS);
    let names: Vec<String> = deployments
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|d| d.metadata.name)
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    for name in &names {
        wait_available(cp, &deployments, name).await;
    }
}

/// Starts a cluster with one real node and the fluidos-node image built
/// from `bin` imported, plus `images`.
pub async fn start(bin: &Path, layout: &ImageLayout, images: Vec<ImageSpec>) -> ControlPlane {
    let mut all = vec![node_image(bin, layout)];
    all.extend(images);
    ControlPlane::start(ControlPlaneOptions {
        real_node: true,
        images: all,
        ..Default::default()
    })
    .await
    .unwrap()
}

/// Labels the real node as one whose resources are sold (the chart's
/// default `nodeResourceLabel`).
pub async fn sell_node(cp: &ControlPlane) {
    let node = cp.real_node().expect("a real-node cluster");
    Api::<Node>::all(cp.client())
        .patch(
            node.name(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {"labels": {"node-role.fluidos.eu/resources": "true"}}
            })),
        )
        .await
        .unwrap();
}

/// Waits (watching) until Deployment `name` has rolled out; else fails with
/// every pod's state and logs and the node's.
pub async fn wait_available(
    cp: &fluidos_testenv::ControlPlane,
    deployments: &Api<Deployment>,
    name: &str,
) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::wait::{await_condition, conditions};
    let available = await_condition(
        deployments.clone(),
        name,
        conditions::is_deployment_completed(),
    );
    if tokio::time::timeout(Duration::from_secs(180), available)
        .await
        .is_ok()
    {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(cp.client(), NS);
    let mut report = String::new();
    for pod in pods.list(&Default::default()).await.unwrap().items {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let logs = pods
            .logs(&pod_name, &Default::default())
            .await
            .unwrap_or_else(|e| e.to_string());
        let statuses = pod.status.map(|s| s.container_statuses);
        report.push_str(&format!("--- {pod_name}: {statuses:?}\n{logs}\n"));
    }
    let node = cp.real_node().map(fluidos_testenv::RealNode::log_tail);
    panic!("Deployment {name} not available:\n{report}\n{node:?}");
}

/// Waits (watching, never polling) for the first object of `api` that
/// matches `labels` and `accept`, for at most `timeout`; fails naming `what`.
pub async fn first_matching<K>(
    api: Api<K>,
    labels: Option<&str>,
    what: &str,
    timeout: Duration,
    accept: impl Fn(&K) -> bool,
) -> K
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let mut config = kube::runtime::watcher::Config::default();
    if let Some(labels) = labels {
        config = config.labels(labels);
    }
    let applied =
        kube::runtime::WatchStreamExt::applied_objects(kube::runtime::watcher(api, config));
    let matching = futures::StreamExt::filter_map(applied, |object| {
        let object = object.ok().filter(|o| accept(o));
        async move { object }
    });
    futures::pin_mut!(matching);
    tokio::time::timeout(timeout, futures::StreamExt::next(&mut matching))
        .await
        .unwrap_or_else(|_| panic!("no {what} after {timeout:?}"))
        .unwrap()
}

/// Waits (watching) for the first Flavor the LRM publishes.
pub async fn first_flavor(cp: &ControlPlane) -> fluidos_api::Flavor {
    let flavors: Api<fluidos_api::Flavor> = Api::namespaced(cp.client(), NS);
    first_matching(
        flavors,
        None,
        "Flavor of the real node",
        Duration::from_secs(60),
        |_| true,
    )
    .await
}
