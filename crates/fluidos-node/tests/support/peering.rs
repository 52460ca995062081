//! Helpers of the tests and the benchmark that peer two control planes
//! through the real Liqo v1.0.0 with `fluidos-node` processes.

use std::io::Write as _;
use std::time::{Duration, Instant};

use fluidos_api::allocation::AllocationState;
use fluidos_api::{Allocation, Contract, Solver};
use fluidos_testenv::{ControlPlane, Liqo};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, ResourceExt};

use super::{NS, NodeProcess};

pub const CONSUMER_ID: &str = "fluidos-consumer";
pub const PROVIDER_ID: &str = "fluidos-provider";
pub const LIMIT: Duration = Duration::from_secs(120);

pub fn say(line: &str) {
    let _ = std::io::stderr().write_all(format!("[peering] {line}\n").as_bytes());
}

pub fn skip_reason() -> Option<String> {
    if let Some(reason) = fluidos_testenv::liqo::skip_reason() {
        return Some(reason);
    }
    if fluidos_testenv::shared_reference_dir().is_none() {
        return Some("../shared/reference is absent (the Solver sample comes from there)".into());
    }
    None
}

pub struct Phases {
    started: Instant,
    last: Instant,
    done: Vec<(String, Duration)>,
}

impl Phases {
    pub fn new() -> Self {
        let now = Instant::now();
        Phases {
            started: now,
            last: now,
            done: Vec::new(),
        }
    }
    pub fn mark(&mut self, name: &str) {
        let took = self.last.elapsed();
        self.last = Instant::now();
        say(&format!("phase {name:<60} {took:>9.2?}"));
        self.done.push((name.to_owned(), took));
    }
    pub fn summary(&self) {
        say("phase timings:");
        for (name, took) in &self.done {
            say(&format!("  {name:<62} {took:>9.2?}"));
        }
        say(&format!(
            "  {:<62} {:>9.2?}",
            "total",
            self.started.elapsed()
        ));
    }
}

/// Polls `f` until `Some`; on timeout fails with `what`, the last state and
/// the logs of both nodes and both Liqos.
pub async fn until<T, F, Fut>(
    what: &str,
    nodes: &[&NodeProcess],
    liqos: &mut [&mut Liqo],
    mut f: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        for l in liqos.iter_mut() {
            if let Err(e) = l.ensure_running() {
                panic!("a Liqo process died while waiting for {what}: {e}");
            }
        }
        let last = match f().await {
            Ok(v) => return v,
            Err(e) => e,
        };
        if start.elapsed() > LIMIT {
            let logs: Vec<String> = nodes.iter().map(|n| n.log()).collect();
            let liqo: Vec<String> = liqos.iter().map(|l| l.log_tails()).collect();
            // CI quotes a failure's first and last lines only: the errors
            // and warnings of Liqo and of the CSR signer come first.
            let problems: Vec<String> = liqos.iter().map(|l| l.problem_lines(4)).collect();
            panic!(
                "timed out waiting for {what}; last: {last}\n{}\n--- node logs\n{}\n--- liqo\n{}",
                problems.join("\n"),
                logs.join("\n---\n"),
                liqo.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn dynamic(
    client: &kube::Client,
    group: &str,
    kind: &str,
    plural: &str,
    ns: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, "v1beta1", kind);
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

/// A provider worker Node (8 CPUs, 16Gi, 110 pods) as
/// `fixtures::worker_node` makes it, but labelled `liqo.io/type` so that kwok
/// (which manages every other Node once the control plane runs workloads)
/// does not replace its capacity with its own defaults.
pub async fn worker_node(cp: &ControlPlane, name: &str) {
    let api: Api<Node> = Api::all(cp.client());
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {
            "node-role.fluidos.eu/resources": "true",
            "liqo.io/type": "fluidos-test-worker"}},
    }))
    .unwrap();
    api.create(&PostParams::default(), &node).await.unwrap();
    let resources = serde_json::json!({"cpu": "8", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"});
    let status = serde_json::json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "machineID": "",
            "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
            "containerRuntimeVersion": "", "kubeletVersion": "", "kubeProxyVersion": ""}
    }});
    api.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(status),
    )
    .await
    .unwrap();
}

/// State and message of the Allocation of Contract `contract`.
pub async fn allocation_state(
    cp: &ControlPlane,
    contract: &str,
) -> Result<(AllocationState, String), String> {
    let list = Api::<Allocation>::namespaced(cp.client(), NS)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let a = list
        .items
        .into_iter()
        .find(|a| a.spec.contract.as_ref().and_then(|c| c.name.as_deref()) == Some(contract))
        .ok_or("no Allocation")?;
    let s = a.status.unwrap_or_default();
    Ok((s.status.ok_or("no status")?, s.message.unwrap_or_default()))
}

/// The first Contract on `cp` not named in `known`.
pub async fn new_contract(cp: &ControlPlane, known: &[String]) -> Result<Contract, String> {
    Api::<Contract>::namespaced(cp.client(), NS)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .find(|c| !known.contains(&c.name_any()))
        .ok_or_else(|| "no new Contract yet".to_owned())
}

/// Once Liqo created the VirtualNode of ResourceSlice `slice` and its
/// virtual-kubelet Deployment, runs the stand-in and waits for the Node.
pub async fn ready_virtual_node(
    consumer: &ControlPlane,
    c_liqo: &mut Liqo,
    p_liqo: &mut Liqo,
    nodes: &[&NodeProcess],
    c_tenant: &str,
    slice: &str,
) -> (Node, String) {
    let virtual_nodes = dynamic(
        &consumer.client(),
        "offloading.liqo.io",
        "VirtualNode",
        "virtualnodes",
        c_tenant,
    );
    let deployment = until(
        "the VirtualNode and its virtual-kubelet Deployment",
        nodes,
        &mut [&mut *c_liqo, &mut *p_liqo],
        || async {
            let vn = virtual_nodes
                .get_opt(slice)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no VirtualNode yet".to_owned())?;
            let d = vn
                .data
                .pointer("/spec/template/metadata/name")
                .and_then(|v| v.as_str())
                .ok_or("no template name")?
                .to_owned();
            Api::<Deployment>::namespaced(consumer.client(), c_tenant)
                .get_opt(&d)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no Deployment yet".to_owned())
                .map(|_| d)
        },
    )
    .await;

    c_liqo
        .start_virtual_kubelet(consumer, c_tenant, &deployment)
        .await
        .unwrap();
    let node = until(
        "the virtual Node Ready",
        nodes,
        &mut [&mut *c_liqo, &mut *p_liqo],
        || async {
            let n = Api::<Node>::all(consumer.client())
                .get_opt(slice)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no Node yet".to_owned())?;
            let ready = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if ready {
                Ok(n)
            } else {
                Err("not Ready".into())
            }
        },
    )
    .await;
    (node, deployment)
}

/// Deletes Solver `solver` and waits until the peering of its Contract
/// (`slice`) is gone from both sides: the ResourceSlice and its replica, the
/// VirtualNode and virtual Node, the Allocation; with `others_left`, the
/// authentication must stay (another Contract uses it), else it must go too
/// (Identity here, Tenant and nonce on the provider).
#[expect(
    clippy::too_many_arguments,
    clippy::too_many_lines,
    reason = "one test step over both clusters, each object checked by name"
)]
pub async fn unpeer(
    consumer: &ControlPlane,
    provider: &ControlPlane,
    c_liqo: &mut Liqo,
    p_liqo: &mut Liqo,
    nodes: &[&NodeProcess],
    solver: &str,
    slice: &str,
    deployment: &str,
    others_left: bool,
) {
    let c_tenant = format!("liqo-tenant-{PROVIDER_ID}");
    let p_tenant = format!("liqo-tenant-{CONSUMER_ID}");
    let started = Instant::now();
    Api::<Solver>::namespaced(consumer.client(), NS)
        .delete(solver, &kube::api::DeleteParams::background())
        .await
        .unwrap();
    // Its Allocation goes with it through kube-controller-manager's garbage
    // collector, which may take long to discover a CRD installed minutes
    // ago; deleting it too keeps the test about our teardown, not the GC.
    let allocations = Api::<Allocation>::namespaced(consumer.client(), NS);
    for a in allocations
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        if a.spec.contract.as_ref().and_then(|c| c.name.as_deref()) == Some(slice) {
            match allocations
                .delete(&a.name_any(), &kube::api::DeleteParams::background())
                .await
            {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => panic!("deleting the Allocation: {e}"),
            }
        }
    }
    let slices = dynamic(
        &consumer.client(),
        "authentication.liqo.io",
        "ResourceSlice",
        "resourceslices",
        &c_tenant,
    );
    let replicas = dynamic(
        &provider.client(),
        "authentication.liqo.io",
        "ResourceSlice",
        "resourceslices",
        &p_tenant,
    );
    let virtual_nodes = dynamic(
        &consumer.client(),
        "offloading.liqo.io",
        "VirtualNode",
        "virtualnodes",
        &c_tenant,
    );
    // The stand-in plays the virtual-kubelet pod: it ends when Liqo deletes
    // the pod's Deployment, as the pod would.
    until(
        "the virtual-kubelet Deployment gone",
        nodes,
        &mut [&mut *c_liqo, &mut *p_liqo],
        || async {
            match Api::<Deployment>::namespaced(consumer.client(), &c_tenant)
                .get_opt(deployment)
                .await
                .map_err(|e| e.to_string())?
            {
                None => Ok(()),
                Some(_) => {
                    let st = allocation_state(consumer, slice).await;
                    Err(format!("Deployment still there; Allocation {st:?}"))
                }
            }
        },
    )
    .await;
    say(&format!(
        "  virtual-kubelet Deployment gone after {:?}",
        started.elapsed()
    ));
    c_liqo.stop_virtual_kubelet(deployment).await;
    until(
        "the slice, its replica, the virtual node and the Allocation gone",
        nodes,
        &mut [&mut *c_liqo, &mut *p_liqo],
        || async {
            let mut left = Vec::new();
            if exists(&slices, slice).await? {
                left.push("ResourceSlice");
            }
            if exists(&replicas, slice).await? {
                left.push("replica on the provider");
            }
            if exists(&virtual_nodes, slice).await? {
                left.push("VirtualNode");
            }
            if Api::<Node>::all(consumer.client())
                .get_opt(slice)
                .await
                .map_err(|e| e.to_string())?
                .is_some()
            {
                left.push("Node");
            }
            match allocation_state(consumer, slice).await {
                Err(e) if e == "no Allocation" => {}
                other => return Err(format!("Allocation still there: {other:?}; also {left:?}")),
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("left: {left:?}"))
            }
        },
    )
    .await;
    let identity = dynamic(
        &consumer.client(),
        "authentication.liqo.io",
        "Identity",
        "identities",
        &c_tenant,
    )
    .get_opt(&format!("controlplane-{PROVIDER_ID}"))
    .await
    .unwrap();
    let tenant = dynamic(
        &provider.client(),
        "authentication.liqo.io",
        "Tenant",
        "tenants",
        &p_tenant,
    );
    if others_left {
        assert!(
            identity.is_some(),
            "another Contract still uses the authentication"
        );
        assert!(tenant.get_opt(CONSUMER_ID).await.unwrap().is_some());
        return;
    }
    until(
        "the authentication gone on both sides",
        nodes,
        &mut [&mut *c_liqo, &mut *p_liqo],
        || async {
            let mut left = Vec::new();
            if dynamic(
                &consumer.client(),
                "authentication.liqo.io",
                "Identity",
                "identities",
                &c_tenant,
            )
            .get_opt(&format!("controlplane-{PROVIDER_ID}"))
            .await
            .map_err(|e| e.to_string())?
            .is_some()
            {
                left.push("Identity");
            }
            if exists(&tenant, CONSUMER_ID).await? {
                left.push("Tenant on the provider");
            }
            for (client, ns, secret) in [
                (consumer.client(), &c_tenant, "liqo-signed-nonce"),
                (provider.client(), &p_tenant, "liqo-nonce"),
            ] {
                if Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client, ns)
                    .get_opt(secret)
                    .await
                    .map_err(|e| e.to_string())?
                    .is_some()
                {
                    left.push(secret);
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("left: {left:?}"))
            }
        },
    )
    .await;
}

/// Two control planes with Liqo on each, a provider with `workers` worker
/// nodes (one flavor each) and a consumer that knows it: the stage of the
/// peering tests and benchmark, before any `fluidos-node` runs.
pub struct TwoClusters {
    /// The provider's control plane.
    pub provider: ControlPlane,
    /// The consumer's control plane.
    pub consumer: ControlPlane,
    provider_port: u16,
    consumer_port: u16,
    /// With Liqo's networking module: the consumer node runs the
    /// networking phase, the gateway pods are played by the stand-ins.
    networking: bool,
    _gateways: Vec<fluidos_testenv::liqo_gateway::GatewayStandIn>,
}

impl TwoClusters {
    /// Starts both clusters and Liqo on each (returned: consumer's, then
    /// provider's), then makes the node identities, the provider's workers
    /// and the consumer's KnownCluster.
    pub async fn start(workers: usize) -> (TwoClusters, Liqo, Liqo) {
        Self::start_with(workers, false).await
    }

    /// [`TwoClusters::start`], with Liqo's networking module on both sides
    /// when `networking`: a kwok node for the gateway pods on each, and the
    /// [`fluidos_testenv::liqo_gateway::GatewayStandIn`] (test support) for
    /// what those pods would do.
    pub async fn start_with(workers: usize, networking: bool) -> (TwoClusters, Liqo, Liqo) {
        let binaries = fluidos_testenv::LiqoBinaries::from_env().unwrap();
        let options = || fluidos_testenv::ControlPlaneOptions {
            workloads: true,
            crd_dirs: vec![fluidos_testenv::crds_dir()],
            ..Default::default()
        };
        let (provider, consumer) = tokio::join!(
            ControlPlane::start(options()),
            ControlPlane::start(options())
        );
        let (provider, consumer) = (provider.unwrap(), consumer.unwrap());
        let liqo = |id: &str| fluidos_testenv::LiqoOptions {
            cluster_id: id.to_owned(),
            networking,
            ..Default::default()
        };
        // The provider's Liqo enforces the granted resources on offloaded
        // pods (off in Liqo's chart by default; a provider selling slices
        // turns it on): each pod must request cpu and memory, and a tenant's
        // pods together get no more than its Quota.
        let enforcing = fluidos_testenv::LiqoOptions {
            extra_controller_manager_args: vec!["--default-limits-enforcement=Soft".into()],
            extra_webhook_args: vec!["--enable-resource-enforcement".into()],
            ..liqo(PROVIDER_ID)
        };
        let (c_liqo, p_liqo) = tokio::join!(
            Liqo::start_with(&consumer, &binaries, liqo(CONSUMER_ID)),
            Liqo::start_with(&provider, &binaries, enforcing)
        );
        let mut gateways = Vec::new();
        if networking {
            for cp in [&provider, &consumer] {
                Api::<k8s_openapi::api::core::v1::Node>::all(cp.client())
                    .create(
                        &PostParams::default(),
                        &fluidos_testenv::liqo::kwok_node("gateway-node"),
                    )
                    .await
                    .unwrap();
                gateways.push(fluidos_testenv::liqo_gateway::GatewayStandIn::start(
                    cp.client(),
                ));
            }
        }
        let (provider_port, consumer_port) = (super::free_port(), super::free_port());
        let provider_key = super::prepare(&provider, "provider01", provider_port).await;
        super::prepare(&consumer, "consumer01", consumer_port).await;
        for i in 1..=workers {
            let name = format!("worker-{i}");
            worker_node(&provider, &name).await;
            if networking {
                // The workers are not kwok's (see `worker_node`): a gateway
                // pod the scheduler put there would never run, and would
                // count against the worker's flavor. It goes to the
                // gateway node.
                Api::<Node>::all(provider.client())
                    .patch(
                        &name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(serde_json::json!({"spec": {"taints": [
                            {"key": "fluidos.eu/test-no-pods", "value": "true",
                                "effect": "NoSchedule"}
                        ]}})),
                    )
                    .await
                    .unwrap();
            }
        }
        Api::<fluidos_api::KnownCluster>::namespaced(consumer.client(), NS)
            .create(
                &PostParams::default(),
                &fluidos_api::KnownCluster::new(
                    "knowncluster-provider01",
                    fluidos_api::network::KnownClusterSpec {
                        address: format!("127.0.0.1:{provider_port}"),
                        fingerprint: Some(provider_key),
                    },
                ),
            )
            .await
            .unwrap();
        (
            TwoClusters {
                provider,
                consumer,
                provider_port,
                consumer_port,
                networking,
                _gateways: gateways,
            },
            c_liqo.unwrap(),
            p_liqo.unwrap(),
        )
    }

    /// The provider's REAR port (in its node identity, and the consumer's
    /// KnownCluster).
    pub fn provider_port(&self) -> u16 {
        self.provider_port
    }

    /// The consumer's REAR port (in its node identity).
    pub fn consumer_port(&self) -> u16 {
        self.consumer_port
    }

    /// The provider's `fluidos-node` (LRM, REAR gateway, REAR manager).
    pub fn provider_node(&self) -> NodeProcess {
        NodeProcess::spawn(
            &self.provider,
            self.provider_port,
            "local-resource-manager,rear-gateway,rear-manager",
            "0",
            &["--liqo-cluster-id", PROVIDER_ID],
        )
    }

    /// The consumer's `fluidos-node` (REAR manager), with a generous listing
    /// timeout: Liqo and the virtual kubelet share the cores with the nodes.
    pub fn consumer_node(&self) -> NodeProcess {
        NodeProcess::spawn(
            &self.consumer,
            self.consumer_port,
            "rear-manager",
            "0",
            &[
                "--liqo-cluster-id",
                CONSUMER_ID,
                "--peer-timeout-ms",
                "10000",
                "--liqo-networking",
                if self.networking { "true" } else { "false" },
                // The stand-in gateways have no node ports to reach.
                "--liqo-gateway-service-type",
                "ClusterIP",
            ],
        )
    }

    /// Waits for the provider's `flavors` flavors and for the consumer's
    /// watches (it acts on Solvers once they have listed).
    pub async fn wait_serving(&self, p_node: &NodeProcess, c_node: &NodeProcess, flavors: usize) {
        let nodes = [p_node, c_node];
        let api: Api<fluidos_api::Flavor> = Api::namespaced(self.provider.client(), NS);
        until("the provider's flavors", &nodes, &mut [], || async {
            let n = api
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
            if n == flavors {
                Ok(())
            } else {
                Err(format!("{n} flavors"))
            }
        })
        .await;
        until("the consumer's controllers", &nodes, &mut [], || async {
            if c_node
                .log()
                .contains("consumer controllers' watches established")
            {
                Ok(())
            } else {
                Err("not yet".to_owned())
            }
        })
        .await;
    }

    /// The upstream Solver sample (`establishPeering: true`), unchanged.
    pub fn sample_solver() -> Solver {
        let path = fluidos_testenv::shared_reference_dir()
            .unwrap()
            .join("fluidos-samples/solver.yaml");
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }
}

/// Whether `name` exists, or the API error as text (for [`until`]).
pub async fn exists<K>(api: &Api<K>, name: &str) -> Result<bool, String>
where
    K: kube::Resource + Clone + for<'de> k8s_openapi::serde::Deserialize<'de> + std::fmt::Debug,
{
    Ok(api
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())?
        .is_some())
}

/// Waits until the consumer's control-plane Identity for the provider has
/// its kubeconfig (authenticated).
pub async fn wait_authenticated(
    consumer: &ControlPlane,
    nodes: &[&NodeProcess],
    liqos: &mut [&mut Liqo],
) {
    let identities = dynamic(
        &consumer.client(),
        "authentication.liqo.io",
        "Identity",
        "identities",
        &format!("liqo-tenant-{PROVIDER_ID}"),
    );
    until(
        "the control-plane Identity's kubeconfig",
        nodes,
        liqos,
        || async {
            let i = identities
                .get_opt(&format!("controlplane-{PROVIDER_ID}"))
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no Identity yet".to_owned())?;
            i.data
                .pointer("/status/kubeconfigSecretRef/name")
                .map(drop)
                .ok_or_else(|| "no kubeconfig yet".to_owned())
        },
    )
    .await;
}

/// Waits until the Allocation of Contract `contract` on `cp` is `Active`;
/// returns its message.
pub async fn wait_active(
    cp: &ControlPlane,
    contract: &str,
    nodes: &[&NodeProcess],
    liqos: &mut [&mut Liqo],
) -> String {
    until("the Allocation Active", nodes, liqos, || async {
        let (s, m) = allocation_state(cp, contract).await?;
        if s == AllocationState::Active {
            Ok(m)
        } else {
            Err(format!("{s}: {m}"))
        }
    })
    .await
}

/// Uses the peering as a consumer's user would, and as `liqoctl` users do:
/// offloads namespace `offloaded` (NamespaceOffloading, remote pods only) and
/// starts a pod there. The consumer's scheduler must place it on virtual node
/// `virtual_node`, the virtual kubelet reflect it to the provider as a
/// ShadowPod, the provider's Liqo make the Pod, kwok run it on a provider
/// Node, and its status come back. Then the pod and the offloading are
/// deleted and the provider's namespace goes away, as before the test.
pub async fn offload_a_pod(
    consumer: &ControlPlane,
    provider: &ControlPlane,
    nodes: &[&NodeProcess],
    liqos: &mut [&mut Liqo],
    (virtual_node, sold_cpu): (&str, &str),
) {
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    let (offloadings, remote_ns) = offload_namespace(consumer, provider, nodes, liqos).await;

    a_peer_may_run_only_restricted_pods(consumer, provider, nodes, liqos, &remote_ns).await;

    // A `restricted` pod (the Pod Security level of the provider's peer
    // namespaces) runs through the virtual node.
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "offloaded"},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "web", "image": "example.invalid/web:1",
                "securityContext": {"allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}},
                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}
    }))
    .unwrap();
    let c_pods: Api<Pod> = Api::namespaced(consumer.client(), "offloaded");
    c_pods.create(&PostParams::default(), &pod).await.unwrap();
    let p_pods: Api<Pod> = Api::namespaced(provider.client(), &remote_ns);
    let remote = until("the pod Running on the provider", nodes, liqos, || async {
        let pod = p_pods
            .get_opt("web")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "no pod on the provider yet".to_owned())?;
        match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Running") => Ok(pod),
            other => Err(format!("provider pod phase {other:?}")),
        }
    })
    .await;
    assert_eq!(
        remote.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("provider-kwok")
    );
    let shadow_pods = dynamic(
        &provider.client(),
        "offloading.liqo.io",
        "ShadowPod",
        "shadowpods",
        &remote_ns,
    );
    assert!(
        exists(&shadow_pods, "web").await.unwrap(),
        "the provider's pod comes from the virtual kubelet's ShadowPod"
    );
    let local = until(
        "the pod Running on the virtual node",
        nodes,
        liqos,
        || async {
            let pod = c_pods.get("web").await.map_err(|e| e.to_string())?;
            match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Running") => Ok(pod),
                other => Err(format!("consumer pod phase {other:?}")),
            }
        },
    )
    .await;
    assert_eq!(
        local.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(virtual_node),
        "the consumer's scheduler placed the pod on the Contract's virtual node"
    );

    more_than_bought_is_refused_by_the_provider(
        (consumer, provider),
        nodes,
        liqos,
        (virtual_node, sold_cpu),
        &remote_ns,
    )
    .await;

    // The pod and the offloading go, and with them the provider's
    // namespace (the kwok Node and the taints stay, unused).
    c_pods
        .delete("web", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    offloadings
        .delete("offloading", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let p_namespaces: Api<Namespace> = Api::all(provider.client());
    until(
        "the provider's offloaded namespace gone",
        nodes,
        liqos,
        || async {
            match exists(&p_namespaces, &remote_ns).await? {
                false => Ok(()),
                true => Err(format!("namespace {remote_ns} still there")),
            }
        },
    )
    .await;
}

/// Namespace `offloaded` on the consumer, offloaded (remote pods only) and
/// Ready, with a kwok-run Node on the provider for its pods: the
/// NamespaceOffloading API and the provider's namespace name.
async fn offload_namespace(
    consumer: &ControlPlane,
    provider: &ControlPlane,
    nodes: &[&NodeProcess],
    liqos: &mut [&mut Liqo],
) -> (Api<DynamicObject>, String) {
    use k8s_openapi::api::core::v1::Namespace;

    // A provider Node kwok runs pods on; not a FLUIDOS resource node, so it
    // is no flavor.
    let kwok_node = fluidos_testenv::liqo::kwok_node("provider-kwok");
    let p_nodes = Api::<Node>::all(provider.client());
    p_nodes
        .create(&PostParams::default(), &kwok_node)
        .await
        .unwrap();
    // The FLUIDOS worker Nodes are not kwok's (see `worker_node`): nothing
    // would run a pod there. A taint keeps them out of the provider
    // scheduler's choice; the LRM does not look at taints.
    for n in p_nodes.list(&ListParams::default()).await.unwrap() {
        if n.name_any() == "provider-kwok" {
            continue;
        }
        let taint = serde_json::json!({"spec": {"taints": [
            {"key": "fluidos.eu/test-no-pods", "value": "true", "effect": "NoSchedule"}
        ]}});
        p_nodes
            .patch(
                &n.name_any(),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(taint),
            )
            .await
            .unwrap();
    }
    let app_ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "offloaded"}
    }))
    .unwrap();
    Api::<Namespace>::all(consumer.client())
        .create(&PostParams::default(), &app_ns)
        .await
        .unwrap();
    let offloadings = dynamic(
        &consumer.client(),
        "offloading.liqo.io",
        "NamespaceOffloading",
        "namespaceoffloadings",
        "offloaded",
    );
    let offloading = fluidos_testenv::liqo::namespace_offloading("offloaded");
    offloadings
        .create(&PostParams::default(), &offloading)
        .await
        .unwrap();
    let remote_ns = until("NamespaceOffloading Ready", nodes, liqos, || async {
        let o = offloadings
            .get("offloading")
            .await
            .map_err(|e| e.to_string())?;
        let phase = o.data.pointer("/status/offloadingPhase");
        if phase.and_then(|p| p.as_str()) != Some("Ready") {
            return Err(format!("offloadingPhase {phase:?}"));
        }
        o.data
            .pointer("/status/remoteNamespaceName")
            .and_then(|n| n.as_str())
            .map(str::to_owned)
            .ok_or_else(|| "no remote namespace name".to_owned())
    })
    .await;
    say(&format!(
        "namespace offloaded to {remote_ns} on the provider"
    ));
    (offloadings, remote_ns)
}

/// A client with the credentials the consumer's virtual kubelet has on the
/// provider: the kubeconfig Liqo issued for its ResourceSlice, named by the
/// consumer's VirtualNode.
async fn virtual_kubelet_client(consumer: &ControlPlane) -> kube::Client {
    use k8s_openapi::api::core::v1::Secret;
    let tenant = format!("liqo-tenant-{PROVIDER_ID}");
    let vnodes = Api::<fluidos_liqo_api::VirtualNode>::namespaced(consumer.client(), &tenant)
        .list(&ListParams::default())
        .await
        .unwrap();
    let secret_name = vnodes
        .items
        .iter()
        .find_map(|v| v.spec.kubeconfig_secret_ref.as_ref()?.name.clone())
        .expect("a VirtualNode names its kubeconfig Secret");
    let secret = Api::<Secret>::namespaced(consumer.client(), &tenant)
        .get(&secret_name)
        .await
        .unwrap();
    let kubeconfig = secret
        .data
        .unwrap_or_default()
        .get("kubeconfig")
        .map(|b| String::from_utf8(b.0.clone()).unwrap())
        .expect("the identity Secret holds a kubeconfig");
    kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap(),
    )
    .unwrap()
}

/// With a peer's own credentials (its virtual kubelet's), no way out of
/// the provider's cluster: a NodePort Service (Liqo's virtual kubelet may
/// create Services there) and a ShadowEndpointSlice at the cloud metadata
/// address are refused, naming the field.
async fn a_peer_may_not_reach_beyond_the_cluster(peer: &kube::Client, remote_ns: &str) {
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(peer.clone(), remote_ns);
    let node_port: k8s_openapi::api::core::v1::Service =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "evil-node-port"},
            "spec": {"type": "NodePort", "ports": [{"port": 80}]},
        }))
        .unwrap();
    match services.create(&PostParams::default(), &node_port).await {
        Err(kube::Error::Api(s)) if s.message.contains("spec.type") => {
            say(&format!("a peer's NodePort Service refused: {}", s.message));
        }
        other => panic!("a peer's NodePort Service was not refused: {other:?}"),
    }
    let slices = dynamic(
        peer,
        "offloading.liqo.io",
        "ShadowEndpointSlice",
        "shadowendpointslices",
        remote_ns,
    );
    let mut slice = DynamicObject::new(
        "evil-endpoints",
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "offloading.liqo.io",
            "v1beta1",
            "ShadowEndpointSlice",
        )),
    );
    slice.data = serde_json::json!({"spec": {"template": {
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["169.254.169.254"]}],
        "ports": [{"port": 80, "protocol": "TCP"}],
    }}});
    match slices.create(&PostParams::default(), &slice).await {
        Err(kube::Error::Api(s)) if s.message.contains("endpoints[*].addresses") => {
            say(&format!(
                "a peer's ShadowEndpointSlice at 169.254.169.254 refused: {}",
                s.message
            ));
        }
        other => panic!(
            "a peer's ShadowEndpointSlice at the metadata address was not refused: {other:?}"
        ),
    }
}

/// The buyer, with the credentials its virtual kubelet has on the provider
/// (the kubeconfig Liqo issued for its ResourceSlice, read from the
/// consumer's VirtualNode, used with a client of its own), creates
/// ShadowPods in its offloaded namespace there as a hostile peer would:
/// privileged, a hostPath of `/`, the host's network, a chosen node. Each is
/// refused by the provider's peer guard with a message naming the field.
/// The namespace Liqo made enforces Pod Security `restricted`; a deleted
/// guard policy is back within seconds.
#[expect(
    clippy::too_many_lines,
    reason = "one scenario with the peer's credentials, step by step"
)]
async fn a_peer_may_run_only_restricted_pods(
    consumer: &ControlPlane,
    provider: &ControlPlane,
    nodes: &[&NodeProcess],
    liqos: &mut [&mut Liqo],
    remote_ns: &str,
) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
    use k8s_openapi::api::core::v1::Namespace;
    let p_namespaces = Api::<Namespace>::all(provider.client());
    until(
        "the peer namespace enforcing Pod Security restricted",
        nodes,
        liqos,
        || async {
            let ns = p_namespaces
                .get(remote_ns)
                .await
                .map_err(|e| e.to_string())?;
            let level = ns
                .metadata
                .labels
                .unwrap_or_default()
                .get("pod-security.kubernetes.io/enforce")
                .cloned();
            (level.as_deref() == Some("restricted"))
                .then_some(())
                .ok_or_else(|| format!("enforce label {level:?}"))
        },
    )
    .await;

    let peer = virtual_kubelet_client(consumer).await;
    let shadows = dynamic(
        &peer,
        "offloading.liqo.io",
        "ShadowPod",
        "shadowpods",
        remote_ns,
    );
    let container = serde_json::json!({"name": "x", "image": "example.invalid/x:1"});
    let hostile = [
        (
            "securityContext.privileged",
            serde_json::json!({"containers": [
            {"name": "x", "image": "example.invalid/x:1", "securityContext": {"privileged": true}}]}),
        ),
        (
            "hostPath",
            serde_json::json!({"containers": [container],
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
        ),
        (
            "hostNetwork",
            serde_json::json!({"containers": [container], "hostNetwork": true}),
        ),
        (
            "nodeName",
            serde_json::json!({"containers": [container], "nodeName": "provider-kwok"}),
        ),
    ];
    for (i, (field, spec)) in hostile.into_iter().enumerate() {
        let mut shadow = DynamicObject::new(
            &format!("evil-{i}"),
            &ApiResource::from_gvk(&GroupVersionKind::gvk(
                "offloading.liqo.io",
                "v1beta1",
                "ShadowPod",
            )),
        );
        shadow.data = serde_json::json!({"spec": {"pod": spec}});
        match shadows.create(&PostParams::default(), &shadow).await {
            Err(kube::Error::Api(s)) => {
                assert!(
                    s.message.contains("spec.pod.") && s.message.contains(field),
                    "the refusal names {field}: {}",
                    s.message
                );
                say(&format!(
                    "hostile ShadowPod ({field}) refused: {}",
                    s.message
                ));
            }
            other => panic!("a peer's ShadowPod with {field} was not refused: {other:?}"),
        }
    }
    a_peer_may_not_reach_beyond_the_cluster(&peer, remote_ns).await;
    let policies = Api::<ValidatingAdmissionPolicy>::all(provider.client());
    let started = Instant::now();
    policies
        .delete(
            fluidos_peer_access::workload_policy::SHADOWPODS,
            &kube::api::DeleteParams::default(),
        )
        .await
        .unwrap();
    until("the deleted guard policy back", nodes, liqos, || async {
        exists(&policies, fluidos_peer_access::workload_policy::SHADOWPODS)
            .await?
            .then_some(())
            .ok_or_else(|| "not back yet".to_owned())
    })
    .await;
    say(&format!(
        "the provider's guard policy, deleted, was back in {:?}",
        started.elapsed()
    ));
}

/// A consumer that ignores its virtual node's capacity (binds a pod to it
/// by `nodeName`, past its own scheduler) still gets no more than it bought:
/// with `web` using 500m of the Contract's CPU, a pod asking for 100m more
/// than the rest (within the Contract, so only the accounting refuses it)
/// is refused by the provider's Liqo (its Quota is the Contract's grant),
/// the virtual kubelet reports `FailedReflection` on the pod, and nothing
/// reaches the provider.
async fn more_than_bought_is_refused_by_the_provider(
    (consumer, provider): (&ControlPlane, &ControlPlane),
    nodes: &[&NodeProcess],
    liqos: &mut [&mut Liqo],
    (virtual_node, sold_cpu): (&str, &str),
    remote_ns: &str,
) {
    use fluidos_api::quantity::Amount;
    use k8s_openapi::api::core::v1::{Event, Pod};
    let left = Amount::parse(sold_cpu).unwrap().millis_ceil() - 500;
    let asked = format!("{}m", left + 100);
    let greedy: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "greedy", "namespace": "offloaded"},
        "spec": {
            "nodeName": virtual_node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "greedy", "image": "example.invalid/greedy:1",
                "resources": {"requests": {"cpu": asked, "memory": "256Mi"}}}]
        }
    }))
    .unwrap();
    let c_pods: Api<Pod> = Api::namespaced(consumer.client(), "offloaded");
    c_pods
        .create(&PostParams::default(), &greedy)
        .await
        .unwrap();
    let events: Api<Event> = Api::namespaced(consumer.client(), "offloaded");
    let refusal = until(
        "the greedy pod refused by the provider",
        nodes,
        liqos,
        || async {
            let list = events
                .list(&ListParams::default().fields("involvedObject.name=greedy"))
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .iter()
                .filter(|e| e.reason.as_deref() == Some("FailedReflection"))
                .filter_map(|e| e.message.clone())
                .find(|m| m.contains("quota usage exceeded"))
                .ok_or_else(|| {
                    let seen: Vec<_> = list.items.iter().map(|e| e.message.clone()).collect();
                    format!("events of the greedy pod: {seen:?}")
                })
        },
    )
    .await;
    say(&format!("greedy pod ({asked}): {refusal}"));
    assert!(
        refusal.contains(&format!("free {left}m / requested {asked}")),
        "refused for the rest of the Contract's CPU ({left}m): {refusal}"
    );
    let shadow_pods = dynamic(
        &provider.client(),
        "offloading.liqo.io",
        "ShadowPod",
        "shadowpods",
        remote_ns,
    );
    assert!(!exists(&shadow_pods, "greedy").await.unwrap());
    assert!(
        !exists(
            &Api::<Pod>::namespaced(provider.client(), remote_ns),
            "greedy"
        )
        .await
        .unwrap()
    );
    c_pods
        .delete(
            "greedy",
            &kube::api::DeleteParams::default().grace_period(0),
        )
        .await
        .unwrap();
}
