//! The peer guard on a real API server: the admission policies it keeps
//! refuse what a peer's ShadowPods and Pods may not do, naming the field;
//! `restricted` workloads pass; the namespaces Liqo makes for a peer are
//! labelled with the Pod Security level (which the API server's own Pod
//! Security admission then enforces) and confined to Liqo's derived names;
//! a deleted or edited policy is back at once. Liqo's CRDs (ShadowPod) come
//! from the pinned Liqo module; the controllers are not needed here (the
//! end-to-end case with them is `fluidos-node`'s `tests/peering.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::collections::BTreeSet;
use std::time::Duration;

use fluidos_controller::Metrics;
use fluidos_controller::readiness::ReadinessGate;
use fluidos_peer_access::workload_policy::{self, PolicyInputs};
use fluidos_peer_access::{GuardConfig, PeerExposure, PodSecurityLevel};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, LiqoBinaries};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::wait::await_condition;
use serde_json::{Value, json};

const PEER: &str = "consumer1";
/// Namespace of the accounts the REAR gateway issues to peers.
const PEER_ACCOUNT_NS: &str = "fluidos";
const WAIT: Duration = Duration::from_secs(20);

fn say(line: &str) {
    println!("[peer-guard] {line}");
}

fn namespace(name: &str, labels: Value, annotations: Value) -> Namespace {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations}
    }))
    .unwrap()
}

/// A namespace as Liqo's NamespaceMap controller makes it for `peer`'s
/// namespace `original`.
fn liqo_namespace(name: &str, original: &str, peer: &str) -> Namespace {
    namespace(
        name,
        json!({"liqo.io/remote-cluster-id": peer}),
        json!({
            "liqo.io/managed-by-namespace-map": format!("liqo-tenant-{peer}/{peer}-nm"),
            "liqo.io/original-name": original,
        }),
    )
}

/// A pod spec a `restricted` namespace admits.
fn restricted_spec() -> Value {
    json!({
        "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "app", "image": "example.invalid/app:1",
            "securityContext": {"allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]}}}]
    })
}

/// `restricted_spec()` with `edit` applied.
fn spec_with(edit: impl FnOnce(&mut Value)) -> Value {
    let mut spec = restricted_spec();
    edit(&mut spec);
    spec
}

/// Hostile pod specs and the field each refusal must name.
fn hostile() -> Vec<(&'static str, Value)> {
    vec![
        (
            "securityContext.privileged",
            // (A Pod may not also say allowPrivilegeEscalation: false.)
            spec_with(|s| s["containers"][0]["securityContext"] = json!({"privileged": true})),
        ),
        (
            "allowPrivilegeEscalation",
            spec_with(|s| {
                s["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true);
            }),
        ),
        ("hostNetwork", spec_with(|s| s["hostNetwork"] = json!(true))),
        ("hostPID", spec_with(|s| s["hostPID"] = json!(true))),
        (
            "hostPath",
            spec_with(|s| {
                s["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]);
                s["containers"][0]["volumeMounts"] =
                    json!([{"name": "root", "mountPath": "/host"}]);
            }),
        ),
        (
            "hostPort",
            spec_with(|s| {
                s["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 80}]);
            }),
        ),
        (
            "nodeName",
            spec_with(|s| s["nodeName"] = json!("control-plane")),
        ),
        (
            "capabilities.add",
            spec_with(|s| {
                s["containers"][0]["securityContext"]["capabilities"]["add"] = json!(["SYS_ADMIN"]);
            }),
        ),
        (
            "seccompProfile",
            spec_with(|s| s["securityContext"]["seccompProfile"] = json!({"type": "Unconfined"})),
        ),
        (
            "priorityClassName",
            spec_with(|s| s["priorityClassName"] = json!("system-node-critical")),
        ),
        (
            "initContainers",
            spec_with(|s| {
                s["initContainers"] = json!([{"name": "init", "image": "example.invalid/i:1",
                    "securityContext": {"privileged": true}}]);
            }),
        ),
    ]
}

fn shadow_pods(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("offloading.liqo.io", "v1beta1", "ShadowPod");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

fn shadow_pod(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "ShadowPod",
        "metadata": {"name": name, "labels": {"liqo.io/origin-cluster-id": PEER}},
        "spec": {"pod": spec},
    }))
    .unwrap()
}

fn pod(name: &str, spec: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// The refusal's message; panics when the create was accepted.
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) -> String {
    match result {
        Err(kube::Error::Api(s)) => {
            assert!(
                s.code == 403 || s.code == 422,
                "{what}: refused with {} {}",
                s.code,
                s.message
            );
            s.message
        }
        other => panic!("{what} was not refused: {other:?}"),
    }
}

async fn until_present<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    tokio::time::timeout(
        WAIT,
        await_condition(api.clone(), name, |o: Option<&K>| o.is_some()),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} not back within {WAIT:?}"))
    .unwrap();
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario against one API server, step by step"
)]
async fn a_peers_workloads_are_confined_to_the_pod_security_level() {
    if let Some(reason) = fluidos_testenv::liqo::skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    let liqo = LiqoBinaries::from_env().unwrap();
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![liqo.crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cp.client();
    let ready = ReadinessGate::new();
    let guard = tokio::spawn({
        let (client, ready) = (client.clone(), ready.clone());
        async move {
            fluidos_peer_access::run(
                client,
                GuardConfig {
                    inputs: PolicyInputs {
                        level: PodSecurityLevel::Restricted,
                        service_namespaces: false,
                        peer_accounts: format!(
                            "system:serviceaccount:{PEER_ACCOUNT_NS}:fluidos-peer-"
                        ),
                        exposure: BTreeSet::new(),
                    },
                },
                &Metrics::new(),
                ready,
                std::future::pending(),
            )
            .await;
        }
    });
    tokio::time::timeout(WAIT, ready.wait())
        .await
        .expect("the API server enforcing the guard's policies");
    say("guard ready: policies in place");

    // Namespaces: Liqo's derived name passes and gets the level; any other
    // name a NamespaceMap asks for, or another peer's label, is refused.
    let namespaces = Api::<Namespace>::all(client.clone());
    let ns = format!("app-{PEER}");
    namespaces
        .create(&PostParams::default(), &liqo_namespace(&ns, "app", PEER))
        .await
        .unwrap();
    tokio::time::timeout(
        WAIT,
        await_condition(namespaces.clone(), &ns, |n: Option<&Namespace>| {
            n.and_then(|n| n.metadata.labels.as_ref())
                .and_then(|l| l.get("pod-security.kubernetes.io/enforce"))
                .is_some_and(|v| v == "restricted")
        }),
    )
    .await
    .expect("the peer namespace labelled restricted")
    .unwrap();
    say(&format!("{ns}: labelled pod-security restricted"));
    // kube-evil: a name of the peer's choosing; web-consumer1: not the
    // mapping of its original name (app); longhorn-system: the derived name
    // of a peer whose cluster ID is one word (system), a name this cluster
    // may need; other-consumer1: another peer's label on it.
    for (name, original, peer, refused_for) in [
        ("kube-evil", "app", PEER, "metadata.name:"),
        ("web-consumer1", "app", PEER, "metadata.name:"),
        (
            "longhorn-system",
            "longhorn",
            "system",
            "cluster ID is one word",
        ),
        // Liqo's own prefix: it would pass for peer tenant-x's tenant namespace.
        (
            "liqo-tenant-x",
            "liqo",
            "tenant-x",
            "are Kubernetes' and Liqo's",
        ),
        (
            "other-consumer1",
            "other",
            PEER,
            "metadata.labels[liqo.io/remote-cluster-id]",
        ),
    ] {
        let mut n = liqo_namespace(name, original, peer);
        if name == "other-consumer1" {
            // Labelled for consumer2, made by consumer1's NamespaceMap.
            n.metadata
                .labels
                .as_mut()
                .unwrap()
                .insert("liqo.io/remote-cluster-id".into(), "consumer2".into());
        }
        let msg = refusal(
            namespaces.create(&PostParams::default(), &n).await,
            &format!("namespace {name}"),
        );
        assert!(msg.contains(refused_for), "{name}: {msg}");
        say(&format!("namespace {name} refused: {msg}"));
    }
    // Namespaces no NamespaceMap made are none of the guard's business.
    namespaces
        .create(
            &PostParams::default(),
            &namespace("ordinary", json!({}), json!({})),
        )
        .await
        .unwrap();
    let tenant = format!("liqo-tenant-{PEER}");
    namespaces
        .create(
            &PostParams::default(),
            &namespace(
                &tenant,
                json!({"liqo.io/remote-cluster-id": PEER, "liqo.io/tenant-namespace": "true"}),
                json!({}),
            ),
        )
        .await
        .unwrap();

    // ShadowPods: each hostile spec refused naming its field; restricted passes.
    let shadows = shadow_pods(&client, &ns);
    for (i, (field, spec)) in hostile().into_iter().enumerate() {
        let msg = refusal(
            shadows
                .create(
                    &PostParams::default(),
                    &shadow_pod(&format!("bad-{i}"), spec),
                )
                .await,
            &format!("ShadowPod with {field}"),
        );
        let field = if field == "initContainers" {
            "securityContext.privileged"
        } else {
            field
        };
        assert!(
            msg.contains("spec.pod.") && msg.contains(field),
            "ShadowPod refusal does not name {field}: {msg}"
        );
        say(&format!("ShadowPod with {field} refused: {msg}"));
    }
    shadows
        .create(
            &PostParams::default(),
            &shadow_pod("restricted", restricted_spec()),
        )
        .await
        .unwrap();
    say("restricted ShadowPod accepted");
    // An update that leaves spec.pod alone is let through; one that makes it
    // privileged is not.
    shadows
        .patch(
            "restricted",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    let msg = refusal(
        shadows
            .patch(
                "restricted",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"pod": {"hostNetwork": true}}})),
            )
            .await,
        "a ShadowPod updated to the host's network",
    );
    assert!(msg.contains("spec.pod.hostNetwork"), "{msg}");

    // Pods (as Liqo's shadowpod controller makes them from spec.pod): the
    // same floor, and Kubernetes' Pod Security admission at the label's level.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    for (field, spec) in hostile().into_iter().take(3) {
        let msg = refusal(
            pods.create(&PostParams::default(), &pod("bad", spec)).await,
            &format!("Pod with {field}"),
        );
        assert!(
            msg.contains(field),
            "Pod refusal does not name {field}: {msg}"
        );
    }
    // A system priority class would outrank (and outlive evictions of)
    // everything here.
    let msg = refusal(
        pods.create(
            &PostParams::default(),
            &pod(
                "critical",
                spec_with(|s| s["priorityClassName"] = json!("system-cluster-critical")),
            ),
        )
        .await,
        "a Pod of a system priority class",
    );
    assert!(msg.contains("spec.priorityClassName"), "{msg}");
    let msg = refusal(
        pods.create(
            &PostParams::default(),
            &pod(
                "root",
                json!({"containers": [{"name": "app", "image": "example.invalid/app:1"}]}),
            ),
        )
        .await,
        "a pod that is not restricted",
    );
    assert!(msg.contains("PodSecurity \"restricted"), "{msg}");
    say(&format!(
        "baseline pod refused by Pod Security admission: {msg}"
    ));
    pods.create(&PostParams::default(), &pod("ok", restricted_spec()))
        .await
        .unwrap();
    // Liqo's own pods in its tenant namespace (networking gateways) are not
    // a peer's.
    let privileged = hostile().remove(0).1;
    Api::<Pod>::namespaced(client.clone(), &tenant)
        .create(&PostParams::default(), &pod("gateway", privileged))
        .await
        .unwrap();
    say("restricted pod admitted; Liqo's tenant namespace untouched");

    // A peer's Service may not capture traffic for external IPs.
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), &ns);
    let service = |name: &str, external: bool| -> k8s_openapi::api::core::v1::Service {
        let mut spec = json!({"ports": [{"port": 80}]});
        if external {
            spec["externalIPs"] = json!(["192.0.2.1"]);
        }
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    let msg = refusal(
        services
            .create(&PostParams::default(), &service("capture", true))
            .await,
        "a Service with externalIPs",
    );
    assert!(msg.contains("spec.externalIPs"), "{msg}");
    services
        .create(&PostParams::default(), &service("plain", false))
        .await
        .unwrap();
    say(&format!("Service with externalIPs refused: {msg}"));

    // A peer's account (with Liqo's peering-user rights on Secrets in its
    // tenant namespace) may not have this cluster's Liqo sign a nonce, nor
    // make a ServiceAccount token; its nonce Secret is fine.
    let peer_user = format!("system:serviceaccount:{PEER_ACCOUNT_NS}:fluidos-peer-{PEER}");
    let rbac: Value = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "peer", "namespace": tenant},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "get"]}]
    });
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), &tenant)
        .create(
            &PostParams::default(),
            &serde_json::from_value(rbac).unwrap(),
        )
        .await
        .unwrap();
    let binding: Value = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "peer", "namespace": tenant},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "peer"},
        "subjects": [{"kind": "ServiceAccount", "name": format!("fluidos-peer-{PEER}"), "namespace": PEER_ACCOUNT_NS}]
    });
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), &tenant)
        .create(
            &PostParams::default(),
            &serde_json::from_value(binding).unwrap(),
        )
        .await
        .unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(
        cp.kubeconfig().clone(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.auth_info.impersonate = Some(peer_user.clone());
    let peer = kube::Client::try_from(config).unwrap();
    let peer_secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(peer.clone(), &tenant);
    let secret = |name: &str, labels: Value, type_: Option<&str>| {
        let annotations = if type_.is_some() {
            json!({"kubernetes.io/service-account.name": "default"})
        } else {
            json!({})
        };
        serde_json::from_value::<k8s_openapi::api::core::v1::Secret>(json!({
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "type": type_.unwrap_or("Opaque"),
            "stringData": {"nonce": "chosen-by-the-peer"}
        }))
        .unwrap()
    };
    // Only its nonce: Liqo trusts Secrets by labels, so a peer choosing a
    // kubeconfig Secret's (the crd-replicator would use it, and send it its
    // token) or a gateway key's labels, or another name, is refused.
    let planted = |name: &str, labels: Value, annotations: Value| {
        serde_json::from_value::<k8s_openapi::api::core::v1::Secret>(json!({
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "stringData": {"kubeconfig": "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token"}
        }))
        .unwrap()
    };
    for (what, s, field) in [
        (
            "a Secret of another name",
            planted("kubeconfig-controlplane-x", json!({}), json!({})),
            "metadata.name",
        ),
        (
            "a nonce with a control-plane kubeconfig's labels",
            planted(
                "liqo-nonce",
                json!({"liqo.io/identity-type": "ControlPlane", "liqo.io/remote-cluster-id": PEER}),
                json!({}),
            ),
            "metadata.labels",
        ),
        (
            "a nonce with a gateway key's label",
            planted(
                "liqo-nonce",
                json!({"networking.liqo.io/gateway-resource": "true"}),
                json!({}),
            ),
            "metadata.labels",
        ),
        (
            "a nonce naming another cluster",
            planted(
                "liqo-nonce",
                json!({"liqo.io/nonce": "true", "liqo.io/remote-cluster-id": "someone-else"}),
                json!({}),
            ),
            "metadata.labels[liqo.io/remote-cluster-id]",
        ),
        (
            "a nonce with annotations",
            planted(
                "liqo-nonce",
                json!({"liqo.io/nonce": "true"}),
                json!({"liqo.io/remote-tenant-namespace": "x"}),
            ),
            "metadata.annotations",
        ),
    ] {
        let msg = refusal(peer_secrets.create(&PostParams::default(), &s).await, what);
        assert!(msg.contains(field), "{what}: {msg}");
        say(&format!("{what} refused: {msg}"));
    }
    let msg = refusal(
        peer_secrets
            .create(
                &PostParams::default(),
                &secret(
                    "liqo-signed-nonce",
                    json!({"liqo.io/signed-nonce": "true", "liqo.io/remote-cluster-id": PEER}),
                    None,
                ),
            )
            .await,
        "a peer's signed-nonce Secret",
    );
    assert!(msg.contains("liqo.io/signed-nonce"), "{msg}");
    say(&format!("peer's signed-nonce Secret refused: {msg}"));
    let msg = refusal(
        peer_secrets
            .create(
                &PostParams::default(),
                &secret(
                    "token",
                    json!({}),
                    Some("kubernetes.io/service-account-token"),
                ),
            )
            .await,
        "a peer's ServiceAccount token",
    );
    assert!(msg.contains("ServiceAccount-token"), "{msg}");
    peer_secrets
        .create(
            &PostParams::default(),
            &secret(
                "liqo-nonce",
                json!({"liqo.io/nonce": "true", "liqo.io/remote-cluster-id": PEER}),
                None,
            ),
        )
        .await
        .unwrap();
    // This node's own peering makes its signed-nonce Secrets (as admin here).
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &tenant)
        .create(
            &PostParams::default(),
            &secret(
                "liqo-signed-nonce",
                json!({"liqo.io/signed-nonce": "true", "liqo.io/remote-cluster-id": PEER}),
                None,
            ),
        )
        .await
        .unwrap();

    // A peer's claim gets a volume provisioned for it, never one of ours.
    let claims =
        Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(client.clone(), &ns);
    let claim = |name: &str, extra: Value| -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
        let mut spec = json!({"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    for (field, extra) in [
        (
            "spec.volumeName",
            json!({"volumeName": "someone-elses-data"}),
        ),
        (
            "spec.selector",
            json!({"selector": {"matchLabels": {"team": "finance"}}}),
        ),
        ("spec.storageClassName", json!({"storageClassName": ""})),
    ] {
        let msg = refusal(
            claims
                .create(&PostParams::default(), &claim("steal", extra))
                .await,
            &format!("a claim with {field}"),
        );
        assert!(msg.contains(field), "{field}: {msg}");
        say(&format!("claim with {field} refused: {msg}"));
    }
    claims
        .create(&PostParams::default(), &claim("own", json!({})))
        .await
        .unwrap();
    // Binding it later by hand: only the volume controller binds.
    let msg = refusal(
        claims
            .patch(
                "own",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"volumeName": "someone-elses-data"}})),
            )
            .await,
        "a claim bound by an update",
    );
    assert!(msg.contains("only the volume controller"), "{msg}");

    // Someone lowers the namespace's level: it is put back.
    namespaces
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "privileged"}}})),
        )
        .await
        .unwrap();
    tokio::time::timeout(
        WAIT,
        await_condition(namespaces.clone(), &ns, |n: Option<&Namespace>| {
            n.and_then(|n| n.metadata.labels.as_ref())
                .and_then(|l| l.get("pod-security.kubernetes.io/enforce"))
                .is_some_and(|v| v == "restricted")
        }),
    )
    .await
    .expect("the level put back")
    .unwrap();

    // A deleted policy, a deleted binding, an emptied policy: back at once.
    let policies = Api::<ValidatingAdmissionPolicy>::all(client.clone());
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
    for name in workload_policy::NAMES {
        let started = std::time::Instant::now();
        policies
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        until_present(&policies, name).await;
        bindings
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        until_present(&bindings, name).await;
        say(&format!(
            "{name}: policy and binding deleted, back in {:?}",
            started.elapsed()
        ));
    }
    policies
        .patch(
            workload_policy::SHADOWPODS,
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": workload_policy::SHADOWPODS},
                "spec": {"validations": [{"expression": "true"}]},
            })),
        )
        .await
        .unwrap();
    let hostile_again = hostile().remove(0).1;
    let mut refused_again = None;
    for _ in 0..100 {
        // The binding caches the policy: a refusal means the guard's
        // validations are back and served.
        match shadows
            .create(
                &PostParams::default(),
                &shadow_pod("again", hostile_again.clone()),
            )
            .await
        {
            Err(kube::Error::Api(s)) if s.message.contains("privileged") => {
                refused_again = Some(s.message);
                break;
            }
            Ok(_) => {
                shadows
                    .delete("again", &DeleteParams::default())
                    .await
                    .unwrap();
            }
            Err(e) => panic!("{e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let msg = refused_again.expect("the edited policy put back");
    say(&format!("edited policy put back: {msg}"));
    guard.abort();
    cp.stop().await;
}

/// A control plane with Liqo's CRDs and a guard allowing `exposure`, and
/// a peer namespace `svc-<PEER>` in it.
async fn guarded_plane(
    exposure: BTreeSet<PeerExposure>,
) -> (ControlPlane, tokio::task::JoinHandle<()>, String) {
    let liqo = LiqoBinaries::from_env().unwrap();
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![liqo.crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cp.client();
    let ready = ReadinessGate::new();
    let guard = tokio::spawn({
        let (client, ready) = (client.clone(), ready.clone());
        async move {
            fluidos_peer_access::run(
                client,
                GuardConfig {
                    inputs: PolicyInputs {
                        level: PodSecurityLevel::Restricted,
                        service_namespaces: false,
                        peer_accounts: format!(
                            "system:serviceaccount:{PEER_ACCOUNT_NS}:fluidos-peer-"
                        ),
                        exposure,
                    },
                },
                &Metrics::new(),
                ready,
                std::future::pending(),
            )
            .await;
        }
    });
    tokio::time::timeout(WAIT, ready.wait())
        .await
        .expect("the API server enforcing the guard's policies");
    let ns = format!("svc-{PEER}");
    Api::<Namespace>::all(client)
        .create(&PostParams::default(), &liqo_namespace(&ns, "svc", PEER))
        .await
        .unwrap();
    (cp, guard, ns)
}

fn service(name: &str, spec: Value) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn ingress(name: &str, spec: Value) -> Ingress {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn backend() -> Value {
    json!({"service": {"name": "web", "port": {"number": 80}}})
}

fn ingress_with_host(host: &str) -> Value {
    json!({"rules": [{"host": host, "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": backend()}]}}]})
}

fn shadow_endpoint_slice(name: &str, address_type: &str, addresses: &[&str]) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "ShadowEndpointSlice",
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": "web"}},
        "spec": {"template": {
            "addressType": address_type,
            "endpoints": [{"addresses": addresses, "conditions": {"ready": true}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }},
    }))
    .unwrap()
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario against one API server, step by step"
)]
async fn by_default_a_peers_workloads_are_reached_only_inside_this_cluster() {
    if let Some(reason) = fluidos_testenv::liqo::skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    let (cp, guard, ns) = guarded_plane(BTreeSet::new()).await;
    let client = cp.client();
    let services = Api::<Service>::namespaced(client.clone(), &ns);
    // Every way out of the cluster, and the field each refusal names.
    for (what, spec, field) in [
        (
            "a NodePort Service",
            json!({"type": "NodePort", "ports": [{"port": 80}]}),
            "spec.type",
        ),
        (
            "a NodePort Service with the port chosen",
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}),
            "spec.type",
        ),
        (
            "a LoadBalancer Service",
            json!({"type": "LoadBalancer", "ports": [{"port": 80}]}),
            "spec.type",
        ),
        (
            "an ExternalName Service",
            json!({"type": "ExternalName", "externalName": "internal.example"}),
            "spec.type",
        ),
        (
            "a Service choosing its load balancer's address",
            json!({"loadBalancerIP": "192.0.2.10", "ports": [{"port": 80}]}),
            "spec.loadBalancerIP",
        ),
    ] {
        let msg = refusal(
            services
                .create(&PostParams::default(), &service("out", spec))
                .await,
            what,
        );
        assert!(
            msg.contains(field) && msg.contains("FLUIDOS peer guard"),
            "{what}: {msg}"
        );
        say(&format!("{what} refused: {msg}"));
    }
    let msg = refusal(
        services
            .create(
                &PostParams::default(),
                &service("out", json!({"type": "NodePort", "ports": [{"port": 80}]})),
            )
            .await,
        "a NodePort Service",
    );
    assert!(msg.contains("--peer-exposure may allow node-port"), "{msg}");
    // ClusterIP and headless Services are the peer's own business.
    services
        .create(
            &PostParams::default(),
            &service("web", json!({"ports": [{"port": 80}]})),
        )
        .await
        .unwrap();
    services
        .create(
            &PostParams::default(),
            &service(
                "headless",
                json!({"clusterIP": "None", "ports": [{"port": 80}]}),
            ),
        )
        .await
        .unwrap();
    // Turning one into a NodePort later is refused too; a label is not.
    let msg = refusal(
        services
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"type": "NodePort"}})),
            )
            .await,
        "a Service turned into a NodePort",
    );
    assert!(msg.contains("spec.type"), "{msg}");
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    say("ClusterIP and headless Services accepted");

    let ingresses = Api::<Ingress>::namespaced(client.clone(), &ns);
    let msg = refusal(
        ingresses
            .create(
                &PostParams::default(),
                &ingress("site", ingress_with_host("shop.example")),
            )
            .await,
        "an Ingress",
    );
    assert!(msg.contains("--peer-exposure may allow ingress"), "{msg}");
    say(&format!("Ingress refused: {msg}"));

    // Endpoints: at the peer's pods, never at what only our nodes reach.
    let gvk = GroupVersionKind::gvk("offloading.liqo.io", "v1beta1", "ShadowEndpointSlice");
    let slices: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk(&gvk));
    for (what, address_type, addresses, field) in [
        (
            "a cloud's metadata service",
            "IPv4",
            &["10.71.0.5", "169.254.169.254"][..],
            "endpoints[*].addresses",
        ),
        (
            "a node's loopback",
            "IPv4",
            &["127.0.0.1"][..],
            "endpoints[*].addresses",
        ),
        (
            "IPv6 loopback",
            "IPv6",
            &["::1"][..],
            "endpoints[*].addresses",
        ),
        (
            "the unspecified address",
            "IPv4",
            &["0.0.0.0"][..],
            "endpoints[*].addresses",
        ),
        (
            "a name",
            "FQDN",
            &["kubernetes.default.svc"][..],
            "spec.template.addressType",
        ),
    ] {
        let msg = refusal(
            slices
                .create(
                    &PostParams::default(),
                    &shadow_endpoint_slice("web-x", address_type, addresses),
                )
                .await,
            &format!("a ShadowEndpointSlice at {what}"),
        );
        assert!(msg.contains(field), "{what}: {msg}");
        say(&format!("ShadowEndpointSlice at {what} refused: {msg}"));
    }
    // An endpoint that names a node here. (Per-node hints cannot be set:
    // Liqo's ShadowEndpointSlice schema prunes them.)
    for (what, edit, field) in [(
        "naming a node here",
        json!({"nodeName": "control-plane"}),
        "endpoints[*].nodeName",
    )] {
        let mut slice = shadow_endpoint_slice("web-x", "IPv4", &["10.71.0.5"]);
        let endpoint = &mut slice.data["spec"]["template"]["endpoints"][0];
        for (k, v) in edit.as_object().unwrap() {
            endpoint[k] = v.clone();
        }
        let msg = refusal(
            slices.create(&PostParams::default(), &slice).await,
            &format!("a ShadowEndpointSlice {what}"),
        );
        assert!(msg.contains(field), "{what}: {msg}");
        say(&format!("ShadowEndpointSlice {what} refused: {msg}"));
    }
    // What Liqo's reflection sends: the peer's pods, remapped, on the
    // peer's cluster.
    let mut liqo_made = shadow_endpoint_slice("web-x", "IPv4", &["10.71.0.5", "10.71.0.6"]);
    liqo_made.data["spec"]["template"]["endpoints"][0]["nodeName"] = json!(PEER);
    slices
        .create(&PostParams::default(), &liqo_made)
        .await
        .unwrap();
    let msg = refusal(
        slices
            .patch(
                "web-x",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"template": {"endpoints": [
                    {"addresses": ["169.254.169.254"]}]}}})),
            )
            .await,
        "a ShadowEndpointSlice moved to the metadata service",
    );
    assert!(msg.contains("endpoints[*].addresses"), "{msg}");
    say("ShadowEndpointSlice at the peer's pods accepted");
    guard.abort();
    cp.stop().await;
}

#[tokio::test]
async fn allowed_exposure_is_admitted_and_an_allowed_ingress_names_its_hosts() {
    if let Some(reason) = fluidos_testenv::liqo::skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    let (cp, guard, ns) = guarded_plane(BTreeSet::from([
        PeerExposure::NodePort,
        PeerExposure::Ingress,
    ]))
    .await;
    let client = cp.client();
    let services = Api::<Service>::namespaced(client.clone(), &ns);
    services
        .create(
            &PostParams::default(),
            &service("web", json!({"type": "NodePort", "ports": [{"port": 80}]})),
        )
        .await
        .unwrap();
    let msg = refusal(
        services
            .create(
                &PostParams::default(),
                &service(
                    "lb",
                    json!({"type": "LoadBalancer", "ports": [{"port": 80}]}),
                ),
            )
            .await,
        "a LoadBalancer Service (not allowed)",
    );
    assert!(msg.contains("ClusterIP or NodePort only"), "{msg}");
    say(&format!("NodePort admitted, LoadBalancer refused: {msg}"));
    let ingresses = Api::<Ingress>::namespaced(client.clone(), &ns);
    ingresses
        .create(
            &PostParams::default(),
            &ingress("site", ingress_with_host("shop.example")),
        )
        .await
        .unwrap();
    for (what, spec, field) in [
        (
            "an Ingress taking every host",
            json!({"rules": [{"http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": backend()}]}}]}),
            "spec.rules[*].host",
        ),
        (
            "an Ingress as the default backend",
            json!({"defaultBackend": backend()}),
            "spec.defaultBackend",
        ),
        (
            "an Ingress for a wildcard host",
            ingress_with_host("*.corp.example"),
            "spec.rules[*].host",
        ),
    ] {
        let msg = refusal(
            ingresses
                .create(&PostParams::default(), &ingress("catch-all", spec))
                .await,
            what,
        );
        assert!(msg.contains(field), "{what}: {msg}");
        say(&format!("{what} refused: {msg}"));
    }
    // The controller's configuration is in annotations: none but Liqo's,
    // added later included.
    let mut snippet = ingress("snippet", ingress_with_host("blog.example"));
    snippet.metadata.annotations = Some(
        [(
            "nginx.ingress.kubernetes.io/server-snippet".to_owned(),
            "location / { proxy_pass http://169.254.169.254; }".to_owned(),
        )]
        .into(),
    );
    let msg = refusal(
        ingresses.create(&PostParams::default(), &snippet).await,
        "an Ingress with a controller's snippet",
    );
    assert!(msg.contains("metadata.annotations"), "{msg}");
    let msg = refusal(
        ingresses
            .patch(
                "site",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    "nginx.ingress.kubernetes.io/auth-url": "http://attacker.example"}}})),
            )
            .await,
        "an Ingress given a controller's annotation later",
    );
    assert!(msg.contains("metadata.annotations"), "{msg}");
    say(&format!("Ingress annotations refused: {msg}"));
    guard.abort();
    cp.stop().await;
}

#[tokio::test]
async fn an_allowed_load_balancer_chooses_no_address() {
    if let Some(reason) = fluidos_testenv::liqo::skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    let (cp, guard, ns) = guarded_plane(BTreeSet::from([PeerExposure::LoadBalancer])).await;
    let services = Api::<Service>::namespaced(cp.client(), &ns);
    let lb = json!({"type": "LoadBalancer", "ports": [{"port": 80}]});
    let mut chosen = service("chosen", lb.clone());
    chosen.metadata.annotations = Some(
        [(
            "metallb.io/loadBalancerIPs".to_owned(),
            "192.0.2.10".to_owned(),
        )]
        .into(),
    );
    let msg = refusal(
        services.create(&PostParams::default(), &chosen).await,
        "a LoadBalancer choosing its address by annotation",
    );
    assert!(
        msg.contains("metadata.annotations") && msg.contains("metallb.io/"),
        "{msg}"
    );
    services
        .create(&PostParams::default(), &service("web", lb))
        .await
        .unwrap();
    let msg = refusal(
        services
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    "metallb.universe.tf/allow-shared-ip": "admins-ip"}}})),
            )
            .await,
        "a LoadBalancer sharing an address by a later annotation",
    );
    assert!(msg.contains("metadata.annotations"), "{msg}");
    say(&format!(
        "LoadBalancer admitted, its address annotations refused: {msg}"
    ));
    guard.abort();
    cp.stop().await;
}
