//! A K8Slice sale binds the buyer into its Liqo tenant namespace, and only
//! its own: a buyer stating another peer's Liqo cluster ID is refused. It
//! also lets the buyer read this cluster's CIDRs (Liqo's IPAM Networks) in
//! Liqo's namespace, and nothing else there. Of the Secrets of its tenant
//! namespace, which Liqo shares with this node's own peering with it (this
//! node's Identity and its private key, when it buys from that peer), the
//! buyer reads and deletes only its nonce and its gateway's keys; a peer
//! Role of an earlier version, which let it list them all, is narrowed when
//! the gateway starts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use fluidos_api::flavor::FlavorType;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "sell, check the rights, refuse another buyer: one story on one cluster"
)]
async fn a_buyer_cannot_claim_another_peers_tenant_namespace() {
    let cp = control_plane().await;
    let client = cp.client();
    let c = http();
    let ns = "rear-tenant";
    namespace(&client, ns).await;
    // Liqo's namespace (no Liqo CRDs needed: the RBAC authorizer answers
    // for any resource name).
    namespace(&client, "liqo").await;
    for name in ["f1", "f2", "f3"] {
        let p = partition(("1", "1"), ("0", "0"), ("0", "0"));
        let k = k8slice("amd64", "2", "4Gi", "20", None, None, p);
        create_flavor(&client, ns, name, spec(FlavorType::k8slice(&k), true)).await;
    }
    let gw = serve(&client, config(&cp, ns)).await;
    let reserve = gw.url("/api/v2/reservations");
    let purchase = |tx: &str| gw.url(&format!("/api/v2/transactions/{tx}/purchase"));
    let buy = |flavor: &str, buyer: &str, liqo_id: &str| {
        let mut body = k8s_reserve(flavor, buyer, "1", "1Gi", "1");
        body["buyerID"]["additionalInformation"]["liqoID"] = liqo_id.into();
        body
    };

    // Buyer a, with its own cluster ID: sold, and bound in liqo-tenant-liqo-a.
    let (s, body) = post(&c, &reserve, &buy("f1", "a", "liqo-a")).await;
    assert_eq!(s, 200, "{body}");
    let tx = json(&body)["transactionID"].as_str().unwrap().to_owned();
    let (s, body) = post(&c, &purchase(&tx), &serde_json::json!({})).await;
    assert_eq!(s, 200, "{body}");
    let contract_a = json(&body)["contractID"].as_str().unwrap().to_owned();
    let tenant = Api::<Namespace>::all(client.clone())
        .get("liqo-tenant-liqo-a")
        .await
        .unwrap();
    assert_eq!(
        tenant.metadata.labels.unwrap()["liqo.io/remote-cluster-id"],
        "liqo-a"
    );
    // It records whom the credentials bound there belong to: this node's
    // own peering uses the namespace only with that peer (fluidos-peering).
    assert_eq!(
        tenant.metadata.annotations.unwrap()["fluidos.eu/buyer-owner"],
        "plain-http"
    );
    let bindings = Api::<RoleBinding>::namespaced(client.clone(), "liqo-tenant-liqo-a")
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(bindings.len(), 1);

    // What the handed-out kubeconfig may do, as the real RBAC authorizer
    // answers: Liqo's peering-user rights in its own tenant namespace, and
    // nothing in the node's namespace, another tenant's or cluster-wide.
    let me = format!("system:serviceaccount:{ns}:fluidos-peer-a");
    let own = Some("liqo-tenant-liqo-a");
    for (verb, group, resource) in [
        ("create", "authentication.liqo.io", "tenants"),
        ("create", "", "secrets"),
        ("list", "", "configmaps"),
    ] {
        assert!(
            allowed(&client, &me, verb, group, resource, own).await,
            "{verb} {resource} in its tenant namespace"
        );
    }
    own_secrets_only(&cp, ns, &contract_a, "liqo-tenant-liqo-a").await;
    // Liqo's networking phase reads the provider's pod and external CIDRs
    // in Liqo's namespace (a list by label, or a get).
    for verb in ["list", "get"] {
        assert!(
            allowed(&client, &me, verb, "ipam.liqo.io", "networks", Some("liqo")).await,
            "{verb} networks in liqo"
        );
    }
    for (verb, group, resource, namespace) in [
        ("get", "", "secrets", Some(ns)),
        ("list", "", "secrets", Some(ns)),
        ("create", "", "secrets", Some(ns)),
        // Secrets of its tenant namespace by name only (what this node
        // keeps there when it buys from that peer too).
        ("list", "", "secrets", own),
        ("watch", "", "secrets", own),
        ("list", "", "configmaps", Some(ns)),
        ("get", "", "secrets", Some("liqo-tenant-liqo-b")),
        (
            "create",
            "authentication.liqo.io",
            "tenants",
            Some("liqo-tenant-liqo-b"),
        ),
        ("list", "", "secrets", None),
        ("create", "", "namespaces", None),
        ("patch", "", "secrets", own),
        ("create", "rbac.authorization.k8s.io", "rolebindings", own),
        ("update", "authentication.liqo.io", "resourceslices", own),
        // In Liqo's namespace, the Networks only, and only read.
        ("list", "", "secrets", Some("liqo")),
        ("get", "", "secrets", Some("liqo")),
        ("list", "", "configmaps", Some("liqo")),
        (
            "list",
            "networking.liqo.io",
            "wggatewayservertemplates",
            Some("liqo"),
        ),
        ("watch", "ipam.liqo.io", "networks", Some("liqo")),
        ("create", "ipam.liqo.io", "networks", Some("liqo")),
        ("update", "ipam.liqo.io", "networks", Some("liqo")),
        // ... and the Networks nowhere else.
        ("list", "ipam.liqo.io", "networks", Some(ns)),
        ("list", "ipam.liqo.io", "networks", Some("default")),
        ("list", "ipam.liqo.io", "networks", None),
    ] {
        assert!(
            !allowed(&client, &me, verb, group, resource, namespace).await,
            "{verb} {group}/{resource} in {namespace:?} must be refused"
        );
    }

    // A buyer stating this provider's own cluster ID: refused, nothing made.
    let (s, body) = post(&c, &reserve, &buy("f3", "c", PROVIDER_LIQO)).await;
    assert_eq!(s, 200, "{body}");
    let tx = json(&body)["transactionID"].as_str().unwrap().to_owned();
    let (s, body) = post(&c, &purchase(&tx), &serde_json::json!({})).await;
    assert_eq!(s, 409, "{body}");
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt(&format!("liqo-tenant-{PROVIDER_LIQO}"))
            .await
            .unwrap()
            .is_none()
    );

    // Buyer b states a's cluster ID: refused with 409, nothing bound for b.
    let (s, body) = post(&c, &reserve, &buy("f2", "b", "liqo-a")).await;
    assert_eq!(s, 200, "{body}");
    let tx = json(&body)["transactionID"].as_str().unwrap().to_owned();
    let (s, body) = post(&c, &purchase(&tx), &serde_json::json!({})).await;
    assert_eq!(s, 409, "{body}");
    assert!(
        json(&body)["error"]
            .as_str()
            .unwrap()
            .contains("belongs to another peer"),
        "{body}"
    );
    let bindings = Api::<RoleBinding>::namespaced(client.clone(), "liqo-tenant-liqo-a")
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(bindings.len(), 1, "b was not bound into a's namespace");
    let b = format!("system:serviceaccount:{ns}:fluidos-peer-b");
    assert!(
        !allowed(
            &client,
            &b,
            "list",
            "ipam.liqo.io",
            "networks",
            Some("liqo")
        )
        .await,
        "a refused buyer reads no CIDRs"
    );
    gw.shutdown().await;
}

/// With its own kubeconfig, the buyer of contract `contract` creates and
/// reads its nonce Secret in `tenant` but cannot list, read or delete a
/// Secret this node keeps there; the peer Role of an earlier version
/// (Liqo's peering user's, listing Secrets) is narrowed by a gateway that
/// starts.
async fn own_secrets_only(
    cp: &fluidos_testenv::ControlPlane,
    ns: &str,
    contract: &str,
    tenant: &str,
) {
    let client = &cp.client();
    let peer = peer_client(client, ns, contract).await;
    let theirs: Api<Secret> = Api::namespaced(peer.clone(), tenant);
    let ours: Api<Secret> = Api::namespaced(client.clone(), tenant);
    let nonce: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "liqo-nonce", "labels": {
            "liqo.io/nonce": "true", "liqo.io/remote-cluster-id": "liqo-a"}},
    }))
    .unwrap();
    theirs.create(&PostParams::default(), &nonce).await.unwrap();
    assert!(theirs.get("liqo-nonce").await.is_ok(), "its own nonce");
    // What Liqo writes for this node's Identity when this node buys from
    // that peer: a kubeconfig with this cluster's Liqo private key.
    let identity: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kubeconfig-controlplane-liqo-a"},
        "stringData": {"kubeconfig": "client-key-data: this cluster's key"},
    }))
    .unwrap();
    ours.create(&PostParams::default(), &identity)
        .await
        .unwrap();
    let refused = |r: Result<_, kube::Error>, what: &str| match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what} must be forbidden: {:?}", other.map(|_| ())),
    };
    refused(
        theirs
            .get("kubeconfig-controlplane-liqo-a")
            .await
            .map(|_| ()),
        "reading this node's Secret",
    );
    refused(
        theirs.list(&ListParams::default()).await.map(|_| ()),
        "listing the Secrets",
    );
    refused(
        theirs
            .delete("kubeconfig-controlplane-liqo-a", &DeleteParams::default())
            .await
            .map(|_| ()),
        "deleting this node's Secret",
    );

    // An earlier version's Role, as Liqo's peering user: listing works...
    let roles: Api<Role> = Api::namespaced(client.clone(), tenant);
    let wide = fluidos_peer_access::grant::liqo_peering_user_rules();
    let patch = serde_json::json!({"rules": wide});
    roles
        .patch(
            "fluidos-peer",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    // ... until a gateway starts, which narrows it again.
    let narrowed = fluidos_peer_access::grant::peer_rules("liqo-a");
    let cfg = config(cp, ns);
    let restarted = serve(client, cfg).await;
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        kube::runtime::wait::await_condition(roles.clone(), "fluidos-peer", |r: Option<&Role>| {
            r.and_then(|r| r.rules.as_ref()) == Some(&narrowed)
        }),
    )
    .await
    .expect("the peer Role narrowed at the gateway's start")
    .unwrap();
    restarted.shutdown().await;
    ours.delete("kubeconfig-controlplane-liqo-a", &DeleteParams::default())
        .await
        .unwrap();
}
