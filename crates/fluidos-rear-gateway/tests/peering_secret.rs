//! A sold Contract keeps no token: the buyer's peering kubeconfig lives in
//! a Secret owned by the Contract, a repeated purchase answers from it (and
//! writes it again when it is missing), and it goes with the Contract.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "an integration scenario reads top to bottom as one story; its steps share one running cluster"
)]

mod common;

use std::time::Duration;

use base64::Engine;
use common::*;
use fluidos_api::flavor::FlavorType;
use fluidos_api::{Contract, Transaction};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The bearer token of a wire kubeconfig (base64 of the YAML).
fn token_of(kubeconfig_b64: &str) -> String {
    let yaml = base64::engine::general_purpose::STANDARD
        .decode(kubeconfig_b64)
        .unwrap();
    let kc: serde_yaml::Value = serde_yaml::from_slice(&yaml).unwrap();
    kc["users"][0]["user"]["token"].as_str().unwrap().to_owned()
}

/// The ServiceAccount UID in a token's JWT claims.
fn account_uid_of(token: &str) -> String {
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.split('.').nth(1).unwrap())
        .unwrap();
    let claims: serde_json::Value = serde_json::from_slice(&claims).unwrap();
    claims["kubernetes.io"]["serviceaccount"]["uid"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A namespace selling one 2-CPU flavor `f` (1 CPU partitions).
async fn market(cp: &ControlPlane, ns: &str) -> fluidos_rear_gateway::GatewayConfig {
    let client = cp.client();
    namespace(&client, ns).await;
    let p = partition(("1", "1"), ("0", "0"), ("0", "0"));
    let two_cpus = k8slice("amd64", "2", "4Gi", "20", None, None, p);
    create_flavor(&client, ns, "f", spec(FlavorType::k8slice(&two_cpus), true)).await;
    let mut cfg = config(cp, ns);
    cfg.sweep_interval = Duration::from_millis(300);
    cfg
}

/// Reserves 1 CPU of `f` for `buyer_id`; returns the transaction ID.
async fn reserve(c: &reqwest::Client, g: &Served, buyer_id: &str) -> String {
    let (s, body) = post(
        c,
        &g.url("/api/v2/reservations"),
        &k8s_reserve("f", buyer_id, "1", "1Gi", "1"),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    json(&body)["transactionID"].as_str().unwrap().to_owned()
}

/// Buys `tx`; returns the contract name and the wire kubeconfig.
async fn purchase(c: &reqwest::Client, g: &Served, tx: &str) -> (String, String) {
    let (s, body) = post(
        c,
        &g.url(&format!("/api/v2/transactions/{tx}/purchase")),
        &serde_json::json!({}),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let v = json(&body);
    (
        v["contractID"].as_str().unwrap().to_owned(),
        v["peeringTargetCredentials"]["kubeconfig"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

async fn wait_secret(secrets: &Api<Secret>, name: &str) -> Secret {
    wait_until(
        &format!("the Secret {name}"),
        Duration::from_secs(10),
        || async { secrets.get_opt(name).await.unwrap().is_some() },
    )
    .await;
    secrets.get(name).await.unwrap()
}

fn kubeconfig_in(secret: &Secret) -> String {
    b64(&secret.data.as_ref().unwrap()["kubeconfig"].0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peering_tokens_live_in_secrets_owned_by_their_contracts() {
    // With kube-controller-manager: its garbage collector removes a Secret
    // whose Contract is deleted.
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: true,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .expect("control plane");
    let client = cp.client();
    let c = http();

    // ---------------- A sale.
    let ns = "sold";
    let g = serve(&client, market(&cp, ns).await).await;
    let contracts: Api<Contract> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let tx = reserve(&c, &g, "buyer-a").await;
    let (name, sold_with) = purchase(&c, &g, &tx).await;
    let token = token_of(&sold_with);
    let secret_name = format!("peering-credentials-{name}");

    // The token names the buyer's account by UID: the gateway checks that
    // UID against the account the sale checked (peer-access credentials/token.rs, `mint`).
    let account = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .get(&fluidos_peer_access::grant::service_account_name("buyer-a"))
        .await
        .unwrap();
    assert_eq!(Some(account_uid_of(&token)), account.metadata.uid);

    // The Contract names its Secret and carries no token.
    let contract = contracts.get(&name).await.unwrap();
    assert_eq!(contract.spec.peering_target_credentials.kubeconfig, "");
    assert_eq!(
        contract.spec.peering_target_credentials.liqo_id,
        PROVIDER_LIQO
    );
    assert_eq!(
        contract.annotations()["fluidos.eu/credentials-secret"],
        secret_name
    );
    let stored = serde_json::to_string(&contract).unwrap();
    assert!(!stored.contains(&token), "the Contract carries the token");
    assert!(
        !stored.contains(&sold_with),
        "the Contract carries the kubeconfig"
    );

    // The Secret holds the kubeconfig YAML of the answer, owned by the Contract.
    let secret = wait_secret(&secrets, &secret_name).await;
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    assert_eq!(kubeconfig_in(&secret), sold_with);
    let owners = secret.owner_references();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0].kind, "Contract");
    assert_eq!(owners[0].name, name);
    assert_eq!(Some(&owners[0].uid), contract.metadata.uid.as_ref());
    assert_eq!(
        secret.labels()["app.kubernetes.io/managed-by"],
        "fluidos-rear-gateway"
    );
    assert_eq!(secret.labels()["fluidos.eu/transaction-id"], tx);
    assert_eq!(secret.labels()["fluidos.eu/rear-side"], "provider");

    // A repeated purchase, once the Transaction is consumed: the same credentials.
    let transactions: Api<Transaction> = Api::namespaced(client.clone(), ns);
    wait_until(
        "the Transaction to be consumed",
        Duration::from_secs(10),
        || async { transactions.get_opt(&tx).await.unwrap().is_none() },
    )
    .await;
    let (again, repeated) = purchase(&c, &g, &tx).await;
    assert_eq!(again, name);
    assert_eq!(repeated, sold_with);

    // The Secret lost (as after a crash before it was written): a repeated
    // purchase writes it again before answering, with what it answers.
    secrets
        .delete(&secret_name, &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the Secret to be gone", Duration::from_secs(10), || async {
        secrets.get_opt(&secret_name).await.unwrap().is_none()
    })
    .await;
    let (_, reissued) = purchase(&c, &g, &tx).await;
    token_of(&reissued);
    let rewritten = secrets.get(&secret_name).await.unwrap();
    assert_eq!(kubeconfig_in(&rewritten), reissued);
    assert_eq!(rewritten.owner_references()[0].name, name);
    let (_, after) = purchase(&c, &g, &tx).await;
    assert_eq!(after, reissued, "answers agree with the Secret");

    // A Contract of an earlier version, with its kubeconfig in the spec:
    // answered from the spec.
    contracts
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "spec": {"peeringTargetCredentials": {"kubeconfig": "bGVnYWN5"}}
            })),
        )
        .await
        .unwrap();
    let (_, legacy) = purchase(&c, &g, &tx).await;
    assert_eq!(legacy, "bGVnYWN5");

    // The operator deletes the Contract: the garbage collector takes its Secret.
    contracts
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        "the deleted Contract's Secret to be collected",
        Duration::from_secs(60),
        || async { secrets.get_opt(&secret_name).await.unwrap().is_none() },
    )
    .await;
    g.shutdown().await;

    // ---------------- A Contract that expires: the contract-end sweep
    // deletes its Secret itself (the ownerReference is removed here so that
    // the garbage collector cannot be what removes it).
    let ns = "expiring";
    let mut cfg = market(&cp, ns).await;
    cfg.contract_ttl = Duration::from_secs(3);
    let g = serve(&client, cfg).await;
    let contracts: Api<Contract> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let tx = reserve(&c, &g, "buyer-b").await;
    let (name, _) = purchase(&c, &g, &tx).await;
    let secret_name = format!("peering-credentials-{name}");
    wait_secret(&secrets, &secret_name).await;
    secrets
        .patch(
            &secret_name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"ownerReferences": null}})),
        )
        .await
        .unwrap();
    wait_until(
        "the Contract to expire and go with its Secret",
        Duration::from_secs(30),
        || async {
            contracts.get_opt(&name).await.unwrap().is_none()
                && secrets.get_opt(&secret_name).await.unwrap().is_none()
        },
    )
    .await;
    g.shutdown().await;
}
