//! REAR gateway benchmark: a real control plane holding 100 flavors, the
//! gateway in-process on loopback, and a bounded load per route.
//!
//! `cargo bench -p fluidos-rear-gateway` prints requests/s and p50/p99 latency
//! for plain and filtered lists, reserve, and reserve+purchase, plus the RSS;
//! the sequential sale on fresh ledgers through the consumer's REAR client,
//! over plain HTTP and over TLS with client certificates, side by side; then
//! the list and the sale again through that client after the load; and the
//! sale while slow clients drip request bodies.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use fluidos_api::common::{NodeIdentity, Price};
use fluidos_api::flavor::{
    FlavorSpec, FlavorType, K8Slice, K8SliceCharacteristics, Partitionability,
};
use fluidos_api::ledger::q;
use fluidos_api::{Flavor, flavor::FlavorTypeData};
use fluidos_rear_client::{ClientConfig, ProviderAddress, RearClient};
use fluidos_rear_gateway::{Gateway, GatewayConfig};
use fluidos_rear_identity::NodeKey;
use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tokio::net::TcpListener;

const NS: &str = "bench";
const FLAVORS: usize = 100;

fn identity() -> NodeIdentity {
    NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: "benchnode1".into(),
        ip: "127.0.0.1:3004".into(),
        additional_information: None,
    }
}

fn flavor(i: usize) -> Flavor {
    let k = K8Slice {
        characteristics: K8SliceCharacteristics {
            architecture: if i.is_multiple_of(2) {
                "amd64"
            } else {
                "arm64"
            }
            .into(),
            cpu: q("64"),
            memory: q("256Gi"),
            pods: q("1000"),
            gpu: None,
            storage: Some(q("1Ti")),
        },
        policies: fluidos_api::flavor::Policies {
            partitionability: Partitionability {
                cpu_min: q("1"),
                cpu_step: q("1"),
                memory_min: q("1Gi"),
                memory_step: q("1Gi"),
                pods_min: q("1"),
                pods_step: q("1"),
                ..Default::default()
            },
        },
        ..Default::default()
    };
    // Keep the builder honest: what we create must decode.
    assert!(matches!(
        FlavorType::k8slice(&k).parse(),
        Ok(FlavorTypeData::K8Slice(_))
    ));
    Flavor {
        metadata: ObjectMeta {
            name: Some(format!("fluidos.eu-k8slice-{i:04x}")),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: FlavorSpec {
            provider_id: identity().node_id,
            flavor_type: FlavorType::k8slice(&k),
            owner: identity(),
            price: Price::default(),
            availability: true,
            network_property_type: Some("networkProperty".into()),
            location: None,
        },
        status: None,
    }
}

struct Stats {
    name: &'static str,
    latencies: Vec<Duration>,
    wall: Duration,
}

impl Stats {
    fn p50_ms(&mut self) -> f64 {
        self.latencies.sort();
        self.latencies[self.latencies.len() / 2].as_secs_f64() * 1e3
    }

    fn print(&mut self) {
        self.latencies.sort();
        let n = self.latencies.len();
        let pct = |p: f64| self.latencies[((n as f64 * p) as usize).min(n - 1)];
        println!(
            "{:<28} {:>7} req  {:>9.0} req/s  p50 {:>8.2} ms  p99 {:>8.2} ms",
            self.name,
            n,
            n as f64 / self.wall.as_secs_f64(),
            pct(0.50).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3,
        );
    }
}

/// Runs `op(i)` `total` times over `workers` concurrent workers.
async fn load<F, Fut>(name: &'static str, total: usize, workers: usize, op: F) -> Stats
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let op = op.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let t = Instant::now();
                op(i).await;
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut latencies = Vec::with_capacity(total);
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    Stats {
        name,
        latencies,
        wall: start.elapsed(),
    }
}

fn rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS"))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "VmRSS: unknown".into())
}

fn reserve_body(flavor: usize, buyer: &str) -> serde_json::Value {
    serde_json::json!({
        "flavorID": format!("fluidos.eu-k8slice-{flavor:04x}"),
        "buyerID": {"ID": buyer, "IP": "127.0.0.1:3005", "domain": "fluidos.eu",
            "additionalInformation": {"liqoID": format!("liqo-{buyer}")}},
        "configuration": {"type": "k8slice", "data": {"cpu": "1", "memory": "1Gi", "pods": "1"}}
    })
}

async fn reserve(c: &reqwest::Client, base: &str, flavor: usize, buyer: &str) -> String {
    let r = c
        .post(format!("{base}/api/v2/reservations"))
        .json(&reserve_body(flavor, buyer))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    v["transactionID"].as_str().unwrap().to_owned()
}

/// Reserves a partition of `flavor` for `buyer` and buys it.
async fn sell(c: &reqwest::Client, base: &str, flavor: usize, buyer: &str) {
    let tx = reserve(c, base, flavor, buyer).await;
    let r = c
        .post(format!("{base}/api/v2/transactions/{tx}/purchase"))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
}

/// Reserve then purchase, one buyer request after the other, `total` times.
async fn sequential_sales(
    name: &'static str,
    c: &reqwest::Client,
    base: &Arc<str>,
    total: usize,
) -> Stats {
    let (cc, b) = (c.clone(), base.clone());
    load(name, total, 1, move |i| {
        let (c, b) = (cc.clone(), b.clone());
        async move { sell(&c, &b, (i * 7) % FLAVORS, &format!("buyer-{}", i % 10)).await }
    })
    .await
}

/// Slow clients: `per_address` connections from each of `addresses`, each
/// sending a RESERVE head and then a byte of its body every 500 ms, for as
/// long as the gateway keeps the connection (until aborted).
fn drip(base: &str, addresses: &[[u8; 4]], per_address: usize) -> Vec<tokio::task::JoinHandle<()>> {
    use tokio::io::AsyncWriteExt;
    let to: std::net::SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let mut tasks = Vec::new();
    for &local in addresses {
        for _ in 0..per_address {
            tasks.push(tokio::spawn(async move {
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket.bind(std::net::SocketAddr::from((local, 0))).unwrap();
                let Ok(mut tcp) = socket.connect(to).await else {
                    return;
                };
                let head = b"POST /api/v2/reservations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{";
                if tcp.write_all(head).await.is_err() {
                    return;
                }
                loop {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    if tcp.write_all(b" ").await.is_err() {
                        return;
                    }
                }
            }));
        }
    }
    tasks
}

/// Sales from this process's address while `drippers` drip (each a set of
/// loopback addresses and connections per address).
async fn sales_while_dripping(
    name: &'static str,
    c: &reqwest::Client,
    base: &Arc<str>,
    addresses: &[[u8; 4]],
    per_address: usize,
) -> Stats {
    let slow = drip(base, addresses, per_address);
    // Let them connect and take what permits they can.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (cc, b) = (c.clone(), base.clone());
    let stats = load(name, 30, 1, move |i| {
        let (c, b) = (cc.clone(), b.clone());
        async move { sell(&c, &b, (i * 11 + 3) % FLAVORS, &format!("drip-{}", i % 10)).await }
    })
    .await;
    for t in slow {
        t.abort();
    }
    stats
}

/// `total` sales through `rear` to each of `providers` (the same gateway,
/// plain then TLS), taking turns, one at a time: (plain, TLS) latencies.
async fn fresh_sales_side_by_side(
    rear: &RearClient,
    providers: [ProviderAddress; 2],
    total: usize,
) -> (Stats, Stats) {
    let names = [
        "fresh sale, REAR client, plain",
        "fresh sale, REAR client, TLS",
    ];
    let mut latencies = [Vec::new(), Vec::new()];
    let start = Instant::now();
    for i in 0..total * 2 {
        let which = i % 2;
        let request: fluidos_api::rear::ReserveRequest = serde_json::from_value(reserve_body(
            (i * 7 + 1) % FLAVORS,
            &format!("fresh-{}", i % 10),
        ))
        .unwrap();
        let t = Instant::now();
        let tx = rear.reserve(&providers[which], &request).await.unwrap();
        rear.purchase(&providers[which], &tx.transaction_id, &Default::default())
            .await
            .unwrap();
        latencies[which].push(t.elapsed());
    }
    // Each side had half of the wall time.
    let wall = start.elapsed() / 2;
    let [plain, tls] = latencies;
    (
        Stats {
            name: names[0],
            latencies: plain,
            wall,
        },
        Stats {
            name: names[1],
            latencies: tls,
            wall,
        },
    )
}

/// Mean number of ledger entries per flavor: what every ledger write carries.
async fn mean_ledger(flavors: &Api<Flavor>) -> f64 {
    let list = flavors.list(&Default::default()).await.unwrap();
    let entries: usize = list
        .items
        .iter()
        .map(|f| {
            f.status
                .as_ref()
                .and_then(|s| s.ledger.as_ref())
                .map_or(0, Vec::len)
        })
        .sum();
    entries as f64 / list.items.len().max(1) as f64
}

fn main() {
    // RUST_LOG=kube_client=debug shows each API-server call with a
    // timestamp, to see what a sale spends its time on.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(bench());
}

#[expect(
    clippy::too_many_lines,
    reason = "the bench's stages run in order and print as they go; one function keeps the sequence readable"
)]
async fn bench() {
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .expect("control plane");
    let client = cp.client();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(NS.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let flavors: Api<Flavor> = Api::namespaced(client.clone(), NS);
    for i in 0..FLAVORS {
        flavors
            .create(&PostParams::default(), &flavor(i))
            .await
            .unwrap();
    }
    let provider_key = NodeKey::generate("bench-provider").unwrap();
    let mut cfg = GatewayConfig::new(NS, identity(), cp.server_url())
        .with_node_key(&provider_key)
        .unwrap();
    // The reqwest client below speaks plain HTTP, as a Go node does.
    cfg.plain_http_sales = fluidos_rear_gateway::PlainHttpSales::All;
    cfg.liqo_cluster_id = Some("liqo-bench-provider".into());
    // One client address sends every request here: the per-peer rate limit
    // is raised out of the way (it still runs on every request, so its cost
    // is measured).
    cfg.rate_limit = Some(fluidos_rear_gateway::RateLimit {
        per_second: 10_000_000,
        burst: 10_000_000,
    });
    // Likewise the per-address hold cap: every simulated buyer holds from
    // 127.0.0.1 (raised, not off, so that its count still runs).
    cfg.max_holds_per_address = 1_000_000;
    let gw = Gateway::start(client.clone(), cfg);
    gw.wait_ready(Duration::from_secs(20)).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(gw.serve(listener, std::future::pending()));
    let c = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let base: Arc<str> = base.into();

    // Warm up connections and the snapshot.
    for _ in 0..50 {
        c.get(format!("{base}/api/v2/flavors"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
    }
    println!(
        "REAR gateway bench: {FLAVORS} flavors, loopback HTTP/1.1, gateway and client in one process"
    );

    // Baseline: what one API-server call costs here (a reserve makes 2 writes).
    let api = flavors.clone();
    let mut s = load("baseline: kube GET", 300, 1, move |i| {
        let api = api.clone();
        async move {
            api.get(&format!("fluidos.eu-k8slice-{:04x}", i % FLAVORS))
                .await
                .unwrap();
        }
    })
    .await;
    s.print();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), NS);
    let mut s = load("baseline: kube create", 300, 1, move |i| {
        let cms = cms.clone();
        async move {
            let cm = k8s_openapi::api::core::v1::ConfigMap {
                metadata: ObjectMeta {
                    name: Some(format!("baseline-{i}")),
                    ..Default::default()
                },
                ..Default::default()
            };
            cms.create(&PostParams::default(), &cm).await.unwrap();
        }
    })
    .await;
    s.print();

    let txs: Api<fluidos_api::Transaction> = Api::namespaced(client.clone(), NS);
    let mut s = load("baseline: create Transaction", 300, 1, move |i| {
        let txs = txs.clone();
        async move {
            let tx = fluidos_api::Transaction::new(
                &format!("baseline-{i}"),
                fluidos_api::reservation::TransactionSpec {
                    flavor_id: "f".into(),
                    buyer: identity(),
                    cluster_id: "c".into(),
                    configuration: None,
                    expiration_time: Some("2030-01-01T00:00:00Z".into()),
                },
            );
            txs.create(&PostParams::default(), &tx).await.unwrap();
        }
    })
    .await;
    s.print();
    let api = flavors.clone();
    let mut s = load("baseline: GET+replace_status", 300, 1, move |i| {
        let api = api.clone();
        async move {
            let name = format!("fluidos.eu-k8slice-{:04x}", 99 - i % 10);
            let mut f = api.get(&name).await.unwrap();
            f.status = Some(fluidos_api::flavor::FlavorStatus {
                last_update_time: format!("{i}"),
                ..Default::default()
            });
            api.replace_status(&name, &PostParams::default(), &f)
                .await
                .unwrap();
        }
    })
    .await;
    s.print();

    let (cc, b) = (c.clone(), base.clone());
    let mut s = load("GET /flavors", 20_000, 8, move |_| {
        let (c, b) = (cc.clone(), b.clone());
        async move {
            let r = c.get(format!("{b}/api/v2/flavors")).send().await.unwrap();
            assert_eq!(r.status(), 200);
            let body = r.bytes().await.unwrap();
            assert!(body.len() > 1000);
        }
    })
    .await;
    s.print();

    let (cc, b) = (c.clone(), base.clone());
    let mut s = load("GET /flavors/k8slice?filter", 20_000, 8, move |_| {
        let (c, b) = (cc.clone(), b.clone());
        async move {
            let r = c
                .get(format!(
                    "{b}/api/v2/flavors/k8slice?filter[architecture][match]=amd64&filter[cpu][range][min]=2&filter[memory][range][min]=1Gi"
                ))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap();
        }
    })
    .await;
    s.print();

    // The latency target: one sale after the other on the 100 flavors as
    // they are (fresh ledgers), through the consumer's REAR client, plain
    // HTTP and TLS 1.3 with client certificates taking turns so that both
    // see the same ledgers; then with a bare reqwest client (no decoding of
    // the answers). Measured again below after 1,500 holds and sales have
    // grown every ledger, which every ledger write then carries.
    let buyer_key = Arc::new(NodeKey::generate("bench-buyer").unwrap());
    let address = base.trim_start_matches("http://").to_owned();
    let rear = RearClient::with_key(ClientConfig::default(), buyer_key.clone()).unwrap();
    let ledger_before = mean_ledger(&flavors).await;
    let (mut fresh_plain, mut fresh_tls) = fresh_sales_side_by_side(
        &rear,
        [
            ProviderAddress::plain(address.clone()),
            ProviderAddress::pinned(address.clone(), provider_key.fingerprint()),
        ],
        200,
    )
    .await;
    fresh_plain.print();
    fresh_tls.print();
    let mut fresh = sequential_sales("reserve+purchase (1 at a time)", &c, &base, 200).await;
    fresh.print();

    let (cc, b) = (c.clone(), base.clone());
    let mut s = load("POST /reservations", 1_000, 4, move |i| {
        let (c, b) = (cc.clone(), b.clone());
        async move {
            reserve(&c, &b, i % FLAVORS, &format!("rsv-{i}")).await;
        }
    })
    .await;
    s.print();

    // Ten buyers, so their peering credentials are issued once and reused.
    let (cc, b) = (c.clone(), base.clone());
    let mut s = load("reserve+purchase", 500, 4, move |i| {
        let (c, b) = (cc.clone(), b.clone());
        async move { sell(&c, &b, i % FLAVORS, &format!("buyer-{}", i % 10)).await }
    })
    .await;
    s.print();

    let ledger_after = mean_ledger(&flavors).await;
    let mut loaded = sequential_sales("  same, after the load above", &c, &base, 200).await;
    loaded.print();

    // The list over reused TLS 1.3 connections with client certificates,
    // bodies read but not decoded (as the reqwest list above): the
    // transport's own cost.
    let tls_config =
        fluidos_rear_identity::tls::client_config(&buyer_key, provider_key.fingerprint()).unwrap();
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    let mut https = hyper_rustls::HttpsConnector::from((tcp, tls_config));
    https.enforce_https();
    let raw_tls: hyper_util::client::legacy::Client<_, http_body_util::Empty<axum::body::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(https);
    let tls_url: Arc<str> = base.replacen("http://", "https://", 1).into();
    let (cc, b) = (raw_tls.clone(), tls_url.clone());
    let mut tls_list = load("GET /flavors over TLS", 20_000, 8, move |_| {
        let (c, b) = (cc.clone(), b.clone());
        async move {
            let uri: hyper::Uri = format!("{b}/api/v2/flavors").parse().unwrap();
            let r = c.get(uri).await.unwrap();
            assert_eq!(r.status(), 200);
            let body = http_body_util::BodyExt::collect(r.into_body())
                .await
                .unwrap()
                .to_bytes();
            assert!(body.len() > 1000);
        }
    })
    .await;
    tls_list.print();

    // The same list and sequential sale through the consumer's REAR client
    // (which also decodes every answer), plain HTTP then TLS 1.3 with a
    // client certificate over reused connections, after the load.
    let mut side_by_side = Vec::new();
    for (transport, provider) in [
        ("plain", ProviderAddress::plain(address.clone())),
        (
            "TLS",
            ProviderAddress::pinned(address.clone(), provider_key.fingerprint()),
        ),
    ] {
        let (list_name, sale_name) = match transport {
            "plain" => ("REAR client list, plain", "REAR client sale, plain"),
            _ => ("REAR client list, TLS", "REAR client sale, TLS"),
        };
        let (r, p) = (rear.clone(), provider.clone());
        let mut list = load(list_name, 20_000, 8, move |_| {
            let (r, p) = (r.clone(), p.clone());
            async move {
                assert_eq!(
                    r.list_flavors(&p, None).await.unwrap().flavors.len(),
                    FLAVORS
                );
            }
        })
        .await;
        list.print();
        let (r, p) = (rear.clone(), provider.clone());
        // Buyer IDs of their own per transport: a buyer ID stays with the
        // owner (plain HTTP, or a key) that first bought with it.
        let prefix = transport.to_ascii_lowercase();
        let mut sales = load(sale_name, 200, 1, move |i| {
            let (r, p, prefix) = (r.clone(), p.clone(), prefix.clone());
            async move {
                let request: fluidos_api::rear::ReserveRequest = serde_json::from_value(
                    reserve_body((i * 7 + 3) % FLAVORS, &format!("{prefix}-buyer-{}", i % 10)),
                )
                .unwrap();
                let tx = r.reserve(&p, &request).await.unwrap();
                r.purchase(&p, &tx.transaction_id, &Default::default())
                    .await
                    .unwrap();
            }
        })
        .await;
        sales.print();
        side_by_side.push((transport, list, sales));
    }
    for (transport, list, sales) in &mut side_by_side {
        let rate = list.latencies.len() as f64 / list.wall.as_secs_f64();
        let p99 = {
            list.latencies.sort();
            let n = list.latencies.len();
            list.latencies[((n as f64 * 0.99) as usize).min(n - 1)].as_secs_f64() * 1e3
        };
        println!(
            "{transport:>5}: list {rate:.0} req/s p99 {p99:.2} ms; reserve+purchase p50 {:.2} ms",
            sales.p50_ms()
        );
    }
    println!(
        "ledger entries per flavor: {ledger_before:.1} before the sequential sales, {ledger_after:.1} before the second run"
    );

    // Slow-drip bodies (issue 28 finding 6): 128 slow clients from two
    // addresses hold 4 body permits each (the rest are refused, 429); 48
    // from twelve addresses hold 48 of the 64. Sales from another address
    // go on in both cases.
    let mut quiet = sales_while_dripping("sale, no slow clients", &c, &base, &[], 0).await;
    quiet.print();
    let mut two = sales_while_dripping(
        "sale, 128 slow from 2 addr",
        &c,
        &base,
        &[[127, 0, 1, 1], [127, 0, 1, 2]],
        64,
    )
    .await;
    two.print();
    let twelve: Vec<[u8; 4]> = (1..=12).map(|i| [127, 0, 2, i]).collect();
    let mut many = sales_while_dripping("sale, 48 slow from 12 addr", &c, &base, &twelve, 4).await;
    many.print();
    println!(
        "sale p50 while slow clients drip: {:.2} ms alone, {:.2} ms with 128 from 2 addresses, {:.2} ms with 48 from 12",
        quiet.p50_ms(),
        two.p50_ms(),
        many.p50_ms()
    );
    println!(
        "targets: list p99 < 10 ms, >= 5000 req/s; reserve+purchase (1 at a time) p50 < 20 ms on fresh ledgers: REAR client {:.2} ms plain, {:.2} ms TLS; bare client {:.2} ms plain ({:.2} ms after load)",
        fresh_plain.p50_ms(),
        fresh_tls.p50_ms(),
        fresh.p50_ms(),
        loaded.p50_ms()
    );

    println!("process {}", rss());
    server.abort();
    cp.stop().await;
}
