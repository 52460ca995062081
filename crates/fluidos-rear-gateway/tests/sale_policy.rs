//! Who may buy K8Slices (`--rear-k8slice-buyers`), on a real API server
//! with the consumer's own REAR client over real TLS: keys cost nothing,
//! so a provider may sell slices only to the keys, KnownClusters or
//! networks it lists.
//!
//! - a listed key reserves and buys; another key is refused with 403
//!   naming its key and the setting, before any hold is on the ledger;
//! - `known` admits a key a KnownCluster here records as
//!   `spec.fingerprint` (not a stale one), and no other;
//! - a hold taken while its buyer was admitted is not bought once it is not;
//! - a listed network admits TLS and plain-HTTP buyers from it;
//! - Service flavors are sold as before.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "one scenario per setting on one running cluster, read top to bottom"
)]

mod common;

use std::sync::Arc;

use common::*;
use fluidos_api::Flavor;
use fluidos_api::common::HostingPolicy;
use fluidos_api::flavor::FlavorType;
use fluidos_api::network::{KnownCluster, KnownClusterSpec};
use fluidos_api::rear::{PurchaseRequest, ReserveRequest};
use fluidos_rear_client::ProviderAddress;
use fluidos_rear_gateway::{K8SliceBuyers, PlainHttpSales};
use fluidos_rear_identity::NodeKey;
use kube::Api;
use kube::api::PostParams;

fn reserve_request(flavor: &str, buyer_id: &str) -> ReserveRequest {
    serde_json::from_value(k8s_reserve(flavor, buyer_id, "1", "1Gi", "1")).unwrap()
}

fn client(key: Option<&Arc<NodeKey>>) -> fluidos_rear_client::RearClient {
    rear_client(key)
}

fn refused(r: Result<impl std::fmt::Debug, fluidos_rear_client::RearError>) -> (u16, String) {
    refusal_of(r)
}

async fn flavors(client: &kube::Client, ns: &str) {
    namespace(client, ns).await;
    let p = partition(("1", "1"), ("1Gi", "1Gi"), ("1", "1"));
    let k = k8slice("amd64", "8", "16Gi", "110", None, None, p);
    create_flavor(
        client,
        ns,
        "fluidos.eu-k8slice-aaaa",
        spec(FlavorType::k8slice(&k), true),
    )
    .await;
    let db = service(
        "database",
        &["sql"],
        &[HostingPolicy::Provider],
        serde_json::json!({"type": "object"}),
    );
    create_flavor(
        client,
        ns,
        "fluidos.eu-service-db01",
        spec(FlavorType::service(&db), true),
    )
    .await;
}

/// Holds on `flavor`'s ledger.
async fn ledger_len(client: &kube::Client, ns: &str, flavor: &str) -> usize {
    Api::<Flavor>::namespaced(client.clone(), ns)
        .get(flavor)
        .await
        .unwrap()
        .status
        .and_then(|s| s.ledger)
        .map_or(0, |l| l.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k8slices_are_sold_only_to_the_buyers_the_setting_admits() {
    let cp = control_plane().await;
    let kube = cp.client();
    let provider_key = NodeKey::generate("provider").unwrap();
    let alice = Arc::new(NodeKey::generate("alice").unwrap());
    let mallory = Arc::new(NodeKey::generate("mallory").unwrap());
    let known = Arc::new(NodeKey::generate("known").unwrap());
    let slice = "fluidos.eu-k8slice-aaaa";

    // ---- Keys: Alice listed, Mallory not.
    let ns = "policy-keys";
    flavors(&kube, ns).await;
    let mut cfg = config(&cp, ns);
    cfg.plain_http_sales = PlainHttpSales::Off;
    cfg.k8slice_buyers = alice.fingerprint().to_string().parse().unwrap();
    let served = serve(&kube, cfg.with_node_key(&provider_key).unwrap()).await;
    let addr = served.base.trim_start_matches("http://").to_owned();
    let pinned = ProviderAddress::pinned(addr.clone(), provider_key.fingerprint());
    let tx = client(Some(&alice))
        .reserve(&pinned, &reserve_request(slice, "alice"))
        .await
        .unwrap();
    client(Some(&alice))
        .purchase(&pinned, &tx.transaction_id, &PurchaseRequest::default())
        .await
        .unwrap();
    let before = ledger_len(&kube, ns, slice).await;
    let (code, text) = refused(
        client(Some(&mallory))
            .reserve(&pinned, &reserve_request(slice, "mallory"))
            .await,
    );
    assert_eq!(code, 403, "{text}");
    assert!(
        text.contains("--rear-k8slice-buyers") && text.contains(&mallory.fingerprint().to_string()),
        "{text}"
    );
    assert_eq!(
        ledger_len(&kube, ns, slice).await,
        before,
        "nothing held for a refused buyer"
    );
    // Writing Alice's buyer ID changes nothing: the key decides.
    let (code, _) = refused(
        client(Some(&mallory))
            .reserve(&pinned, &reserve_request(slice, "alice"))
            .await,
    );
    assert_eq!(code, 403);
    // Services are sold as before.
    let service: ReserveRequest = serde_json::from_value(serde_json::json!({
        "flavorID": "fluidos.eu-service-db01", "buyerID": buyer("mallory")}))
    .unwrap();
    client(Some(&mallory))
        .reserve(&pinned, &service)
        .await
        .unwrap();
    served.shutdown().await;

    // ---- `known`: the key a KnownCluster records, written before the
    // gateway starts (its first list decides the first sale).
    let ns = "policy-known";
    flavors(&kube, ns).await;
    let record = KnownCluster::new(
        "knowncluster-known",
        KnownClusterSpec {
            address: "10.0.0.9:3004".into(),
            fingerprint: Some(known.fingerprint().to_string()),
        },
    );
    let known_clusters = Api::<KnownCluster>::namespaced(kube.clone(), ns);
    known_clusters
        .create(&PostParams::default(), &record)
        .await
        .unwrap();
    // A stale announcement (its expiry passed) admits no one.
    let stale = KnownCluster::new(
        "knowncluster-stale",
        KnownClusterSpec {
            address: "10.0.0.10:3004".into(),
            fingerprint: Some(alice.fingerprint().to_string()),
        },
    );
    known_clusters
        .create(&PostParams::default(), &stale)
        .await
        .unwrap();
    known_clusters
        .patch_status(
            "knowncluster-stale",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"status": {
                "expirationTime": "2020-01-01T00:00:00Z",
                "lastUpdateTime": "2020-01-01T00:00:00Z"}})),
        )
        .await
        .unwrap();
    let mut cfg = config(&cp, ns);
    cfg.plain_http_sales = PlainHttpSales::Off;
    cfg.k8slice_buyers = "known".parse().unwrap();
    let served = serve(&kube, cfg.with_node_key(&provider_key).unwrap()).await;
    let addr = served.base.trim_start_matches("http://").to_owned();
    let pinned = ProviderAddress::pinned(addr.clone(), provider_key.fingerprint());
    client(Some(&known))
        .reserve(&pinned, &reserve_request(slice, "known"))
        .await
        .unwrap();
    let (code, text) = refused(
        client(Some(&alice))
            .reserve(&pinned, &reserve_request(slice, "alice"))
            .await,
    );
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("KnownCluster"), "{text}");
    served.shutdown().await;

    // ---- A network: every buyer from it, TLS or plain HTTP; none from
    // elsewhere.
    let ns = "policy-network";
    flavors(&kube, ns).await;
    let mut cfg = config(&cp, ns);
    cfg.plain_http_sales = PlainHttpSales::All;
    cfg.k8slice_buyers = "127.0.0.0/8".parse().unwrap();
    let served = serve(&kube, cfg.clone().with_node_key(&provider_key).unwrap()).await;
    let addr = served.base.trim_start_matches("http://").to_owned();
    let pinned = ProviderAddress::pinned(addr.clone(), provider_key.fingerprint());
    let plain = ProviderAddress::plain(addr.clone());
    client(Some(&mallory))
        .reserve(&pinned, &reserve_request(slice, "mallory"))
        .await
        .unwrap();
    client(None)
        .reserve(&plain, &reserve_request(slice, "gonode"))
        .await
        .unwrap();
    served.shutdown().await;
    cfg.k8slice_buyers =
        K8SliceBuyers::Only(vec![fluidos_rear_gateway::sale_policy::Admitted::Network(
            "10.99.0.0/16".parse().unwrap(),
        )]);
    let served = serve(&kube, cfg).await;
    let plain = ProviderAddress::plain(served.base.trim_start_matches("http://").to_owned());
    let (code, text) = refused(
        client(None)
            .reserve(&plain, &reserve_request(slice, "gonode2"))
            .await,
    );
    assert_eq!(code, 403, "{text}");
    assert!(
        text.contains("plain-HTTP buyer") && text.contains("127.0.0.1"),
        "{text}"
    );
    served.shutdown().await;

    // ---- A hold taken while the setting admitted its buyer is not bought
    // once it no longer does (a restart with a tighter setting, or a
    // replica of another version).
    let ns = "policy-tightened";
    flavors(&kube, ns).await;
    let mut cfg = config(&cp, ns);
    cfg.plain_http_sales = PlainHttpSales::Off;
    let open = serve(&kube, cfg.clone().with_node_key(&provider_key).unwrap()).await;
    let pinned = ProviderAddress::pinned(
        open.base.trim_start_matches("http://").to_owned(),
        provider_key.fingerprint(),
    );
    let held = client(Some(&mallory))
        .reserve(&pinned, &reserve_request(slice, "mallory"))
        .await
        .unwrap();
    // A sale made while admitted (another buyer ID of the same key).
    let bought = client(Some(&mallory))
        .reserve(&pinned, &reserve_request(slice, "mallory-2"))
        .await
        .unwrap();
    client(Some(&mallory))
        .purchase(&pinned, &bought.transaction_id, &PurchaseRequest::default())
        .await
        .unwrap();
    open.shutdown().await;
    cfg.k8slice_buyers = alice.fingerprint().to_string().parse().unwrap();
    let tight = serve(&kube, cfg.with_node_key(&provider_key).unwrap()).await;
    let pinned = ProviderAddress::pinned(
        tight.base.trim_start_matches("http://").to_owned(),
        provider_key.fingerprint(),
    );
    let (code, text) = refused(
        client(Some(&mallory))
            .purchase(&pinned, &held.transaction_id, &PurchaseRequest::default())
            .await,
    );
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("--rear-k8slice-buyers"), "{text}");
    // The sale made before is still answered to its buyer: the setting
    // decides new sales.
    client(Some(&mallory))
        .purchase(&pinned, &bought.transaction_id, &PurchaseRequest::default())
        .await
        .unwrap();
    tight.shutdown().await;

    // ---- No API server address peers can reach: no K8Slice is sold, and
    // the answer says why; Services still are.
    let ns = "policy-no-address";
    flavors(&kube, ns).await;
    let mut cfg = config(&cp, ns);
    cfg.plain_http_sales = PlainHttpSales::All;
    cfg.k8slice_refusal = Some("set --api-server-url".into());
    let served = serve(&kube, cfg).await;
    let plain = ProviderAddress::plain(served.base.trim_start_matches("http://").to_owned());
    let (code, text) = refused(
        client(None)
            .reserve(&plain, &reserve_request(slice, "gonode"))
            .await,
    );
    assert_eq!(code, 503, "{text}");
    assert!(
        text.contains("cannot sell K8Slices") && text.contains("--api-server-url"),
        "{text}"
    );
    assert_eq!(ledger_len(&kube, ns, slice).await, 0);
    client(None).reserve(&plain, &service).await.unwrap();
    served.shutdown().await;
}
