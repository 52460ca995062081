//! The real Liqo controllers peering two test control planes with `liqoctl
//! peer` (networking off), observed object by object up to a pod offloaded
//! through the virtual node. Only the virtual-kubelet pod has a stand-in (the
//! real binary run as a process, `Liqo::start_virtual_kubelet`).

// Helpers outside #[test] functions are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::io::Write as _;
use std::time::{Duration, Instant};

use fluidos_testenv::{ControlPlane, ControlPlaneOptions, Liqo, LiqoBinaries, LiqoOptions};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use kube::Api;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

const CONSUMER_ID: &str = "fluidos-consumer";
const PROVIDER_ID: &str = "fluidos-provider";
/// Each wait below is for one controller's reaction; seconds in practice.
const STEP_TIMEOUT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(200);

/// Prints straight to the process's stderr (not through the test harness's
/// capture) so phase timings show in every run's output.
fn say(line: &str) {
    let _ = std::io::stderr().write_all(format!("[liqo] {line}\n").as_bytes());
}

/// Wall-clock per phase, printed as it goes and summed up at the end.
struct Phases {
    started: Instant,
    last: Instant,
    done: Vec<(String, Duration)>,
}

impl Phases {
    fn new() -> Self {
        let now = Instant::now();
        Phases {
            started: now,
            last: now,
            done: Vec::new(),
        }
    }

    fn mark(&mut self, name: &str) {
        let took = self.last.elapsed();
        self.last = Instant::now();
        say(&format!("phase {name:<58} {took:>9.2?}"));
        self.done.push((name.to_owned(), took));
    }

    fn summary(&self) {
        say("phase timings:");
        for (name, took) in &self.done {
            say(&format!("  {name:<60} {took:>9.2?}"));
        }
        say(&format!(
            "  {:<60} {:>9.2?}",
            "total",
            self.started.elapsed()
        ));
    }
}

fn liqo_api(
    client: &kube::Client,
    group: &str,
    kind: &str,
    plural: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, "v1beta1", kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

fn foreign_clusters(client: &kube::Client) -> Api<DynamicObject> {
    liqo_api(
        client,
        "core.liqo.io",
        "ForeignCluster",
        "foreignclusters",
        None,
    )
}

fn tenant_ns(peer: &str) -> String {
    format!("liqo-tenant-{peer}")
}

fn pointer<'a>(object: &'a DynamicObject, path: &str) -> Option<&'a Value> {
    object.data.pointer(path)
}

/// The `status` of the condition of `type_` in the array at `path`.
fn condition_status<'a>(object: &'a DynamicObject, path: &str, type_: &str) -> Option<&'a str> {
    pointer(object, path)?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .get("status")?
        .as_str()
}

/// Polls `check` until it returns `Some`, failing with the last state seen
/// and the Liqo logs. A Liqo process dying fails the wait at once.
async fn wait_until<T, F, Fut>(what: &str, liqos: &mut [&mut Liqo], mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    loop {
        for liqo in liqos.iter_mut() {
            if let Err(e) = liqo.ensure_running() {
                panic!("a Liqo process died while waiting for {what}: {e}");
            }
        }
        let last = match check().await {
            Ok(value) => return value,
            Err(e) => e,
        };
        if started.elapsed() > STEP_TIMEOUT {
            let logs = liqos
                .iter()
                .map(|l| l.log_tails())
                .collect::<Vec<_>>()
                .join("\n");
            panic!("{what} not reached after {STEP_TIMEOUT:?}; last state: {last}\n{logs}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `Ok(object)` once it exists and `ready` holds; else the reason.
async fn get_when(
    api: &Api<DynamicObject>,
    name: &str,
    ready: impl Fn(&DynamicObject) -> Result<(), String>,
) -> Result<DynamicObject, String> {
    let object = api
        .get_opt(name)
        .await
        .map_err(|e| format!("get {name}: {e}"))?
        .ok_or_else(|| format!("{name} does not exist"))?;
    ready(&object).map(|()| object.clone()).map_err(|e| {
        format!(
            "{name}: {e}; status: {}",
            object.data.get("status").unwrap_or(&Value::Null)
        )
    })
}

fn expect_condition(
    object: &DynamicObject,
    path: &str,
    type_: &str,
    want: &str,
) -> Result<(), String> {
    match condition_status(object, path, type_) {
        Some(status) if status == want => Ok(()),
        other => Err(format!("{type_} is {other:?}, want {want}")),
    }
}

#[tokio::test]
#[allow(clippy::too_many_lines)] // One scenario, phase by phase; splitting it hides the order.
async fn liqoctl_peer_between_two_control_planes_offloads_a_pod() {
    if let Some(reason) = fluidos_testenv::liqo::skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    let binaries = LiqoBinaries::from_env().unwrap();
    let mut phases = Phases::new();

    // Phase 1: two control planes, each with kube-controller-manager (CSR
    // signing, garbage collection), kube-scheduler and kwok.
    let workloads = || ControlPlaneOptions {
        workloads: true,
        ..Default::default()
    };
    let (consumer_cp, provider_cp) = tokio::join!(
        ControlPlane::start(workloads()),
        ControlPlane::start(workloads())
    );
    let (consumer_cp, provider_cp) = (consumer_cp.unwrap(), provider_cp.unwrap());
    say(&format!(
        "consumer {} (logs {}), provider {} (logs {})",
        consumer_cp.server_url(),
        consumer_cp.log_dir().display(),
        provider_cp.server_url(),
        provider_cp.log_dir().display()
    ));
    phases.mark("two control planes ready");

    // Phase 2: Liqo on both.
    let options = |id: &str| LiqoOptions {
        cluster_id: id.to_owned(),
        ..Default::default()
    };
    let (consumer_liqo, provider_liqo) = tokio::join!(
        Liqo::start_with(&consumer_cp, &binaries, options(CONSUMER_ID)),
        Liqo::start_with(&provider_cp, &binaries, options(PROVIDER_ID))
    );
    let (mut consumer_liqo, mut provider_liqo) = (consumer_liqo.unwrap(), provider_liqo.unwrap());
    for (who, liqo) in [("consumer", &consumer_liqo), ("provider", &provider_liqo)] {
        for (step, took) in liqo.startup_phases() {
            say(&format!("  {who} Liqo start: {step:<40} {took:>9.2?}"));
        }
    }
    phases.mark("Liqo started on both (CRDs, webhook, controllers)");

    let c = consumer_cp.client();
    let p = provider_cp.client();
    let c_tenant = tenant_ns(PROVIDER_ID);
    let p_tenant = tenant_ns(CONSUMER_ID);

    // Phase 3: liqoctl peer, as a user would run it.
    let home = tempfile::tempdir().unwrap();
    let output = binaries
        .liqoctl_peer(&consumer_cp, &provider_cp, home.path())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // liqoctl pads its spinner lines with spaces.
    let printed: Vec<&str> = stdout
        .lines()
        .chain(stderr.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    say(&format!(
        "liqoctl peer exited {}; output:\n  {}",
        output.status,
        printed.join("\n  ")
    ));
    assert!(
        output.status.success(),
        "liqoctl peer failed\n{}\n{}",
        consumer_liqo.log_tails(),
        provider_liqo.log_tails()
    );
    phases.mark("liqoctl peer --networking-disabled returned");

    let mut both = [&mut consumer_liqo, &mut provider_liqo];

    // Phase 4: authentication. The provider's Tenant got a certificate signed
    // by kube-controller-manager; the consumer's control-plane Identity
    // turned it into a kubeconfig.
    let tenants = liqo_api(
        &p,
        "authentication.liqo.io",
        "Tenant",
        "tenants",
        Some(&p_tenant),
    );
    let tenant = wait_until("Tenant authParams on the provider", &mut both, || {
        get_when(&tenants, CONSUMER_ID, |t| {
            match (
                pointer(t, "/status/authParams/signedCRT"),
                pointer(t, "/status/tenantNamespace"),
            ) {
                (Some(_), Some(_)) => Ok(()),
                _ => Err("no authParams/tenantNamespace yet".into()),
            }
        })
    })
    .await;
    assert_eq!(
        pointer(&tenant, "/status/authParams/apiServer").and_then(Value::as_str),
        Some(provider_cp.server_url()),
        "the provider advertises its loopback API server"
    );
    let identities = liqo_api(
        &c,
        "authentication.liqo.io",
        "Identity",
        "identities",
        Some(&c_tenant),
    );
    let control_plane_identity = format!("controlplane-{PROVIDER_ID}");
    wait_until(
        "control-plane Identity kubeconfig on the consumer",
        &mut both,
        || {
            get_when(&identities, &control_plane_identity, |i| {
                pointer(i, "/status/kubeconfigSecretRef/name")
                    .map(drop)
                    .ok_or_else(|| "no kubeconfigSecretRef yet".into())
            })
        },
    )
    .await;
    let secrets: Api<Secret> = Api::namespaced(c.clone(), &c_tenant);
    let kubeconfig_secret = secrets
        .get(&format!("kubeconfig-{control_plane_identity}"))
        .await
        .unwrap();
    assert!(
        kubeconfig_secret
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key("kubeconfig")),
        "the control-plane kubeconfig Secret holds a kubeconfig"
    );
    phases.mark("Tenant signed (provider), Identity kubeconfig (consumer)");

    // Phase 5: ForeignClusters on both sides, with their roles and the
    // authentication conditions Liqo computes.
    let c_fcs = foreign_clusters(&c);
    let p_fcs = foreign_clusters(&p);
    wait_until(
        "consumer's ForeignCluster for the provider",
        &mut both,
        || {
            get_when(&c_fcs, PROVIDER_ID, |fc| {
                let role = pointer(fc, "/status/role").and_then(Value::as_str);
                if role != Some("Provider") {
                    return Err(format!("role {role:?}"));
                }
                expect_condition(
                    fc,
                    "/status/modules/authentication/conditions",
                    "AuthIdentityControlPlaneStatus",
                    "Ready",
                )?;
                // Liqo's API server checker reaches the provider's loopback URL.
                expect_condition(fc, "/status/conditions", "APIServerStatus", "Established")
            })
        },
    )
    .await;
    wait_until(
        "provider's ForeignCluster for the consumer",
        &mut both,
        || {
            get_when(&p_fcs, CONSUMER_ID, |fc| {
                let role = pointer(fc, "/status/role").and_then(Value::as_str);
                if role != Some("Consumer") {
                    return Err(format!("role {role:?}"));
                }
                expect_condition(
                    fc,
                    "/status/modules/authentication/conditions",
                    "AuthTenantStatus",
                    "Ready",
                )
            })
        },
    )
    .await;
    phases.mark("ForeignClusters Provider/Consumer, authentication Ready");

    // Phase 6: the ResourceSlice liqoctl created on the consumer, replicated
    // to the provider by crd-replicator, accepted there, status copied back.
    let c_slices = liqo_api(
        &c,
        "authentication.liqo.io",
        "ResourceSlice",
        "resourceslices",
        Some(&c_tenant),
    );
    let slice = wait_until("ResourceSlice accepted (consumer copy)", &mut both, || {
        get_when(&c_slices, PROVIDER_ID, |s| {
            expect_condition(s, "/status/conditions", "Authentication", "Accepted")?;
            expect_condition(s, "/status/conditions", "Resources", "Accepted")
        })
    })
    .await;
    say(&format!(
        "granted resources: {}",
        pointer(&slice, "/status/resources").unwrap_or(&Value::Null)
    ));
    let p_slices = liqo_api(
        &p,
        "authentication.liqo.io",
        "ResourceSlice",
        "resourceslices",
        Some(&p_tenant),
    );
    let replica = p_slices.get(PROVIDER_ID).await.unwrap();
    assert_eq!(
        replica.metadata.labels.as_ref().unwrap()["liqo.io/replicated"],
        "true",
        "the provider's copy is crd-replicator's replica"
    );
    let quotas = liqo_api(&p, "offloading.liqo.io", "Quota", "quotas", Some(&p_tenant));
    let quota = wait_until("Quota on the provider", &mut both, || {
        let quotas = quotas.clone();
        async move {
            let list = quotas
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .next()
                .ok_or_else(|| "no Quota yet".to_owned())
        }
    })
    .await;
    assert_eq!(
        pointer(&quota, "/spec/resources"),
        pointer(&slice, "/status/resources"),
        "the Quota enforces what the provider granted"
    );
    phases.mark("ResourceSlice replicated, accepted, Quota created");

    // Phase 7: the consumer's VirtualNode, completed by Liqo's webhook, and
    // the virtual-kubelet Deployment its controller asks for.
    let virtual_nodes = liqo_api(
        &c,
        "offloading.liqo.io",
        "VirtualNode",
        "virtualnodes",
        Some(&c_tenant),
    );
    let virtual_node = wait_until(
        "VirtualNode with its virtual kubelet running",
        &mut both,
        || {
            get_when(&virtual_nodes, PROVIDER_ID, |vn| {
                expect_condition(vn, "/status/conditions", "VirtualKubelet", "Running")
            })
        },
    )
    .await;
    assert_eq!(
        pointer(&virtual_node, "/spec/clusterID").and_then(Value::as_str),
        Some(PROVIDER_ID)
    );
    let deployment_name = pointer(&virtual_node, "/spec/template/metadata/name")
        .and_then(Value::as_str)
        .expect("the webhook filled the virtual-kubelet Deployment template")
        .to_owned();
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), &c_tenant);
    let deployment = deployments.get(&deployment_name).await.unwrap();
    let container = &deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    say(&format!(
        "virtual-kubelet Deployment {deployment_name}: image {:?}, args {:?}",
        container.image, container.args
    ));
    phases.mark("VirtualNode created, virtual-kubelet Deployment created");

    // Phase 8: the virtual-kubelet pod cannot run here; its stand-in runs the
    // real binary with that Deployment's arguments. It registers the virtual
    // Node with the resources the provider granted (kwok leaves Nodes labelled
    // liqo.io/type alone, so Ready comes from the virtual kubelet).
    consumer_liqo
        .start_virtual_kubelet(&consumer_cp, &c_tenant, &deployment_name)
        .await
        .unwrap();
    let mut both = [&mut consumer_liqo, &mut provider_liqo];
    let nodes: Api<Node> = Api::all(c.clone());
    let node = wait_until("virtual Node Ready on the consumer", &mut both, || {
        let nodes = nodes.clone();
        async move {
            let node = nodes
                .get_opt(PROVIDER_ID)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no Node yet".to_owned())?;
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .map(|c| (c.status.clone(), c.message.clone()));
            match ready {
                Some((status, _)) if status == "True" => Ok(node),
                other => Err(format!("Ready condition {other:?}")),
            }
        }
    })
    .await;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("liqo.io/type").map(String::as_str),
        Some("virtual-node")
    );
    assert_eq!(
        labels.get("liqo.io/remote-cluster-id").map(String::as_str),
        Some(PROVIDER_ID)
    );
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.clone())
        .unwrap_or_default();
    say(&format!(
        "virtual Node {PROVIDER_ID} Ready, allocatable {allocatable:?}"
    ));
    assert_eq!(
        allocatable.get("pods").map(|q| q.0.as_str()),
        pointer(&slice, "/status/resources/pods").and_then(Value::as_str),
        "the virtual Node offers what the provider granted"
    );
    wait_until(
        "ForeignCluster offloading Ready on the consumer",
        &mut both,
        || {
            get_when(&c_fcs, PROVIDER_ID, |fc| {
                expect_condition(
                    fc,
                    "/status/modules/offloading/conditions",
                    "OffloadingNodeStatus",
                    "Ready",
                )
            })
        },
    )
    .await;
    phases.mark("virtual kubelet stand-in: virtual Node Ready, FC offloading Ready");

    // Phase 9: offload a namespace and a pod. The provider needs a Node for
    // the offloaded pod (a kwok fake); the consumer's scheduler puts the pod
    // on the virtual node, the virtual kubelet reflects it to the provider as
    // a ShadowPod, the provider's Liqo turns that into a Pod, kwok runs it,
    // and the status travels back.
    let provider_node = fluidos_testenv::liqo::kwok_node("provider-worker");
    Api::<Node>::all(p.clone())
        .create(&PostParams::default(), &provider_node)
        .await
        .unwrap();
    let app_ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "offloaded"}
    }))
    .unwrap();
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &app_ns)
        .await
        .unwrap();
    let offloadings = liqo_api(
        &c,
        "offloading.liqo.io",
        "NamespaceOffloading",
        "namespaceoffloadings",
        Some("offloaded"),
    );
    let offloading = fluidos_testenv::liqo::namespace_offloading("offloaded");
    offloadings
        .create(&PostParams::default(), &offloading)
        .await
        .unwrap();
    let offloading = wait_until("NamespaceOffloading Ready", &mut both, || {
        get_when(&offloadings, "offloading", |o| {
            match pointer(o, "/status/offloadingPhase").and_then(Value::as_str) {
                Some("Ready") => Ok(()),
                other => Err(format!("offloadingPhase {other:?}")),
            }
        })
    })
    .await;
    let remote_ns = pointer(&offloading, "/status/remoteNamespaceName")
        .and_then(Value::as_str)
        .unwrap()
        .to_owned();
    phases.mark("namespace offloaded (remote namespace on the provider)");

    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "offloaded"},
        "spec": {"containers": [{"name": "web", "image": "example.invalid/web:1"}]}
    }))
    .unwrap();
    let c_pods: Api<Pod> = Api::namespaced(c.clone(), "offloaded");
    c_pods.create(&PostParams::default(), &pod).await.unwrap();
    let p_pods: Api<Pod> = Api::namespaced(p.clone(), &remote_ns);
    let remote_pod = wait_until("offloaded pod Running on the provider", &mut both, || {
        let p_pods = p_pods.clone();
        async move {
            let pod = p_pods
                .get_opt("web")
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no pod on the provider yet".to_owned())?;
            match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Running") => Ok(pod),
                other => Err(format!("provider pod phase {other:?}")),
            }
        }
    })
    .await;
    assert_eq!(
        remote_pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref()),
        Some("provider-worker")
    );
    let shadow_pods = liqo_api(
        &p,
        "offloading.liqo.io",
        "ShadowPod",
        "shadowpods",
        Some(&remote_ns),
    );
    assert!(
        shadow_pods.get_opt("web").await.unwrap().is_some(),
        "the provider's pod comes from the virtual kubelet's ShadowPod"
    );
    let local_pod = wait_until(
        "pod Running on the consumer's virtual node",
        &mut both,
        || {
            let c_pods = c_pods.clone();
            async move {
                let pod = c_pods.get("web").await.map_err(|e| e.to_string())?;
                match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
                    Some("Running") => Ok(pod),
                    other => Err(format!("consumer pod phase {other:?}")),
                }
            }
        },
    )
    .await;
    assert_eq!(
        local_pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(PROVIDER_ID),
        "the consumer's scheduler placed the pod on the virtual node"
    );
    phases.mark("pod offloaded: Running on the provider and on the virtual node");

    phases.summary();
    consumer_liqo.stop().await;
    provider_liqo.stop().await;
    consumer_cp.stop().await;
    provider_cp.stop().await;
}
