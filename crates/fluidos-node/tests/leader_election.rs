//! Leader election on a real control plane: two `fluidos-node` replicas
//! with `--leader-elect` and a short Lease. Exactly one holds the Lease and
//! runs the controllers (the other's gateway still serves, and it is
//! ready); SIGKILL the leader and the standby takes over within the lease
//! duration; no Solver is processed twice.
//!
//! One cluster plays both sides: a provider node in namespace `provider`
//! (local resource manager + REAR gateway) sells to the replicas, which run
//! in `fluidos` with the local resource manager, the REAR gateway and the
//! REAR manager, and reach the provider through `--peers`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::time::{Duration, Instant};

use fluidos_api::solver::{Selector, SolverSpec};
use fluidos_api::{Contract, Discovery, Flavor, Phase, Reservation, Solver};
use fluidos_testenv::{ControlPlane, fixtures};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::process::Child;

mod support;

use support::{
    CollectedOutput, NS, cluster, free_port, node_command, spawn_collecting, test_node_log,
};

/// The provider's namespace.
const PROVIDER_NS: &str = "provider";
/// The replicas' components.
const COMPONENTS: &str = "local-resource-manager,rear-gateway,rear-manager";
/// The Lease their component set elects on by default.
const LEASE: &str = "fluidos-node-local-resource-manager-rear-gateway-rear-manager";
/// Lease timing of the test (seconds): a standby takes over at most
/// `LEASE_SECONDS` (plus up to 1 s of jitter) after the leader's last renewal.
const LEASE_SECONDS: u64 = 8;
const RENEW_SECONDS: u64 = 5;
const RETRY_SECONDS: u64 = 2;

/// A `fluidos-node` process with its output, its ports and its Pod name.
struct Node {
    name: &'static str,
    child: Child,
    log: CollectedOutput,
    rear: u16,
    probes: u16,
    metrics: u16,
}

impl Node {
    /// Starts `components` in `namespace` as Pod `name`, with `extra` flags.
    fn spawn(
        cp: &ControlPlane,
        name: &'static str,
        namespace: &str,
        components: &str,
        rear: u16,
        extra: &[&str],
    ) -> Node {
        let (probes, metrics) = (free_port(), free_port());
        let mut cmd = node_command();
        cmd.env("KUBECONFIG", cp.kubeconfig_path())
            .env("POD_NAME", name)
            .env("RUST_LOG", test_node_log())
            .args(["--namespace", namespace, "--components", components])
            .args([
                "--health-probe-bind-address",
                &format!("127.0.0.1:{probes}"),
                "--metrics-bind-address",
                &format!("127.0.0.1:{metrics}"),
                "--rear-bind-address",
                "127.0.0.1",
                "--http-port",
                &rear.to_string(),
            ])
            .args(extra);
        let (child, log) = spawn_collecting(cmd);
        Node {
            name,
            child,
            log,
            rear,
            probes,
            metrics,
        }
    }

    /// A replica: the components under test, with `--leader-elect` and the
    /// short Lease.
    /// The replicas reach the provider through `--peers`, pinned to its key.
    fn replica(
        cp: &ControlPlane,
        name: &'static str,
        provider_rear: u16,
        provider_key: &str,
    ) -> Node {
        let peers = format!("127.0.0.1:{provider_rear}#{provider_key}");
        let (lease, renew, retry) = (
            LEASE_SECONDS.to_string(),
            RENEW_SECONDS.to_string(),
            RETRY_SECONDS.to_string(),
        );
        Node::spawn(
            cp,
            name,
            NS,
            COMPONENTS,
            free_port(),
            &[
                "--leader-elect",
                "--leader-election-lease-duration-seconds",
                &lease,
                "--leader-election-renew-deadline-seconds",
                &renew,
                "--leader-election-retry-period-seconds",
                &retry,
                "--peering=false",
                "--peers",
                &peers,
                "--peer-timeout-ms",
                "5000",
            ],
        )
    }

    fn log(&self) -> String {
        format!("--- {}\n{}", self.name, self.log.text())
    }

    /// GET `path` on `port`: status and body, `None` when nothing answers.
    async fn get(port: u16, path: &str) -> Option<(u16, String)> {
        let response = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}{path}"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.text().await.ok()?))
    }

    /// A sample of this node's `/metrics` (0 when absent).
    async fn metric(&self, series: &str) -> f64 {
        let (_, text) = Node::get(self.metrics, "/metrics").await.unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }

    /// Whether this node says it leads (`fluidos_leader` 1): it has seen
    /// itself as the Lease's holder, which can come after the Lease shows it.
    async fn leads(&self) -> bool {
        Node::get(self.metrics, "/metrics")
            .await
            .is_some_and(|(_, text)| text.lines().any(|l| l == "fluidos_leader 1"))
    }

    async fn solver_reconciles(&self) -> f64 {
        self.metric("fluidos_controller_reconciles_total{controller=\"solver\"}")
            .await
    }

    /// SIGKILL, and wait for the process to be gone.
    async fn kill(&mut self) {
        self.child.kill().await.unwrap();
    }

    /// SIGTERM, and the exit code.
    async fn terminate(&mut self) -> Option<i32> {
        let pid = self.child.id().unwrap().to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(status.success());
        let status = tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .expect("the node did not stop within 5 s of SIGTERM")
            .unwrap();
        self.log.drained(Duration::from_secs(5)).await;
        status.code()
    }
}

/// Polls `f` every 100 ms until it returns `Some`, failing with `what` and
/// the nodes' logs after `limit`.
async fn eventually<T, F, Fut>(what: &str, limit: Duration, nodes: &[&Node], mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out waiting for {what}\n{}",
            nodes.iter().map(|n| n.log()).collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The Lease's holder, if any.
async fn holder(cp: &ControlPlane) -> Option<String> {
    Api::<Lease>::namespaced(cp.client(), NS)
        .get_opt(LEASE)
        .await
        .unwrap()?
        .spec?
        .holder_identity
}

/// The replica `identity` belongs to (identities are `<pod>_<suffix>`).
fn holder_pod(identity: &str) -> &str {
    identity.split_once('_').map_or(identity, |(pod, _)| pod)
}

fn k8slice_solver(name: &str) -> Solver {
    let mut s = Solver::new(
        name,
        SolverSpec {
            selector: Some(Selector {
                flavor_type: "K8Slice".into(),
                filters: Some(json!({
                    "cpuFilter": {"name": "Range", "data": {"min": "1000m"}},
                    "memoryFilter": {"name": "Range", "data": {"min": "1Gi", "max": "100Gi"}}
                })),
            }),
            intent_id: format!("intent-{name}"),
            find_candidate: Some(true),
            reserve_and_buy: Some(true),
            establish_peering: Some(false),
        },
    );
    s.metadata.namespace = Some(NS.into());
    s
}

/// Creates the Solver `name` and waits until it is Solved.
async fn buy(cp: &ControlPlane, name: &str, nodes: &[&Node]) {
    let solvers: Api<Solver> = Api::namespaced(cp.client(), NS);
    solvers
        .create(&PostParams::default(), &k8slice_solver(name))
        .await
        .unwrap();
    let (phase, msg) = eventually(
        &format!("Solver {name} to finish"),
        Duration::from_secs(60),
        nodes,
        || async {
            let p = solvers
                .get(name)
                .await
                .unwrap()
                .status
                .and_then(|s| s.solver_phase)
                .unwrap_or_default();
            let msg = p.message.unwrap_or_default();
            let done = matches!(p.phase, Phase::Failed | Phase::TimedOut)
                || (p.phase == Phase::Solved && msg.starts_with("No need to"));
            done.then_some((p.phase, msg))
        },
    )
    .await;
    let discovery = Api::<Discovery>::namespaced(cp.client(), NS)
        .get_opt(&format!("discovery-{name}"))
        .await
        .unwrap();
    assert_eq!(
        (phase, msg.as_str()),
        (Phase::Solved, "No need to establish a peering"),
        "discovery status: {:?}\n{}",
        discovery.and_then(|d| d.status),
        nodes.iter().map(|n| n.log()).collect::<Vec<_>>().join("\n")
    );
}

/// Names and UIDs of the `K` objects in `ns`.
async fn uids<K>(cp: &ControlPlane, ns: &str) -> Vec<(String, String)>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned,
    K::DynamicType: Default,
{
    let mut out: Vec<(String, String)> = Api::<K>::namespaced(cp.client(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| (o.name_any(), o.uid().unwrap_or_default()))
        .collect();
    out.sort();
    out
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, election to failover to release: it reads top to bottom"
)]
async fn one_replica_leads_and_the_other_takes_over_when_it_dies() {
    let cp = cluster().await;
    fixtures::namespace(&cp, NS).await.unwrap();
    fixtures::namespace(&cp, PROVIDER_NS).await.unwrap();
    // Two workers, two flavors: each Solver buys a whole one (all its pods).
    for worker in ["worker-1", "worker-2"] {
        fixtures::worker_node(&cp, worker, "8", "16Gi")
            .await
            .unwrap();
    }
    let provider_rear = free_port();
    fixtures::node_identity(&cp, PROVIDER_NS, "provider01", "127.0.0.1", provider_rear)
        .await
        .unwrap();
    // The provider's REAR key, made before it starts (it loads it then).
    let provider_key =
        fluidos_rear_identity::secret::node_fingerprint(&cp.client(), PROVIDER_NS, "provider01")
            .await
            .unwrap()
            .to_string();
    // The replicas share one identity, as a Deployment's Pods do.
    fixtures::node_identity(&cp, NS, "consumer01", "127.0.0.1", free_port())
        .await
        .unwrap();
    let provider = Node::spawn(
        &cp,
        "provider",
        PROVIDER_NS,
        "local-resource-manager,rear-gateway",
        provider_rear,
        &["--liqo-cluster-id", "liqo-provider"],
    );
    let mut a = Node::replica(&cp, "replica-a", provider_rear, &provider_key);
    let mut b = Node::replica(&cp, "replica-b", provider_rear, &provider_key);

    // Exactly one holds the Lease; both are ready (the standby because its
    // gateway serves); only the leader says it leads.
    let first = eventually(
        "a replica to hold the Lease",
        Duration::from_secs(60),
        &[&a, &b],
        || async { holder(&cp).await },
    )
    .await;
    let (leader, standby) = match holder_pod(&first) {
        "replica-a" => (&mut a, &mut b),
        "replica-b" => (&mut b, &mut a),
        other => panic!("unexpected holder {other:?} ({first})"),
    };
    for node in [&*leader, &*standby] {
        eventually(
            &format!("{} to be ready", node.name),
            Duration::from_secs(60),
            &[node],
            || async {
                Node::get(node.probes, "/readyz")
                    .await
                    .filter(|(code, _)| *code == 200)
            },
        )
        .await;
    }
    let (_, body) = Node::get(standby.probes, "/readyz").await.unwrap();
    assert!(body.contains("not the leader"), "{body}");
    eventually(
        "the leader to say so",
        Duration::from_secs(10),
        &[&*leader],
        || async { leader.leads().await.then_some(()) },
    )
    .await;
    assert_eq!(standby.metric("fluidos_leader").await, 0.0);
    // The standby's REAR gateway answers other nodes with the flavors the
    // leader publishes. Being ready means its Flavor cache has synced, not
    // that it has seen a Flavor the leader wrote a moment before (a 204,
    // nothing for sale, until its watch delivers it).
    eventually(
        "the standby's REAR gateway to list the leader's flavors",
        Duration::from_secs(30),
        &[&*standby],
        || async {
            Node::get(standby.rear, "/api/v2/flavors")
                .await
                .filter(|(code, _)| *code == 200)
        },
    )
    .await;
    // The provider publishes before the first Solver.
    let provider_flavors: Api<Flavor> = Api::namespaced(cp.client(), PROVIDER_NS);
    eventually(
        "the provider's flavors",
        Duration::from_secs(30),
        &[&provider],
        || async {
            (provider_flavors
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len()
                == 2)
                .then_some(())
        },
    )
    .await;

    // The leader buys; the standby never reconciles a Solver.
    buy(&cp, "solver-1", &[&*leader, &*standby, &provider]).await;
    assert!(leader.solver_reconciles().await > 0.0);
    assert_eq!(standby.solver_reconciles().await, 0.0, "{}", standby.log());
    assert_eq!(holder(&cp).await.as_deref(), Some(first.as_str()));
    let discoveries = uids::<Discovery>(&cp, NS).await;
    let reservations = uids::<Reservation>(&cp, NS).await;
    let sold = uids::<Contract>(&cp, PROVIDER_NS).await;
    assert_eq!(discoveries.len(), 1, "{discoveries:?}");
    assert_eq!(reservations.len(), 1, "{reservations:?}");
    assert_eq!(sold.len(), 1, "{sold:?}");

    // SIGKILL the leader: it cannot release the Lease; the standby takes
    // over once it expires.
    leader.kill().await;
    let killed = Instant::now();
    let second = eventually(
        "the standby to take the Lease over",
        Duration::from_secs(LEASE_SECONDS + 10),
        &[&*standby],
        || async { holder(&cp).await.filter(|h| *h != first) },
    )
    .await;
    let took = killed.elapsed();
    assert_eq!(holder_pod(&second), standby.name, "{second}");
    assert!(
        took <= Duration::from_secs(LEASE_SECONDS + 3),
        "took over after {took:?}, lease {LEASE_SECONDS} s\n{}",
        standby.log()
    );
    eprintln!("standby took over {took:?} after the leader was killed");
    eventually(
        "the new leader to say so",
        Duration::from_secs(10),
        &[&*standby],
        || async { standby.leads().await.then_some(()) },
    )
    .await;

    // The new leader buys for a new Solver, and leaves the first alone: its
    // Discovery, Reservation and Contract are the same objects as before.
    buy(&cp, "solver-2", &[&*standby, &provider]).await;
    assert!(standby.solver_reconciles().await > 0.0);
    let after_d = uids::<Discovery>(&cp, NS).await;
    let after_r = uids::<Reservation>(&cp, NS).await;
    let after_c = uids::<Contract>(&cp, PROVIDER_NS).await;
    // At most one Discovery per Solver: solver-2 may pick a candidate
    // solver-1's Discovery found instead of discovering again.
    assert!(after_d.len() <= 2, "{after_d:?}");
    assert_eq!(after_r.len(), 2, "one Reservation per Solver: {after_r:?}");
    assert_eq!(after_c.len(), 2, "one sale per Solver: {after_c:?}");
    assert!(after_d.contains(&discoveries[0]), "{after_d:?}");
    assert!(after_r.contains(&reservations[0]), "{after_r:?}");
    assert!(after_c.contains(&sold[0]), "{after_c:?}");
    assert_eq!(uids::<Contract>(&cp, NS).await.len(), 2);

    // SIGTERM: the leader stops its controllers, then releases the Lease.
    assert_eq!(standby.terminate().await, Some(0), "{}", standby.log());
    let lease = Api::<Lease>::namespaced(cp.client(), NS)
        .get(LEASE)
        .await
        .unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity),
        None,
        "{}",
        standby.log()
    );
    drop(provider);
    cp.stop().await;
}

/// A leader that finds another holder on the Lease (it was partitioned
/// away and the Lease was taken over) stops at once: exit code 1, so that
/// Kubernetes restarts it as a standby.
#[tokio::test]
async fn a_leader_that_loses_the_lease_exits_1() {
    let cp = cluster().await;
    fixtures::namespace(&cp, NS).await.unwrap();
    fixtures::node_identity(&cp, NS, "consumer01", "127.0.0.1", free_port())
        .await
        .unwrap();
    let (lease, renew, retry) = (
        LEASE_SECONDS.to_string(),
        RENEW_SECONDS.to_string(),
        RETRY_SECONDS.to_string(),
    );
    let mut node = Node::spawn(
        &cp,
        "replica-a",
        NS,
        "rear-manager",
        free_port(),
        &[
            "--leader-elect",
            "--leader-election-lease-name",
            "the-lease",
            "--leader-election-lease-duration-seconds",
            &lease,
            "--leader-election-renew-deadline-seconds",
            &renew,
            "--leader-election-retry-period-seconds",
            &retry,
            "--peering=false",
        ],
    );
    let leases: Api<Lease> = Api::namespaced(cp.client(), NS);
    // Leading by its own account: the Lease shows the holder a moment
    // before the replica has read it back.
    eventually(
        "the replica to lead",
        Duration::from_secs(60),
        &[&node],
        || async { node.leads().await.then_some(()) },
    )
    .await;
    let holder = leases
        .get("the-lease")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(holder.starts_with("replica-a_"), "{holder}");
    // Another holder, freshly renewed, as after a partition.
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    );
    leases
        .patch(
            "the-lease",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {
                "holderIdentity": "intruder_00000000",
                "renewTime": now,
                "acquireTime": now,
            }})),
        )
        .await
        .unwrap();
    let status = tokio::time::timeout(
        Duration::from_secs(RENEW_SECONDS + RETRY_SECONDS + 5),
        node.child.wait(),
    )
    .await
    .unwrap_or_else(|_| panic!("the replica kept running\n{}", node.log()))
    .unwrap();
    // Its last lines are read after its exit is seen.
    node.log.drained(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(1), "{}", node.log());
    assert!(node.log().contains("leadership lost"), "{}", node.log());
    cp.stop().await;
}
