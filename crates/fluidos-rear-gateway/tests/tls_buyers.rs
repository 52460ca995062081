//! REAR over TLS on a real API server, as attacks that must fail: buyers
//! are the keys their connections prove, never what they write in
//! `buyerID`. The clients are the consumer's own REAR client (hyper +
//! rustls), pinned to the provider's key.
//!
//! - plain HTTP lists but may not buy while plain-HTTP sales are off (403
//!   saying how to enable them); TLS without a certificate may not buy;
//! - a client pinned to another key refuses the provider;
//! - a spoofed buyer (another key writing the buyer's ID) gets a hold of its
//!   own, never the buyer's; a replayed purchase and a repeated purchase
//!   from another key: 403; a repeated reserve with another configuration:
//!   409;
//! - one key's holds count together against the per-buyer cap whatever IDs
//!   it writes;
//! - two keys buying at the same instant with one new buyer ID: one gets
//!   the buyer ID's credentials, the other 403;
//! - with plain-HTTP sales on for an address, a Go-style buyer buys, its
//!   sale cannot be taken over TLS, and it cannot take a keyed sale;
//! - a connection that opens a TLS handshake and stalls is closed within
//!   the header timeout.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "an integration scenario reads top to bottom as one story; its steps share one running cluster"
)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use fluidos_api::flavor::FlavorType;
use fluidos_api::ledger::LedgerState;
use fluidos_api::rear::{PurchaseRequest, ReserveRequest};
use fluidos_api::{Contract, Flavor, Transaction};
use fluidos_peer_access::grant::{OWNER_ANNOTATION, service_account_name};
use fluidos_rear_client::{ProviderAddress, RearError};
use fluidos_rear_gateway::PlainHttpSales;
use fluidos_rear_gateway::labels::{BUYER_ADDRESS, BUYER_KEY};
use fluidos_rear_identity::NodeKey;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "rear-tls";

fn reserve_request(flavor: &str, buyer_id: &str, cpu: &str) -> ReserveRequest {
    serde_json::from_value(k8s_reserve(flavor, buyer_id, cpu, "1Gi", "1")).unwrap()
}

fn client(key: Option<&Arc<NodeKey>>) -> fluidos_rear_client::RearClient {
    rear_client(key)
}

fn status(r: Result<impl std::fmt::Debug, fluidos_rear_client::RearError>) -> (u16, String) {
    refusal_of(r)
}

async fn setup_flavors(client: &kube::Client) {
    namespace(client, NS).await;
    let p = partition(("1", "1"), ("1Gi", "1Gi"), ("1", "1"));
    for id in ["aaaa", "bbbb", "cccc"] {
        let k = k8slice("amd64", "8", "16Gi", "110", None, None, p.clone());
        create_flavor(
            client,
            NS,
            &format!("fluidos.eu-k8slice-{id}"),
            spec(FlavorType::k8slice(&k), true),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buyers_are_the_keys_their_connections_prove() {
    let cp = control_plane().await;
    let kube = cp.client();
    setup_flavors(&kube).await;

    let provider_key = NodeKey::generate("provider").unwrap();
    let alice = Arc::new(NodeKey::generate("alice").unwrap());
    let mallory = Arc::new(NodeKey::generate("mallory").unwrap());

    // The node's default: TLS for sales, plain HTTP for the catalog only.
    let mut cfg = config(&cp, NS);
    cfg.plain_http_sales = PlainHttpSales::Off;
    cfg.max_holds_per_buyer = 2;
    cfg = cfg.with_node_key(&provider_key).unwrap();
    let served = serve(&kube, cfg).await;
    let addr = served.base.trim_start_matches("http://").to_owned();
    let pinned = ProviderAddress::pinned(addr.clone(), provider_key.fingerprint());
    let plain = ProviderAddress::plain(addr.clone());

    // The catalog is open on both transports.
    assert_eq!(
        client(None)
            .list_flavors(&plain, None)
            .await
            .unwrap()
            .flavors
            .len(),
        3
    );
    assert_eq!(
        client(None)
            .list_flavors(&pinned, None)
            .await
            .unwrap()
            .flavors
            .len(),
        3
    );

    // Plain HTTP may not buy, and is told how to get it enabled.
    let (code, text) = status(
        client(None)
            .reserve(
                &plain,
                &reserve_request("fluidos.eu-k8slice-aaaa", "alice", "1"),
            )
            .await,
    );
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("--rear-plain-http-sales"), "{text}");
    // TLS without a client certificate may not buy either.
    let (code, text) = status(
        client(None)
            .reserve(
                &pinned,
                &reserve_request("fluidos.eu-k8slice-aaaa", "alice", "1"),
            )
            .await,
    );
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("client certificate"), "{text}");
    // A client pinned to another key refuses this provider before sending anything.
    let elsewhere = ProviderAddress::pinned(addr.clone(), mallory.fingerprint());
    match client(Some(&alice)).list_flavors(&elsewhere, None).await {
        Err(e @ RearError::WrongKey { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains(&provider_key.fingerprint().to_string())
                    && text.contains(&mallory.fingerprint().to_string()),
                "{text}"
            );
        }
        other => panic!("expected WrongKey, got {other:?}"),
    }

    // Alice reserves over TLS: the sale is bound to her key.
    let alice_c = client(Some(&alice));
    let mallory_c = client(Some(&mallory));
    let want = reserve_request("fluidos.eu-k8slice-aaaa", "alice", "1");
    let tx = alice_c.reserve(&pinned, &want).await.unwrap();
    let stored = Api::<Transaction>::namespaced(kube.clone(), NS)
        .get(&tx.transaction_id)
        .await
        .unwrap();
    assert_eq!(
        stored.annotations().get(BUYER_KEY),
        Some(&alice.fingerprint().to_string())
    );
    let flavor = Api::<Flavor>::namespaced(kube.clone(), NS)
        .get("fluidos.eu-k8slice-aaaa")
        .await
        .unwrap();
    let ledger = flavor.status.unwrap().ledger.unwrap();
    assert_eq!(
        ledger[0].buyer_key.as_deref(),
        Some(alice.fingerprint().to_string().as_str())
    );

    // Mallory writes Alice's buyer ID: she gets a hold of her own (as any
    // buyer would), not Alice's, and cannot buy Alice's.
    let spoofed = mallory_c.reserve(&pinned, &want).await.unwrap();
    assert_ne!(spoofed.transaction_id, tx.transaction_id, "spoofed buyer");
    let (code, text) = status(
        mallory_c
            .purchase(&pinned, &tx.transaction_id, &PurchaseRequest::default())
            .await,
    );
    assert_eq!(code, 403, "replayed purchase: {text}");
    assert!(text.contains("another key"), "{text}");
    // Nor over plain HTTP (plain sales off: 403 before anything is read).
    let (code, _) = status(
        client(None)
            .purchase(&plain, &tx.transaction_id, &PurchaseRequest::default())
            .await,
    );
    assert_eq!(code, 403);

    // Alice asking for something else on the same flavor is a conflict,
    // the same thing again is the same transaction.
    let (code, text) = status(
        alice_c
            .reserve(
                &pinned,
                &reserve_request("fluidos.eu-k8slice-aaaa", "alice", "2"),
            )
            .await,
    );
    assert_eq!(code, 409, "{text}");
    assert!(text.contains(&tx.transaction_id), "{text}");
    let again = alice_c.reserve(&pinned, &want).await.unwrap();
    assert_eq!(again.transaction_id, tx.transaction_id);

    // Alice buys; the Contract is bound to her key too.
    let contract = alice_c
        .purchase(&pinned, &tx.transaction_id, &PurchaseRequest::default())
        .await
        .unwrap();
    let stored = Api::<Contract>::namespaced(kube.clone(), NS)
        .get(&contract.contract_id)
        .await
        .unwrap();
    assert_eq!(
        stored.annotations().get(BUYER_KEY),
        Some(&alice.fingerprint().to_string())
    );
    // A repeated purchase (the Transaction is consumed in the background)
    // gives Alice her contract again, and Mallory nothing.
    let transactions = Api::<Transaction>::namespaced(kube.clone(), NS);
    wait_until("the Transaction consumed", Duration::from_secs(20), || {
        let transactions = transactions.clone();
        let id = tx.transaction_id.clone();
        async move { transactions.get_opt(&id).await.unwrap().is_none() }
    })
    .await;
    let (code, text) = status(
        mallory_c
            .purchase(&pinned, &tx.transaction_id, &PurchaseRequest::default())
            .await,
    );
    assert_eq!(code, 403, "repeated purchase from another key: {text}");
    let again = alice_c
        .purchase(&pinned, &tx.transaction_id, &PurchaseRequest::default())
        .await
        .unwrap();
    assert_eq!(again.contract_id, contract.contract_id);

    // Mallory's holds count together whatever buyer IDs she writes: the
    // one as "alice" above, one as "m1", and the cap (2) is reached.
    mallory_c
        .reserve(
            &pinned,
            &reserve_request("fluidos.eu-k8slice-bbbb", "m1", "1"),
        )
        .await
        .unwrap();
    let (code, text) = status(
        mallory_c
            .reserve(
                &pinned,
                &reserve_request("fluidos.eu-k8slice-cccc", "m2", "1"),
            )
            .await,
    );
    assert_eq!(code, 429, "{text}");
    assert!(text.contains(&mallory.fingerprint().to_string()), "{text}");

    // A handshake that stalls is closed within the header timeout.
    let mut cfg = config(&cp, NS);
    cfg.header_read_timeout = Duration::from_secs(2);
    cfg = cfg.with_node_key(&provider_key).unwrap();
    let short = serve(&kube, cfg).await;
    let mut tcp = tokio::net::TcpStream::connect(short.base.trim_start_matches("http://"))
        .await
        .unwrap();
    // The start of a TLS record header, then nothing.
    tcp.write_all(&[0x16, 0x03]).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(20), tcp.read(&mut buf))
        .await
        .expect("the server closes a stalled handshake");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(started.elapsed() < Duration::from_secs(15));

    short.shutdown().await;
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_sales_for_listed_addresses_stay_plain() {
    let cp = control_plane().await;
    let kube = cp.client();
    namespace(&kube, NS).await;
    let p = partition(("1", "1"), ("1Gi", "1Gi"), ("1", "1"));
    let k = k8slice("amd64", "8", "16Gi", "110", None, None, p);
    create_flavor(
        &kube,
        NS,
        "fluidos.eu-k8slice-aaaa",
        spec(FlavorType::k8slice(&k), true),
    )
    .await;
    let provider_key = NodeKey::generate("provider").unwrap();
    let alice = Arc::new(NodeKey::generate("alice").unwrap());

    // Loopback is listed, as an operator lists a Go node's address.
    let mut cfg = config(&cp, NS);
    cfg.plain_http_sales = "127.0.0.0/8".parse().unwrap();
    cfg = cfg.with_node_key(&provider_key).unwrap();
    let served = serve(&kube, cfg).await;
    let addr = served.base.trim_start_matches("http://").to_owned();
    let plain = ProviderAddress::plain(addr.clone());
    let pinned = ProviderAddress::pinned(addr, provider_key.fingerprint());

    let go = client(None);
    let tx = go
        .reserve(
            &plain,
            &reserve_request("fluidos.eu-k8slice-aaaa", "go-node", "1"),
        )
        .await
        .unwrap();
    let stored = Api::<Transaction>::namespaced(kube.clone(), NS)
        .get(&tx.transaction_id)
        .await
        .unwrap();
    assert_eq!(
        stored.annotations().get(BUYER_KEY),
        None,
        "plain sales have no key"
    );
    assert_eq!(
        stored.annotations().get(BUYER_ADDRESS).map(String::as_str),
        Some("127.0.0.1"),
        "plain sales are bound to the address they were reserved from"
    );
    // Another plain-HTTP caller (another address, also allowed) writing the
    // Go buyer's ID, with another configuration: not the Go buyer's hold, so
    // neither a 409 naming its transaction nor its transaction; it reserves
    // on its own. Buying the Go buyer's transaction by its ID is refused.
    let elsewhere = reqwest::Client::builder()
        .local_address(Some("127.0.0.2".parse().unwrap()))
        .build()
        .unwrap();
    let (code, text) = post(
        &elsewhere,
        &format!("{}/api/v2/reservations", served.base),
        &k8s_reserve("fluidos.eu-k8slice-aaaa", "go-node", "2", "1Gi", "1"),
    )
    .await;
    assert_eq!(code, 200, "{text}");
    assert!(!text.contains(&tx.transaction_id), "{text}");
    let (code, text) = post(
        &elsewhere,
        &format!(
            "{}/api/v2/transactions/{}/purchase",
            served.base, tx.transaction_id
        ),
        &serde_json::json!({}),
    )
    .await;
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("at another address"), "{text}");
    assert!(!text.contains("kubeconfig"), "{text}");
    // A keyed peer cannot take a plain-HTTP sale.
    let (code, text) = status(
        client(Some(&alice))
            .purchase(&pinned, &tx.transaction_id, &PurchaseRequest::default())
            .await,
    );
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("plain-HTTP buyer"), "{text}");
    // Nor can an allowed plain-HTTP caller take a keyed sale, even with the
    // buyer's ID and the transaction ID.
    let keyed = client(Some(&alice))
        .reserve(
            &pinned,
            &reserve_request("fluidos.eu-k8slice-aaaa", "alice", "1"),
        )
        .await
        .unwrap();
    let (code, text) = status(
        go.purchase(&plain, &keyed.transaction_id, &PurchaseRequest::default())
            .await,
    );
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("another key"), "{text}");
    // The Go-style buyer buys its own.
    let contract = go
        .purchase(&plain, &tx.transaction_id, &PurchaseRequest::default())
        .await
        .unwrap();
    assert_eq!(contract.transaction_id, tx.transaction_id);
    // Alice buys hers; a plain-HTTP caller stating Alice's buyer ID may
    // reserve and buy, but is not handed Alice's peering credentials.
    let alices = client(Some(&alice))
        .purchase(&pinned, &keyed.transaction_id, &PurchaseRequest::default())
        .await
        .unwrap();
    assert!(!alices.peering_target_credentials.kubeconfig.is_empty());
    let posing = go
        .reserve(
            &plain,
            &reserve_request("fluidos.eu-k8slice-aaaa", "alice", "1"),
        )
        .await
        .unwrap();
    let (code, text) = status(
        go.purchase(&plain, &posing.transaction_id, &PurchaseRequest::default())
            .await,
    );
    assert_eq!(code, 403, "{text}");
    assert!(
        text.contains("holds peering credentials of another peer"),
        "{text}"
    );
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_buyer_id_goes_to_one_key_when_two_buy_with_it_at_once() {
    let cp = control_plane().await;
    let kube = cp.client();
    setup_flavors(&kube).await;
    let provider_key = NodeKey::generate("provider").unwrap();
    let alice = Arc::new(NodeKey::generate("alice").unwrap());
    let mallory = Arc::new(NodeKey::generate("mallory").unwrap());
    let mut cfg = config(&cp, NS);
    cfg.plain_http_sales = PlainHttpSales::Off;
    cfg = cfg.with_node_key(&provider_key).unwrap();
    let served = serve(&kube, cfg).await;
    let addr = served.base.trim_start_matches("http://").to_owned();
    let pinned = ProviderAddress::pinned(addr, provider_key.fingerprint());
    let (a, m) = (client(Some(&alice)), client(Some(&mallory)));
    // Each round is a buyer ID neither key used before; before the first
    // sale made the account, both passed the owner check and the last
    // writer took the account from the first.
    for round in 0..6 {
        let buyer = format!("contested-{round}");
        let a_tx = a
            .reserve(
                &pinned,
                &reserve_request("fluidos.eu-k8slice-aaaa", &buyer, "1"),
            )
            .await
            .unwrap();
        let m_tx = m
            .reserve(
                &pinned,
                &reserve_request("fluidos.eu-k8slice-bbbb", &buyer, "1"),
            )
            .await
            .unwrap();
        let req = PurchaseRequest::default();
        let (a_got, m_got) = tokio::join!(
            a.purchase(&pinned, &a_tx.transaction_id, &req),
            m.purchase(&pinned, &m_tx.transaction_id, &req),
        );
        let (won, lost, winner, lost_tx) = match (a_got, m_got) {
            (Ok(won), lost @ Err(_)) => (won, lost, &alice, &m_tx.transaction_id),
            (lost @ Err(_), Ok(won)) => (won, lost, &mallory, &a_tx.transaction_id),
            // Not the contracts themselves: they carry tokens.
            (a_got, m_got) => panic!(
                "round {round}: both or neither bought: alice {:?}, mallory {:?}",
                a_got.map(|c| c.contract_id),
                m_got.map(|c| c.contract_id)
            ),
        };
        assert!(!won.peering_target_credentials.kubeconfig.is_empty());
        let (code, text) = status(lost);
        assert_eq!(code, 403, "round {round}: {text}");
        assert!(
            text.contains("holds peering credentials of another peer"),
            "round {round}: {text}"
        );
        // The account is the winner's; the loser bought nothing: no
        // Contract, and its hold is still only a hold.
        let account = Api::<ServiceAccount>::namespaced(kube.clone(), NS)
            .get(&service_account_name(&buyer))
            .await
            .unwrap();
        assert_eq!(
            account.annotations().get(OWNER_ANNOTATION),
            Some(&winner.fingerprint().to_string()),
            "round {round}"
        );
        let contracts = Api::<Contract>::namespaced(kube.clone(), NS)
            .list(&Default::default())
            .await
            .unwrap();
        assert!(
            contracts
                .items
                .iter()
                .all(|c| &c.spec.transaction_id != lost_tx),
            "round {round}: the loser got a Contract"
        );
        let flavors = Api::<Flavor>::namespaced(kube.clone(), NS)
            .list(&Default::default())
            .await
            .unwrap();
        let entry = flavors
            .items
            .iter()
            .filter_map(|f| f.status.as_ref()?.ledger.as_ref())
            .flatten()
            .find(|e| &e.transaction_id == lost_tx)
            .unwrap();
        assert_eq!(entry.state, LedgerState::Held, "round {round}");
    }
    served.shutdown().await;
}

/// What the credentials code relies on to never make or take over an
/// account whose owner a sale did not check: a server-side apply naming an
/// account's UID is refused once that account is gone (not made again), and
/// once another account of the same name replaced it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_naming_an_accounts_uid_neither_makes_nor_takes_another() {
    let cp = control_plane().await;
    let kube = cp.client();
    namespace(&kube, NS).await;
    let api = Api::<ServiceAccount>::namespaced(kube.clone(), NS);
    let named = |uid: &str, owner: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {
            "name": "uid-checked", "namespace": NS, "uid": uid,
            "annotations": {OWNER_ANNOTATION: owner}}})
    };
    let pp = PatchParams::apply("uid-test").force();
    let first = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "uid-checked", "annotations": {OWNER_ANNOTATION: "a"}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let uid = first.uid().unwrap();
    // The account checked: applied.
    api.patch("uid-checked", &pp, &Patch::Apply(named(&uid, "a")))
        .await
        .unwrap();
    api.delete("uid-checked", &Default::default())
        .await
        .unwrap();
    // Gone: not made again.
    let gone = api
        .patch("uid-checked", &pp, &Patch::Apply(named(&uid, "a")))
        .await
        .unwrap_err();
    assert!(
        matches!(&gone, kube::Error::Api(e) if e.code == 409),
        "{gone:?}"
    );
    assert!(api.get_opt("uid-checked").await.unwrap().is_none());
    // Made again by another owner: not taken over.
    api.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "uid-checked", "annotations": {OWNER_ANNOTATION: "b"}}
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    let other = api
        .patch("uid-checked", &pp, &Patch::Apply(named(&uid, "a")))
        .await
        .unwrap_err();
    assert!(
        matches!(&other, kube::Error::Api(e) if e.code == 409 || e.code == 422),
        "{other:?}"
    );
    let now = api.get("uid-checked").await.unwrap();
    assert_eq!(now.annotations().get(OWNER_ANNOTATION).unwrap(), "b");
}

/// A provider delivering Services by Liqo takes a `Consumer` hosting policy
/// asked for explicitly at RESERVE from a buyer known by its key (TLS), and
/// refuses the purchase (400, `liqoCredentials`) when the buyer then sends
/// no kubeconfig to deliver with, so nothing is sold that would run
/// elsewhere than asked. Over plain HTTP (no key) the same RESERVE is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_on_the_buyer_are_sold_only_to_be_delivered_by_liqo() {
    use fluidos_api::common::HostingPolicy;
    use fluidos_api::rear::WireLiqoCredentials;

    let cp = control_plane().await;
    let kube = cp.client();
    namespace(&kube, NS).await;
    let mq = service(
        "message-queue",
        &["mqtt"],
        &[HostingPolicy::Consumer, HostingPolicy::Provider],
        serde_json::json!({"type": "object"}),
    );
    create_flavor(
        &kube,
        NS,
        "fluidos.eu-service-mq01",
        spec(FlavorType::service(&mq), true),
    )
    .await;
    let provider_key = NodeKey::generate("provider").unwrap();
    let alice = Arc::new(NodeKey::generate("alice").unwrap());
    let mut cfg = config(&cp, NS);
    cfg.service_delivery = fluidos_api::service_delivery::ServiceDelivery::Liqo;
    cfg = cfg.with_node_key(&provider_key).unwrap();
    let served = serve(&kube, cfg).await;
    let addr = served.base.trim_start_matches("http://").to_owned();
    let pinned = ProviderAddress::pinned(addr.clone(), provider_key.fingerprint());
    let plain = ProviderAddress::plain(addr);

    let want: ReserveRequest = serde_json::from_value(serde_json::json!({
        "flavorID": "fluidos.eu-service-mq01", "buyerID": buyer("alice"),
        "configuration": {"type": "service", "data": {
            "hostingPolicy": "Consumer", "configurationData": {}}}
    }))
    .unwrap();
    // No key: nothing can be delivered by Liqo, so the policy is refused.
    let (code, text) = status(client(None).reserve(&plain, &want).await);
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("hostingPolicy"), "{text}");
    // Alice, over TLS: held.
    let alice_c = client(Some(&alice));
    let tx = alice_c.reserve(&pinned, &want).await.unwrap();
    // Her purchase without a kubeconfig to deliver with: refused, unsold.
    let no_kubeconfig = PurchaseRequest {
        liqo_credentials: Some(WireLiqoCredentials {
            cluster_id: "liqo-alice".into(),
            kubeconfig: String::new(),
        }),
        ..PurchaseRequest::default()
    };
    let (code, text) = status(
        alice_c
            .purchase(&pinned, &tx.transaction_id, &no_kubeconfig)
            .await,
    );
    assert_eq!(code, 400, "{text}");
    assert!(
        text.contains("liqoCredentials") && text.contains("delivery by Liqo"),
        "{text}"
    );
    assert!(
        Api::<Contract>::namespaced(kube.clone(), NS)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "nothing sold"
    );
    let flavor = Api::<Flavor>::namespaced(kube.clone(), NS)
        .get("fluidos.eu-service-mq01")
        .await
        .unwrap();
    let ledger = flavor.status.and_then(|s| s.ledger).unwrap_or_default();
    let hold = ledger
        .iter()
        .find(|e| e.transaction_id == tx.transaction_id)
        .expect("the hold is kept");
    assert_ne!(hold.state, LedgerState::Sold, "the hold is not sold");

    // With a kubeconfig to deliver with (an https server, inline CA and
    // token, for the cluster ID reserved with): sold, to be delivered by
    // Liqo, with the policy asked (Shared here: pods on either cluster).
    let shared: ReserveRequest = serde_json::from_value(serde_json::json!({
        "flavorID": "fluidos.eu-service-mq01", "buyerID": buyer("alice"),
        "configuration": {"type": "service", "data": {
            "hostingPolicy": "Shared", "configurationData": {}}}
    }))
    .unwrap();
    let mq = service(
        "message-queue",
        &["mqtt"],
        &[HostingPolicy::Shared],
        serde_json::json!({"type": "object"}),
    );
    create_flavor(
        &kube,
        NS,
        "fluidos.eu-service-mq02",
        spec(FlavorType::service(&mq), true),
    )
    .await;
    let mut shared = shared;
    shared.flavor_id = "fluidos.eu-service-mq02".into();
    let tx = alice_c.reserve(&pinned, &shared).await.unwrap();
    let kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    \
        server: https://127.0.0.1:6443\n    certificate-authority-data: Y2E=\nusers:\n- name: u\n  \
        user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
        current-context: c\n";
    let with_kubeconfig = PurchaseRequest {
        liqo_credentials: Some(WireLiqoCredentials {
            cluster_id: "liqo-alice".into(),
            kubeconfig: base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                kubeconfig,
            ),
        }),
        ..PurchaseRequest::default()
    };
    let sold = alice_c
        .purchase(&pinned, &tx.transaction_id, &with_kubeconfig)
        .await
        .unwrap();
    let contract = Api::<Contract>::namespaced(kube.clone(), NS)
        .get(&sold.contract_id)
        .await
        .unwrap();
    assert!(fluidos_api::service_delivery::by_liqo(&contract.spec));
    assert_eq!(
        fluidos_api::service_delivery::hosting_policy(&contract.spec),
        HostingPolicy::Shared
    );
    served.stop();
}
