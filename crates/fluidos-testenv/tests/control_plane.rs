//! Integration tests against real etcd/kube-apiserver processes.

// Helpers outside #[test] functions are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};

async fn announce(cp: &ControlPlane, label: &str) {
    let version = cp.client().apiserver_version().await.unwrap();
    eprintln!(
        "[{label}] real kube-apiserver {} (go {}, platform {}) serving at {}",
        version.git_version,
        version.go_version,
        version.platform,
        cp.server_url()
    );
}

fn configmap(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("key".to_owned(), value.to_owned())])),
        ..Default::default()
    }
}

#[tokio::test]
async fn starts_a_real_apiserver_and_round_trips_a_configmap() {
    let started = Instant::now();
    let cp = ControlPlane::start(ControlPlaneOptions::default())
        .await
        .unwrap();
    eprintln!("control plane started in {:.1?}", started.elapsed());
    announce(&cp, "single").await;
    let client = cp.client();

    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some("testenv".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();

    let configmaps: Api<ConfigMap> = Api::namespaced(client, "testenv");
    configmaps
        .create(&PostParams::default(), &configmap("greeting", "hello"))
        .await
        .unwrap();
    let read = configmaps.get("greeting").await.unwrap();
    assert_eq!(read.data.unwrap()["key"], "hello");

    // The kubeconfig file must be self-contained for child processes.
    let from_file = kube::config::Kubeconfig::read_from(cp.kubeconfig_path()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(from_file, &Default::default())
        .await
        .unwrap();
    let other_client = kube::Client::try_from(config).unwrap();
    let via_file: Api<ConfigMap> = Api::namespaced(other_client, "testenv");
    assert_eq!(
        via_file.get("greeting").await.unwrap().data.unwrap()["key"],
        "hello"
    );
    assert_eq!(
        cp.kubeconfig().clusters[0]
            .cluster
            .as_ref()
            .unwrap()
            .server
            .as_deref(),
        Some(cp.server_url())
    );

    let stopping = Instant::now();
    cp.stop().await;
    eprintln!("control plane stopped in {:.1?}", stopping.elapsed());
}

#[tokio::test]
async fn two_control_planes_are_isolated() {
    let started = Instant::now();
    let (provider, consumer) = tokio::join!(
        ControlPlane::start(ControlPlaneOptions::default()),
        ControlPlane::start(ControlPlaneOptions::default()),
    );
    let (provider, consumer) = (provider.unwrap(), consumer.unwrap());
    eprintln!("two control planes started in {:.1?}", started.elapsed());
    announce(&provider, "provider").await;
    announce(&consumer, "consumer").await;
    assert_ne!(provider.server_url(), consumer.server_url());

    let in_provider: Api<ConfigMap> = Api::namespaced(provider.client(), "default");
    let in_consumer: Api<ConfigMap> = Api::namespaced(consumer.client(), "default");
    in_provider
        .create(&PostParams::default(), &configmap("only-here", "provider"))
        .await
        .unwrap();
    assert!(in_provider.get_opt("only-here").await.unwrap().is_some());
    assert!(in_consumer.get_opt("only-here").await.unwrap().is_none());

    // Each cluster has its own CA and token: one cluster's credentials are
    // useless against the other.
    let mut crossed = provider.kubeconfig().clone();
    crossed.clusters[0].cluster.as_mut().unwrap().server = Some(consumer.server_url().to_owned());
    let config = kube::Config::from_custom_kubeconfig(crossed, &Default::default())
        .await
        .unwrap();
    let crossed_client = kube::Client::try_from(config).unwrap();
    let crossed_api: Api<ConfigMap> = Api::namespaced(crossed_client, "default");
    assert!(crossed_api.list(&ListParams::default()).await.is_err());

    // Stopping one leaves the other serving.
    provider.stop().await;
    in_consumer
        .create(&PostParams::default(), &configmap("still-up", "consumer"))
        .await
        .unwrap();
    consumer.stop().await;
}

#[tokio::test]
async fn installs_crds_from_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("widgets.yaml"),
        "\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
",
    )
    .unwrap();
    let cp = ControlPlane::start(ControlPlaneOptions {
        crd_dirs: vec![dir.path().to_path_buf()],
        ..Default::default()
    })
    .await
    .unwrap();
    announce(&cp, "crds").await;
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client());
    let crd = crds.get("widgets.example.com").await.unwrap();
    let established = crd
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established);
    // Applying again is a no-op update, not a conflict.
    cp.install_crds(dir.path()).await.unwrap();

    // The real API server validates: a schema-less v1 CRD is refused, and the
    // error names the file.
    let bad = tempfile::tempdir().unwrap();
    std::fs::write(
        bad.path().join("gadgets.yaml"),
        "\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  names: {kind: Gadget, plural: gadgets}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true}]
",
    )
    .unwrap();
    let err = cp.install_crds(bad.path()).await.unwrap_err();
    assert!(
        matches!(err, fluidos_testenv::Error::CrdRejected { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("gadgets.yaml"), "{err}");
    cp.stop().await;
}

#[tokio::test]
async fn workloads_mode_runs_a_deployment_on_a_kwok_node() {
    let started = Instant::now();
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: true,
        ..Default::default()
    })
    .await
    .unwrap();
    eprintln!(
        "control plane with controllers, scheduler and kwok started in {:.1?}",
        started.elapsed()
    );
    announce(&cp, "workloads").await;
    let client = cp.client();

    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "kwok-node-0",
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": "kwok-node-0"}
        },
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}
        }
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();

    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "example.invalid/web:1"}]}
            }
        }
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();

    let pods: Api<Pod> = Api::namespaced(client, "default");
    let deadline = Instant::now() + Duration::from_secs(90);
    let pod = loop {
        let list = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .unwrap();
        let ready = list.items.into_iter().find(|p| {
            let status = p.status.as_ref();
            let running = status.and_then(|s| s.phase.as_deref()) == Some("Running");
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            running && ready
        });
        if let Some(pod) = ready {
            break pod;
        }
        assert!(
            Instant::now() < deadline,
            "no Running+Ready pod for deployment web within 90s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let spec = pod.spec.unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("kwok-node-0"));
    eprintln!(
        "pod {} Running and Ready on {} after {:.1?} total",
        pod.metadata.name.unwrap_or_default(),
        spec.node_name.unwrap_or_default(),
        started.elapsed()
    );
    cp.stop().await;
}
