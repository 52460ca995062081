//! K8Slice flavors from labelled nodes, on a real kube-apiserver.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "an integration scenario reads top to bottom as one story; its steps share one running cluster"
)]

mod common;

use std::time::Duration;

use common::*;
use fluidos_api::flavor::Gpu;
use fluidos_api::naming::hash_prefix;
use fluidos_lrm::names::{LEDGER_FINALIZER, NODE_LABEL};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, ResourceExt};
use serde_json::json;

const W1_ALLOC: &[(&str, &str)] = &[
    ("cpu", "4"),
    ("memory", "8032832Ki"),
    ("pods", "110"),
    ("ephemeral-storage", "50Gi"),
];

const W2_ALLOC: &[(&str, &str)] = &[
    ("cpu", "8"),
    ("memory", "32Gi"),
    ("pods", "110"),
    ("ephemeral-storage", "100Gi"),
    ("nvidia.com/gpu", "2"),
];

async fn create_node(client: &kube::Client, n: &Node) -> Node {
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), n)
        .await
        .unwrap()
}

/// Node objects with allocatable amounts and pods bound to them produce
/// flavors with exactly allocatable − requests; pod, capacity and label
/// changes update or remove them; a restart converges on the same objects.
#[tokio::test]
async fn flavors_follow_nodes_and_pods() {
    let cp = control_plane().await;
    let client = cp.client();
    let w1 = create_node(&client, &node("worker-1", true, W1_ALLOC, &[])).await;
    let w2 = create_node(
        &client,
        &node(
            "worker-2",
            true,
            W2_ALLOC,
            &[
                ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB"),
                ("nvidia.com/gpu.memory", "40960"),
            ],
        ),
    )
    .await;
    create_node(&client, &node("control", false, W1_ALLOC, &[])).await;
    create_pod(
        &client,
        &pod("p1", "worker-1", &[("cpu", "500m"), ("memory", "1Gi")]),
    )
    .await;
    create_pod(
        &client,
        &pod(
            "p2",
            "worker-1",
            &[
                ("cpu", "250m"),
                ("memory", "512Mi"),
                ("ephemeral-storage", "1Gi"),
            ],
        ),
    )
    .await;
    create_pod(&client, &pod("on-control", "control", &[("cpu", "1")])).await;
    create_pod(
        &client,
        &pod(
            "trainer",
            "worker-2",
            &[("cpu", "1"), ("nvidia.com/gpu", "1")],
        ),
    )
    .await;

    let lrm = start(client.clone(), config()).await;

    // worker-1: 4 − 750m, 8032832Ki − 1.5Gi, 110 − 2, 50Gi − 1Gi.
    let f1 = wait_numbers(&client, "worker-1", ("3250m", "6459968Ki", "108", "49Gi")).await;
    let uid1 = w1.uid().unwrap();
    assert_eq!(
        f1.name_any(),
        format!("fluidos.eu-k8slice-{}", hash_prefix(&uid1, 16))
    );
    let owner = &f1.owner_references()[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str()
        ),
        ("v1", "Node", "worker-1", uid1.as_str())
    );
    assert_eq!(f1.labels()[NODE_LABEL], "worker-1");
    assert_eq!(f1.spec.provider_id, "4ahrqttvng");
    assert_eq!(f1.spec.owner, identity());
    assert!(f1.spec.availability);
    assert_eq!(
        f1.spec.network_property_type.as_deref(),
        Some("networkProperty")
    );
    assert_eq!(
        f1.spec.location.as_ref().unwrap().city.as_deref(),
        Some("Turin")
    );
    let c1 = characteristics(&f1);
    assert_eq!(c1.architecture, "amd64");
    assert_eq!(
        c1.gpu,
        Some(Gpu {
            model: String::new(),
            cores: q("0"),
            memory: q("0")
        }),
        "no GPU: upstream's zero gpu object"
    );
    let td = &f1.spec.flavor_type.type_data;
    assert_eq!(td["policies"]["partitionability"]["cpuStep"], "1");
    assert_eq!(td["policies"]["partitionability"]["memoryStep"], "100Mi");
    assert_eq!(td["properties"], json!({}));
    assert!(f1.finalizers().is_empty());

    // worker-2 offers its free GPU, model and memory from the discovery labels.
    let f2 = wait_numbers(&client, "worker-2", ("7", "32Gi", "109", "100Gi")).await;
    assert_eq!(
        characteristics(&f2).gpu,
        Some(Gpu {
            model: "NVIDIA-A100-SXM4-40GB".into(),
            cores: q("1"),
            memory: q("40Gi")
        })
    );
    // The unlabelled node offers nothing.
    assert!(flavor_of_node(&client, "control").await.is_none());
    wait_event(&client, NS, &f1.name_any(), "FlavorCreated").await;

    // A pod's requests change (pods are immutable: delete and recreate).
    delete_pod(&client, "p1").await;
    create_pod(
        &client,
        &pod("p1", "worker-1", &[("cpu", "1"), ("memory", "2Gi")]),
    )
    .await;
    wait_numbers(&client, "worker-1", ("2750m", "5411392Ki", "108", "49Gi")).await;
    wait_event(&client, NS, &f1.name_any(), "FlavorUpdated").await;

    // A new pod, then the same pod finishing (status subresource).
    create_pod(&client, &pod("batch", "worker-1", &[("cpu", "100m")])).await;
    wait_numbers(&client, "worker-1", ("2650m", "5411392Ki", "107", "49Gi")).await;
    Api::<Pod>::namespaced(client.clone(), "default")
        .patch_status(
            "batch",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    wait_numbers(&client, "worker-1", ("2750m", "5411392Ki", "108", "49Gi")).await;

    // Node capacity change.
    Api::<Node>::all(client.clone())
        .patch_status(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"allocatable": {"cpu": "6"}}})),
        )
        .await
        .unwrap();
    let f1 = wait_numbers(&client, "worker-1", ("4750m", "5411392Ki", "108", "49Gi")).await;

    // Losing the label removes the flavor; regaining it brings back the same name.
    let nodes = Api::<Node>::all(client.clone());
    nodes
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {LABEL: null}}})),
        )
        .await
        .unwrap();
    wait_for("worker-1 flavor removed", || async {
        flavor_of_node(&client, "worker-1")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    wait_event(&client, NS, &f1.name_any(), "FlavorDeleted").await;
    nodes
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {LABEL: "true"}}})),
        )
        .await
        .unwrap();
    let again = wait_numbers(&client, "worker-1", ("4750m", "5411392Ki", "108", "49Gi")).await;
    assert_eq!(again.name_any(), f1.name_any(), "deterministic name");

    // Deleting the node removes its flavor (without a garbage collector here:
    // the manager does it).
    nodes
        .delete("worker-2", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("worker-2 flavor removed", || async {
        flavor_of_node(&client, "worker-2")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(w2.uid().is_some());

    // A restart converges on the same object and writes nothing.
    lrm.stop().await;
    let before = flavor_of_node(&client, "worker-1").await.unwrap();
    let lrm = start(client.clone(), config()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = flavor_of_node(&client, "worker-1").await.unwrap();
    assert_eq!(
        after.resource_version(),
        before.resource_version(),
        "restart rewrote the flavor"
    );
    assert_eq!(
        flavors(&client)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    lrm.stop().await;
}

fn sold(cpu: &str, memory: &str, pods: &str) -> serde_json::Value {
    json!({"transactionID": "tx-sold", "buyerID": "buyer1", "state": "Sold", "contract": "contract-x",
        "resources": {"cpu": cpu, "memory": memory, "pods": pods}})
}

async fn set_ledger(client: &kube::Client, flavor: &str, ledger: serde_json::Value) {
    flavors(client)
        .patch_status(
            flavor,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"creationTime": "", "expirationTime": "",
                "lastUpdateTime": "", "ledger": ledger}})),
        )
        .await
        .unwrap();
}

/// A flavor with live ledger entries is never shrunk below them nor deleted:
/// it is pinned by the finalizer, made unavailable when its node goes, and
/// deleted once the entries are gone (a sale removed, a hold expired).
#[tokio::test]
async fn ledger_keeps_flavors_under_contract() {
    let cp = control_plane().await;
    let client = cp.client();
    let alloc = &[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")];
    create_node(&client, &node("sold-node", true, alloc, &[])).await;
    create_node(&client, &node("held-node", true, alloc, &[])).await;
    let lrm = start(client.clone(), config()).await;
    let f = wait_numbers(&client, "sold-node", ("4", "8Gi", "110", "0")).await;
    let name = f.name_any();

    set_ledger(&client, &name, json!([sold("3", "4Gi", "10")])).await;
    wait_for("finalizer added", || async {
        let f = flavors(&client).get(&name).await.unwrap();
        f.finalizers()
            .iter()
            .any(|x| x == LEDGER_FINALIZER)
            .then_some(())
    })
    .await;
    // Pods would leave 2 cpu and 2Gi: the flavor keeps the 3 cpu and 4Gi sold.
    create_pod(
        &client,
        &pod("big", "sold-node", &[("cpu", "2"), ("memory", "6Gi")]),
    )
    .await;
    wait_numbers(&client, "sold-node", ("3", "4Gi", "109", "0")).await;

    // The node goes: the flavor stays, unsellable.
    Api::<Node>::all(client.clone())
        .delete("sold-node", &DeleteParams::default())
        .await
        .unwrap();
    wait_event(&client, NS, &name, "FlavorWithdrawn").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kept = flavors(&client).get(&name).await.unwrap();
    assert!(!kept.spec.availability);
    assert!(kept.finalizers().iter().any(|x| x == LEDGER_FINALIZER));
    assert_eq!(numbers(&kept).0, "3");

    // The contract ends: the flavor goes.
    set_ledger(&client, &name, json!([])).await;
    wait_for("sold flavor deleted", || async {
        flavors(&client)
            .get_opt(&name)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    wait_event(&client, NS, &name, "FlavorDeleted").await;

    // A hold pins the flavor only until it expires.
    let held = flavor_of_node(&client, "held-node")
        .await
        .unwrap()
        .name_any();
    let expiry = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(4))
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    set_ledger(
        &client,
        &held,
        json!([{"transactionID": "tx-held", "buyerID": "b", "state": "Held",
            "expirationTime": expiry, "resources": {"cpu": "1", "memory": "1Gi", "pods": "1"}}]),
    )
    .await;
    wait_for("finalizer added to held flavor", || async {
        let f = flavors(&client).get(&held).await.unwrap();
        f.finalizers()
            .iter()
            .any(|x| x == LEDGER_FINALIZER)
            .then_some(())
    })
    .await;
    Api::<Node>::all(client.clone())
        .delete("held-node", &DeleteParams::default())
        .await
        .unwrap();
    wait_event(&client, NS, &held, "FlavorWithdrawn").await;
    assert!(flavors(&client).get_opt(&held).await.unwrap().is_some());
    wait_for("held flavor deleted after expiry", || async {
        flavors(&client)
            .get_opt(&held)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    lrm.stop().await;
}

/// With metrics.k8s.io served (here by a CRD standing in for metrics-server),
/// measured usage above the requests is subtracted, and re-read periodically.
#[tokio::test]
async fn usage_counts_when_metrics_are_served() {
    let cp = control_plane().await;
    let client = cp.client();
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "nodes.metrics.k8s.io",
            "annotations": {"api-approved.kubernetes.io": "unapproved, test stand-in for metrics-server"}},
        "spec": {"group": "metrics.k8s.io", "scope": "Cluster",
            "names": {"plural": "nodes", "singular": "nodemetrics", "kind": "NodeMetrics", "listKind": "NodeMetricsList"},
            "versions": [{"name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let gvk = GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "NodeMetrics");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "nodes");
    let metrics: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let usage = |cpu: &str| {
        let mut o = DynamicObject::new("m-node", &ar);
        o.data = json!({"usage": {"cpu": cpu, "memory": "1Gi"}, "window": "15s"});
        o
    };
    wait_for("metrics CRD served", || async {
        metrics
            .create(&PostParams::default(), &usage("3"))
            .await
            .ok()
    })
    .await;

    create_node(
        &client,
        &node(
            "m-node",
            true,
            &[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")],
            &[],
        ),
    )
    .await;
    create_pod(
        &client,
        &pod("small", "m-node", &[("cpu", "500m"), ("memory", "2Gi")]),
    )
    .await;
    let mut cfg = config();
    cfg.metrics_resync = Duration::from_secs(1);
    let lrm = start(client.clone(), cfg).await;
    // cpu: usage 3 > requests 500m; memory: requests 2Gi > usage 1Gi.
    wait_numbers(&client, "m-node", ("1", "6Gi", "109", "0")).await;
    // Usage drops; no watch event, the periodic re-read notices.
    let mut m = metrics.get("m-node").await.unwrap();
    m.data["usage"]["cpu"] = json!("123456789n");
    metrics
        .replace("m-node", &PostParams::default(), &m)
        .await
        .unwrap();
    wait_numbers(&client, "m-node", ("3500m", "6Gi", "109", "0")).await;
    lrm.stop().await;
}

/// The owner reference names the core `v1` Node, so Kubernetes' garbage
/// collector removes the flavor of a deleted node even with the manager down
/// (upstream's `nodecore.fluidos.eu/v1alpha1` Node reference never resolves).
#[tokio::test]
async fn garbage_collector_follows_the_node_owner_reference() {
    init_tracing();
    let cp = fluidos_testenv::ControlPlane::start(fluidos_testenv::ControlPlaneOptions {
        workloads: true,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cp.client();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await
        .unwrap();
    create_node(
        &client,
        &node(
            "gc-node",
            true,
            &[("cpu", "2"), ("memory", "4Gi"), ("pods", "10")],
            &[],
        ),
    )
    .await;
    let lrm = start(client.clone(), config()).await;
    let f = wait_for("gc-node flavor", || flavor_of_node(&client, "gc-node")).await;
    lrm.stop().await;
    Api::<Node>::all(client.clone())
        .delete("gc-node", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("flavor garbage-collected", || async {
        flavors(&client)
            .get_opt(&f.name_any())
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}
