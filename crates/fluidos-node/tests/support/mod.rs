//! Shared by the integration tests that run `fluidos-node` as a process
//! against real control planes.

// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

pub mod helm;
pub mod image;
pub mod peering;
pub mod real_cluster;
pub mod service;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fluidos_testenv::{ControlPlane, ControlPlaneOptions, fixtures};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// The namespace every test node uses.
pub const NS: &str = "fluidos";

/// A free loopback port.
pub fn free_port() -> u16 {
    fixtures::free_port().unwrap()
}

/// A control plane with our CRDs.
pub async fn cluster() -> ControlPlane {
    ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap()
}

/// The namespace and the identity ConfigMap a node needs to start, and its
/// REAR key (created here as the node would on first start; the node then
/// loads it): returns the key's fingerprint, which peers pin.
pub async fn prepare(cp: &ControlPlane, node_id: &str, rear_port: u16) -> String {
    fixtures::namespace(cp, NS).await.unwrap();
    fixtures::node_identity(cp, NS, node_id, "127.0.0.1", rear_port)
        .await
        .unwrap();
    fluidos_rear_identity::secret::node_fingerprint(&cp.client(), NS, node_id)
        .await
        .unwrap()
        .to_string()
}

/// A `fluidos-node` process, its output collected for failure messages.
pub struct NodeProcess {
    child: Child,
    log: CollectedOutput,
}

impl NodeProcess {
    /// Starts `components` on `cp`, REAR on `rear_port`, `/metrics` on
    /// `metrics_bind` (`"0"`: off), with `extra` flags.
    pub fn spawn(
        cp: &ControlPlane,
        rear_port: u16,
        components: &str,
        metrics_bind: &str,
        extra: &[&str],
    ) -> NodeProcess {
        let mut cmd = node_command();
        // FLUIDOS_TEST_NODE_LOG, to debug a failing test or bench.
        cmd.env("KUBECONFIG", cp.kubeconfig_path())
            .env("RUST_LOG", test_node_log())
            .args(["--namespace", NS, "--components", components])
            .args([
                "--health-probe-bind-address",
                &format!("127.0.0.1:{}", free_port()),
            ])
            .args(["--metrics-bind-address", metrics_bind])
            .args([
                "--rear-bind-address",
                "127.0.0.1",
                "--http-port",
                &rear_port.to_string(),
            ])
            .args(extra);
        NodeProcess::start(cmd)
    }

    /// Spawns `cmd` with stdin closed and its output collected; killed on drop.
    pub fn start(cmd: Command) -> NodeProcess {
        let (child, log) = spawn_collecting(cmd);
        NodeProcess { child, log }
    }

    /// Everything it printed so far.
    pub fn log(&self) -> String {
        self.log.text()
    }

    /// SIGKILL.
    pub async fn kill(mut self) {
        self.child.kill().await.unwrap();
    }
}

/// The `fluidos-node` binary under test, without the test's own
/// `FLUIDOS_*` and `KUBERNETES_*` environment (a test's settings must not
/// leak into the node it starts).
pub fn node_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fluidos-node"));
    for (key, _) in std::env::vars() {
        if key.starts_with("FLUIDOS_") || key.starts_with("KUBERNETES_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// The log level of test nodes: `FLUIDOS_TEST_NODE_LOG`, else info.
pub fn test_node_log() -> String {
    std::env::var("FLUIDOS_TEST_NODE_LOG").unwrap_or_else(|_| "info,kube=warn".into())
}

/// A process's stdout and stderr, read line by line into one text.
pub struct CollectedOutput {
    text: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

impl CollectedOutput {
    /// Everything read so far.
    pub fn text(&self) -> String {
        self.text.lock().unwrap().clone()
    }

    /// Waits until both streams ended (the process exited and its last
    /// lines were read), at most `limit`: a process's exit is seen before
    /// the readers reach the end of its pipes.
    pub async fn drained(&mut self, limit: Duration) {
        let readers = std::mem::take(&mut self.readers);
        let _ = tokio::time::timeout(limit, join_readers(readers)).await;
    }
}

async fn join_readers(readers: Vec<JoinHandle<()>>) {
    for reader in readers {
        let _ = reader.await;
    }
}

/// Spawns `cmd` with stdin closed, collecting stdout and stderr into one
/// log; the process is killed when the `Child` is dropped.
pub fn spawn_collecting(mut cmd: Command) -> (Child, CollectedOutput) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let text = Arc::new(Mutex::new(String::new()));
    let readers = vec![
        collect(child.stdout.take().unwrap(), text.clone()),
        collect(child.stderr.take().unwrap(), text.clone()),
    ];
    (child, CollectedOutput { text, readers })
}

fn collect(r: impl AsyncRead + Unpin + Send + 'static, into: Arc<Mutex<String>>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut s = into.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    })
}

/// Polls `f` until it returns `Some`, failing with `what` and the logs.
pub async fn eventually<T, F, Fut>(
    what: &str,
    limit: Duration,
    logs: &[&NodeProcess],
    mut f: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if start.elapsed() > limit {
            let logs: Vec<String> = logs.iter().map(|n| n.log()).collect();
            panic!(
                "timed out waiting for {what}\n--- logs\n{}",
                logs.join("\n---\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
