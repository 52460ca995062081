//! Buying from a FLUIDOS-rs provider whose key is known: the KnownCluster
//! carries its fingerprint, so discovery, RESERVE and PURCHASE go over TLS
//! pinned to that key, presenting the consumer's key; the candidate and the
//! Contract remember the fingerprint. A provider holding another key is
//! reported, not bought from.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::sync::Arc;
use std::time::{Duration, Instant};

use fluidos_api::advertisement::ProviderOutcome;
use fluidos_api::flavor::{FlavorSpec, FlavorType, K8Slice};
use fluidos_api::network::KnownClusterSpec;
use fluidos_api::peering_credentials;
use fluidos_api::solver::{Selector, SolverSpec};
use fluidos_api::{
    Contract, Discovery, Flavor, KnownCluster, NodeIdentity, NodeIdentityAdditionalInfo,
    PROVIDER_FINGERPRINT_ANNOTATION, PeeringCandidate, Price, Solver,
};
use fluidos_consumer::{ConsumerConfig, Context, Metrics};
use fluidos_rear_client::{ClientConfig, Fingerprint, NodeKey};
use fluidos_rear_gateway::{Gateway, GatewayConfig};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, fixtures};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const CONSUMER_NS: &str = "fluidos";
const PROVIDER_NS: &str = "provider";

fn identity(id: &str, ip: &str) -> NodeIdentity {
    NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: id.into(),
        ip: ip.into(),
        additional_information: None,
    }
}

/// One cluster holding both nodes (a namespace each), the provider's
/// gateway serving TLS with its key, and a KnownCluster naming it with
/// `fingerprint`. Returns the cluster and the provider's fingerprint.
async fn market(
    known_fingerprint: impl FnOnce(Fingerprint) -> Fingerprint,
) -> (ControlPlane, Fingerprint) {
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    fixtures::namespace(&cp, CONSUMER_NS).await.unwrap();
    fixtures::namespace(&cp, PROVIDER_NS).await.unwrap();
    let kube_cfg =
        kube::Config::from_custom_kubeconfig(cp.kubeconfig().clone(), &Default::default())
            .await
            .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seller = identity("provider01", &addr);
    let k = K8Slice {
        characteristics: fluidos_api::rear::characteristics("amd64", "8", "16Gi", "110"),
        ..Default::default()
    };
    let mut f = Flavor::new(
        "fluidos.eu-k8slice-pinned",
        FlavorSpec {
            provider_id: seller.node_id.clone(),
            flavor_type: FlavorType::k8slice(&k),
            owner: seller.clone(),
            price: Price {
                amount: "1".into(),
                currency: "EUR".into(),
                period: "hour".into(),
            },
            availability: true,
            network_property_type: None,
            location: None,
        },
    );
    f.metadata.namespace = Some(PROVIDER_NS.into());
    Api::<Flavor>::namespaced(cp.client(), PROVIDER_NS)
        .create(&PostParams::default(), &f)
        .await
        .unwrap();
    let provider_key = NodeKey::generate("provider01").unwrap();
    let mut cfg = GatewayConfig::new(PROVIDER_NS, seller, "")
        .with_kube_config(&kube_cfg)
        .with_node_key(&provider_key)
        .unwrap();
    cfg.liqo_cluster_id = Some("liqo-provider".into());
    let gateway = Gateway::start(cp.client(), cfg);
    gateway.wait_ready(Duration::from_secs(30)).await.unwrap();
    tokio::spawn(async move {
        let _ = gateway.serve(listener, std::future::pending()).await;
    });
    Api::<KnownCluster>::namespaced(cp.client(), CONSUMER_NS)
        .create(
            &PostParams::default(),
            &KnownCluster::new(
                "knowncluster-provider01",
                KnownClusterSpec {
                    address: addr,
                    fingerprint: Some(known_fingerprint(provider_key.fingerprint()).to_string()),
                },
            ),
        )
        .await
        .unwrap();
    (cp, provider_key.fingerprint())
}

/// Starts the consumer with `key` and asks it to buy a K8Slice.
async fn buy(cp: &ControlPlane, key: Arc<NodeKey>) {
    let mut me = identity("consumer01", "127.0.0.1:1");
    me.additional_information = Some(NodeIdentityAdditionalInfo {
        liqo_id: Some("liqo-consumer".into()),
    });
    let mut cfg = ConsumerConfig::new(CONSUMER_NS, me);
    cfg.node_key = Some(key);
    let ctx = Context::new(cp.client(), cfg, ClientConfig::default(), Metrics::new()).unwrap();
    tokio::spawn(fluidos_consumer::run(ctx, std::future::pending()));
    let mut s = Solver::new(
        "solver-pinned",
        SolverSpec {
            selector: Some(Selector {
                flavor_type: "K8Slice".into(),
                filters: Some(json!({"cpuFilter": {"name": "Range", "data": {"min": "1"}}})),
            }),
            intent_id: "intent-pinned".into(),
            find_candidate: Some(true),
            reserve_and_buy: Some(true),
            establish_peering: Some(false),
        },
    );
    s.metadata.namespace = Some(CONSUMER_NS.into());
    Api::<Solver>::namespaced(cp.client(), CONSUMER_NS)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: not within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_pinned_provider_is_bought_from_over_tls_and_knows_the_buyers_key() {
    let (cp, provider) = market(|own| own).await;
    let consumer = Arc::new(NodeKey::generate("consumer01").unwrap());
    buy(&cp, consumer.clone()).await;

    let contracts: Api<Contract> = Api::namespaced(cp.client(), CONSUMER_NS);
    let bought = eventually("the consumer's Contract", || async {
        contracts
            .list(&ListParams::default())
            .await
            .ok()
            .and_then(|l| l.items.into_iter().next())
    })
    .await;
    assert_eq!(
        bought.annotations().get(PROVIDER_FINGERPRINT_ANNOTATION),
        Some(&provider.to_string()),
        "later calls about the Contract are pinned too"
    );
    let candidates = Api::<PeeringCandidate>::namespaced(cp.client(), CONSUMER_NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(!candidates.is_empty());
    for pc in &candidates {
        assert_eq!(
            pc.annotations().get(PROVIDER_FINGERPRINT_ANNOTATION),
            Some(&provider.to_string()),
            "{}",
            pc.name_any()
        );
    }
    // The provider sold to the consumer's key.
    let sold = Api::<Contract>::namespaced(cp.client(), PROVIDER_NS)
        .get(&bought.name_any())
        .await
        .unwrap();
    assert_eq!(
        sold.annotations()
            .get(fluidos_rear_gateway::labels::BUYER_KEY),
        Some(&consumer.fingerprint().to_string())
    );
    the_peering_kubeconfig_is_in_a_secret_owned_by(&cp, &bought).await;
    cp.stop().await;
}

/// The consumer's Contract keeps no token: the Secret its annotation names
/// holds the kubeconfig the provider sold (the provider's own Secret holds
/// the same), owned by the Contract.
async fn the_peering_kubeconfig_is_in_a_secret_owned_by(cp: &ControlPlane, bought: &Contract) {
    assert_eq!(bought.spec.peering_target_credentials.kubeconfig, "");
    let name = peering_credentials::secret_name(&bought.name_any());
    assert_eq!(
        bought.annotations().get(peering_credentials::ANNOTATION),
        Some(&name)
    );
    let secrets: Api<Secret> = Api::namespaced(cp.client(), CONSUMER_NS);
    // The ownerReference follows the Contract's apply, in the same reconcile.
    let secret = eventually("the credentials Secret owned by the Contract", || async {
        secrets
            .get_opt(&name)
            .await
            .unwrap()
            .filter(|s| !s.owner_references().is_empty())
    })
    .await;
    let owner = &secret.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Contract", bought.name_any().as_str(), Some(true))
    );
    assert_eq!(Some(owner.uid.clone()), bought.uid());
    let kubeconfig = peering_credentials::kubeconfig_in(&secret).expect("a kubeconfig");
    // The provider writes its own after answering the sale.
    let provider_secrets: Api<Secret> = Api::namespaced(cp.client(), PROVIDER_NS);
    let provider_copy = eventually("the provider's credentials Secret", || async {
        provider_secrets.get_opt(&name).await.unwrap()
    })
    .await;
    assert_eq!(
        peering_credentials::kubeconfig_in(&provider_copy).as_deref(),
        Some(kubeconfig.as_str()),
        "the consumer keeps what the provider sold"
    );
}

#[tokio::test]
async fn a_provider_holding_another_key_is_reported_and_not_bought_from() {
    let expected = NodeKey::generate("someone else").unwrap().fingerprint();
    let (cp, provider) = market(|_| expected).await;
    buy(&cp, Arc::new(NodeKey::generate("consumer01").unwrap())).await;

    let discoveries: Api<Discovery> = Api::namespaced(cp.client(), CONSUMER_NS);
    let status = eventually("the Discovery's provider status", || async {
        discoveries
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find_map(|d| d.status?.providers?.into_iter().next())
    })
    .await;
    assert_eq!(status.outcome, ProviderOutcome::Failed);
    let message = status.message.unwrap_or_default();
    assert!(message.contains("presented key"), "{message}");
    assert!(message.contains(&provider.to_string()), "{message}");
    assert!(message.contains(&expected.to_string()), "{message}");
    let sold = Api::<Contract>::namespaced(cp.client(), PROVIDER_NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(sold.is_empty(), "{sold:?}");
    cp.stop().await;
}
