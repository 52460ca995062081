//! Installing Liqo and fluidos-node on real clusters by their charts, as
//! their docs give it, and waiting (watching) until each rolled out.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Api;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::wait::{await_condition, conditions};

use super::helm::{Helm, chart_dir};
use super::node_image::{NodeImage, REAL_IMAGE_REPOSITORY, REAL_IMAGE_TAG};
use crate::{ControlPlane, ControlPlaneOptions, Error, ImageSpec, LiqoBinaries, RealNode};

/// The namespace the fluidos-node chart is installed in.
pub const NS: &str = "fluidos";

/// How long a component may take to roll out.
const ROLL_OUT: Duration = Duration::from_secs(180);

fn real_node(cp: &ControlPlane) -> Result<&RealNode, Error> {
    cp.real_node()
        .ok_or_else(|| Error::RealNode("this cluster has no real node".into()))
}

fn kubeconfig_flag(cp: &ControlPlane) -> String {
    format!("--kubeconfig={}", cp.kubeconfig_path().display())
}

/// Starts a cluster with one real node, the fluidos-node image and `images`
/// imported into its containerd.
pub async fn start(image: &NodeImage, images: Vec<ImageSpec>) -> Result<ControlPlane, Error> {
    let mut all = vec![image.spec()?];
    all.extend(images);
    ControlPlane::start(ControlPlaneOptions {
        real_node: true,
        images: all,
        ..Default::default()
    })
    .await
}

/// Labels the real node as one whose resources are sold (the chart's
/// default `nodeResourceLabel`).
pub async fn sell_node(cp: &ControlPlane) -> Result<(), Error> {
    Api::<Node>::all(cp.client())
        .patch(
            real_node(cp)?.name(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {"labels": {"node-role.fluidos.eu/resources": "true"}}
            })),
        )
        .await?;
    Ok(())
}

/// Waits (watching) until Deployment `name` in `ns` has rolled out; else
/// [`Error::Timeout`] with every pod's state and log and the node's.
pub async fn wait_rolled_out(cp: &ControlPlane, ns: &str, name: &str) -> Result<(), Error> {
    let deployments: Api<Deployment> = Api::namespaced(cp.client(), ns);
    let rolled_out = await_condition(deployments, name, conditions::is_deployment_completed());
    match tokio::time::timeout(ROLL_OUT, rolled_out).await {
        Ok(Ok(_)) => return Ok(()),
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => {}
    }
    let pods: Api<Pod> = Api::namespaced(cp.client(), ns);
    let mut report = String::new();
    for pod in pods.list(&ListParams::default()).await?.items {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let logs = pods
            .logs(&pod_name, &Default::default())
            .await
            .unwrap_or_else(|e| e.to_string());
        let statuses = pod.status.map(|s| s.container_statuses);
        report.push_str(&format!("--- {pod_name}: {statuses:?}\n{logs}\n"));
    }
    Err(Error::Timeout {
        what: format!("Deployment {ns}/{name}"),
        waited: ROLL_OUT,
        last_error: "not rolled out".into(),
        log_tail: format!(
            "{report}\n{}",
            cp.real_node().map(RealNode::log_tail).unwrap_or_default()
        ),
    })
}

async fn wait_all_rolled_out(cp: &ControlPlane, ns: &str) -> Result<usize, Error> {
    let deployments: Api<Deployment> = Api::namespaced(cp.client(), ns);
    let names: Vec<String> = deployments
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|d| d.metadata.name)
        .collect();
    for name in &names {
        wait_rolled_out(cp, ns, name).await?;
    }
    Ok(names.len())
}

/// `helm install` of fluidos-node's chart on this real cluster as an
/// operator would run it: the local image, never pulled; the node's own
/// address as its identity and the API server URL peers can reach;
/// `extra_sets` after those. Then waits until every component rolled out;
/// returns how many Deployments the release has.
pub async fn install_fluidos(
    helm: &Helm,
    cp: &ControlPlane,
    extra_sets: &[String],
) -> Result<usize, Error> {
    let node = real_node(cp)?;
    let chart = chart_dir();
    let kubeconfig = kubeconfig_flag(cp);
    let mut sets = vec![
        format!("image.repository={REAL_IMAGE_REPOSITORY}"),
        format!("tag={REAL_IMAGE_TAG}"),
        "pullPolicy=Never".to_owned(),
        format!("common.configMaps.nodeIdentity.ip={}", node.node_ip()),
        format!("apiServer.address={}", cp.server_url()),
    ];
    sets.extend_from_slice(extra_sets);
    let chart = chart.to_string_lossy();
    let mut install = vec![
        "install",
        "fluidos",
        &chart,
        "--namespace",
        NS,
        "--create-namespace",
        &kubeconfig,
    ];
    for set in &sets {
        install.extend(["--set", set.as_str()]);
    }
    helm.run_off_runtime(&install).await?;
    wait_all_rolled_out(cp, NS).await
}

/// Waits (watching) for the REAR fingerprint the provider's node publishes
/// (what its NOTES tell its operator to give peers).
pub async fn provider_fingerprint(provider: &ControlPlane) -> Result<String, Error> {
    const NAME: &str = "fluidos-node-rear-fingerprint";
    let waited = Duration::from_secs(60);
    let has_fingerprint = |cm: Option<&ConfigMap>| {
        cm.and_then(|c| c.data.as_ref())
            .is_some_and(|d| d.contains_key("fingerprint"))
    };
    let cm = tokio::time::timeout(
        waited,
        await_condition(
            Api::namespaced(provider.client(), NS),
            NAME,
            has_fingerprint,
        ),
    )
    .await
    .map_err(|_| Error::Timeout {
        what: format!("ConfigMap {NS}/{NAME} with the provider's REAR fingerprint"),
        waited,
        last_error: "not published".into(),
        log_tail: String::new(),
    })??;
    cm.and_then(|cm| cm.data)
        .and_then(|mut d| d.remove("fingerprint"))
        .ok_or_else(|| Error::RealNode(format!("{NAME} lost its fingerprint")))
}

/// The provider's chart (its node sold), then the consumer's, pinned to the
/// provider's address and key as the provider's NOTES tell its operator;
/// `extra_sets` on both. Returns the provider's REAR fingerprint.
pub async fn install_pair(
    helm: &Helm,
    provider: &ControlPlane,
    consumer: &ControlPlane,
    extra_sets: &[String],
) -> Result<String, Error> {
    let provider_ip = real_node(provider)?.node_ip();
    sell_node(provider).await?;
    install_fluidos(helm, provider, extra_sets).await?;
    let fingerprint = provider_fingerprint(provider).await?;
    let peers = format!("rearManager.peers={{{provider_ip}:30000#{fingerprint}}}");
    install_fluidos(helm, consumer, &[extra_sets, &[peers]].concat()).await?;
    Ok(fingerprint)
}

/// `helm install` of Liqo's own chart on this real cluster, as its docs
/// give it with networking disabled (no WireGuard or Geneve in this kernel),
/// and the metric agent, proxy and telemetry off (each needs an image of
/// its own); the images are the local ones (`LiqoBinaries::chart_images`,
/// imported at the cluster's start), never pulled. Waits until it rolled out
/// and its webhooks answer.
pub async fn install_liqo(
    helm: &Helm,
    cp: &ControlPlane,
    liqo: &LiqoBinaries,
    cluster_id: &str,
) -> Result<(), Error> {
    let chart = liqo.chart_dir();
    let chart = chart.to_string_lossy();
    let kubeconfig = kubeconfig_flag(cp);
    let sets = [
        format!("tag={}", crate::liqo_version()?),
        "pullPolicy=Never".to_owned(),
        "networking.enabled=false".to_owned(),
        "metricAgent.enabled=false".to_owned(),
        "proxy.enabled=false".to_owned(),
        "telemetry.enabled=false".to_owned(),
        format!("discovery.config.clusterID={cluster_id}"),
        // What `liqoctl install` finds out by itself.
        format!("ipam.podCIDR={}", real_node(cp)?.pod_cidr()),
        format!("ipam.serviceCIDR={}", crate::SERVICE_CLUSTER_IP_RANGE),
        format!("apiServer.address={}", cp.server_url()),
    ];
    let mut install = vec![
        "install",
        "liqo",
        &chart,
        "--namespace",
        "liqo",
        "--create-namespace",
        &kubeconfig,
    ];
    for set in &sets {
        install.extend(["--set", set.as_str()]);
    }
    helm.run_off_runtime(&install).await?;
    wait_all_rolled_out(cp, "liqo").await?;
    liqo_webhook_serving(cp).await
}

/// Waits until kube-apiserver can call Liqo's admission webhooks. The
/// webhook makes its serving certificate at start and writes its CA into
/// the webhook configurations, so its pod is Ready a moment before a call
/// verifies; a dry-run create of a ResourceSlice (which its validating
/// webhook sees) is the only sign, tried a bounded number of times. The
/// webhook's own verdict on the object, either way, means it answered.
async fn liqo_webhook_serving(cp: &ControlPlane) -> Result<(), Error> {
    let gvk = GroupVersionKind::gvk("authentication.liqo.io", "v1beta1", "ResourceSlice");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "resourceslices");
    let slices: Api<DynamicObject> = Api::namespaced_with(cp.client(), "default", &resource);
    let mut probe = DynamicObject::new("fluidos-testenv-webhook-probe", &resource);
    probe.data = serde_json::json!({"spec": {"class": "default"}});
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let mut last = String::new();
    for _ in 0..120 {
        match slices.create(&dry_run, &probe).await {
            Ok(_) => return Ok(()),
            // The webhook's verdict: an API answer that is not
            // kube-apiserver failing to call it.
            Err(kube::Error::Api(e)) if !e.message.contains("failed calling webhook") => {
                return Ok(());
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(Error::Timeout {
        what: "Liqo's webhooks answering kube-apiserver".into(),
        waited: started.elapsed(),
        last_error: last,
        log_tail: String::new(),
    })
}
