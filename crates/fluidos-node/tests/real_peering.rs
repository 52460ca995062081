//! The K8Slice scenario on two real clusters, each with one real node
//! (`fluidos_testenv::RealNode`): Liqo installed by its own chart (networking
//! disabled: this kernel has no WireGuard or Geneve), fluidos-node by its
//! chart from the image built of the static binary, with peering on. The
//! upstream `solver.yaml` on the consumer leads to a Ready virtual node
//! there, and a pod in an offloaded namespace runs as a real container on the
//! provider's kubelet, whose logs and exec reach the consumer through the
//! virtual kubelet.
//!
//! Needs what `tests/real_clusters.rs` needs and the Liqo binaries
//! (`FLUIDOS_LIQO_BIN_DIR`, including the uninstaller); without them it
//! prints `SKIP: ...` (in CI it fails, or without the binary is deferred to
//! CI's second pass, as `tests/real_clusters.rs` says).

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::time::{Duration, Instant};

use fluidos_api::configuration::ConfigurationData;
use fluidos_api::ledger::Resources;
use fluidos_api::quantity::Amount;
use fluidos_api::{Contract, Solver};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::wait::await_condition;

mod support;

use support::real_cluster::Prerequisites;
use support::{NS, real_cluster};

/// A phase reached, with the time since `started`, on stderr as it happens.
fn phase(started: Instant, what: &str) {
    eprintln!("[real peering] {:>7.1?} {what}", started.elapsed());
}

/// Waits until the virtual kubelet of `virtual_node` serves TLS: it asks for
/// its serving certificate by a CSR (kubelet-serving signer) only once it
/// runs, so the virtual node is Ready and pods run through it a moment
/// before `logs` and `exec` can reach it. The CSR's issue is watched; the
/// handshake that follows is the only sign the certificate is in use, tried
/// a bounded number of times.
async fn virtual_kubelet_serving(consumer: &fluidos_testenv::ControlPlane, virtual_node: &str) {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    real_cluster::first_matching(
        Api::<CertificateSigningRequest>::all(consumer.client()),
        None,
        "issued serving certificate of the virtual kubelet",
        Duration::from_secs(60),
        |csr: &CertificateSigningRequest| {
            csr.spec.signer_name == "kubernetes.io/kubelet-serving"
                && csr.status.as_ref().is_some_and(|s| s.certificate.is_some())
        },
    )
    .await;
    // Through kube-apiserver's node proxy, as `logs` and `exec` go.
    let url = format!("/api/v1/nodes/{virtual_node}/proxy/healthz");
    let mut last = String::new();
    for _ in 0..40 {
        let request = http::Request::get(&url).body(Vec::new()).unwrap();
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            consumer.client().request_text(request),
        )
        .await;
        match answer {
            Ok(Ok(_)) => return,
            // Its own answer: the virtual kubelet serves no /healthz.
            Ok(Err(e)) if e.to_string().contains("404 request not found") => return,
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "no answer within 5s".to_owned(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the virtual kubelet never served {url}: {last}");
}

/// What the consumer's only K8Slice Contract bought, as exact amounts.
async fn contracted_slice(consumer: &fluidos_testenv::ControlPlane) -> Resources {
    let contracts = Api::<Contract>::namespaced(consumer.client(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(contracts.len(), 1, "one Contract on the consumer");
    let configuration = contracts[0]
        .spec
        .configuration
        .as_ref()
        .expect("the Solver bought a partition");
    let ConfigurationData::K8Slice(slice) = configuration.parse("spec.configuration").unwrap()
    else {
        panic!("a K8Slice Contract: {configuration:?}")
    };
    Resources::of_configuration(&slice).unwrap()
}

/// The virtual node offers exactly the contracted CPU, memory and pods,
/// neither more (the provider would host what it did not sell) nor less.
fn assert_exact_slice(node: &Node, contracted: &Resources) {
    let status = node.status.as_ref().unwrap();
    for (what, resources) in [
        ("capacity", status.capacity.as_ref()),
        ("allocatable", status.allocatable.as_ref()),
    ] {
        let resources = resources.unwrap_or_else(|| panic!("the virtual node has no {what}"));
        for (name, want) in [
            ("cpu", contracted.cpu),
            ("memory", contracted.memory),
            ("pods", contracted.pods),
        ] {
            let have = Amount::parse(&resources[name].0).unwrap();
            assert_eq!(
                have.nanos, want.nanos,
                "virtual node {what} {name} is {} where the Contract says {want}",
                resources[name].0
            );
        }
    }
}

/// Whether every condition of `module` in a ForeignCluster's status is
/// Established or Ready, as `liqoctl info` judges a module Healthy.
fn module_healthy(fc: Option<&kube::api::DynamicObject>, module: &str) -> bool {
    let Some(module) = fc.and_then(|fc| fc.data.pointer(&format!("/status/modules/{module}")))
    else {
        return false;
    };
    module["enabled"] == true
        && module["conditions"].as_array().is_some_and(|c| {
            !c.is_empty()
                && c.iter()
                    .all(|c| c["status"] == "Established" || c["status"] == "Ready")
        })
}

/// `liqoctl info peer <peer> -o json` on `cp`, the user's own check: the
/// peer has `role`, authentication is Healthy (networking Disabled, as
/// installed), one accepted ResourceSlice is `action`, and on the consumer
/// (its peer the Provider) the virtual node is Healthy with exactly the
/// `contracted` resources. Liqo's ForeignCluster controller brings the
/// authentication conditions up to date a moment after the peering is
/// made; that is watched first. Its offloading module is not asserted: it
/// counts a virtual node ready when its virtual-kubelet pods are Ready, but
/// watches no pods, so it stays "All virtual nodes are not ready" until
/// some other object it watches changes (seen for over 60 s here); the
/// virtual node's own status, which liqoctl reports beside it, is.
async fn liqoctl_reports_the_peering(
    liqo: &fluidos_testenv::LiqoBinaries,
    cp: &fluidos_testenv::ControlPlane,
    peer: &str,
    role: &str,
    action: &str,
    contracted: &Resources,
) {
    let gvk = kube::api::GroupVersionKind::gvk("core.liqo.io", "v1beta1", "ForeignCluster");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "foreignclusters");
    let foreign_clusters: Api<kube::api::DynamicObject> = Api::all_with(cp.client(), &resource);
    let healthy = tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(
            foreign_clusters.clone(),
            peer,
            |fc: Option<&kube::api::DynamicObject>| module_healthy(fc, "authentication"),
        ),
    )
    .await;
    if healthy.is_err() {
        let fc = foreign_clusters.get_opt(peer).await.unwrap();
        panic!(
            "ForeignCluster {peer}: authentication never Healthy: {:#}",
            fc.map(|fc| fc.data["status"].clone()).unwrap_or_default()
        );
    }
    let out = tokio::process::Command::new(liqo.liqoctl())
        .args(["info", "peer", peer, "-o", "json"])
        .arg(real_cluster::kubeconfig_flag(cp))
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "liqoctl info peer {peer}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("liqoctl info peer {peer} -o json: {e}: {text}"));
    let peer_info = &info[peer];
    assert_eq!(peer_info["info"]["role"], role, "{text}");
    assert_eq!(peer_info["authentication"]["status"], "Healthy", "{text}");
    assert_eq!(peer_info["network"]["status"], "Disabled", "{text}");
    let slices = peer_info["authentication"]["resourceSlices"]
        .as_array()
        .unwrap_or_else(|| panic!("no resource slices: {text}"));
    assert!(
        slices
            .iter()
            .any(|s| s["action"] == action && s["accepted"] == true),
        "no accepted {action} ResourceSlice: {text}"
    );
    if role == "Provider" {
        let nodes = peer_info["offloading"]["virtualNodes"]
            .as_array()
            .unwrap_or_else(|| panic!("no virtual nodes: {text}"));
        assert_eq!(nodes.len(), 1, "{text}");
        assert_eq!(nodes[0]["status"], "Healthy", "{text}");
        for (name, want) in [
            ("cpu", contracted.cpu),
            ("memory", contracted.memory),
            ("pods", contracted.pods),
        ] {
            let have = nodes[0]["resources"][name].as_str().unwrap_or_default();
            assert_eq!(
                Amount::parse(have).map(|a| a.nanos).ok(),
                Some(want.nanos),
                "liqoctl reports {name} {have} where the Contract says {want}: {text}"
            );
        }
    }
}

/// A pod asking for more CPU than the contract sold (`contracted_cpu`
/// nanocores) is refused: the consumer's scheduler finds no node for it,
/// and bound to `virtual_node` by name the provider refuses it; nothing of
/// it reaches the provider's namespace either way.
async fn too_big_is_refused(
    consumer: &fluidos_testenv::ControlPlane,
    provider: &fluidos_testenv::ControlPlane,
    remote_ns: &str,
    contracted_cpu: i128,
    virtual_node: &str,
) {
    let mut pod = real_cluster::offloaded_pod("offloaded");
    pod.metadata.name = Some("too-big".to_owned());
    let millis = contracted_cpu / 1_000_000 + 1000;
    let container = &mut pod.spec.as_mut().unwrap().containers[0];
    let resources = container.resources.as_mut().unwrap();
    for list in [resources.requests.as_mut(), resources.limits.as_mut()] {
        list.unwrap().insert(
            "cpu".to_owned(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(format!("{millis}m")),
        );
    }
    let pod_template = pod.clone();
    let c_pods: Api<Pod> = Api::namespaced(consumer.client(), "offloaded");
    c_pods.create(&PostParams::default(), &pod).await.unwrap();
    let unschedulable = |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
            })
    };
    let refused = tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(c_pods, "too-big", unschedulable),
    )
    .await
    .expect("the pod larger than the contract was never found unschedulable")
    .unwrap()
    .unwrap();
    let message = refused
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled")
        .and_then(|c| c.message)
        .unwrap_or_default();
    assert!(message.contains("Insufficient cpu"), "{message}");
    let on_provider = Api::<Pod>::namespaced(provider.client(), remote_ns)
        .get_opt("too-big")
        .await
        .unwrap();
    assert!(on_provider.is_none(), "{on_provider:?}");
    // A hostile consumer binds it to the virtual node by name, past its
    // scheduler: the provider's Liqo webhook refuses the ShadowPod on the
    // peering's quota (the contracted slice), and the consumer's virtual
    // kubelet reports that as an event on the pod.
    let mut pod = pod_template;
    pod.metadata.name = Some("too-big-bound".to_owned());
    pod.spec.as_mut().unwrap().node_name = Some(virtual_node.to_owned());
    let c_pods: Api<Pod> = Api::namespaced(consumer.client(), "offloaded");
    c_pods.create(&PostParams::default(), &pod).await.unwrap();
    let refusal = real_cluster::first_matching(
        Api::<Event>::namespaced(consumer.client(), "offloaded"),
        None,
        "FailedReflection event of the pod bound past the scheduler",
        Duration::from_secs(90),
        |e: &Event| {
            e.involved_object.name.as_deref() == Some("too-big-bound")
                && e.reason.as_deref() == Some("FailedReflection")
        },
    )
    .await;
    let message = refusal.message.unwrap_or_default();
    assert!(
        message.contains("shadowpod.validate.liqo.io") && message.contains("quota"),
        "{message}"
    );
    let on_provider = Api::<Pod>::namespaced(provider.client(), remote_ns)
        .get_opt("too-big-bound")
        .await
        .unwrap();
    assert!(on_provider.is_none(), "{on_provider:?}");
}

/// The K8Slice scenario: Liqo installed by its own chart on both clusters
/// (networking disabled: no WireGuard or Geneve here), fluidos-node by its
/// chart with peering on; the upstream `solver.yaml` (establishPeering)
/// on the consumer leads to a Ready virtual node there, and a pod in an
/// offloaded namespace runs as a real container on the provider's kubelet,
/// whose logs and exec reach the consumer through the virtual kubelet.
#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario read top to bottom, phase by phase, as the issue states it"
)]
async fn a_k8slice_bought_between_two_real_clusters_runs_a_real_container() {
    let Some(Prerequisites {
        bin,
        layout,
        helm_bin,
    }) = real_cluster::prerequisites()
    else {
        return;
    };
    let Some(reference) = fluidos_testenv::shared_reference_dir() else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference is absent (the Solver sample comes from there)",
        );
        return;
    };
    let liqo = fluidos_testenv::LiqoBinaries::from_env().unwrap();
    let started = Instant::now();
    let (provider, consumer) = tokio::join!(
        real_cluster::start(&bin, &layout, liqo.chart_images().unwrap()),
        real_cluster::start(&bin, &layout, liqo.chart_images().unwrap()),
    );
    tokio::join!(
        real_cluster::install_liqo(&helm_bin, &provider, &liqo, "real-provider"),
        real_cluster::install_liqo(&helm_bin, &consumer, &liqo, "real-consumer"),
    );
    phase(started, "Liqo installed by its chart on both");
    real_cluster::install_pair(&helm_bin, &provider, &consumer, &[]).await;
    let installed = started.elapsed();
    phase(started, "fluidos-node installed by its chart on both");

    let solver = real_cluster::upstream_k8slice_solver(&reference);
    let bought = Instant::now();
    Api::<Solver>::namespaced(consumer.client(), NS)
        .create(&PostParams::default(), &solver)
        .await
        .unwrap();
    let virtual_node =
        fluidos_testenv::real_cluster::ready_virtual_node(&consumer, Duration::from_secs(180))
            .await;
    let Ok(virtual_node) = virtual_node else {
        panic!(
            "no Ready virtual node on the consumer after 180s\n{}\n{}",
            real_cluster::dump(&consumer, "consumer").await,
            real_cluster::dump(&provider, "provider").await
        );
    };
    let virtual_node_ready = bought.elapsed();
    phase(started, "virtual node Ready");
    let contracted = contracted_slice(&consumer).await;
    assert_exact_slice(&virtual_node, &contracted);
    let virtual_node_cpu = contracted.cpu.nanos;
    let virtual_node = virtual_node.metadata.name.unwrap();
    liqoctl_reports_the_peering(
        &liqo,
        &consumer,
        "real-provider",
        "Provider",
        "Consuming",
        &contracted,
    )
    .await;
    liqoctl_reports_the_peering(
        &liqo,
        &provider,
        "real-consumer",
        "Consumer",
        "Providing",
        &contracted,
    )
    .await;
    phase(started, "liqoctl info peer reports the peering on both");

    // An offloaded namespace and a pod in it.
    let remote_ns = real_cluster::offload_namespace(&consumer, "offloaded").await;
    phase(started, "namespace offloaded");

    let c_pods: Api<Pod> = Api::namespaced(consumer.client(), "offloaded");
    c_pods
        .create(
            &PostParams::default(),
            &real_cluster::offloaded_pod("offloaded"),
        )
        .await
        .unwrap();
    let p_pods: Api<Pod> = Api::namespaced(provider.client(), &remote_ns);
    let remote = tokio::time::timeout(
        Duration::from_secs(120),
        await_condition(p_pods, "web", real_cluster::running),
    )
    .await
    .expect("the offloaded pod never ran on the provider")
    .unwrap()
    .unwrap();
    let first_pod = bought.elapsed();
    phase(started, "offloaded pod Running on the provider");
    assert_eq!(
        remote.spec.as_ref().unwrap().node_name.as_deref(),
        Some(provider.real_node().unwrap().name()),
        "the provider's real kubelet runs it"
    );
    let local = tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(c_pods, "web", real_cluster::running),
    )
    .await
    .expect("the consumer never saw its pod Running")
    .unwrap()
    .unwrap();
    assert_eq!(
        local.spec.unwrap().node_name.as_deref(),
        Some(virtual_node.as_str())
    );

    // The real container answers, from the provider's pod network.
    let pod_ip = remote.status.unwrap().pod_ip.unwrap();
    let page = real_cluster::get_from_host(&format!("http://{pod_ip}:8080/"))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(page, "offloaded web\n");
    virtual_kubelet_serving(&consumer, &virtual_node).await;
    phase(started, "virtual kubelet serving");
    let mut exec = consumer.kubectl().await.unwrap();
    exec.args([
        "--request-timeout=60s",
        "-n",
        "offloaded",
        "exec",
        "web",
        "--",
        "busybox",
        "cat",
        "/www/index.html",
    ]);
    let out = exec.output().unwrap();
    if !out.status.success() {
        let mut csr = consumer.kubectl().await.unwrap();
        csr.args(["get", "csr,pods,deployments", "-A", "-o", "wide"]);
        let csr = csr.output().unwrap();
        let mut vk = consumer.kubectl().await.unwrap();
        vk.args([
            "-n",
            "liqo-tenant-real-provider",
            "logs",
            "-l",
            "app.kubernetes.io/name=virtual-kubelet",
            "--tail=80",
            "--prefix",
            "--timestamps",
        ]);
        let vk = vk.output().unwrap();
        panic!(
            "exec through the virtual kubelet: {}\n{}\n{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&csr.stdout),
            String::from_utf8_lossy(&vk.stdout),
            String::from_utf8_lossy(&vk.stderr)
        );
    }
    assert_eq!(String::from_utf8_lossy(&out.stdout), "offloaded web\n");
    let mut logs = consumer.kubectl().await.unwrap();
    logs.args(["--request-timeout=60s", "-n", "offloaded", "logs", "web"]);
    let out = logs.output().unwrap();
    assert!(
        out.status.success(),
        "logs through the virtual kubelet: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // httpd -v logged the GET above.
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("response:200"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    too_big_is_refused(
        &consumer,
        &provider,
        &remote_ns,
        virtual_node_cpu,
        &virtual_node,
    )
    .await;
    phase(started, "a pod larger than the contract refused");

    // The buyer uninstalls, then the seller, then each its Liqo, as their
    // operators would, and deletes the namespaces Helm made: the chart's
    // pre-delete hook ends the sale through the node's teardown, so no
    // namespace stays Terminating and nothing of either is left (the user's
    // own namespace on the consumer stays).
    let uninstalling = Instant::now();
    real_cluster::uninstall(&helm_bin, &consumer, "fluidos", NS).await;
    let consumer_uninstalled = uninstalling.elapsed();
    real_cluster::uninstall(&helm_bin, &provider, "fluidos", NS).await;
    phase(started, "fluidos-node uninstalled on both");
    // Liqo's uninstall asks that namespaces be unoffloaded first (its docs,
    // "Uninstall"): the user's own step, with Liqo's own tool.
    let out = tokio::process::Command::new(liqo.liqoctl())
        .args(["unoffload", "namespace", "offloaded", "--skip-confirm"])
        .arg(real_cluster::kubeconfig_flag(&consumer))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "liqoctl unoffload namespace offloaded: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    real_cluster::uninstall(&helm_bin, &consumer, "liqo", "liqo").await;
    real_cluster::uninstall(&helm_bin, &provider, "liqo", "liqo").await;
    let uninstalled = uninstalling.elapsed();
    phase(started, "Liqo uninstalled on both");
    // Liqo's controller makes its storage namespace at start (the virtual
    // storage class's, `storage.storageNamespace`), and Liqo's uninstall
    // leaves it, empty: Liqo's, not a peering's.
    let liqo_storage = "liqo-storage";
    let consumer_left = real_cluster::leftovers(&consumer, &["offloaded", liqo_storage]).await;
    let provider_left = real_cluster::leftovers(&provider, &[liqo_storage]).await;
    assert!(
        consumer_left.is_empty() && provider_left.is_empty(),
        "left after helm uninstall on both sides:\nconsumer:\n  {}\nprovider:\n  {}",
        consumer_left.join("\n  "),
        provider_left.join("\n  ")
    );
    println!(
        "real peering: two clusters with Liqo and fluidos-node installed by their charts at {installed:.1?}; Solver -> virtual node {virtual_node} Ready in {virtual_node_ready:.1?}, -> offloaded pod Running on the provider's kubelet ({pod_ip}) in {first_pod:.1?}; exec and logs through the virtual kubelet; helm uninstall of fluidos-node on the consumer in {consumer_uninstalled:.1?}, of both charts on both sides in {uninstalled:.1?}, nothing left"
    );
}
