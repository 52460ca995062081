//! Starts the real `fluidos-node` binary against a real kube-apiserver
//! (fluidos-testenv) and checks startup failures, probes and shutdown.

// Helpers outside #[test] fns panic by design: a failed setup step is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::{
    ConfigMap, EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Namespace,
};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, ResourceExt};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

const NAMESPACE: &str = "fluidos";

async fn control_plane(with_crds: bool) -> ControlPlane {
    ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: if with_crds {
            vec![fluidos_testenv::crds_dir()]
        } else {
            Vec::new()
        },
        ..Default::default()
    })
    .await
    .unwrap()
}

async fn create_namespace(cp: &ControlPlane) {
    let api: Api<Namespace> = Api::all(cp.client());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &ns).await.unwrap();
}

async fn create_identity(cp: &ControlPlane, data: &[(&str, &str)]) {
    let api: Api<ConfigMap> = Api::namespaced(cp.client(), NAMESPACE);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(fluidos_api::NODE_IDENTITY_CONFIGMAP.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..Default::default()
    };
    api.create(&PostParams::default(), &cm).await.unwrap();
}

fn free_port() -> u16 {
    // Racy by nature (the port is released before the node binds it), but
    // the window is tiny and a clash fails loudly with a bind error.
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `fluidos-node` whose output is collected as it is written.
struct Node {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    /// The tasks reading stdout and stderr.
    readers: Vec<tokio::task::JoinHandle<()>>,
    probes: SocketAddr,
    metrics: SocketAddr,
    rear: SocketAddr,
}

impl Node {
    /// Without Liqo unless `extra_args` speak of it: these tests are about
    /// starting up, and a peering node waits for Liqo's cluster ID.
    fn spawn(cp: &ControlPlane, extra_args: &[&str]) -> Node {
        Node::spawn_as(
            cp,
            std::path::Path::new(env!("CARGO_BIN_EXE_fluidos-node")),
            extra_args,
        )
    }

    /// [`Node::spawn`] of `program` (e.g. a link to the binary under a Go
    /// binary's name); with `--kubeconfig` among `extra_args`, KUBECONFIG is
    /// not set.
    fn spawn_as(cp: &ControlPlane, program: &std::path::Path, extra_args: &[&str]) -> Node {
        Node::spawn_with_env(cp, program, extra_args, &[])
    }

    /// [`Node::spawn_as`] with `env` set too.
    fn spawn_with_env(
        cp: &ControlPlane,
        program: &std::path::Path,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Node {
        let probes: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let rear: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let liqo_said = extra_args
            .iter()
            .any(|a| a.starts_with("--peering") || a.starts_with("--liqo-cluster-id"));
        let mut cmd = Command::new(program);
        for (key, _) in std::env::vars() {
            if key.starts_with("FLUIDOS_") || key.starts_with("KUBERNETES_") || key == "KUBECONFIG"
            {
                cmd.env_remove(key);
            }
        }
        if !extra_args.iter().any(|a| a.starts_with("--kubeconfig")) {
            cmd.env("KUBECONFIG", cp.kubeconfig_path());
        }
        cmd.envs(env.iter().copied());
        cmd.env("RUST_LOG", "info")
            .args(["--namespace", NAMESPACE])
            .args(["--health-probe-bind-address", &probes.to_string()])
            .args(["--metrics-bind-address", &metrics.to_string()])
            .args(["--http-port", &rear.port().to_string()])
            .args(if liqo_said {
                &[][..]
            } else {
                &["--peering=false"][..]
            })
            // Each node advertises on loopback, on a group port of its own:
            // nodes of concurrent tests must not discover each other, and
            // nothing goes out on the host's LAN.
            .env_remove("MULTICAST_ADDRESS")
            .args([
                "--multicast-address",
                &format!("239.11.11.1:{}", free_port()),
                "--cni-interface",
                "127.0.0.1",
            ])
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let (stdout, out_reader) = collect(child.stdout.take().unwrap());
        let (stderr, err_reader) = collect(child.stderr.take().unwrap());
        Node {
            child,
            stdout,
            stderr,
            readers: vec![out_reader, err_reader],
            probes,
            metrics,
            rear,
        }
    }

    async fn wait(&mut self, limit: Duration) -> ExitStatus {
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("node still running after {limit:?}\n{}", self.output()))
            .unwrap();
        // Its exit is seen before the readers reach the end of its pipes.
        for reader in std::mem::take(&mut self.readers) {
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
        }
        status
    }

    fn sigterm(&self) {
        let pid = self.child.id().unwrap();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn output(&self) -> String {
        format!("--- stdout\n{}--- stderr\n{}", self.stdout(), self.stderr())
    }

    /// Polls `path` until it answers 200, failing after `limit`.
    async fn until_ok(&self, addr: SocketAddr, path: &str, limit: Duration) {
        let start = Instant::now();
        let mut last = None;
        while start.elapsed() < limit {
            last = http_status(addr, path).await;
            if last == Some(200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{path} not 200 after {limit:?} (last: {last:?})\n{}",
            self.output()
        );
    }
}

/// How long a node may take to report ready: every controller's first list
/// of a freshly installed CRD, with five nodes and their API servers starting
/// at once on two cores (over 10 s once in a cold CI run).
const READY_WITHIN: Duration = Duration::from_secs(30);

fn collect(
    stream: impl AsyncRead + Unpin + Send + 'static,
) -> (Arc<Mutex<String>>, tokio::task::JoinHandle<()>) {
    let buf = Arc::new(Mutex::new(String::new()));
    let sink = buf.clone();
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut out = sink.lock().unwrap();
            out.push_str(&line);
            out.push('\n');
        }
    });
    (buf, reader)
}

/// Status code and body of an HTTP/1.0 GET, or None if nothing answers.
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((code, body))
}

/// Status code of an HTTP/1.0 GET, or None if nothing answers.
async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

fn started_components(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.contains("component started"))
        .filter_map(|l| l.split("component=").nth(1))
        .map(|rest| rest.split_whitespace().next().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test]
async fn without_crds_it_exits_2_naming_every_missing_crd() {
    let cp = control_plane(false).await;
    let mut node = Node::spawn(&cp, &[]);
    let status = node.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(2), "{}", node.output());
    let stderr = node.stderr();
    for crd in fluidos_api::crds() {
        assert!(
            stderr.contains(&crd.name_any()),
            "{} not named:\n{}",
            crd.name_any(),
            node.output()
        );
    }
    assert!(stderr.contains("deploy/crds/"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    cp.stop().await;
}

/// Peers' pods may not run privileged here by accident: the level needs
/// its explicit opt-in, checked before anything else.
#[tokio::test]
async fn privileged_peer_pods_without_the_opt_in_exit_2_saying_why() {
    let cp = control_plane(false).await;
    let mut node = Node::spawn(&cp, &["--peer-pod-security", "privileged"]);
    let status = node.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(2), "{}", node.output());
    let stderr = node.stderr();
    assert!(
        stderr.contains("needs --peer-pod-security-allow-privileged"),
        "{stderr}"
    );
    // Refused before the CRD check (none are installed here).
    assert!(!stderr.contains("deploy/crds/"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    cp.stop().await;
}

#[tokio::test]
async fn without_identity_configmap_it_exits_2_saying_so() {
    let cp = control_plane(true).await;
    create_namespace(&cp).await;
    let mut node = Node::spawn(&cp, &[]);
    let status = node.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(2), "{}", node.output());
    let stderr = node.stderr();
    assert!(
        stderr.contains("ConfigMap fluidos/fluidos-node-identity does not exist"),
        "{stderr}"
    );
    assert!(
        stderr.contains("kubectl create configmap fluidos-node-identity -n fluidos"),
        "{stderr}"
    );
    assert_eq!(
        stderr.lines().count(),
        1,
        "one paragraph expected:\n{stderr}"
    );
    cp.stop().await;
}

#[tokio::test]
async fn with_everything_in_place_it_becomes_ready_and_stops_on_sigterm() {
    let cp = control_plane(true).await;
    create_namespace(&cp).await;
    create_identity(
        &cp,
        &[
            ("domain", "fluidos.eu"),
            ("nodeID", "abcdefghij"),
            ("ip", "192.0.2.7"),
            ("port", "30000"),
        ],
    )
    .await;
    let mut node = Node::spawn(&cp, &[]);

    node.until_ok(node.probes, "/healthz", Duration::from_secs(10))
        .await;
    node.until_ok(node.probes, "/readyz", READY_WITHIN).await;
    // Ready means the consumer's watches are established (a Solver created
    // now is acted on at once), not merely that its task started.
    assert!(
        node.stdout()
            .contains("consumer controllers' watches established"),
        "{}",
        node.output()
    );
    node.until_ok(node.metrics, "/metrics", Duration::from_secs(5))
        .await;

    let stdout = node.stdout();
    assert!(stdout.contains("ip=192.0.2.7:30000"), "{}", node.output());
    let mut started = started_components(&stdout);
    started.sort();
    assert_eq!(
        started,
        [
            "local-resource-manager",
            "network-manager",
            "rear-gateway",
            "rear-manager"
        ],
        "{}",
        node.output()
    );

    let sent = Instant::now();
    node.sigterm();
    let status = node.wait(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{}", node.output());
    assert!(sent.elapsed() < Duration::from_secs(5));
    assert!(
        node.stdout().contains("fluidos-node stopped"),
        "{}",
        node.output()
    );
    cp.stop().await;
}

#[tokio::test]
async fn components_flag_starts_only_the_selected_one() {
    let cp = control_plane(true).await;
    create_namespace(&cp).await;
    create_identity(
        &cp,
        &[
            ("domain", "fluidos.eu"),
            ("nodeID", "abcdefghij"),
            ("ip", "192.0.2.8"),
            ("port", "30001"),
        ],
    )
    .await;
    // Started with the usual soft limit of 1024 open files, which the node
    // raises to the hard limit (its gateway alone may serve 1024 connections).
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("fluidos-node-low-nofile");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nulimit -Sn 1024\nexec {} \"$@\"\n",
            env!("CARGO_BIN_EXE_fluidos-node")
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut node = Node::spawn_as(&cp, &wrapper, &["--components", "rear-gateway"]);
    node.until_ok(node.probes, "/readyz", READY_WITHIN).await;

    let stdout = node.stdout();
    assert_eq!(
        started_components(&stdout),
        ["rear-gateway"],
        "{}",
        node.output()
    );
    let pid = node.child.id().unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let open_files: Vec<&str> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .skip(3)
        .take(2)
        .collect();
    let (soft, hard): (u64, u64) = (
        open_files[0].parse().unwrap_or(0),
        open_files[1].parse().unwrap_or(u64::MAX),
    );
    if hard > 1024 {
        assert!(
            soft > 1024 && soft == hard,
            "started with a soft limit of 1024, the node raised it to the hard one ({hard}): {open_files:?}"
        );
    } else {
        eprintln!("the hard open-files limit here is {hard}: nothing to raise, not checked");
    }
    assert!(stdout.contains("ip=192.0.2.8:30001"), "{}", node.output());

    node.sigterm();
    let status = node.wait(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{}", node.output());
    cp.stop().await;
}

/// The node ID logged at start.
fn logged_node_id(stdout: &str) -> String {
    stdout
        .split("node_id=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(|id| id.trim_matches('"').to_owned())
        .unwrap_or_else(|| panic!("no node_id logged: {stdout}"))
}

/// An identity ConfigMap naming no node ID (the chart leaves it empty, so
/// that every render is the same): components starting at once draw one
/// ID between them, keep it in `fluidos-node-generated-identity`, and a
/// restart keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_node_id_the_components_draw_one_and_keep_it() {
    let cp = control_plane(true).await;
    create_namespace(&cp).await;
    create_identity(
        &cp,
        &[
            ("domain", "fluidos.eu"),
            ("nodeID", ""),
            ("ip", "192.0.2.8"),
            ("port", "30001"),
        ],
    )
    .await;
    let mut a = Node::spawn(&cp, &["--components", "rear-gateway"]);
    let mut b = Node::spawn(&cp, &["--components", "rear-gateway"]);
    a.until_ok(a.probes, "/readyz", READY_WITHIN).await;
    b.until_ok(b.probes, "/readyz", READY_WITHIN).await;
    let id = logged_node_id(&a.stdout());
    assert_eq!(id.len(), 10, "{id}");
    assert_eq!(logged_node_id(&b.stdout()), id, "{}", b.output());
    let kept = Api::<ConfigMap>::namespaced(cp.client(), NAMESPACE)
        .get("fluidos-node-generated-identity")
        .await
        .unwrap();
    assert_eq!(kept.data.unwrap()["nodeID"], id);
    for node in [&a, &b] {
        node.sigterm();
    }
    for node in [&mut a, &mut b] {
        let status = node.wait(Duration::from_secs(5)).await;
        assert_eq!(status.code(), Some(0), "{}", node.output());
    }
    let mut again = Node::spawn(&cp, &["--components", "rear-gateway"]);
    again.until_ok(again.probes, "/readyz", READY_WITHIN).await;
    assert_eq!(logged_node_id(&again.stdout()), id, "kept across restarts");
    again.sigterm();
    let status = again.wait(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{}", again.output());
    cp.stop().await;
}

/// In a pod without `--api-server-url`, the address the node uses is the
/// in-cluster `kubernetes` Service's, which peers cannot reach: the node
/// serves, sells no K8Slice, and `/readyz` and the log say why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_pod_without_an_api_server_address_it_says_it_sells_no_k8slice() {
    let cp = control_plane(true).await;
    create_namespace(&cp).await;
    create_identity(
        &cp,
        &[
            ("domain", "fluidos.eu"),
            ("nodeID", "abcdefghij"),
            ("ip", "192.0.2.8"),
            ("port", "30001"),
        ],
    )
    .await;
    // As in a pod: the kubernetes Service's address is the one it uses.
    let mut node = Node::spawn_with_env(
        &cp,
        std::path::Path::new(env!("CARGO_BIN_EXE_fluidos-node")),
        &["--components", "rear-gateway"],
        &[("KUBERNETES_SERVICE_HOST", "127.0.0.1")],
    );
    node.until_ok(node.probes, "/readyz", READY_WITHIN).await;
    let (code, body) = http_get(node.probes, "/readyz").await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(
        body.starts_with("ok (degraded: ") && body.contains("--api-server-url"),
        "{body}"
    );
    assert!(
        node.output().contains("apiServer.address"),
        "{}",
        node.output()
    );
    node.sigterm();
    let status = node.wait(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{}", node.output());

    // Given the address peers reach it at, it says nothing of the kind.
    let mut node = Node::spawn_with_env(
        &cp,
        std::path::Path::new(env!("CARGO_BIN_EXE_fluidos-node")),
        &[
            "--components",
            "rear-gateway",
            "--api-server-url",
            "https://203.0.113.10:6443",
        ],
        &[("KUBERNETES_SERVICE_HOST", "127.0.0.1")],
    );
    node.until_ok(node.probes, "/readyz", READY_WITHIN).await;
    let (code, body) = http_get(node.probes, "/readyz").await.unwrap();
    assert_eq!((code, body.as_str()), (200, "ok"));
    node.sigterm();
    let status = node.wait(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{}", node.output());
    cp.stop().await;
}

/// The Go chart's rear-controller container, image changed only: the
/// binary invoked as `/usr/bin/rear-controller` with the chart's and
/// controller-runtime's flags runs the REAR gateway alone, from the cluster
/// of `--kubeconfig`, and says which Go flags it ignores.
#[tokio::test]
async fn invoked_as_the_go_rear_controller_it_runs_the_gateway() {
    let cp = control_plane(true).await;
    create_namespace(&cp).await;
    create_identity(
        &cp,
        &[
            ("domain", "fluidos.eu"),
            ("nodeID", "abcdefghij"),
            ("ip", "192.0.2.8"),
            ("port", "30001"),
        ],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("rear-controller");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_fluidos-node"), &program).unwrap();
    let kubeconfig = format!("--kubeconfig={}", cp.kubeconfig_path().display());
    let mut node = Node::spawn_as(
        &cp,
        &program,
        &[
            "--grpc-port=2710",
            "--enable-webhooks=true",
            "--leader-elect",
            "--zap-log-level=info",
            &kubeconfig,
        ],
    );
    node.until_ok(node.probes, "/readyz", READY_WITHIN).await;
    let stdout = node.stdout();
    assert_eq!(
        started_components(&stdout),
        ["rear-gateway"],
        "{}",
        node.output()
    );
    for flag in ["--grpc-port", "--enable-webhooks"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains("Go node flag accepted and ignored") && l.contains(flag)),
            "{flag} not reported\n{}",
            node.output()
        );
    }
    // --leader-elect is real (docs/leader-election.md): the gateway serves
    // whatever the election, and the flag is not reported as ignored.
    assert!(
        !stdout
            .lines()
            .any(|l| l.contains("accepted and ignored") && l.contains("--leader-elect")),
        "{}",
        node.output()
    );
    node.sigterm();
    let status = node.wait(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{}", node.output());
    cp.stop().await;
}

#[tokio::test]
async fn empty_ip_falls_back_to_the_kubernetes_endpoints() {
    let cp = control_plane(true).await;
    create_namespace(&cp).await;
    create_identity(
        &cp,
        &[
            ("domain", "fluidos.eu"),
            ("nodeID", "abcdefghij"),
            ("ip", ""),
            ("port", "30002"),
        ],
    )
    .await;

    // A loopback-advertised kube-apiserver cannot publish Endpoints
    // default/kubernetes (Endpoints reject loopback IPs), so there is none:
    // upstream would panic here; we must exit 2 and say what to set.
    let mut node = Node::spawn(&cp, &[]);
    let status = node.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(2), "{}", node.output());
    let stderr = node.stderr();
    assert!(stderr.contains("has no ip"), "{stderr}");
    assert!(stderr.contains("Endpoints default/kubernetes"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // Once the Endpoints exist, its first address stands in for `ip`.
    let endpoints: Api<Endpoints> = Api::namespaced(cp.client(), "default");
    let ep = Endpoints {
        metadata: ObjectMeta {
            name: Some("kubernetes".into()),
            ..Default::default()
        },
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![EndpointAddress {
                ip: "192.0.2.10".into(),
                ..Default::default()
            }]),
            ports: Some(vec![EndpointPort {
                name: Some("https".into()),
                port: 6443,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }]),
    };
    endpoints.create(&PostParams::default(), &ep).await.unwrap();
    let mut node = Node::spawn(
        &cp,
        &["--components", "rear-manager", "--log-format", "json"],
    );
    node.until_ok(node.probes, "/readyz", READY_WITHIN).await;
    let stdout = node.stdout();
    assert!(
        stdout.contains(r#""ip":"192.0.2.10:30002""#),
        "{}",
        node.output()
    );
    assert!(
        stdout
            .lines()
            .all(|l| l.starts_with('{') && l.ends_with('}')),
        "not JSON lines:\n{stdout}"
    );
    node.sigterm();
    let status = node.wait(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{}", node.output());
    cp.stop().await;
}

#[tokio::test]
async fn a_peering_node_waits_for_liqos_cluster_id_answering_503() {
    let cp = control_plane(true).await;
    create_namespace(&cp).await;
    create_identity(
        &cp,
        &[
            ("domain", "fluidos.eu"),
            ("nodeID", "abcdefghij"),
            ("ip", "192.0.2.9"),
            ("port", "30003"),
        ],
    )
    .await;
    // Peering (the default) and no Liqo yet: no invented cluster ID.
    let mut node = Node::spawn(&cp, &["--components", "rear-gateway", "--peering=true"]);
    node.until_ok(node.probes, "/healthz", Duration::from_secs(10))
        .await;
    let start = Instant::now();
    let rear = loop {
        if let Some(answer) = http_get(node.rear, "/api/v2/flavors").await {
            break answer;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "REAR port silent\n{}",
            node.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(rear.0, 503, "{rear:?}\n{}", node.output());
    assert!(
        rear.1.contains("Liqo cluster ID is not known yet"),
        "{rear:?}"
    );
    let (code, body) = http_get(node.probes, "/readyz").await.unwrap();
    assert_eq!(code, 503);
    assert!(body.contains("waiting for Liqo's cluster ID"), "{body}");
    assert!(
        !node.stdout().contains("component started"),
        "{}",
        node.output()
    );

    // Liqo installed afterwards: its ConfigMap is picked up, then served.
    let client = cp.client();
    Api::<Namespace>::all(client.clone())
        .create(
            &Default::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "liqo"}})).unwrap(),
        )
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(client, "liqo")
        .create(
            &Default::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "liqo-clusterid-configmap",
                    "labels": {"app.kubernetes.io/name": "clusterid-configmap"}},
                "data": {"CLUSTER_ID": "liqo-installed-later"}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    node.until_ok(node.probes, "/readyz", READY_WITHIN).await;
    // Served now: no flavors yet, which the Go gateway answers with 204.
    let start = Instant::now();
    loop {
        let code = http_status(node.rear, "/api/v2/flavors").await;
        if code == Some(204) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "REAR still {code:?}\n{}",
            node.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        node.stdout().contains("liqo-installed-later"),
        "{}",
        node.output()
    );
    node.sigterm();
    let status = node.wait(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{}", node.output());
    cp.stop().await;
}

/// Broker discovery on (the default): the network manager is ready with no
/// Broker, not ready while a Broker cannot connect (here: its Secrets do not
/// exist), and ready again once that Broker is gone. The node never deletes
/// the Broker, which says why it is down.
#[tokio::test]
async fn the_network_manager_is_ready_only_while_its_brokers_are_connected() {
    use fluidos_api::network::{Broker, BrokerSpec};

    let cp = control_plane(true).await;
    create_namespace(&cp).await;
    create_identity(
        &cp,
        &[
            ("domain", "fluidos.eu"),
            ("nodeID", "abcdefghij"),
            ("ip", "127.0.0.1"),
            ("port", "30001"),
        ],
    )
    .await;
    let node = Node::spawn(
        &cp,
        &[
            "--components",
            "rear-gateway,network-manager",
            "--enable-local-discovery=false",
        ],
    );
    node.until_ok(node.probes, "/readyz", READY_WITHIN).await;

    let brokers: Api<Broker> = Api::namespaced(cp.client(), NAMESPACE);
    let broker = Broker::new(
        "broker-sample",
        BrokerSpec {
            name: "broker-sample".into(),
            address: "127.0.0.1:1".into(),
            role: "both".into(),
            rule: "{}".into(),
            metric: "{}".into(),
            cacert: "no-such-ca".into(),
            clcert: "no-such-client".into(),
        },
    );
    brokers
        .create(&PostParams::default(), &broker)
        .await
        .unwrap();
    let start = Instant::now();
    let body = loop {
        let answer = http_get(node.probes, "/readyz").await;
        if let Some((503, body)) = answer {
            break body;
        }
        assert!(
            start.elapsed() < READY_WITHIN,
            "/readyz still {answer:?} with a Broker that cannot connect\n{}",
            node.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(body.contains("network-manager"), "{body}");
    let condition = loop {
        let b = brokers.get("broker-sample").await.unwrap();
        if let Some(c) = b
            .status
            .and_then(|s| s.conditions)
            .and_then(|c| c.into_iter().find(|c| c.type_ == "Connected"))
        {
            break c;
        }
        assert!(start.elapsed() < READY_WITHIN, "no Connected condition");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "SecretMissing"),
        "{condition:?}"
    );
    assert!(
        node.stdout()
            .contains("Brokers not connected: broker-sample (SecretMissing)"),
        "{}",
        node.output()
    );

    brokers
        .delete("broker-sample", &Default::default())
        .await
        .unwrap();
    node.until_ok(node.probes, "/readyz", READY_WITHIN).await;
    node.sigterm();
    let mut node = node;
    let status = node.wait(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0), "{}", node.output());
    cp.stop().await;
}

/// With peering on and no Liqo installed, the node says once per watch of
/// a Liqo kind that K8Slice peering is not available and why, `/readyz`
/// says it (still 200: sales and Services go on), and nothing repeats
/// while the watches back off; once Liqo's CRDs are installed, peering
/// goes on without a restart and the note is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_liqo_it_says_once_that_peering_is_not_available() {
    if let Some(reason) = fluidos_testenv::liqo::skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    let liqo = fluidos_testenv::LiqoBinaries::from_env().unwrap();
    let cp = control_plane(true).await;
    create_namespace(&cp).await;
    create_identity(
        &cp,
        &[
            ("domain", "fluidos.eu"),
            ("nodeID", "abcdefghij"),
            ("ip", "192.0.2.8"),
            ("port", "30001"),
        ],
    )
    .await;
    let mut node = Node::spawn(
        &cp,
        &[
            "--components",
            "rear-manager",
            "--liqo-cluster-id",
            "cluster-1",
        ],
    );
    node.until_ok(node.probes, "/readyz", READY_WITHIN).await;
    let started = Instant::now();
    let body = loop {
        let (code, body) = http_get(node.probes, "/readyz").await.unwrap();
        assert_eq!(code, 200, "{body}");
        if body.contains("K8Slice peering is not available") {
            break body;
        }
        assert!(
            started.elapsed() < READY_WITHIN,
            "/readyz never said peering is not available: {body}\n{}",
            node.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        body.starts_with("ok (degraded: rear-manager: ")
            && body.contains("Liqo's ")
            && body.contains("--peering=false"),
        "{body}"
    );
    // Long enough for the watches' backoff to retry (from 0.8 s, doubling).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let log = node.output();
    let said = log
        .lines()
        .filter(|l| l.contains("K8Slice peering is not available"))
        .count();
    // One per watch of a Liqo kind (Identity, ResourceSlice, ForeignCluster
    // of the Allocation controller; ResourceSlice, Tenant of the slice class;
    // Tenant of the cleanup), however often they retried.
    assert!((1..=6).contains(&said), "said {said} times:\n{log}");
    assert!(
        !log.lines()
            .any(|l| l.contains("watch failed") && l.contains("liqo.io")),
        "{log}"
    );

    // Liqo installed: the watches list, the note goes.
    cp.install_crds(&liqo.crds_dir()).await.unwrap();
    let started = Instant::now();
    loop {
        let (code, body) = http_get(node.probes, "/readyz").await.unwrap();
        if (code, body.as_str()) == (200, "ok") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "/readyz still {code} {body} with Liqo's CRDs installed\n{}",
            node.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(node.output().contains("is served now"), "{}", node.output());
    node.sigterm();
    let status = node.wait(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{}", node.output());
    cp.stop().await;
}
