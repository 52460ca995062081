//! The real stage: two clusters on this machine, each with a real node (a
//! kubelet with containerd and runc, the bridge CNI and kube-proxy), Liqo
//! installed by its own chart (networking off: this kernel has neither
//! WireGuard nor Geneve) and fluidos-node by its chart from the image built
//! of the static binary. The consumer buys a K8Slice with peering, as the
//! upstream `solver.yaml` asks, and a Service; a pod offloaded through the
//! virtual node runs on the provider's kubelet and answers, and a pod on
//! the consumer reaches the delivered service with the delivered
//! credentials.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fluidos_api::{Contract, Flavor, ServiceBlueprint, Solver};
use fluidos_testenv::ControlPlane;
use fluidos_testenv::real_cluster::{self, NS, NodeImage, samples};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ListParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::prepare;

fn step(t0: Instant, what: &str) {
    println!("[{:6.1}s] {what}", t0.elapsed().as_secs_f64());
}

/// Runs the real stage; with `keep`, leaves everything up until Ctrl-C.
pub async fn run(keep: bool) -> anyhow::Result<()> {
    println!("building what the real clusters need:");
    let built = prepare::all().await?;
    let image = NodeImage::load(&built.node)?;
    if !image.is_the_containerfiles() {
        println!(
            "  NOTE: {} is the glibc fallback, not deploy/Containerfile's musl binary",
            built.node.display()
        );
    }
    let t0 = Instant::now();
    let (provider, consumer) = tokio::join!(
        real_cluster::start(&image, built.liqo.chart_images()?),
        real_cluster::start(&image, built.liqo.chart_images()?),
    );
    let (provider, consumer) = (
        provider.context("starting the provider cluster")?,
        consumer.context("starting the consumer cluster")?,
    );
    for (side, cp) in [("provider", &provider), ("consumer", &consumer)] {
        let node = cp.real_node().context("a real node")?;
        println!(
            "  {side}: {} with node {} ({}, pods {})",
            cp.server_url(),
            node.name(),
            node.node_ip(),
            node.pod_cidr()
        );
    }
    step(t0, "two clusters up, each with a real node Ready");
    let (p, c) = tokio::join!(
        real_cluster::install_liqo(&built.helm, &provider, &built.liqo, "demo-provider"),
        real_cluster::install_liqo(&built.helm, &consumer, &built.liqo, "demo-consumer"),
    );
    p.context("installing Liqo on the provider")?;
    c.context("installing Liqo on the consumer")?;
    step(
        t0,
        "Liqo installed by its chart on both (helm install liqo)",
    );
    let fingerprint = real_cluster::install_pair(&built.helm, &provider, &consumer, &[]).await?;
    step(
        t0,
        &format!(
            "fluidos-node installed by its chart on both; the consumer knows the provider by rearManager.peers, key {fingerprint}"
        ),
    );
    let outcome = buy_and_use(&provider, &consumer, t0).await;
    if keep {
        if let Err(e) = &outcome {
            eprintln!("the demo stopped: {e:#}");
        }
        crate::keep::until_interrupted(&[("provider", &provider), ("consumer", &consumer)]).await;
    }
    println!("stopping both clusters ...");
    provider.stop().await;
    consumer.stop().await;
    outcome
}

async fn buy_and_use(
    provider: &ControlPlane,
    consumer: &ControlPlane,
    t0: Instant,
) -> anyhow::Result<()> {
    Api::<ServiceBlueprint>::namespaced(provider.client(), NS)
        .create(&PostParams::default(), &samples::kv_blueprint(NS)?)
        .await?;
    real_cluster::first_matching(
        Api::<Flavor>::namespaced(provider.client(), NS),
        None,
        "the blueprint's Service flavor",
        Duration::from_secs(60),
        |f: &Flavor| f.spec.flavor_type.type_identifier == "Service",
    )
    .await?;
    step(
        t0,
        "the provider sells its node's K8Slice and the kv Service",
    );

    let solvers: Api<Solver> = Api::namespaced(consumer.client(), NS);
    let wanted = [
        samples::k8slice_solver(NS, "solver-sample")?,
        samples::kv_solver(NS)?,
    ];
    let bought = Instant::now();
    for s in &wanted {
        solvers.create(&PostParams::default(), s).await?;
    }
    step(
        t0,
        "created Solvers solver-sample (K8Slice, establishPeering) and solver-kv (Service)",
    );
    let names: Vec<String> = wanted.iter().map(ResourceExt::name_any).collect();
    crate::progress::follow_solvers(solvers, &names, bought, Duration::from_secs(180)).await?;
    for c in Api::<Contract>::namespaced(consumer.client(), NS)
        .list(&ListParams::default())
        .await?
    {
        println!(
            "  Contract {} — flavor {} bought from {}",
            c.name_any(),
            c.spec.flavor.id(),
            c.spec.seller.node_id
        );
    }
    let virtual_node = real_cluster::ready_virtual_node(consumer, Duration::from_secs(180)).await?;
    let capacity = virtual_node
        .status
        .as_ref()
        .and_then(|s| s.capacity.clone())
        .unwrap_or_default();
    let show = |k: &str| capacity.get(k).map(|q| q.0.clone()).unwrap_or_default();
    step(
        t0,
        &format!(
            "virtual node {} Ready on the consumer: cpu {}, memory {}, pods {} (the contracted slice)",
            virtual_node.name_any(),
            show("cpu"),
            show("memory"),
            show("pods")
        ),
    );
    offload_a_pod(provider, consumer, t0).await?;
    use_the_service(provider, consumer, t0).await?;
    println!(
        "the whole mission in {:.1}s after the Solvers: a K8Slice bought, peered, and running a pod on the provider; a Service bought and answering its buyer",
        bought.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Offloads namespace `demo` and runs a pod there: it runs on the
/// provider's kubelet and answers HTTP.
async fn offload_a_pod(
    provider: &ControlPlane,
    consumer: &ControlPlane,
    t0: Instant,
) -> anyhow::Result<()> {
    let remote_ns = real_cluster::offload_namespace(consumer, "demo").await?;
    step(
        t0,
        &format!(
            "namespace demo offloaded (liqo.io NamespaceOffloading); on the provider it is {remote_ns}"
        ),
    );
    Api::<Pod>::namespaced(consumer.client(), "demo")
        .create(&PostParams::default(), &samples::offloaded_pod("demo")?)
        .await?;
    let remote = tokio::time::timeout(
        Duration::from_secs(120),
        await_condition(
            Api::<Pod>::namespaced(provider.client(), &remote_ns),
            "web",
            real_cluster::running,
        ),
    )
    .await
    .context("the offloaded pod did not run on the provider within 120 s")??
    .context("the offloaded pod is gone")?;
    let node = remote
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .context("the provider's pod has no node")?;
    let provider_node = provider.real_node().map(|n| n.name().to_owned());
    if provider_node.as_deref() != Some(node.as_str()) {
        bail!("the offloaded pod runs on {node}, not on the provider's real node");
    }
    let ip = remote
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("the provider's pod has no IP")?;
    step(
        t0,
        &format!(
            "pod demo/web Running on the provider's node {node} (pod {remote_ns}/web, IP {ip})"
        ),
    );
    let page = http_get(&format!("{ip}:8080"), "/").await?;
    step(
        t0,
        &format!("GET http://{ip}:8080/ answered: {}", page.trim()),
    );
    Ok(())
}

/// Reads the Service's credentials on the consumer and connects to the
/// endpoint from a pod there.
async fn use_the_service(
    provider: &ControlPlane,
    consumer: &ControlPlane,
    t0: Instant,
) -> anyhow::Result<()> {
    let secret = real_cluster::first_matching(
        Api::<Secret>::namespaced(consumer.client(), NS),
        Some("nodecore.fluidos.eu/flavor-service-credentials=true"),
        "the Service's credentials on the consumer",
        Duration::from_secs(120),
        |_| true,
    )
    .await?;
    let data: BTreeMap<String, String> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    let field = |k: &str| {
        data.get(k)
            .cloned()
            .with_context(|| format!("the credentials have no {k}"))
    };
    let endpoint = field("endpoints")?
        .split(',')
        .next()
        .unwrap_or_default()
        .to_owned();
    let (user, password) = (field("username")?, field("password")?);
    let served_by = Api::<Pod>::all(provider.client())
        .list(&ListParams::default().labels("app=kv"))
        .await?
        .items
        .into_iter()
        .next()
        .and_then(|p| p.spec.and_then(|s| s.node_name))
        .context("no kv server pod on a provider node")?;
    step(
        t0,
        &format!(
            "Secret {} on the consumer: endpoint {endpoint}, user {user} (the kv server runs on the provider's node {served_by})",
            secret.metadata.name.unwrap_or_default()
        ),
    );
    let answer = samples::fetch_from_client_pod(consumer, &endpoint, &user, &password).await?;
    if !answer.status.success() {
        bail!(
            "the consumer's pod could not reach {endpoint}: {}",
            String::from_utf8_lossy(&answer.stderr)
        );
    }
    step(
        t0,
        &format!(
            "a pod on the consumer connected to {endpoint} with those credentials: {}",
            String::from_utf8_lossy(&answer.stdout).trim()
        ),
    );
    Ok(())
}

/// A plain `GET path` over HTTP/1.0 to `address`, as any client outside
/// the cluster makes it; the body.
async fn http_get(address: &str, path: &str) -> anyhow::Result<String> {
    let mut stream = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(address),
    )
    .await
    .with_context(|| format!("connecting to {address}"))??;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
        .await
        .with_context(|| format!("reading from {address}"))??;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        bail!(
            "{address} answered {}",
            head.lines().next().unwrap_or_default()
        );
    }
    Ok(body.to_owned())
}
