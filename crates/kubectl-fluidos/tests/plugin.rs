//! `kubectl fluidos` run through a real kubectl, found on `PATH` as a plugin,
//! against a provider and a consumer: two real control planes and two
//! `fluidos-node` processes trading over REAR on loopback.
//!
//! kubectl is the one `tools/control-plane/build.sh` builds from the Go
//! module proxy into `$FLUIDOS_CP_BIN_DIR` (not a system kubectl). Without
//! that directory the test says `SKIP` and passes, except in CI (`CI` set),
//! where it fails.
//!
//! The `fluidos-node` binary belongs to another package, so Cargo does not
//! hand it to this test (`CARGO_BIN_EXE_*` covers this package's binaries
//! only, and a dev-dependency's binaries are not built). It is taken from the
//! same target directory as `kubectl-fluidos` (or `$FLUIDOS_NODE_BIN`):
//! `cargo test --workspace`, which CI runs, builds every binary before any
//! test, so it is there and current; alone, run `cargo build -p fluidos-node`
//! first. The test fails saying so when it is missing, and warns when it is
//! older than the node's sources. Building it from here instead would
//! deadlock: `cargo test` holds the build directory's lock while tests run.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use fluidos_api::network::KnownClusterSpec;
use fluidos_api::{Contract, Flavor, KnownCluster, Reservation};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, fixtures};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

const NS: &str = "fluidos";

/// The kubectl built by tools/control-plane/build.sh, or why there is none.
fn built_kubectl() -> Result<PathBuf, String> {
    let dir = std::env::var_os("FLUIDOS_CP_BIN_DIR")
        .filter(|d| !d.is_empty())
        .ok_or("FLUIDOS_CP_BIN_DIR is not set (tools/control-plane/build.sh prints it)")?;
    let kubectl = PathBuf::from(dir).join("kubectl");
    if kubectl.is_file() {
        Ok(kubectl)
    } else {
        Err(format!(
            "{} is missing: run tools/control-plane/build.sh (it builds kubectl)",
            kubectl.display()
        ))
    }
}

/// The `fluidos-node` binary next to `kubectl-fluidos` (see the module docs).
fn node_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("FLUIDOS_NODE_BIN").filter(|b| !b.is_empty()) {
        return PathBuf::from(bin);
    }
    let plugin = Path::new(env!("CARGO_BIN_EXE_kubectl-fluidos"));
    let node = plugin
        .parent()
        .expect("the plugin binary has a directory")
        .join("fluidos-node");
    assert!(
        node.is_file(),
        "{} is missing: this test runs the node binary of another package; \
         run `cargo build -p fluidos-node` first, or `cargo test --workspace` (which builds it), \
         or set FLUIDOS_NODE_BIN",
        node.display()
    );
    warn_if_stale(&node);
    node
}

/// Warns when a source file of the workspace (other than this crate's) is
/// newer than `bin`: the test would run yesterday's node.
fn warn_if_stale(bin: &Path) {
    fn newest(dir: &Path, acc: &mut Option<(SystemTime, PathBuf)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                newest(&path, acc);
                continue;
            }
            if path.extension().is_some_and(|e| e == "rs")
                && let Ok(modified) = entry.metadata().and_then(|m| m.modified())
                && acc.as_ref().is_none_or(|(t, _)| modified > *t)
            {
                *acc = Some((modified, path));
            }
        }
    }
    let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
        return;
    };
    let crates = fluidos_testenv::workspace_root().join("crates");
    let mut latest = None;
    for entry in std::fs::read_dir(&crates).into_iter().flatten().flatten() {
        let name = entry.file_name();
        if name == "kubectl-fluidos" || name == "fluidos-demo" || name == "fluidos-crdgen" {
            continue;
        }
        newest(&entry.path().join("src"), &mut latest);
    }
    if let Some((_, path)) = latest.filter(|(t, _)| *t > built) {
        eprintln!(
            "WARNING: {} is older than {}: run `cargo build -p fluidos-node` to test the current node",
            bin.display(),
            path.display()
        );
    }
}

/// A `fluidos-node` process, its output kept for failure messages.
struct NodeProcess {
    _child: Child,
    log: Arc<Mutex<String>>,
}

impl NodeProcess {
    fn spawn(
        bin: &Path,
        cp: &ControlPlane,
        rear_port: u16,
        components: &str,
        extra: &[&str],
    ) -> Self {
        let mut cmd = Command::new(bin);
        for (key, _) in std::env::vars() {
            if key.starts_with("FLUIDOS_") || key.starts_with("KUBERNETES_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("KUBECONFIG", cp.kubeconfig_path())
            .env("RUST_LOG", "info,kube=warn")
            .args(["--namespace", NS, "--components", components])
            .args([
                "--health-probe-bind-address",
                &format!("127.0.0.1:{}", fixtures::free_port().unwrap()),
            ])
            .args(["--metrics-bind-address", "0"])
            .args(["--rear-bind-address", "127.0.0.1"])
            .args(["--http-port", &rear_port.to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        collect(child.stdout.take().unwrap(), log.clone());
        collect(child.stderr.take().unwrap(), log.clone());
        NodeProcess { _child: child, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

fn collect(r: impl AsyncRead + Unpin + Send + 'static, into: Arc<Mutex<String>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut s = into.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
}

async fn cluster() -> ControlPlane {
    ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap()
}

/// kubectl with only the plugin on its `PATH`, a private `HOME`, and no
/// ambient kubeconfig: it must find `kubectl-fluidos` as a plugin.
struct Kubectl {
    kubectl: PathBuf,
    plugin_dir: tempfile::TempDir,
}

/// What one kubectl run did.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Kubectl {
    fn new(kubectl: PathBuf) -> Self {
        let plugin_dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_kubectl-fluidos"),
            plugin_dir.path().join("kubectl-fluidos"),
        )
        .unwrap();
        Kubectl {
            kubectl,
            plugin_dir,
        }
    }

    async fn run(&self, args: &[&str]) -> Run {
        let out = tokio::time::timeout(
            Duration::from_secs(120),
            Command::new(&self.kubectl)
                .args(args)
                .env_clear()
                .env("PATH", self.plugin_dir.path())
                .env("HOME", self.plugin_dir.path())
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("kubectl did not finish in 120 s")
        .unwrap();
        let run = Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        // Shown when the test fails (or with --nocapture).
        println!("$ kubectl {}\n{run}\n", args.join(" "));
        run
    }
}

async fn wait_for<T, Fut: Future<Output = Option<T>>>(
    what: &str,
    limit: Duration,
    nodes: &[&NodeProcess],
    mut f: impl FnMut() -> Fut,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out waiting for {what}\n--- node logs\n{}",
            nodes
                .iter()
                .map(|n| n.log())
                .collect::<Vec<_>>()
                .join("\n---\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one market and the plugin's commands in the order a user runs them"
)]
async fn kubectl_fluidos_solves_reports_and_releases() {
    let kubectl = match built_kubectl() {
        Ok(k) => k,
        Err(why) => {
            fluidos_testenv::skip::unavailable(why);
            return;
        }
    };
    let node_bin = node_binary();
    let kubectl = Kubectl::new(kubectl);

    // The market: a provider with one worker, a consumer that knows it.
    let (provider, consumer) = tokio::join!(cluster(), cluster());
    let (pport, cport) = (
        fixtures::free_port().unwrap(),
        fixtures::free_port().unwrap(),
    );
    for (cp, id, port) in [
        (&provider, "provider01", pport),
        (&consumer, "consumer01", cport),
    ] {
        fixtures::namespace(cp, NS).await.unwrap();
        fixtures::node_identity(cp, NS, id, "127.0.0.1", port)
            .await
            .unwrap();
    }
    fixtures::worker_node(&provider, "worker-1", "8", "16Gi")
        .await
        .unwrap();
    // The provider's REAR key, made before it starts (it loads it then): the
    // consumer and `flavors --remote` call it over TLS, pinned to it.
    let provider_key =
        fluidos_rear_identity::secret::node_fingerprint(&provider.client(), NS, "provider01")
            .await
            .unwrap()
            .to_string();
    let known = KnownCluster::new(
        "knowncluster-provider01",
        KnownClusterSpec {
            address: format!("127.0.0.1:{pport}"),
            fingerprint: Some(provider_key),
        },
    );
    Api::<KnownCluster>::namespaced(consumer.client(), NS)
        .create(&PostParams::default(), &known)
        .await
        .unwrap();
    let provider_node = NodeProcess::spawn(
        &node_bin,
        &provider,
        pport,
        "local-resource-manager,rear-gateway",
        &["--liqo-cluster-id", "liqo-provider"],
    );
    let consumer_node = NodeProcess::spawn(
        &node_bin,
        &consumer,
        cport,
        "rear-manager",
        &[
            "--liqo-cluster-id",
            "liqo-consumer",
            "--peer-timeout-ms",
            "1000",
        ],
    );
    let nodes = [&provider_node, &consumer_node];
    let flavors: Api<Flavor> = Api::namespaced(provider.client(), NS);
    wait_for(
        "the provider's flavor",
        Duration::from_secs(30),
        &nodes,
        || async {
            (!flavors
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty())
            .then_some(())
        },
    )
    .await;

    let pkc = provider.kubeconfig_path().to_str().unwrap().to_owned();
    let ckc = consumer.kubeconfig_path().to_str().unwrap().to_owned();
    let context = consumer
        .kubeconfig()
        .current_context
        .clone()
        .expect("the test kubeconfig names its context");

    // kubectl finds the plugin.
    let run = kubectl.run(&["plugin", "list"]).await;
    assert!(run.stdout.contains("kubectl-fluidos"), "{run}");

    // flavors: the provider's own, and the consumer's view over REAR.
    let run = kubectl
        .run(&["fluidos", "flavors", "--kubeconfig", &pkc])
        .await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.starts_with("NAME"), "{run}");
    assert!(run.stdout.contains("K8Slice"), "{run}");
    assert!(!run.stdout.contains('\x1b'), "no colour on a pipe: {run}");
    let run = kubectl
        .run(&[
            "fluidos",
            "flavors",
            "--remote",
            "--kubeconfig",
            &ckc,
            "-o",
            "json",
        ])
        .await;
    assert_eq!(run.code, Some(0), "{run}");
    let remote: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        remote["providers"][0]["source"], "knowncluster-provider01",
        "{run}"
    );
    assert!(
        !remote["providers"][0]["flavors"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{run}"
    );

    // solve: a purchase followed to the end, exit 0, the Contract present.
    let run = kubectl
        .run(&[
            "fluidos",
            "solve",
            "--kubeconfig",
            &ckc,
            "--context",
            &context,
            "--name",
            "buy-1",
            "--cpu",
            "1",
            "--memory",
            "1Gi",
            "--pods",
            "10",
            "--timeout",
            "90s",
        ])
        .await;
    assert_eq!(
        run.code,
        Some(0),
        "{run}\n--- consumer log\n{}",
        consumer_node.log()
    );
    assert!(run.stdout.contains("solver/buy-1 created"), "{run}");
    assert!(
        run.stdout.contains("Discovery"),
        "progress phase by phase: {run}"
    );
    assert!(
        run.stdout.contains("solver/buy-1 solved: contract/"),
        "{run}"
    );
    let reservation = Api::<Reservation>::namespaced(consumer.client(), NS)
        .get("reservation-buy-1")
        .await
        .unwrap();
    let contract = reservation
        .status
        .and_then(|s| s.contract)
        .and_then(|c| c.name)
        .expect("the Reservation names its Contract");
    let contracts: Api<Contract> = Api::namespaced(consumer.client(), NS);
    assert!(contracts.get_opt(&contract).await.unwrap().is_some());
    assert!(run.stdout.contains(&contract), "{run}");

    // A Solver that cannot be satisfied fails, and so does the command.
    let run = kubectl
        .run(&[
            "fluidos",
            "solve",
            "--kubeconfig",
            &ckc,
            "--name",
            "too-big",
            "--cpu",
            "1000",
            "--timeout",
            "60s",
        ])
        .await;
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("solver/too-big failed"), "{run}");

    // Not waiting, and giving up waiting: the Solver keeps running.
    let run = kubectl
        .run(&[
            "fluidos",
            "solve",
            "--kubeconfig",
            &ckc,
            "--name",
            "later",
            "--find-only",
            "--no-wait",
        ])
        .await;
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(run.stdout, "solver/later created\n", "{run}");
    let run = kubectl
        .run(&[
            "fluidos",
            "solve",
            "--kubeconfig",
            &ckc,
            "--name",
            "impatient",
            "--find-only",
            "--timeout",
            "1ms",
        ])
        .await;
    assert_eq!(run.code, Some(3), "{run}");
    assert!(run.stderr.contains("gave up after"), "{run}");

    // Bad usage is refused before anything is created.
    let run = kubectl
        .run(&[
            "fluidos",
            "solve",
            "--kubeconfig",
            &ckc,
            "--flavor-type",
            "Service",
            "--cpu",
            "1",
        ])
        .await;
    assert_eq!(run.code, Some(2), "{run}");

    // status: both Solvers and the Contract, as JSON.
    let run = kubectl
        .run(&["fluidos", "status", "--kubeconfig", &ckc, "-o", "json"])
        .await;
    assert_eq!(run.code, Some(0), "{run}");
    let status: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let phase_of = |name: &str| {
        status["solvers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["phase"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(phase_of("buy-1").as_deref(), Some("Solved"), "{run}");
    assert_eq!(phase_of("too-big").as_deref(), Some("Failed"), "{run}");
    assert_eq!(status["contracts"][0]["name"], contract.as_str(), "{run}");
    assert_eq!(status["contracts"][0]["role"], "bought", "{run}");
    assert!(status.get("peerings").is_none(), "no Liqo here: {run}");
    let run = kubectl
        .run(&["fluidos", "status", "--kubeconfig", &ckc])
        .await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout.contains("SOLVERS") && run.stdout.contains("buy-1"),
        "{run}"
    );

    // release: the consumer's copy, named through its Solver; then the
    // provider's, which returns the capacity.
    let run = kubectl
        .run(&["fluidos", "release", "--kubeconfig", &ckc, "solver/buy-1"])
        .await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout
            .contains(&format!("contract/{contract} released")),
        "{run}"
    );
    assert!(contracts.get_opt(&contract).await.unwrap().is_none());
    let provider_contracts: Api<Contract> = Api::namespaced(provider.client(), NS);
    let sold = provider_contracts
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(sold.len(), 1);
    let sold = sold[0].name_any();
    let run = kubectl
        .run(&[
            "fluidos",
            "release",
            "--kubeconfig",
            &pkc,
            &format!("contract/{sold}"),
        ])
        .await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("for sale again"), "{run}");
    assert!(provider_contracts.get_opt(&sold).await.unwrap().is_none());
    let run = kubectl
        .run(&[
            "fluidos",
            "release",
            "--kubeconfig",
            &pkc,
            "contract/no-such",
        ])
        .await;
    assert_eq!(run.code, Some(1), "{run}");
}
