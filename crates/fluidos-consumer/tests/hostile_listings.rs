//! What one Discovery round can cost when providers are strangers: a
//! listing over the client's limit is refused and not asked again, a
//! listing of more flavors than are read is read up to the count and says
//! how many were left, and no more than `discovery_concurrency` providers
//! are asked at once. The providers are plain HTTP servers on loopback
//! answering what a hostile or very large provider would; the consumer's
//! controllers run against a real API server.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fluidos_api::advertisement::{DiscoverySpec, ProviderOutcome, ProviderQueryStatus};
use fluidos_api::network::KnownClusterSpec;
use fluidos_api::rear::{WireK8Slice, characteristics};
use fluidos_api::{Discovery, KnownCluster, NodeIdentity, PeeringCandidate};
use fluidos_consumer::{ConsumerConfig, Context, Metrics};
use fluidos_rear_client::{ClientConfig, MAX_LIST_BYTES, MAX_LISTED_FLAVORS};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, fixtures};
use kube::api::{ListParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use serde_json::json;

const NS: &str = "fluidos";
/// Flavors the large provider lists: past what the client reads.
const LISTED: usize = MAX_LISTED_FLAVORS + 6;
/// Providers asked at once in this test.
const CONCURRENCY: usize = 2;
/// How long a provider waits for company before answering alone: each
/// answers once `CONCURRENCY` queries are in flight (so the bound is
/// reached for certain, however loaded the machine), or after this.
const ALONE_AFTER: Duration = Duration::from_secs(1);

/// Providers in flight now and the most seen at once.
#[derive(Default)]
struct Gauge {
    in_flight: AtomicUsize,
    most: AtomicUsize,
    changed: tokio::sync::Notify,
}

impl Gauge {
    /// Waits until `CONCURRENCY` queries are in flight, for `ALONE_AFTER` at most.
    async fn company(&self) {
        let _ = tokio::time::timeout(ALONE_AFTER, async {
            loop {
                let changed = self.changed.notified();
                if self.in_flight.load(Ordering::SeqCst) >= CONCURRENCY {
                    return;
                }
                changed.await;
            }
        })
        .await;
    }
}

fn k8slice(id: &str, address: &str) -> serde_json::Value {
    let k = WireK8Slice {
        characteristics: characteristics("amd64", "4", "8Gi", "110"),
        ..Default::default()
    };
    json!({
        "flavorID": id,
        "providerID": "p",
        "type": {"name": "k8slice", "data": serde_json::to_value(&k).unwrap()},
        "timestamp": "2026-12-06T10:00:00Z",
        "price": {"amount": "1", "currency": "EUR", "period": "hourly"},
        "owner": {"ID": "p", "IP": address, "domain": "fluidos.eu"},
        "availability": true
    })
}

/// A provider on loopback whose listing is `body(its address)`; returns its
/// address and how many times it was asked.
async fn provider(gauge: Arc<Gauge>, body: impl Fn(&str) -> Vec<u8>) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let body = Arc::new(body(&address));
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let app = axum::Router::new().fallback(move || {
        let (gauge, body, counted) = (gauge.clone(), body.clone(), counted.clone());
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            let now = gauge.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            gauge.most.fetch_max(now, Ordering::SeqCst);
            gauge.changed.notify_waiters();
            gauge.company().await;
            gauge.in_flight.fetch_sub(1, Ordering::SeqCst);
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body.as_ref().clone(),
            )
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, asked)
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "six providers, one Discovery round, then what it recorded of each"
)]
async fn oversized_and_overlong_listings_are_bounded_and_providers_are_asked_a_few_at_a_time() {
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    fixtures::namespace(&cp, NS).await.unwrap();
    let gauge = Arc::new(Gauge::default());

    // Over the listing limit: flavors padded past MAX_LIST_BYTES in all.
    let (huge, huge_asked) = provider(gauge.clone(), |address| {
        let pad = "x".repeat(60 * 1024);
        let n = MAX_LIST_BYTES / pad.len() + 2;
        let list: Vec<_> = (0..n)
            .map(|i| {
                let mut f = k8slice(&format!("fluidos.eu-k8slice-huge{i}"), address);
                f["type"]["data"]["pad"] = json!(pad);
                f
            })
            .collect();
        let body = serde_json::to_vec(&list).unwrap();
        assert!(body.len() > MAX_LIST_BYTES);
        body
    })
    .await;
    // More flavors than the client reads.
    let (many, _) = provider(gauge.clone(), |address| {
        let list: Vec<_> = (0..LISTED)
            .map(|i| k8slice(&format!("fluidos.eu-k8slice-many{i:04}"), address))
            .collect();
        serde_json::to_vec(&list).unwrap()
    })
    .await;
    let mut small = Vec::new();
    for i in 0..4 {
        let (address, _) = provider(gauge.clone(), move |address| {
            serde_json::to_vec(&[k8slice(&format!("fluidos.eu-k8slice-small{i}"), address)])
                .unwrap()
        })
        .await;
        small.push(address);
    }
    let known: Api<KnownCluster> = Api::namespaced(cp.client(), NS);
    for (i, address) in [&huge, &many].into_iter().chain(&small).enumerate() {
        let kc = KnownCluster::new(
            &format!("knowncluster-p{i}"),
            KnownClusterSpec {
                address: address.clone(),
                fingerprint: None,
            },
        );
        known.create(&PostParams::default(), &kc).await.unwrap();
    }

    let me = NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: "consumer01".into(),
        ip: "127.0.0.1:1".into(),
        additional_information: None,
    };
    let mut cfg = ConsumerConfig::new(NS, me);
    cfg.discovery_concurrency = CONCURRENCY;
    let ctx = Context::new(cp.client(), cfg, ClientConfig::default(), Metrics::new()).unwrap();
    tokio::spawn(fluidos_consumer::run(ctx, std::future::pending()));

    let discoveries: Api<Discovery> = Api::namespaced(cp.client(), NS);
    let mut d = Discovery::new(
        "discovery-hostile",
        DiscoverySpec {
            solver_id: "solver-hostile".into(),
            selector: None,
            subscribe: false,
        },
    );
    d.metadata.namespace = Some(NS.into());
    discoveries
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let providers_recorded = |d: Option<&Discovery>| {
        d.and_then(|d| d.status.as_ref()?.providers.as_ref())
            .is_some_and(|p| p.len() == 6)
    };
    let done = tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(discoveries, "discovery-hostile", providers_recorded),
    )
    .await
    .expect("the Discovery records all six providers within 60 s")
    .unwrap()
    .unwrap();
    let status = done.status.unwrap();
    let of = |address: &str| -> ProviderQueryStatus {
        status
            .providers
            .iter()
            .flatten()
            .find(|p| p.address == address)
            .cloned()
            .unwrap()
    };

    let h = of(&huge);
    assert_eq!(h.outcome, ProviderOutcome::Failed, "{h:?}");
    let message = h.message.unwrap_or_default();
    assert!(
        message.contains(&format!("over {MAX_LIST_BYTES} bytes")),
        "{message}"
    );
    assert_eq!(huge_asked.load(Ordering::SeqCst), 1, "asked again");

    let m = of(&many);
    assert_eq!(m.outcome, ProviderOutcome::Answered, "{m:?}");
    let kept = usize::try_from(m.flavors).unwrap();
    assert_eq!(
        kept,
        fluidos_consumer::discovery::machine::MAX_FLAVORS_PER_PROVIDER
    );
    assert_eq!(usize::try_from(m.dropped_count).unwrap(), LISTED - kept);
    // Unread past the count (and the memory budget, were it reached) and
    // decoded past what is kept of one provider: all counted.
    let message = m.message.unwrap_or_default();
    let unread: usize = message
        .split_once(" listed flavors not read")
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("{message}"));
    assert!(unread >= LISTED - MAX_LISTED_FLAVORS, "{message}");
    for address in &small {
        let s = of(address);
        assert_eq!((s.outcome, s.flavors), (ProviderOutcome::Answered, 1));
    }

    assert_eq!(
        gauge.most.load(Ordering::SeqCst),
        CONCURRENCY,
        "providers asked at once"
    );
    let candidates = Api::<PeeringCandidate>::namespaced(cp.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(candidates.len(), kept + small.len());
    assert!(
        candidates.iter().all(|pc| !pc.name_any().contains("huge")),
        "nothing kept of the oversized listing"
    );
    cp.stop().await;
}
