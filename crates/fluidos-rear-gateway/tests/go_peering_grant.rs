//! `--rear-go-peering-grant`: an unmodified Go consumer's peering calls on
//! its provider (`fluidos-node.md` §4.3–4.4, in its order), made with the
//! kubeconfig a Go-style plain-HTTP purchase returns, against a real API
//! server with the real RBAC authorizer and admission: every call the Go
//! node makes is allowed, the same rights reach nothing outside the buyer's
//! own tenant namespace, and the contract's end takes them back.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "the Go consumer's calls read top to bottom as one peering, on one running cluster"
)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use fluidos_api::Contract;
use fluidos_api::flavor::FlavorType;
use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};

const BUYER: &str = "gonode";
/// The Liqo ID [`buyer`] states for [`BUYER`], and its tenant namespace.
const CLUSTER: &str = "liqo-gonode";
const TENANT: &str = "liqo-tenant-liqo-gonode";

fn liqo(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn object(ar: &ApiResource, ns: &str, name: &str, body: serde_json::Value) -> DynamicObject {
    let mut o = DynamicObject::new(name, ar).within(ns);
    o.metadata.labels = Some([("liqo.io/remote-cluster-id".to_owned(), CLUSTER.to_owned())].into());
    o.data = body;
    o
}

/// The API server's answer code for a failed call.
fn code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("not an API answer: {other}"),
    }
}

async fn created(api: &Api<DynamicObject>, o: &DynamicObject) -> Result<(), kube::Error> {
    api.create(&PostParams::default(), o).await.map(|_| ())
}

fn namespace_named(name: &str, labels: &[(&str, &str)]) -> Namespace {
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.into());
    ns.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    ns
}

fn secret(ns: &str, name: &str, labels: &[(&str, &str)], type_: Option<&str>) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    s.metadata.namespace = Some(ns.into());
    s.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    s.type_ = type_.map(Into::into);
    s
}

/// The Go claim on `buyer`'s account, if any.
async fn sas_claim(admin: &kube::Client, ns: &str, buyer: &str) -> Option<String> {
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .get_opt(&format!("fluidos-peer-{buyer}"))
        .await
        .unwrap()
        .and_then(|sa| sa.metadata.annotations)
        .and_then(|a| a.get("fluidos.eu/go-peer-cluster-id").cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_consumer_peers_in_its_own_tenant_namespace_and_nowhere_else() {
    let Some(liqo_crds) = fluidos_testenv::shared_reference_dir()
        .map(|d| d.join("liqo-v1.0.0-crds"))
        .filter(|d| d.is_dir())
    else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference/liqo-v1.0.0-crds is absent (Liqo's CRDs, upstream's files)",
        );
        return;
    };
    init_tracing();
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir(), liqo_crds],
        ..Default::default()
    })
    .await
    .unwrap();
    let admin = cp.client();
    let ns = "rear-go";
    namespace(&admin, ns).await;
    namespace(&admin, "liqo").await;
    // What Liqo's chart installs on the provider and the Go consumer reads.
    let mut cluster_id = ConfigMap::default();
    cluster_id.metadata.name = Some("liqo-clusterid-configmap".into());
    cluster_id.metadata.labels = Some(
        [(
            "app.kubernetes.io/name".to_owned(),
            "clusterid-configmap".to_owned(),
        )]
        .into(),
    );
    cluster_id.data = Some([("CLUSTER_ID".to_owned(), PROVIDER_LIQO.to_owned())].into());
    Api::<ConfigMap>::namespaced(admin.clone(), "liqo")
        .create(&PostParams::default(), &cluster_id)
        .await
        .unwrap();
    let networks = liqo("ipam.liqo.io", "v1alpha1", "Network", "networks");
    let mut pod_cidr = object(
        &networks,
        "liqo",
        "pod-cidr",
        serde_json::json!({"spec": {"cidr": "10.100.0.0/16"}}),
    );
    pod_cidr.metadata.labels = Some(
        [(
            "ipam.liqo.io/network-type".to_owned(),
            "pod-cidr".to_owned(),
        )]
        .into(),
    );
    created(
        &Api::namespaced_with(admin.clone(), "liqo", &networks),
        &pod_cidr,
    )
    .await
    .unwrap();

    let p = partition(("1", "1"), ("0", "0"), ("0", "0"));
    let k = k8slice("amd64", "4", "8Gi", "20", None, None, p);
    create_flavor(&admin, ns, "f", spec(FlavorType::k8slice(&k), true)).await;
    let mut cfg = config(&cp, ns);
    cfg.go_peering_grant = "127.0.0.1".parse().unwrap();
    cfg.revoke_grace = Duration::from_secs(1);
    let gw = serve(&admin, cfg).await;

    // The Go consumer buys over plain HTTP (as it must) with its Liqo ID.
    let c = http();
    let (s, body) = post(
        &c,
        &gw.url("/api/v2/reservations"),
        &k8s_reserve("f", BUYER, "1", "1Gi", "1"),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let tx: serde_json::Value = serde_json::from_str(&body).unwrap();
    let tx = tx["transactionID"].as_str().unwrap().to_owned();
    let (s, body) = post(
        &c,
        &gw.url(&format!("/api/v2/transactions/{tx}/purchase")),
        &serde_json::json!({}),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let contract: serde_json::Value = serde_json::from_str(&body).unwrap();
    let contract = contract["contractID"].as_str().unwrap().to_owned();
    assert!(
        Api::<Namespace>::all(admin.clone())
            .get_opt(TENANT)
            .await
            .unwrap()
            .is_none(),
        "the tenant namespace is the Go consumer's to create (it fails when it exists)"
    );
    let peer = peer_client(&admin, ns, &contract).await;
    let user = format!("system:serviceaccount:{ns}:fluidos-peer-{BUYER}");

    // ---- The Go consumer's calls on its provider, in order (§4.3, §4.4).
    let found = Api::<ConfigMap>::namespaced(peer.clone(), "liqo")
        .list(&ListParams::default().labels("app.kubernetes.io/name=clusterid-configmap"))
        .await
        .unwrap();
    assert_eq!(found.items.len(), 1, "Liqo's cluster ID");
    // Ownership marks are the gateway's: a namespace made with one (here
    // the owner a TLS seller's namespace would carry, and the gateway's own
    // label) is refused.
    let mut forged = namespace_named(
        TENANT,
        &[
            ("liqo.io/remote-cluster-id", CLUSTER),
            ("liqo.io/tenant-namespace", "true"),
            ("app.kubernetes.io/managed-by", "fluidos-rear-gateway"),
        ],
    );
    let refused = Api::<Namespace>::all(peer.clone())
        .create(&PostParams::default(), &forged)
        .await
        .unwrap_err();
    assert_eq!(code(&refused), 403, "{refused}");
    assert!(refused.to_string().contains("marks"), "{refused}");
    forged
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("app.kubernetes.io/managed-by");
    forged.metadata.annotations = Some(
        [(
            "fluidos.eu/buyer-owner".to_owned(),
            "sha256:the-seller-this-node-buys-from".to_owned(),
        )]
        .into(),
    );
    let refused = Api::<Namespace>::all(peer.clone())
        .create(&PostParams::default(), &forged)
        .await
        .unwrap_err();
    assert_eq!(code(&refused), 403, "{refused}");
    // Labelled for another cluster, Liqo would take it for that cluster's.
    let other = namespace_named(
        TENANT,
        &[
            ("liqo.io/remote-cluster-id", "someone-else"),
            ("liqo.io/tenant-namespace", "true"),
        ],
    );
    let refused = Api::<Namespace>::all(peer.clone())
        .create(&PostParams::default(), &other)
        .await
        .unwrap_err();
    assert_eq!(code(&refused), 403, "{refused}");
    assert!(refused.to_string().contains("bought with"), "{refused}");
    let made = Instant::now();
    Api::<Namespace>::all(peer.clone())
        .create(
            &PostParams::default(),
            &namespace_named(
                TENANT,
                &[
                    ("liqo.io/remote-cluster-id", CLUSTER),
                    ("liqo.io/tenant-namespace", "true"),
                ],
            ),
        )
        .await
        .unwrap();
    let configurations = liqo(
        "networking.liqo.io",
        "v1beta1",
        "Configuration",
        "configurations",
    );
    created(
        &Api::namespaced_with(peer.clone(), TENANT, &configurations),
        &object(&configurations, TENANT, CLUSTER, serde_json::json!({"spec": {"remote": {"cidr": {"pod": ["10.200.0.0/16"], "external": ["10.201.0.0/16"]}}}})),
    )
    .await
    .unwrap();
    let listed = Api::<DynamicObject>::namespaced_with(peer.clone(), "liqo", &networks)
        .list(&ListParams::default().labels("ipam.liqo.io/network-type=pod-cidr"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1, "the provider's pod CIDR");
    let servers = liqo(
        "networking.liqo.io",
        "v1beta1",
        "GatewayServer",
        "gatewayservers",
    );
    let servers_api = Api::<DynamicObject>::namespaced_with(peer.clone(), TENANT, &servers);
    created(
        &servers_api,
        &object(&servers, TENANT, CLUSTER, serde_json::json!({"spec": {"mtu": 1340, "endpoint": {"port": 51840, "serviceType": "NodePort"}}})),
    )
    .await
    .unwrap();
    // The Go consumer reads in its tenant namespace first on its next
    // polling tick, 5 s after it made the namespace: the gateway has adopted
    // it and bound the peer Role by then.
    wait_until(
        "the peer Role bound in the Go consumer's namespace",
        Duration::from_secs(5),
        || async {
            allowed(
                &admin,
                &user,
                "get",
                "networking.liqo.io",
                "gatewayservers",
                Some(TENANT),
            )
            .await
        },
    )
    .await;
    eprintln!(
        "the Go consumer's namespace was bound {:?} after it made it",
        made.elapsed()
    );
    servers_api.get(CLUSTER).await.unwrap();
    // Adopted as bought over plain HTTP: never counted as a TLS seller's.
    let adopted = Api::<Namespace>::all(admin.clone())
        .get(TENANT)
        .await
        .unwrap();
    assert_eq!(
        adopted
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("fluidos.eu/buyer-owner"))
            .map(String::as_str),
        Some("plain-http")
    );
    // Liqo's gateway key Secret (`gw-<name>`), then the PublicKey.
    Api::<Secret>::namespaced(admin.clone(), TENANT)
        .create(
            &PostParams::default(),
            &secret(
                TENANT,
                &format!("gw-{CLUSTER}"),
                &[("networking.liqo.io/gateway-resource", "true")],
                None,
            ),
        )
        .await
        .unwrap();
    Api::<Secret>::namespaced(peer.clone(), TENANT)
        .get(&format!("gw-{CLUSTER}"))
        .await
        .unwrap();
    let keys = liqo("networking.liqo.io", "v1beta1", "PublicKey", "publickeies");
    created(
        &Api::namespaced_with(peer.clone(), TENANT, &keys),
        &object(
            &keys,
            TENANT,
            CLUSTER,
            serde_json::json!({"spec": {"publicKey": "AAAA"}}),
        ),
    )
    .await
    .unwrap();
    let connections = liqo("networking.liqo.io", "v1beta1", "Connection", "connections");
    Api::<DynamicObject>::all_with(peer.clone(), &connections)
        .list(&ListParams::default().labels(&format!("liqo.io/remote-cluster-id={CLUSTER}")))
        .await
        .unwrap();
    // Authentication: the nonce Secret, then the Tenant.
    let peer_secrets = Api::<Secret>::namespaced(peer.clone(), TENANT);
    peer_secrets
        .create(
            &PostParams::default(),
            &secret(
                TENANT,
                "liqo-nonce",
                &[
                    ("liqo.io/nonce", "true"),
                    ("liqo.io/remote-cluster-id", CLUSTER),
                ],
                None,
            ),
        )
        .await
        .unwrap();
    peer_secrets.get("liqo-nonce").await.unwrap();
    let tenants = liqo("authentication.liqo.io", "v1beta1", "Tenant", "tenants");
    let tenants_api = Api::<DynamicObject>::namespaced_with(peer.clone(), TENANT, &tenants);
    created(
        &tenants_api,
        &object(&tenants, TENANT, CLUSTER, serde_json::json!({"spec": {"clusterID": CLUSTER, "publicKey": "AAAA", "csr": "AAAA", "signature": "AAAA"}})),
    )
    .await
    .unwrap();
    tenants_api.get(CLUSTER).await.unwrap();
    let by_label = tenants_api
        .list(&ListParams::default().labels(&format!("liqo.io/remote-cluster-id={CLUSTER}")))
        .await
        .unwrap();
    assert_eq!(by_label.items.len(), 1);

    // ---- Nothing outside its own tenant namespace.
    // Refused by the policy (its name in the answer), not by RBAC.
    let refused_by_policy = |r: Result<(), kube::Error>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(code(&e), 403, "{what}: {e}");
        assert!(
            e.to_string()
                .contains(&format!("fluidos-go-peer.{ns}.fluidos.eu")),
            "{what}: refused by the Go peers' policy, not {e}"
        );
    };
    refused_by_policy(
        Api::<Namespace>::all(peer.clone())
            .create(
                &PostParams::default(),
                &namespace_named("liqo-tenant-someone-else", &[]),
            )
            .await
            .map(|_| ()),
        "creating another tenant namespace",
    );
    for other in ["default", "kube-system", ns] {
        refused_by_policy(
            Api::<Secret>::namespaced(peer.clone(), other)
                .create(&PostParams::default(), &secret(other, "planted", &[], None))
                .await
                .map(|_| ()),
            &format!("creating a Secret in {other}"),
        );
        refused_by_policy(
            created(
                &Api::namespaced_with(peer.clone(), other, &servers),
                &object(&servers, other, "planted", serde_json::json!({"spec": {}})),
            )
            .await,
            &format!("creating a GatewayServer in {other}"),
        );
    }
    // A token for an account of its namespace would be a way out.
    let mut token = secret(
        TENANT,
        "token",
        &[],
        Some("kubernetes.io/service-account-token"),
    );
    token.metadata.annotations = Some(
        [(
            "kubernetes.io/service-account.name".to_owned(),
            "default".to_owned(),
        )]
        .into(),
    );
    refused_by_policy(
        peer_secrets
            .create(&PostParams::default(), &token)
            .await
            .map(|_| ()),
        "creating a ServiceAccount-token Secret",
    );
    // Another tenant's namespace, made by the provider.
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &namespace_named("liqo-tenant-other", &[]),
        )
        .await
        .unwrap();
    refused_by_policy(
        created(
            &Api::namespaced_with(peer.clone(), "liqo-tenant-other", &tenants),
            &object(
                &tenants,
                "liqo-tenant-other",
                CLUSTER,
                serde_json::json!({"spec": {}}),
            ),
        )
        .await,
        "creating a Tenant in another tenant's namespace",
    );
    for (verb, group, resource, namespace) in [
        ("list", "", "secrets", None),
        ("get", "", "secrets", Some(ns)),
        ("get", "", "secrets", Some("liqo-tenant-other")),
        ("get", "", "secrets", Some("liqo")),
        ("list", "", "secrets", Some("liqo")),
        ("update", "", "namespaces", None),
        ("delete", "", "namespaces", None),
        ("list", "authentication.liqo.io", "tenants", None),
        (
            "get",
            "authentication.liqo.io",
            "tenants",
            Some("liqo-tenant-other"),
        ),
        (
            "create",
            "rbac.authorization.k8s.io",
            "rolebindings",
            Some(TENANT),
        ),
        ("patch", "", "secrets", Some(TENANT)),
    ] {
        assert!(
            !allowed(&admin, &user, verb, group, resource, namespace).await,
            "{verb} {group}/{resource} in {namespace:?} must be refused"
        );
    }

    // ---- Another Go buyer may not claim that cluster ID, nor any buyer
    // this provider's own.
    for (buyer, cluster) in [("gonode2", CLUSTER), ("gonode3", PROVIDER_LIQO)] {
        let mut body = k8s_reserve("f", buyer, "1", "1Gi", "1");
        body["buyerID"]["additionalInformation"]["liqoID"] = cluster.into();
        let (s, answer) = post(&c, &gw.url("/api/v2/reservations"), &body).await;
        assert_eq!(s, 200, "{answer}");
        let tx: serde_json::Value = serde_json::from_str(&answer).unwrap();
        let tx = tx["transactionID"].as_str().unwrap().to_owned();
        let (s, answer) = post(
            &c,
            &gw.url(&format!("/api/v2/transactions/{tx}/purchase")),
            &serde_json::json!({}),
        )
        .await;
        assert_eq!(s, 409, "{buyer} claiming {cluster}: {answer}");
        assert!(answer.contains("belongs to another peer"), "{answer}");
        assert!(
            sas_claim(&admin, ns, buyer).await.is_none(),
            "a refused claim leaves none behind"
        );
    }

    // ---- A tenant namespace this node's own peering is in (it buys from
    // that cluster: its signed nonce is there) is never adopted for a Go
    // consumer, whose rights there would list this node's credentials.
    let (we_buy_from, its_tenant) = ("liqo-we-buy-from", "liqo-tenant-liqo-we-buy-from");
    let p = partition(("1", "1"), ("0", "0"), ("0", "0"));
    let k = k8slice("amd64", "4", "8Gi", "20", None, None, p);
    create_flavor(&admin, ns, "f5", spec(FlavorType::k8slice(&k), true)).await;
    let buy = |buyer: &'static str| {
        let c = c.clone();
        let reserve = gw.url("/api/v2/reservations");
        let base = gw.url("/api/v2/transactions");
        async move {
            let mut body = k8s_reserve("f5", buyer, "1", "1Gi", "1");
            body["buyerID"]["additionalInformation"]["liqoID"] = we_buy_from.into();
            let (s, answer) = post(&c, &reserve, &body).await;
            assert_eq!(s, 200, "{answer}");
            let tx: serde_json::Value = serde_json::from_str(&answer).unwrap();
            let tx = tx["transactionID"].as_str().unwrap().to_owned();
            post(&c, &format!("{base}/{tx}/purchase"), &serde_json::json!({})).await
        }
    };
    let (s, answer) = buy("gonode5").await;
    assert_eq!(s, 200, "the claim, before the namespace exists: {answer}");
    // Made after the claim, as this node's peering of an earlier version
    // made it (Liqo's two labels only); the signed nonce in it before the
    // namespace looks adoptable (a setup label hides it from the watch).
    let namespaces = Api::<Namespace>::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &namespace_named(
                its_tenant,
                &[
                    ("liqo.io/remote-cluster-id", we_buy_from),
                    ("liqo.io/tenant-namespace", "true"),
                    ("app.kubernetes.io/managed-by", "test-setup"),
                ],
            ),
        )
        .await
        .unwrap();
    Api::<Secret>::namespaced(admin.clone(), its_tenant)
        .create(
            &PostParams::default(),
            &secret(
                its_tenant,
                "liqo-signed-nonce",
                &[
                    ("liqo.io/signed-nonce", "true"),
                    ("liqo.io/remote-cluster-id", we_buy_from),
                ],
                None,
            ),
        )
        .await
        .unwrap();
    namespaces
        .patch(
            its_tenant,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({
                "metadata": {"labels": {"app.kubernetes.io/managed-by": null}}
            })),
        )
        .await
        .unwrap();
    let (s, answer) = buy("gonode5").await;
    assert_eq!(s, 409, "{answer}");
    let kept = namespaces.get(its_tenant).await.unwrap();
    let labels = kept.metadata.labels.unwrap_or_default();
    assert!(
        !labels.contains_key("fluidos.eu/go-peering-grant")
            && !labels.contains_key("app.kubernetes.io/managed-by"),
        "given back, not adopted: {labels:?}"
    );
    // Marked, so that neither the namespace watch nor another sale takes
    // it again (no adopt-and-give-back loop).
    assert!(
        kept.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("fluidos.eu/go-adoption-refused")
    );
    let (s, answer) = buy("gonode5").await;
    assert_eq!(s, 409, "{answer}");
    assert!(
        Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin.clone(), its_tenant)
            .get_opt("fluidos-peer-gonode5")
            .await
            .unwrap()
            .is_none(),
        "no Go consumer bound where this node's peering is"
    );

    // ---- The contract's end takes the rights back.
    Api::<Contract>::namespaced(admin.clone(), ns)
        .delete(&contract, &DeleteParams::default())
        .await
        .unwrap();
    let sas = Api::<ServiceAccount>::namespaced(admin.clone(), ns);
    wait_until(
        "the Go consumer's account to be revoked",
        Duration::from_secs(20),
        || async {
            sas.get_opt(&format!("fluidos-peer-{BUYER}"))
                .await
                .unwrap()
                .is_none()
        },
    )
    .await;
    assert!(
        Api::<ClusterRoleBinding>::all(admin.clone())
            .get_opt(&format!("fluidos-peer-{BUYER}"))
            .await
            .unwrap()
            .is_none(),
        "its ClusterRoleBinding is gone"
    );
    for (verb, group, resource, namespace) in [
        ("create", "", "namespaces", None),
        ("list", "networking.liqo.io", "connections", None),
        ("list", "", "configmaps", Some("liqo")),
        ("get", "networking.liqo.io", "gatewayservers", Some(TENANT)),
    ] {
        assert!(
            !allowed(&admin, &user, verb, group, resource, namespace).await,
            "after revocation: {verb} {group}/{resource} in {namespace:?}"
        );
    }
    gw.shutdown().await;
}
