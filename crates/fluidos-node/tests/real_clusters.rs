//! Two real clusters, each with one real node (`fluidos_testenv::RealNode`:
//! kubelet, containerd, runc, bridge CNI, kube-proxy) and fluidos-node
//! installed by `helm install` from the image built of the static binary, as
//! an operator installs them; nothing runs as a host process.
//!
//! A Service sale end to end, delivered without Liqo (the chart's default):
//! the consumer knows the provider only by the chart's `rearManager.peers`
//! (address and pinned key), a Solver there buys the provider's Service
//! flavor, the provider runs the blueprint's workload as a real container on
//! its node, and a pod on the consumer's cluster opens a connection to the
//! delivered endpoint with the delivered credentials and gets an answer, while
//! wrong credentials are refused.
//!
//! Needs what `tests/image.rs` needs (`FLUIDOS_STATIC_BINARY`, root,
//! `FLUIDOS_HELM_BIN_DIR`) and the packages of `tools/node-runtime/install.sh`;
//! without them it prints `SKIP: ...` (`.ci/run` runs this file after the
//! static build and fails if it skipped).

#![allow(clippy::unwrap_used, clippy::expect_used)]
// in tests a panic is the failure report
// The blueprint is one json! literal, deeper than the default limit.
#![recursion_limit = "256"]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fluidos_api::{Flavor, ServiceBlueprint, Solver};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::wait::await_condition;

mod support;

use support::real_cluster::Prerequisites;
use support::{NS, real_cluster};

/// A test blueprint: a key-value page over HTTP behind basic auth, whose
/// user and password are the sale's credentials (the blueprint's Secret),
/// made of the busybox image every real node has.
fn blueprint() -> ServiceBlueprint {
    let restricted = serde_json::json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"}
    });
    let from_secret = |name: &str, key: &str| serde_json::json!({"name": name, "valueFrom": {"secretKeyRef": {"name": "kv-credentials", "key": key}}});
    serde_json::from_value(serde_json::json!({
        "apiVersion": "nodecore.fluidos.eu/v1alpha1",
        "kind": "ServiceBlueprint",
        "metadata": {"name": "kv", "namespace": NS},
        "spec": {
            "name": "kv",
            "description": "A key-value page over HTTP with basic auth (test workload)",
            "category": "database",
            "tags": ["database", "kv"],
            "hostingPolicies": ["Provider"],
            "templates": [
                {
                    "name": "secret",
                    "description": "The credentials",
                    "serviceData": {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {"name": "kv-credentials"},
                        "type": "Opaque",
                        "stringData": {
                            "username": "{{ .username }}",
                            "password": "{{ .password }}",
                            "database": "{{ .database }}"
                        }
                    }
                },
                {
                    "name": "service",
                    "description": "The endpoint",
                    "serviceData": {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "metadata": {
                            "name": "kv-service",
                            "labels": {"nodecore.fluidos.eu/flavor-service-endpoint": "true"}
                        },
                        "spec": {
                            "selector": {"app": "kv"},
                            "ports": [{"protocol": "TCP", "port": 8080, "targetPort": 8080}]
                        }
                    }
                },
                {
                    "name": "deployment",
                    "description": "The server",
                    "serviceData": {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "metadata": {"name": "kv"},
                        "spec": {
                            "replicas": 1,
                            "selector": {"matchLabels": {"app": "kv"}},
                            "template": {
                                "metadata": {"labels": {"app": "kv"}},
                                "spec": {
                                    "containers": [{
                                        "name": "kv",
                                        "image": fluidos_testenv::BUSYBOX_IMAGE,
                                        "imagePullPolicy": "Never",
                                        "command": ["/bin/sh", "-c",
                                            "echo \"/:$USERNAME:$PASSWORD\" > /conf/httpd.conf && echo \"$DATABASE is served\" > /www/index.html && exec busybox httpd -f -v -p 8080 -h /www -c /conf/httpd.conf -r kv"],
                                        "env": [
                                            from_secret("USERNAME", "username"),
                                            from_secret("PASSWORD", "password"),
                                            from_secret("DATABASE", "database")
                                        ],
                                        "ports": [{"containerPort": 8080}],
                                        "resources": {
                                            "requests": {"cpu": "10m", "memory": "16Mi"},
                                            "limits": {"cpu": "100m", "memory": "32Mi"}
                                        },
                                        "securityContext": restricted,
                                        "volumeMounts": [
                                            {"name": "www", "mountPath": "/www"},
                                            {"name": "conf", "mountPath": "/conf"}
                                        ]
                                    }],
                                    "volumes": [
                                        {"name": "www", "emptyDir": {}},
                                        {"name": "conf", "emptyDir": {}}
                                    ]
                                }
                            }
                        }
                    }
                }
            ]
        }
    }))
    .unwrap()
}

/// The upstream `solver-service.yaml`, asking for this blueprint's tag.
fn solver() -> Solver {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "nodecore.fluidos.eu/v1alpha1",
        "kind": "Solver",
        "metadata": {"name": "solver-kv", "namespace": NS},
        "spec": {
            "selector": {
                "flavorType": "Service",
                "filters": {
                    "categoryFilter": {"name": "Match", "data": {"value": "database"}},
                    "tagsFilter": {"name": "Match", "data": {"value": "kv"}}
                }
            },
            "intentID": "intent-kv",
            "findCandidate": true,
            "reserveAndBuy": true,
            "establishPeering": true
        }
    }))
    .unwrap()
}

/// A busybox pod on the consumer's cluster to connect from.
fn client_pod() -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "client"},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "client",
                "image": fluidos_testenv::BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["busybox", "sleep", "3600"],
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}
            }]
        }
    }))
    .unwrap()
}

fn decoded(secret: Secret) -> BTreeMap<String, String> {
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect()
}

/// `wget` of the endpoint from the consumer's client pod, with basic auth.
async fn fetch(
    consumer: &fluidos_testenv::ControlPlane,
    endpoint: &str,
    user: &str,
    password: &str,
) -> std::process::Output {
    let url = format!("http://{user}:{password}@{endpoint}/");
    let mut kubectl = consumer.kubectl().await.unwrap();
    // busybox wget -T crashes in Debian's static build: timeout instead.
    kubectl.args([
        "exec", "client", "--", "busybox", "timeout", "10", "busybox", "wget", "-qO-", &url,
    ]);
    kubectl.output().unwrap()
}

/// A client pod on the consumer's cluster connects to the delivered endpoint:
/// answered with the delivered credentials, refused with a wrong password.
async fn connect_as_buyer(
    consumer: &fluidos_testenv::ControlPlane,
    endpoint: &str,
    data: &BTreeMap<String, String>,
) {
    // A client on the consumer's side, with the delivered credentials.
    let pods: Api<Pod> = Api::namespaced(consumer.client(), "default");
    pods.create(&PostParams::default(), &client_pod())
        .await
        .unwrap();
    let running = |pod: Option<&Pod>| {
        pod.and_then(|p| p.status.as_ref())
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|c| c.iter().all(|c| c.ready))
    };
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(pods, "client", running),
    )
    .await
    .expect("the consumer's client pod did not start")
    .unwrap();
    let answer = fetch(consumer, endpoint, &data["username"], &data["password"]).await;
    assert!(
        answer.status.success(),
        "{}",
        String::from_utf8_lossy(&answer.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&answer.stdout),
        format!("{} is served\n", data["database"])
    );
    let refused = fetch(consumer, endpoint, &data["username"], "not-the-password").await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[tokio::test]
async fn a_service_bought_between_two_real_clusters_answers_its_buyer() {
    let Some(Prerequisites {
        bin,
        layout,
        helm_bin,
    }) = real_cluster::prerequisites()
    else {
        return;
    };
    let started = Instant::now();
    let (provider, consumer) = tokio::join!(
        real_cluster::start(&bin, &layout, Vec::new()),
        real_cluster::start(&bin, &layout, Vec::new()),
    );
    let clusters_up = started.elapsed();
    let provider_ip = provider.real_node().unwrap().node_ip().to_string();

    let no_liqo = ["peering.enabled=false".to_owned()];
    real_cluster::install_pair(&helm_bin, &provider, &consumer, &no_liqo).await;
    let installed = started.elapsed();

    Api::<ServiceBlueprint>::namespaced(provider.client(), NS)
        .create(&PostParams::default(), &blueprint())
        .await
        .unwrap();
    real_cluster::first_matching(
        Api::<Flavor>::namespaced(provider.client(), NS),
        None,
        "Service flavor of the blueprint",
        Duration::from_secs(60),
        |f: &Flavor| f.spec.flavor_type.type_identifier == "Service",
    )
    .await;

    let bought = Instant::now();
    Api::<Solver>::namespaced(consumer.client(), NS)
        .create(&PostParams::default(), &solver())
        .await
        .unwrap();
    let secret = real_cluster::first_matching(
        Api::<Secret>::namespaced(consumer.client(), NS),
        Some("nodecore.fluidos.eu/flavor-service-credentials=true"),
        "credentials Secret on the consumer",
        Duration::from_secs(180),
        |_| true,
    )
    .await;
    let delivered = bought.elapsed();
    let data = decoded(secret);
    let endpoint = data["endpoints"].split(',').next().unwrap().to_owned();
    assert!(
        endpoint.starts_with(&format!("{provider_ip}:")),
        "the endpoint names the provider's node: {endpoint}"
    );

    // The blueprint's workload is a real container on the provider's node.
    let provider_pods = Api::<Pod>::all(provider.client())
        .list(&kube::api::ListParams::default().labels("app=kv"))
        .await
        .unwrap();
    assert_eq!(provider_pods.items.len(), 1);
    let kv = &provider_pods.items[0];
    assert_eq!(
        kv.spec.as_ref().unwrap().node_name.as_deref(),
        Some(provider.real_node().unwrap().name())
    );

    connect_as_buyer(&consumer, &endpoint, &data).await;
    println!(
        "real clusters: two clusters with a real node each up in {clusters_up:.1?}, both charts installed and rolled out at {installed:.1?}; Solver -> credentials on the consumer in {delivered:.1?}; a consumer pod reached {endpoint} with them"
    );
}
