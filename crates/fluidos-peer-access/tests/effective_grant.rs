//! Waiting for a grant to be in force, on a real API server: a RoleBinding
//! written just before is in force when the wait returns, so the peer's
//! first request with it is allowed, not a 403; a node that may not ask says
//! so and does not wait.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use fluidos_peer_access::effective_grant::{self, Access, Waited};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use serde_json::json;

const ACCOUNTS: &str = "fluidos";

async fn impersonating(cp: &ControlPlane, user: &str) -> kube::Client {
    let mut config = kube::Config::from_custom_kubeconfig(
        cp.kubeconfig().clone(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.auth_info.impersonate = Some(user.to_owned());
    kube::Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_is_in_force_when_the_wait_returns() {
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![],
        ..Default::default()
    })
    .await
    .expect("control plane");
    let client = cp.client();
    let pp = PostParams::default();
    for ns in [ACCOUNTS, "liqo-tenant-peer-1"] {
        Api::<Namespace>::all(client.clone())
            .create(
                &pp,
                &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await
            .unwrap();
    }
    let tenant = "liqo-tenant-peer-1";
    Api::<Role>::namespaced(client.clone(), tenant)
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": "fluidos-peer"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    // Several accounts, each bound just before its wait: the authorizer's
    // lag is short and not every write shows it, but after each wait the
    // account's first request must pass.
    for round in 0..5 {
        let account = format!("fluidos-peer-{round}");
        Api::<ServiceAccount>::namespaced(client.clone(), ACCOUNTS)
            .create(
                &pp,
                &serde_json::from_value(json!({"metadata": {"name": account}})).unwrap(),
            )
            .await
            .unwrap();
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "fluidos-peer"},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ACCOUNTS}]
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(client.clone(), tenant)
            .create(&pp, &binding)
            .await
            .unwrap();
        let access = Access {
            account_namespace: ACCOUNTS,
            account: &account,
            namespace: tenant,
            group: "",
            resource: "secrets",
            verb: "list",
        };
        assert_eq!(
            effective_grant::wait_in_force(&client, access).await,
            Waited::InForce,
            "{account}"
        );
        let peer = impersonating(&cp, &format!("system:serviceaccount:{ACCOUNTS}:{account}")).await;
        Api::<Secret>::namespaced(peer, tenant)
            .list(&Default::default())
            .await
            .unwrap_or_else(|e| panic!("{account}: its first list after the wait: {e}"));
    }

    // A node without the right to ask does not wait.
    let unprivileged = impersonating(&cp, "someone-else").await;
    let access = Access {
        account_namespace: ACCOUNTS,
        account: "fluidos-peer-0",
        namespace: tenant,
        group: "",
        resource: "secrets",
        verb: "list",
    };
    assert_eq!(
        effective_grant::wait_in_force(&unprivileged, access).await,
        Waited::NotAllowedToAsk
    );
    cp.stop().await;
}
