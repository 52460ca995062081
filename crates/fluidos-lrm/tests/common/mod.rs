//! Helpers shared by the integration tests: a real control plane, the manager
//! running against it, and objects to feed it.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use fluidos_api::flavor::{FlavorTypeData, K8SliceCharacteristics};
use fluidos_api::{Flavor, NodeIdentity};
use fluidos_lrm::{LrmConfig, Readiness};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::{
    Container, Namespace, Node, NodeStatus, NodeSystemInfo, Pod, PodSpec, ResourceRequirements,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const NS: &str = "fluidos";
pub const LABEL: &str = "node-role.fluidos.eu/resources";

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "fluidos_lrm=info".into()),
        )
        .with_test_writer()
        .try_init();
}

pub fn identity() -> NodeIdentity {
    NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: "4ahrqttvng".into(),
        ip: "172.19.0.4:30001".into(),
        additional_information: None,
    }
}

pub fn config() -> LrmConfig {
    let mut cfg = LrmConfig::new(identity());
    cfg.cpu_step = "1".into();
    cfg.memory_step = "100Mi".into();
    cfg
}

/// A control plane with the project's CRDs and the `fluidos` namespace.
pub async fn control_plane() -> ControlPlane {
    init_tracing();
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    Api::<Namespace>::all(cp.client())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(NS.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    cp
}

/// The manager running in the background.
pub struct Running {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), fluidos_lrm::Error>>>,
    pub readiness: Readiness,
}

impl Running {
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .expect("manager did not stop")
                .unwrap()
                .unwrap();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

pub async fn start(client: Client, cfg: LrmConfig) -> Running {
    let (tx, rx) = oneshot::channel::<()>();
    let readiness = Readiness::new();
    let task = tokio::spawn(fluidos_lrm::run_with_readiness(
        client,
        cfg,
        readiness.clone(),
        async move {
            let _ = rx.await;
        },
    ));
    tokio::time::timeout(Duration::from_secs(30), readiness.wait())
        .await
        .expect("manager not ready within 30s");
    Running {
        stop: Some(tx),
        task: Some(task),
        readiness,
    }
}

pub fn q(s: &str) -> Quantity {
    Quantity(s.into())
}

pub fn node(
    name: &str,
    labelled: bool,
    alloc: &[(&str, &str)],
    extra_labels: &[(&str, &str)],
) -> Node {
    let mut labels: BTreeMap<String, String> = extra_labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    if labelled {
        labels.insert(LABEL.into(), "true".into());
    }
    let alloc: BTreeMap<String, Quantity> =
        alloc.iter().map(|(k, v)| ((*k).to_owned(), q(v))).collect();
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..Default::default()
        },
        status: Some(NodeStatus {
            capacity: Some(alloc.clone()),
            allocatable: Some(alloc),
            node_info: Some(NodeSystemInfo {
                architecture: "amd64".into(),
                operating_system: "linux".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn pod(name: &str, node: &str, requests: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                resources: Some(ResourceRequirements {
                    requests: Some(
                        requests
                            .iter()
                            .map(|(k, v)| ((*k).to_owned(), q(v)))
                            .collect(),
                    ),
                    // Extended resources cannot be overcommitted: limit = request.
                    limits: Some(
                        requests
                            .iter()
                            .filter(|(k, _)| k.contains('/'))
                            .map(|(k, v)| ((*k).to_owned(), q(v)))
                            .collect(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub async fn create_pod(client: &Client, p: &Pod) {
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), p)
        .await
        .unwrap();
}

pub async fn delete_pod(client: &Client, name: &str) {
    let api = Api::<Pod>::namespaced(client.clone(), "default");
    // No kubelet: delete at once.
    api.delete(
        name,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    wait_for(&format!("pod {name} gone"), || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

/// Polls `f` every 50 ms until it yields `Some`, for at most 30 s.
pub async fn wait_for<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn flavors(client: &Client) -> Api<Flavor> {
    Api::namespaced(client.clone(), NS)
}

/// The flavor published for `node`, found by its owner reference.
pub async fn flavor_of_node(client: &Client, node: &str) -> Option<Flavor> {
    flavors(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|f| {
            f.owner_references()
                .iter()
                .any(|o| o.kind == "Node" && o.name == node)
        })
}

pub fn characteristics(f: &Flavor) -> K8SliceCharacteristics {
    match f.spec.flavor_type.parse().unwrap() {
        FlavorTypeData::K8Slice(k) => k.characteristics,
        other => panic!("not a K8Slice flavor: {other:?}"),
    }
}

/// `(cpu, memory, pods, storage)` as published.
pub fn numbers(f: &Flavor) -> (String, String, String, String) {
    let c = characteristics(f);
    (
        c.cpu.0,
        c.memory.0,
        c.pods.0,
        c.storage.map(|s| s.0).unwrap_or_default(),
    )
}

/// Waits until the node's flavor has the given numbers; returns it.
pub async fn wait_numbers(client: &Client, node: &str, want: (&str, &str, &str, &str)) -> Flavor {
    let want = (
        want.0.to_owned(),
        want.1.to_owned(),
        want.2.to_owned(),
        want.3.to_owned(),
    );
    let mut last = None;
    let started = Instant::now();
    loop {
        if let Some(f) = flavor_of_node(client, node).await {
            let n = numbers(&f);
            if n == want {
                return f;
            }
            last = Some(n);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "flavor of {node}: want {want:?}, last seen {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Events (events.k8s.io) in `ns` regarding `name` with `reason`.
pub async fn events(client: &Client, ns: &str, name: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

pub async fn wait_event(client: &Client, ns: &str, name: &str, reason: &str) -> Event {
    wait_for(&format!("event {reason} regarding {name}"), || async {
        events(client, ns, name, reason).await.into_iter().next()
    })
    .await
}
