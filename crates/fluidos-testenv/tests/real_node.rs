//! The real-node profile: a kubelet with containerd, runc, the bridge CNI and
//! kube-proxy runs a real container, which answers HTTP from the host, through
//! its Service, and through `kubectl logs`/`exec` by way of kube-apiserver,
//! and finds Services by name through the cluster DNS (CoreDNS); and nothing
//! of it is left on the machine once the cluster stops.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::time::Duration;

use fluidos_testenv::{BUSYBOX_IMAGE, ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::{LogParams, PostParams};
use kube::runtime::wait::await_condition;

const NAMESPACE: &str = "default";
/// Generous for a first container start on 2 busy cores; a warm start takes about a second.
const POD_TIMEOUT: Duration = Duration::from_secs(120);

/// A `restricted`-profile pod: busybox's httpd serving a page that holds the
/// pod's own UID (from the downward API), so the answer proves this very
/// pod, started by the kubelet from the API server's object, served it.
fn web_pod() -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"}
            },
            "containers": [{
                "name": "web",
                "image": BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c",
                    "echo \"pod $POD_UID\" > /www/index.html && exec busybox httpd -f -v -p 8080 -h /www"],
                "env": [{"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}],
                "ports": [{"containerPort": 8080}],
                "volumeMounts": [{"name": "www", "mountPath": "/www"}],
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}
                }
            }],
            "volumes": [{"name": "www", "emptyDir": {}}]
        }
    }))
    .unwrap()
}

fn web_service() -> Service {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .unwrap()
}

/// One plain HTTP GET, as a client outside the cluster would make it.
async fn http_get(address: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

fn run(mut command: std::process::Command) -> String {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn a_real_container_runs_answers_and_leaves_nothing_behind() {
    if let Err(e) = fluidos_testenv::real_node_prerequisites() {
        // CI installs the runtime (tools/node-runtime/install.sh) and runs as root.
        fluidos_testenv::skip::unavailable(e);
        return;
    }
    let cp = ControlPlane::start(ControlPlaneOptions {
        real_node: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let node = cp.real_node().unwrap();
    let (netns, node_name) = (node.netns_path(), node.name().to_owned());
    let scratch = node.scratch_dir().to_owned();
    let pods: Api<Pod> = Api::namespaced(cp.client(), NAMESPACE);
    let created = pods
        .create(&PostParams::default(), &web_pod())
        .await
        .unwrap();
    let uid = created.metadata.uid.unwrap();

    let ready = await_condition(pods.clone(), "web", |pod: Option<&Pod>| {
        pod.and_then(|p| p.status.as_ref())
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|c| c.iter().all(|c| c.ready))
    });
    let pod = tokio::time::timeout(POD_TIMEOUT, ready)
        .await
        .unwrap_or_else(|_| panic!("pod not ready:\n{}", node.log_tail()))
        .unwrap()
        .unwrap();
    let status = pod.status.unwrap();
    assert_eq!(
        pod.spec.unwrap().node_name.as_deref(),
        Some(node_name.as_str())
    );
    let pod_ip = status.pod_ip.unwrap();
    assert!(
        pod_ip.starts_with(node.pod_cidr().trim_end_matches("0/24")),
        "{pod_ip} is outside {}",
        node.pod_cidr()
    );

    // From the host, straight to the pod's address on the node's bridge.
    let answer = http_get(&format!("{pod_ip}:8080")).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.ends_with(&format!("pod {uid}\n")), "{answer}");

    // Logs through kube-apiserver and the kubelet: httpd -v logged that GET.
    let logs = pods.logs("web", &LogParams::default()).await.unwrap();
    assert!(logs.contains("response:200"), "{logs}");

    // exec through kube-apiserver and the kubelet's streaming server, and
    // the Service's cluster address through kube-proxy (the pod reaching
    // itself through it also needs the bridge's hairpin mode).
    let services: Api<Service> = Api::namespaced(cp.client(), NAMESPACE);
    let service = services
        .create(&PostParams::default(), &web_service())
        .await
        .unwrap();
    let cluster_ip = service.spec.unwrap().cluster_ip.unwrap();
    let mut exec = cp.kubectl().await.unwrap();
    exec.args(["exec", "web", "--", "busybox", "cat", "/www/index.html"]);
    assert_eq!(run(exec), format!("pod {uid}\n"));
    let mut through_service = cp.kubectl().await.unwrap();
    // The EndpointSlice and kube-proxy's rules follow the Service by a
    // moment; these retries are the client's, not a wait on a controller
    // (busybox wget -T crashes in Debian's static build: timeout instead).
    through_service.args([
        "exec",
        "web",
        "--",
        "sh",
        "-c",
        &format!(
            "for i in 1 2 3 4 5 6 7 8 9 10; do busybox timeout 2 busybox wget -qO- http://{cluster_ip}/ && exit 0; busybox sleep 1; done; exit 1"
        ),
    ]);
    assert_eq!(run(through_service), format!("pod {uid}\n"));

    resolves_through_the_cluster_dns(&cp, &cluster_ip).await;

    cp.stop().await;
    assert!(!netns.exists(), "{} outlived the cluster", netns.display());
    // This node's mounts only: other tests (and test binaries) may hold
    // other slots at the same time.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let left: Vec<&str> = mountinfo
        .lines()
        .filter(|line| {
            line.split(' ')
                .nth(4)
                .is_some_and(|point| std::path::Path::new(point).starts_with(&scratch))
        })
        .collect();
    assert!(
        left.is_empty(),
        "mounts under {} outlived the cluster:\n{}",
        scratch.display(),
        left.join("\n")
    );
    let httpd_left = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("environ")).ok())
        .any(|environ| environ.contains(&uid));
    assert!(!httpd_left, "the pod's process outlived the cluster");
}

/// Names through the cluster DNS (CoreDNS behind kube-dns), from pod `web`:
/// the Service's and the API server's, each resolving to its cluster
/// address, and the pod's resolv.conf naming kube-dns and the search path
/// (busybox's nslookup does not apply it, so the names are full ones).
async fn resolves_through_the_cluster_dns(cp: &ControlPlane, cluster_ip: &str) {
    let cluster_ip_of = |ns: &str, name: &str| {
        let services: Api<Service> = Api::namespaced(cp.client(), ns);
        let name = name.to_owned();
        async move {
            services
                .get(&name)
                .await
                .unwrap()
                .spec
                .unwrap()
                .cluster_ip
                .unwrap()
        }
    };
    let api_server_ip = cluster_ip_of("default", "kubernetes").await;
    let dns_ip = cluster_ip_of("kube-system", "kube-dns").await;
    for (name, address) in [
        (
            "web.default.svc.cluster.local".to_owned(),
            cluster_ip.to_owned(),
        ),
        (
            "kubernetes.default.svc.cluster.local".to_owned(),
            api_server_ip,
        ),
    ] {
        let mut lookup = cp.kubectl().await.unwrap();
        lookup.args(["exec", "web", "--", "busybox", "nslookup", "-type=a", &name]);
        let answer = run(lookup);
        assert!(
            answer
                .lines()
                .any(|l| l.trim() == format!("Address: {address}")),
            "{name} did not resolve to {address}:\n{answer}"
        );
    }
    let mut resolv = cp.kubectl().await.unwrap();
    resolv.args(["exec", "web", "--", "busybox", "cat", "/etc/resolv.conf"]);
    let resolv = run(resolv);
    assert!(
        resolv
            .lines()
            .any(|l| l.trim() == format!("nameserver {dns_ip}"))
            && resolv.contains("default.svc.cluster.local"),
        "{resolv}"
    );
}
