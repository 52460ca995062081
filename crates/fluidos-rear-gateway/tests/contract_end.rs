//! A sale ends when its Contract is deleted or expires: the sold capacity is
//! for sale again, the Allocation goes, and the buyer's peering token stops
//! working once it has no Contract left.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "an integration scenario reads top to bottom as one story; its steps share one running cluster"
)]

mod common;

use std::time::Duration;

use common::*;
use fluidos_api::flavor::FlavorType;
use fluidos_api::{Allocation, Contract, Flavor};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Reserves `cpu` of `flavor` for `buyer_id` and buys it; returns the Contract name.
async fn buy(c: &reqwest::Client, g: &Served, flavor: &str, buyer_id: &str, cpu: &str) -> String {
    let (s, body) = post(
        c,
        &g.url("/api/v2/reservations"),
        &k8s_reserve(flavor, buyer_id, cpu, "1Gi", "1"),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let tx = json(&body)["transactionID"].as_str().unwrap().to_owned();
    let (s, body) = post(
        c,
        &g.url(&format!("/api/v2/transactions/{tx}/purchase")),
        &serde_json::json!({}),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    json(&body)["contractID"].as_str().unwrap().to_owned()
}

/// The Liqo tenant namespace of a buyer of [`buy`] (its Liqo ID is
/// `liqo-<buyer>`): the one namespace where its credentials grant anything.
fn tenant(buyer: &str) -> String {
    format!("liqo-tenant-liqo-{buyer}")
}

/// The peer's credentials grant what its Role does (listing ConfigMaps in
/// its tenant namespace).
///
/// A revoked token is refused with 401, or with 403 while the API server's
/// ServiceAccount cache still knows the deleted account but RBAC no longer
/// binds it; both mean no access.
async fn token_works(peer: &kube::Client, ns: &str) -> bool {
    match Api::<ConfigMap>::namespaced(peer.clone(), ns)
        .list(&Default::default())
        .await
    {
        Ok(_) => true,
        Err(kube::Error::Api(e)) if e.code == 401 || e.code == 403 => false,
        Err(e) => panic!("unexpected answer to the peer: {e}"),
    }
}

/// The reasons of the Events about `kind`/`name` in `ns`.
async fn event_reasons(client: &kube::Client, ns: &str, kind: &str, name: &str) -> Vec<String> {
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .filter_map(|e| e.reason)
        .collect()
}

/// Waits for an Event `reason` about `kind`/`name`.
async fn wait_event(client: &kube::Client, ns: &str, kind: &str, name: &str, reason: &str) {
    wait_until(
        &format!("a {reason} event about {kind} {name}"),
        Duration::from_secs(10),
        || async {
            event_reasons(client, ns, kind, name)
                .await
                .iter()
                .any(|r| r == reason)
        },
    )
    .await;
}

/// RBAC grants take effect through the API server's caches: wait for them.
async fn wait_token_works(peer: &kube::Client, ns: &str, what: &str) {
    wait_until(what, Duration::from_secs(10), || token_works(peer, ns)).await;
}

fn cpu_listed(body: &str) -> Option<String> {
    if body.is_empty() {
        return None;
    }
    json(body).as_array().unwrap().first().map(|f| {
        f["type"]["data"]["charateristics"]["cpu"]
            .as_str()
            .unwrap()
            .to_owned()
    })
}

/// A namespace selling one 2-CPU flavor `f` (1 CPU partitions), and a
/// gateway configuration that sweeps every 300 ms.
async fn market(
    cp: &fluidos_testenv::ControlPlane,
    ns: &str,
) -> fluidos_rear_gateway::GatewayConfig {
    let client = cp.client();
    namespace(&client, ns).await;
    let p = partition(("1", "1"), ("0", "0"), ("0", "0"));
    let two_cpus = k8slice("amd64", "2", "4Gi", "20", None, None, p);
    create_flavor(&client, ns, "f", spec(FlavorType::k8slice(&two_cpus), true)).await;
    let mut cfg = config(cp, ns);
    cfg.sweep_interval = Duration::from_millis(300);
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_and_expired_contracts_release_capacity_and_credentials() {
    let cp = control_plane().await;
    let client = cp.client();
    let c = http();

    // ---------------- A Contract deleted by the provider's operator.
    let ns = "ended";
    let mut cfg = market(&cp, ns).await;
    // Liqo's namespace, where a K8Slice buyer may read the CIDRs.
    namespace(&client, "liqo").await;
    cfg.revoke_grace = Duration::from_secs(1);
    let g = serve(&client, cfg.clone()).await;
    // A second replica that never sweeps: it sells, the other one revokes.
    cfg.sweep_interval = Duration::from_secs(3600);
    let replica = serve(&client, cfg).await;
    let contracts: Api<Contract> = Api::namespaced(client.clone(), ns);
    let allocations: Api<Allocation> = Api::namespaced(client.clone(), ns);
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);

    let c1 = buy(&c, &replica, "f", "buyer-one", "1").await;
    let c2 = buy(&c, &g, "f", "buyer-two", "1").await;
    // The listing follows the ledger through a watch: it may lag a moment.
    wait_until(
        "the flavor to be sold out",
        Duration::from_secs(10),
        || async { cpu_listed(&get(&c, &g.url("/api/v2/flavors/k8slice")).await.1).is_none() },
    )
    .await;
    let peer_one = peer_client(&client, ns, &c1).await;
    let peer_two = peer_client(&client, ns, &c2).await;
    wait_token_works(
        &peer_one,
        &tenant("buyer-one"),
        "buyer-one's credentials to work",
    )
    .await;
    let reads_cidrs = |buyer: &'static str| {
        let client = client.clone();
        async move {
            let user = format!("system:serviceaccount:{ns}:fluidos-peer-{buyer}");
            allowed(
                &client,
                &user,
                "list",
                "ipam.liqo.io",
                "networks",
                Some("liqo"),
            )
            .await
        }
    };
    assert!(reads_cidrs("buyer-one").await);
    assert!(reads_cidrs("buyer-two").await);
    assert_eq!(
        allocations
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );

    contracts
        .delete(&c1, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        "the deleted contract's CPU to be for sale again",
        Duration::from_secs(15),
        || async {
            cpu_listed(&get(&c, &g.url("/api/v2/flavors/k8slice")).await.1).as_deref() == Some("1")
        },
    )
    .await;
    let f = Api::<Flavor>::namespaced(client.clone(), ns)
        .get("f")
        .await
        .unwrap();
    let ledger = f.status.and_then(|s| s.ledger).unwrap_or_default();
    assert_eq!(ledger.len(), 1, "only buyer-two's sale is left: {ledger:?}");
    assert_eq!(ledger[0].contract.as_deref(), Some(c2.as_str()));
    wait_until(
        "buyer-one's credentials to be revoked",
        Duration::from_secs(15),
        || async {
            sas.get_opt("fluidos-peer-buyer-one")
                .await
                .unwrap()
                .is_none()
        },
    )
    .await;
    wait_until(
        "buyer-one's token to be refused",
        Duration::from_secs(10),
        || async { !token_works(&peer_one, &tenant("buyer-one")).await },
    )
    .await;
    let bindings_left: Vec<String> = Api::<RoleBinding>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|b| b.metadata.name.as_deref() == Some("fluidos-peer-buyer-one"))
        .map(|b| {
            format!(
                "{}/fluidos-peer-buyer-one",
                b.metadata.namespace.clone().unwrap_or_default()
            )
        })
        .collect();
    assert!(
        bindings_left.is_empty(),
        "revoked buyer still bound in {bindings_left:?}"
    );
    assert!(
        !reads_cidrs("buyer-one").await,
        "a revoked buyer reads no CIDRs"
    );
    assert!(reads_cidrs("buyer-two").await);
    // buyer-two still has its Contract, its Allocation and working credentials.
    wait_token_works(
        &peer_two,
        &tenant("buyer-two"),
        "buyer-two's credentials to keep working",
    )
    .await;
    // Operators see what happened on the objects.
    wait_event(&client, ns, "Flavor", "f", "SoldCapacityReleased").await;
    wait_event(
        &client,
        ns,
        "ServiceAccount",
        "fluidos-peer-buyer-one",
        "PeerCredentialsRevoked",
    )
    .await;
    assert!(
        sas.get_opt("fluidos-peer-buyer-two")
            .await
            .unwrap()
            .is_some()
    );
    let left: Vec<String> = allocations
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|a| a.spec.contract.as_ref().unwrap().name.clone().unwrap())
        .collect();
    assert_eq!(left, vec![c2]);
    // The freed CPU sells again to the revoked buyer, on the replica that
    // cached its old token: the replica sees the account is gone (within its
    // watch's latency) and issues fresh credentials.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let c3 = buy(&c, &replica, "f", "buyer-one", "1").await;
    let again = peer_client(&client, ns, &c3).await;
    wait_token_works(
        &again,
        &tenant("buyer-one"),
        "new credentials after a revocation to work",
    )
    .await;
    replica.shutdown().await;
    g.shutdown().await;

    // ---------------- Contracts that expire on their own.
    let ns = "expiring";
    let mut cfg = market(&cp, ns).await;
    cfg.contract_ttl = Duration::from_secs(3);
    cfg.revoke_grace = Duration::from_secs(1);
    let g = serve(&client, cfg).await;
    let contracts: Api<Contract> = Api::namespaced(client.clone(), ns);
    let allocations: Api<Allocation> = Api::namespaced(client.clone(), ns);
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let name = buy(&c, &g, "f", "buyer-three", "2").await;
    let peer = peer_client(&client, ns, &name).await;
    wait_token_works(
        &peer,
        &tenant("buyer-three"),
        "buyer-three's credentials to work",
    )
    .await;
    wait_until(
        "the contract to expire and go",
        Duration::from_secs(20),
        || async {
            contracts.get_opt(&name).await.unwrap().is_none()
                && allocations
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items
                    .is_empty()
        },
    )
    .await;
    wait_event(&client, ns, "Contract", &name, "ContractExpired").await;
    wait_until(
        "the capacity to return",
        Duration::from_secs(15),
        || async {
            cpu_listed(&get(&c, &g.url("/api/v2/flavors/k8slice")).await.1).as_deref() == Some("2")
        },
    )
    .await;
    wait_until(
        "the credentials to be revoked",
        Duration::from_secs(15),
        || async {
            sas.get_opt("fluidos-peer-buyer-three")
                .await
                .unwrap()
                .is_none()
        },
    )
    .await;
    wait_until(
        "buyer-three's token to be refused",
        Duration::from_secs(10),
        || async { !token_works(&peer, &tenant("buyer-three")).await },
    )
    .await;
    g.shutdown().await;

    // ---------------- A buyer who comes back while its revocation is pending.
    let ns = "comeback";
    let mut cfg = market(&cp, ns).await;
    cfg.revoke_grace = Duration::from_secs(4);
    let g = serve(&client, cfg).await;
    let contracts: Api<Contract> = Api::namespaced(client.clone(), ns);
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let first = buy(&c, &g, "f", "buyer-four", "1").await;
    contracts
        .delete(&first, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        "the revocation to be pending",
        Duration::from_secs(15),
        || async {
            sas.get("fluidos-peer-buyer-four")
                .await
                .unwrap()
                .metadata
                .annotations
                .unwrap_or_default()
                .contains_key("fluidos.eu/revoking-since")
        },
    )
    .await;
    // Buying again cancels it: no cached token of the marked account is reused.
    let second = buy(&c, &g, "f", "buyer-four", "1").await;
    let peer = peer_client(&client, ns, &second).await;
    wait_token_works(
        &peer,
        &tenant("buyer-four"),
        "the returning buyer's credentials to work",
    )
    .await;
    let account = sas.get("fluidos-peer-buyer-four").await.unwrap();
    assert!(
        !account
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("fluidos.eu/revoking-since"),
        "issuing clears the pending revocation"
    );
    // Past the grace period the account, and the token, are still there.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let still = sas.get("fluidos-peer-buyer-four").await.unwrap();
    assert_eq!(still.metadata.uid, account.metadata.uid);
    assert!(token_works(&peer, &tenant("buyer-four")).await);
    assert!(
        !event_reasons(&client, ns, "ServiceAccount", "fluidos-peer-buyer-four")
            .await
            .iter()
            .any(|r| r == "PeerCredentialsRevoked")
    );
    g.shutdown().await;

    // ---------------- An owner that only reserves, again and again.
    // Holds keep its account through a hold's longest life past the grace
    // period (a purchase after a hold is not revoked under it), no longer.
    let ns = "holding";
    let mut cfg = market(&cp, ns).await;
    cfg.revoke_grace = Duration::from_secs(1);
    cfg.max_hold_age = Duration::from_secs(3);
    let g = serve(&client, cfg).await;
    let contracts: Api<Contract> = Api::namespaced(client.clone(), ns);
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let name = buy(&c, &g, "f", "buyer-five", "1").await;
    let peer = peer_client(&client, ns, &name).await;
    wait_token_works(
        &peer,
        &tenant("buyer-five"),
        "buyer-five's credentials to work",
    )
    .await;
    contracts
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut marked = None;
    loop {
        let (status, body) = post(
            &c,
            &g.url("/api/v2/reservations"),
            &k8s_reserve("f", "buyer-five", "1", "1Gi", "1"),
        )
        .await;
        assert!(status == 200 || status == 409, "{status} {body}");
        match sas.get_opt("fluidos-peer-buyer-five").await.unwrap() {
            None => break,
            Some(sa) => {
                if marked.is_none() && sa.annotations().contains_key("fluidos.eu/revoking-since") {
                    marked = Some(std::time::Instant::now());
                }
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "an owner that keeps reserving kept its credentials"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let marked = marked.expect("the account marked before it went");
    assert!(
        marked.elapsed() >= Duration::from_secs(3),
        "revoked {:?} after the mark, within a hold's life",
        marked.elapsed()
    );
    wait_until(
        "buyer-five's token to be refused",
        Duration::from_secs(10),
        || async { !token_works(&peer, &tenant("buyer-five")).await },
    )
    .await;
    g.shutdown().await;
    cp.stop().await;
}
