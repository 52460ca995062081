//! What the real-cluster scenarios buy and run: a K8Slice Solver, a
//! restricted pod to offload, a Service blueprint made of the busybox image
//! every real node has, its Solver, and a client pod to reach it from.
//! JSON literals, as a user writes YAML.

use fluidos_api::{ServiceBlueprint, Solver};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::Error;
use crate::real_node::BUSYBOX_IMAGE;

fn from_json<T: serde::de::DeserializeOwned>(what: &str, value: Value) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| Error::Fixture(format!("{what}: {e}")))
}

/// The Pod Security `restricted` container settings.
fn restricted_container() -> Value {
    json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
}

fn restricted_pod() -> Value {
    json!({"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}})
}

/// The upstream sample Solver (`fluidos-samples/solver.yaml`: a K8Slice of
/// at least 1 CPU and 1 GiB on amd64, with `establishPeering: true`)
/// without its `podsFilter: Match 110`, which holds only where a flavor's
/// pods are the node's allocatable pods whatever runs there (the Go LRM's
/// bug; this LRM subtracts the pods bound to the node, and a real node
/// always runs some), and without its memory maximum of 100Gi, which a
/// real node of a larger host would exceed.
pub fn k8slice_solver(namespace: &str, name: &str) -> Result<Solver, Error> {
    from_json(
        "K8Slice Solver",
        json!({
            "apiVersion": "nodecore.fluidos.eu/v1alpha1",
            "kind": "Solver",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "selector": {
                    "flavorType": "K8Slice",
                    "filters": {
                        "architectureFilter": {"name": "Match", "data": {"value": "amd64"}},
                        "cpuFilter": {"name": "Range", "data": {"min": "1000m"}},
                        "memoryFilter": {"name": "Range", "data": {"min": "1Gi"}}
                    }
                },
                "intentID": "intent-sample",
                "findCandidate": true,
                "reserveAndBuy": true,
                "establishPeering": true
            }
        }),
    )
}

/// A restricted busybox pod `web` in `namespace` answering HTTP on 8080
/// with `offloaded <its name>`, asking for a part of the contracted slice.
pub fn offloaded_pod(namespace: &str) -> Result<Pod, Error> {
    from_json(
        "offloaded pod",
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {
                "securityContext": restricted_pod(),
                "containers": [{
                    "name": "web",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c",
                        // Ends on SIGTERM as a well-behaved server does (as PID 1,
                        // httpd would ignore it and wait out the grace period).
                        "echo \"offloaded $POD_NAME\" > /www/index.html; trap 'exit 0' TERM; busybox httpd -f -v -p 8080 -h /www & wait"],
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}},
                    "securityContext": restricted_container(),
                    "volumeMounts": [{"name": "www", "mountPath": "/www"}]
                }],
                "volumes": [{"name": "www", "emptyDir": {}}]
            }
        }),
    )
}

fn kv_templates() -> Value {
    let from_secret = |name: &str, key: &str| json!({"name": name, "valueFrom": {"secretKeyRef": {"name": "kv-credentials", "key": key}}});
    let mut container = restricted_container();
    container["runAsNonRoot"] = json!(true);
    container["runAsUser"] = json!(1000);
    container["seccompProfile"] = json!({"type": "RuntimeDefault"});
    json!([
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
                                "image": BUSYBOX_IMAGE,
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
                                "securityContext": container,
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
    ])
}

/// A Service blueprint `kv`: a key-value page over HTTP behind basic auth,
/// whose user and password are the sale's credentials (the blueprint's
/// Secret); its page says `<database> is served`.
pub fn kv_blueprint(namespace: &str) -> Result<ServiceBlueprint, Error> {
    from_json(
        "kv blueprint",
        json!({
            "apiVersion": "nodecore.fluidos.eu/v1alpha1",
            "kind": "ServiceBlueprint",
            "metadata": {"name": "kv", "namespace": namespace},
            "spec": {
                "name": "kv",
                "description": "A key-value page over HTTP with basic auth (test workload)",
                "category": "database",
                "tags": ["database", "kv"],
                "hostingPolicies": ["Provider"],
                "templates": kv_templates()
            }
        }),
    )
}

/// The upstream `solver-service.yaml`, asking for the `kv` blueprint's tag.
pub fn kv_solver(namespace: &str) -> Result<Solver, Error> {
    from_json(
        "Service Solver",
        json!({
            "apiVersion": "nodecore.fluidos.eu/v1alpha1",
            "kind": "Solver",
            "metadata": {"name": "solver-kv", "namespace": namespace},
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
        }),
    )
}

/// A restricted busybox pod `client` that sleeps, to connect from.
pub fn client_pod() -> Result<Pod, Error> {
    from_json(
        "client pod",
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "client"},
            "spec": {
                "securityContext": restricted_pod(),
                "containers": [{
                    "name": "client",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["busybox", "sleep", "3600"],
                    "securityContext": restricted_container()
                }]
            }
        }),
    )
}

/// `wget http://user:password@endpoint/` from pod `client` in `default` on
/// `cp` (started from [`client_pod`] and waited for, watching, when it is
/// not there yet): its output, whether it succeeded or not.
pub async fn fetch_from_client_pod(
    cp: &crate::ControlPlane,
    endpoint: &str,
    user: &str,
    password: &str,
) -> Result<std::process::Output, Error> {
    use kube::Api;
    use kube::api::PostParams;
    use kube::runtime::wait::await_condition;
    let pods: Api<Pod> = Api::namespaced(cp.client(), "default");
    if pods.get_opt("client").await?.is_none() {
        pods.create(&PostParams::default(), &client_pod()?).await?;
    }
    let ready = |pod: Option<&Pod>| {
        pod.and_then(|p| p.status.as_ref())
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|c| c.iter().all(|c| c.ready))
    };
    let waited = std::time::Duration::from_secs(60);
    tokio::time::timeout(waited, await_condition(pods, "client", ready))
        .await
        .map_err(|_| Error::Timeout {
            what: "the client pod Ready".into(),
            waited,
            last_error: String::new(),
            log_tail: cp
                .real_node()
                .map(crate::RealNode::log_tail)
                .unwrap_or_default(),
        })??;
    let url = format!("http://{user}:{password}@{endpoint}/");
    let mut kubectl = cp.kubectl().await?;
    // busybox wget -T crashes in Debian's static build: timeout instead.
    kubectl.args([
        "exec", "client", "--", "busybox", "timeout", "10", "busybox", "wget", "-qO-", &url,
    ]);
    kubectl
        .output()
        .map_err(|e| Error::io("running kubectl exec", e))
}
