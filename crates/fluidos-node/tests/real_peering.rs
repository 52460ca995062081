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
//! prints `SKIP: ...`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::time::{Duration, Instant};

use fluidos_api::Solver;
use k8s_openapi::api::core::v1::Pod;
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

/// A restricted busybox pod answering HTTP with its own UID, asking for a
/// part of the contracted slice.
fn offloaded_pod() -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "offloaded"},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "web",
                "image": fluidos_testenv::BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c",
                    "echo \"offloaded $POD_NAME\" > /www/index.html && exec busybox httpd -f -v -p 8080 -h /www"],
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}},
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "www", "mountPath": "/www"}]
            }],
            "volumes": [{"name": "www", "emptyDir": {}}]
        }
    }))
    .unwrap()
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

fn running(pod: Option<&Pod>) -> bool {
    pod.and_then(|p| p.status.as_ref())
        .and_then(|s| s.phase.as_deref())
        == Some("Running")
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
    use k8s_openapi::api::core::v1::{Namespace, Node};
    let Some(Prerequisites {
        bin,
        layout,
        helm_bin,
    }) = real_cluster::prerequisites()
    else {
        return;
    };
    let Some(reference) = fluidos_testenv::shared_reference_dir() else {
        return eprintln!(
            "SKIP: ../shared/reference is absent (the Solver sample comes from there)"
        );
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

    let mut solver: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(reference.join("fluidos-samples/solver.yaml")).unwrap(),
    )
    .unwrap();
    // Its `podsFilter: Match 110` holds only where a flavor's pods are the
    // node's allocatable pods whatever runs there, which the Go LRM
    // publishes (the reference's bug 23, "pods usage not subtracted"); this
    // LRM subtracts the pods bound to the node, and a real node always runs
    // some (Liqo's, ours), so the filter would exclude every real flavor.
    // Without it the Solver takes the flavor's pods, as upstream does.
    solver["spec"]["selector"]["filters"]
        .as_object_mut()
        .unwrap()
        .remove("podsFilter");
    let solver: Solver = serde_json::from_value(solver).unwrap();
    let bought = Instant::now();
    Api::<Solver>::namespaced(consumer.client(), NS)
        .create(&PostParams::default(), &solver)
        .await
        .unwrap();
    let virtual_node = tokio::time::timeout(
        Duration::from_secs(180),
        real_cluster::first_matching(
            Api::<Node>::all(consumer.client()),
            Some("liqo.io/type=virtual-node"),
            "Ready virtual node on the consumer",
            Duration::from_secs(3600),
            |n: &Node| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            },
        ),
    )
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
    let virtual_node = virtual_node.metadata.name.unwrap();

    // An offloaded namespace and a pod in it.
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "offloaded"}})).unwrap();
    Api::<Namespace>::all(consumer.client())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let gvk =
        kube::api::GroupVersionKind::gvk("offloading.liqo.io", "v1beta1", "NamespaceOffloading");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "namespaceoffloadings");
    let offloadings: Api<kube::api::DynamicObject> =
        Api::namespaced_with(consumer.client(), "offloaded", &resource);
    offloadings
        .create(
            &PostParams::default(),
            &fluidos_testenv::liqo::namespace_offloading("offloaded"),
        )
        .await
        .unwrap();
    let ready = |o: Option<&kube::api::DynamicObject>| {
        o.and_then(|o| o.data.pointer("/status/offloadingPhase"))
            .and_then(|p| p.as_str())
            == Some("Ready")
    };
    let offloading = tokio::time::timeout(
        Duration::from_secs(120),
        await_condition(offloadings, "offloading", ready),
    )
    .await
    .expect("the NamespaceOffloading never became Ready")
    .unwrap()
    .unwrap();
    phase(started, "namespace offloaded");
    let remote_ns = offloading.data["status"]["remoteNamespaceName"]
        .as_str()
        .unwrap()
        .to_owned();

    let c_pods: Api<Pod> = Api::namespaced(consumer.client(), "offloaded");
    c_pods
        .create(&PostParams::default(), &offloaded_pod())
        .await
        .unwrap();
    let p_pods: Api<Pod> = Api::namespaced(provider.client(), &remote_ns);
    let remote = tokio::time::timeout(
        Duration::from_secs(120),
        await_condition(p_pods, "web", running),
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
        await_condition(c_pods, "web", running),
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
    println!(
        "real peering: two clusters with Liqo and fluidos-node installed by their charts at {installed:.1?}; Solver -> virtual node {virtual_node} Ready in {virtual_node_ready:.1?}, -> offloaded pod Running on the provider's kubelet ({pod_ip}) in {first_pod:.1?}; exec and logs through the virtual kubelet"
    );
}
