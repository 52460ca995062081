//! What hostile providers' listings cost a consumer: peak memory (the
//! process's resident set, its high-water mark reset before each round) and
//! time of rounds of listings asked at once, from providers on loopback
//! answering (a) 16 MiB streamed without a length, (b) just under the 4 MiB
//! limit of flavors whose payloads are tiny maps (the shape that decodes to
//! the most), (c) a legitimate 1000-flavor listing. Prints figures; asserts
//! only that the hostile rounds are refused or bounded as documented.
//!
//! `cargo bench -p fluidos-rear-client --bench hostile_listings`

#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench: a panic is the report

use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use fluidos_rear_client::{ClientConfig, MAX_LIST_BYTES, ProviderAddress, RearClient};

/// Listings asked at once: twice the consumer's default of 8.
const AT_ONCE: usize = 16;

fn flavor(id: &str, data: &str) -> String {
    format!(
        r#"{{"flavorID":"{id}","providerID":"p","type":{{"name":"Other","data":{data}}},"timestamp":"","price":{{"amount":"1","currency":"EUR","period":"hourly"}},"owner":{{"domain":"d","nodeID":"p","ip":"h:1"}},"availability":true}}"#
    )
}

/// Flavors of tiny maps (each under the 32 KiB per-flavor limit) up to
/// just under the listing limit.
fn tiny_maps_listing() -> Bytes {
    let data = format!(r#"{{"a":[{}]}}"#, vec![r#"{"":0}"#; 4000].join(","));
    let mut out = String::from("[");
    let mut i = 0;
    loop {
        let f = flavor(&format!("t{i}"), &data);
        if out.len() + f.len() + 2 > MAX_LIST_BYTES {
            break;
        }
        if i > 0 {
            out.push(',');
        }
        out.push_str(&f);
        i += 1;
    }
    out.push(']');
    Bytes::from(out)
}

fn legit_listing() -> Bytes {
    let list: Vec<_> = (0..1000)
        .map(|i| flavor(&format!("fluidos.eu-k8slice-{i:04}"), r#"{"cpu":"4"}"#))
        .collect();
    Bytes::from(format!("[{}]", list.join(",")))
}

/// A provider answering `body`; `None`: 16 MiB streamed, no length.
async fn provider(body: Option<Bytes>) -> ProviderAddress {
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move {
            match body {
                Some(b) => Body::from(b),
                None => {
                    let chunk = Bytes::from(vec![b'['; 64 * 1024]);
                    Body::from_stream(futures::stream::iter(
                        (0..256).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
                    ))
                }
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });
    ProviderAddress::plain(address)
}

/// VmHWM and VmRSS of this process, in MiB.
fn memory() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib = |key: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap()
    };
    (kib("VmHWM:") / 1024.0, kib("VmRSS:") / 1024.0)
}

/// Resets the resident high-water mark to the current resident set.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

async fn round(client: &RearClient, providers: &[ProviderAddress]) -> (Duration, usize, usize) {
    let start = Instant::now();
    let answers =
        futures::future::join_all(providers.iter().map(|p| client.list_flavors(p, None))).await;
    let elapsed = start.elapsed();
    let decoded = answers.iter().flatten().map(|l| l.flavors.len()).sum();
    let failed = answers.iter().filter(|a| a.is_err()).count();
    (elapsed, decoded, failed)
}

async fn scenario(name: &str, client: &RearClient, body: Option<Bytes>) {
    let mut providers = Vec::new();
    for _ in 0..AT_ONCE {
        providers.push(provider(body.clone()).await);
    }
    for run in ["cold", "warm"] {
        reset_peak();
        let (_, before) = memory();
        let (elapsed, decoded, failed) = round(client, &providers).await;
        let (peak, after) = memory();
        println!(
            "{name} ({run}): {AT_ONCE} listings at once in {:.1} ms; flavors decoded {decoded}, \
             refused {failed}; resident {before:.1} MiB before, peak {peak:.1} MiB (+{:.1}), \
             {after:.1} MiB after",
            elapsed.as_secs_f64() * 1000.0,
            peak - before,
        );
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = RearClient::new(ClientConfig {
            retries: 0,
            list_timeout: Duration::from_secs(30),
            ..ClientConfig::default()
        })
        .unwrap();
        let tiny = tiny_maps_listing();
        println!(
            "bodies: 16 MiB streamed; {:.2} MiB of tiny-map flavors; {:.2} MiB legitimate (1000 flavors)",
            tiny.len() as f64 / 1048576.0,
            legit_listing().len() as f64 / 1048576.0
        );
        scenario("16 MiB streamed", &client, None).await;
        scenario("tiny maps under 4 MiB", &client, Some(tiny)).await;
        scenario("1000 legitimate flavors", &client, Some(legit_listing())).await;
    });
}
