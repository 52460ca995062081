//! REAR request fuzzing on stable Rust: a seeded generator of requests
//! (malformed JSON, deep nesting, huge and odd quantities, bad names, wrong
//! methods and paths, raw malformed HTTP) sent over real loopback HTTP to a
//! gateway on a real API server, counting answers by status.
//!
//! Shared by `tests/fuzz.rs` (a bounded slice) and `benches/rear-fuzz.rs`
//! (10^6 requests). The same seed gives the same request sequence per worker.
//!
//! [`Transport::Tls`] sends the same requests over TLS 1.3 with a client
//! certificate (the gateway's other way in: the first byte decides), raw
//! ones included, so the sniffing, the handshake and the key-bound sale
//! paths are fuzzed too.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fluidos_api::common::HostingPolicy;
use fluidos_api::flavor::FlavorType;
use fluidos_rear_gateway::RateLimit;
use fluidos_rear_identity::{Fingerprint, NodeKey};
use fluidos_testenv::ControlPlane;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{
    Served, config, create_flavor, k8slice, namespace, partition, serve, service, spec,
};

/// Namespace of the fuzzed gateway.
pub const NS: &str = "rear-fuzz";
/// K8Slice flavors on sale.
pub const K8SLICES: usize = 8;
/// Buyers the valid-looking requests come from (fewer than requests, so
/// per-buyer caps and repeated reserves are exercised).
const BUYERS: u64 = 24;

/// Panics seen anywhere in the process while fuzzing (the gateway runs in it).
static PANICS: AtomicU64 = AtomicU64::new(0);

/// SplitMix64: tiny, seedable, good enough to pick cases.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Up to `max` - 1 random bytes.
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = self.below(max);
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// One generated request.
#[derive(Debug, Clone)]
pub enum Fuzzed {
    /// Sent with reqwest: method, path and query (already a valid URI), body.
    Http {
        method: reqwest::Method,
        path: String,
        body: Vec<u8>,
        headers: Vec<(&'static str, String)>,
    },
    /// Written as is on a fresh TCP connection, ended by a blank line.
    Raw(Vec<u8>),
}

const QUANTITIES: &[&str] = &[
    "1",
    "2",
    "1",
    "500m",
    "1.5",
    "1e3",
    "1E2",
    "0",
    "0m",
    "-1",
    "1Ki",
    "1Gi",
    "2Gi",
    "999999999999999999999",
    "9Ei",
    "99999999999999999999999999Ei",
    "1e400",
    "0x10",
    "",
    " 1",
    "１",
    "NaN",
    "Infinity",
    "1.0000000001",
    "+1",
    "1Mi",
    "1m",
    "9223372036854775807",
    "-9223372036854775808n",
];

const NAMES: &[&str] = &[
    "?watch=true",
    "a/status",
    "..",
    "../../secrets",
    "%2e%2e",
    "UPPER",
    "-lead",
    "trail-",
    "a..b",
    "é",
    "\u{0}",
    "a b",
    "fluidos.eu-k8slice-zzzz",
    "",
];

fn flavor_name(i: usize) -> String {
    format!("fuzz-k8slice-{i}")
}

/// Longest path and query: URIs stay under the 64 KiB a client can send
/// (longer heads are tried with raw requests).
const MAX_URI: usize = 60_000;

/// `e` (percent-encoded) cut to `max` bytes, never inside a `%XX` escape.
fn cut_escaped(mut e: String, max: usize) -> String {
    if e.len() <= max {
        return e;
    }
    e.truncate(max);
    let b = e.as_bytes();
    if b.last() == Some(&b'%') {
        e.pop();
    } else if b.len() >= 2 && b[b.len() - 2] == b'%' {
        e.truncate(e.len() - 2);
    }
    e
}

/// Percent-encodes a path segment or query value.
fn enc(s: &str) -> String {
    cut_escaped(
        form_urlencoded::byte_serialize(s.as_bytes()).collect(),
        MAX_URI,
    )
}

fn odd_string(rng: &mut Rng) -> String {
    match rng.below(7) {
        0 => (*rng.pick(NAMES)).to_owned(),
        1 => "x".repeat(rng.below(70_000)),
        2 => String::from_utf8_lossy(&rng.bytes(64)).into_owned(),
        3 => (*rng.pick(QUANTITIES)).to_owned(),
        4 => format!("buyer-{}", rng.below(BUYERS as usize)),
        5 => flavor_name(rng.below(K8SLICES + 2)),
        _ => "\u{202e}\u{feff}ü\u{1F600}".repeat(rng.below(40)),
    }
}

fn odd_value(rng: &mut Rng) -> serde_json::Value {
    match rng.below(9) {
        0 => serde_json::Value::Null,
        1 => serde_json::json!(rng.next() as i64),
        2 => serde_json::json!(f64::from_bits(rng.next()).clamp(-1e300, 1e300)),
        3 => serde_json::json!(true),
        4 => serde_json::json!([odd_string(rng), rng.next()]),
        5 => serde_json::json!({ odd_string(rng): odd_string(rng) }),
        _ => serde_json::json!(odd_string(rng)),
    }
}

fn buyer(rng: &mut Rng) -> serde_json::Value {
    let id = format!("buyer-{}", rng.below(BUYERS as usize));
    let mut b = serde_json::json!({
        "ID": id, "IP": "127.0.0.1:30000", "domain": "fluidos.eu",
        "additionalInformation": {"liqoID": format!("liqo-{id}")}
    });
    if rng.chance(20) {
        let key = *rng.pick(&["ID", "IP", "domain", "additionalInformation"]);
        b[key] = odd_value(rng);
    }
    b
}

fn k8slice_configuration(rng: &mut Rng) -> serde_json::Value {
    let plain = rng.chance(70);
    let q = |rng: &mut Rng, normal: &str| {
        if plain {
            normal.to_owned()
        } else {
            (*rng.pick(QUANTITIES)).to_owned()
        }
    };
    let cpu = q(rng, "1");
    let memory = q(rng, "1Gi");
    let pods = q(rng, "1");
    let mut data = serde_json::json!({"cpu": cpu, "memory": memory, "pods": pods});
    if rng.chance(10) {
        data["gpu"] = serde_json::json!(q(rng, "0"));
    }
    if rng.chance(10) {
        data[odd_string(rng)] = odd_value(rng);
    }
    serde_json::json!({"type": *rng.pick(&["k8slice", "k8slice", "K8Slice", "service", "vm", ""]), "data": data})
}

fn reserve_body(rng: &mut Rng) -> serde_json::Value {
    let flavor = match rng.below(10) {
        0 => serde_json::json!(odd_string(rng)),
        1 => serde_json::json!("fuzz-service-0"),
        _ => serde_json::json!(flavor_name(rng.below(K8SLICES))),
    };
    let mut body = serde_json::json!({"flavorID": flavor, "buyerID": buyer(rng)});
    match rng.below(6) {
        0 => {}
        1 => {
            body["configuration"] = serde_json::json!({"type": "service",
                "data": {"hostingPolicy": *rng.pick(&["Provider", "Consumer", "Shared", "x"]),
                    "configurationData": odd_value(rng)}});
        }
        _ => body["configuration"] = k8slice_configuration(rng),
    }
    body
}

/// Deeply nested JSON of `n` levels, arrays or objects.
fn nested(rng: &mut Rng, n: usize) -> Vec<u8> {
    let (open, close): (&[u8], &[u8]) = if rng.chance(50) {
        (b"[", b"]")
    } else {
        (br#"{"a":"#, b"}")
    };
    let mut v = Vec::with_capacity(n * (open.len() + 1));
    for _ in 0..n {
        v.extend_from_slice(open);
    }
    v.extend_from_slice(b"1");
    if rng.chance(50) {
        for _ in 0..n {
            v.extend_from_slice(close);
        }
    }
    v
}

/// Mutates JSON text: flip, delete, insert or truncate bytes.
fn mutate(rng: &mut Rng, mut v: Vec<u8>) -> Vec<u8> {
    for _ in 0..=rng.below(4) {
        if v.is_empty() {
            break;
        }
        let i = rng.below(v.len());
        match rng.below(4) {
            0 => v[i] = rng.next() as u8,
            1 => {
                v.remove(i);
            }
            2 => v.insert(i, *rng.pick(b"{}[]\",:\\0x\x00\xff")),
            _ => v.truncate(i),
        }
    }
    v
}

/// A JSON-ish body for a POST.
fn post_body(rng: &mut Rng, valid: serde_json::Value) -> Vec<u8> {
    let text = serde_json::to_vec(&valid).unwrap();
    match rng.below(20) {
        0..=9 => text,
        10..=13 => mutate(rng, text),
        14 => {
            let n = 1 + rng.below(200_000);
            nested(rng, n)
        }
        15 => rng.bytes(512),
        16 => Vec::new(),
        17 => format!("[{}]", "1,".repeat(rng.below(100_000)) + "1").into_bytes(),
        18 => serde_json::to_vec(&odd_value(rng)).unwrap(),
        _ => format!(r#"{{"flavorID":"{}"}}"#, "f".repeat(rng.below(2 << 20))).into_bytes(),
    }
}

fn query(rng: &mut Rng) -> String {
    const KEYS: &[&str] = &[
        "filter[cpu][range][min]",
        "filter[cpu][range][max]",
        "filter[memory][range][min]",
        "filter[pods][match]",
        "filter[architecture][match]",
        "filter[category][match]",
        "filter[tags][match]",
        "filter[gpu][range][max]",
        "filter[storage][match]",
        "filter[regex]",
        "filter[",
        "watch",
        "",
    ];
    (0..rng.below(5))
        .map(|_| {
            let v = if rng.chance(60) {
                (*rng.pick(QUANTITIES)).to_owned()
            } else {
                odd_string(rng)
            };
            let key: &str = rng.pick::<&str>(KEYS);
            format!("{}={}", enc(key), enc(&v))
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A raw request with malformed HTTP (complete head, so the server must answer or close).
fn raw_request(rng: &mut Rng) -> Vec<u8> {
    let mut r: Vec<u8> = match rng.below(8) {
        0 => rng.bytes(200),
        1 => b"GET /api/v2/flavors HTTP/9.9\r\nHost: x".to_vec(),
        2 => format!("GET /{} HTTP/1.1\r\nHost: x", "a".repeat(70_000)).into_bytes(),
        3 => format!(
            "GET /api/v2/flavors HTTP/1.1\r\nHost: x\r\nX-Big: {}",
            "b".repeat(70_000)
        )
        .into_bytes(),
        4 => b"POST /api/v2/reservations HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0".to_vec(),
        5 => b"POST /api/v2/reservations HTTP/1.1\r\nHost: x\r\nContent-Length: -5".to_vec(),
        6 => b"POST /api/v2/reservations HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}".to_vec(),
        _ => b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03".to_vec(),
    };
    r.extend_from_slice(b"\r\n\r\n");
    r
}

/// The next request, maybe using a transaction ID a previous reserve returned.
pub fn generate(rng: &mut Rng, known_tx: Option<&str>) -> Fuzzed {
    match generate_uncut(rng, known_tx) {
        Fuzzed::Http {
            method,
            path,
            body,
            headers,
        } => Fuzzed::Http {
            method,
            path: cut_escaped(path, MAX_URI),
            body,
            headers,
        },
        raw => raw,
    }
}

/// A PURCHASE of a known, plausible or odd transaction ID.
fn purchase_request(rng: &mut Rng, known_tx: Option<&str>) -> Fuzzed {
    let id = match (known_tx, rng.below(3)) {
        (Some(tx), 0) => tx.to_owned(),
        (_, 1) => format!("{:032x}-{}", rng.next(), rng.next()),
        _ => odd_string(rng),
    };
    let valid = match rng.below(4) {
        0 => serde_json::json!({}),
        1 => {
            serde_json::json!({"liqoCredentials": {"clusterID": odd_string(rng), "kubeconfig": "a2NmZw=="}})
        }
        2 => {
            serde_json::json!({"ingressTelemetryEndpoint": {"endpoint": odd_string(rng), "intents": [odd_string(rng)]}})
        }
        _ => odd_value(rng),
    };
    Fuzzed::Http {
        method: reqwest::Method::POST,
        path: format!("/api/v2/transactions/{}/purchase", enc(&id)),
        body: post_body(rng, valid),
        headers: vec![("content-type", "application/json".to_owned())],
    }
}

/// A method no route has, on a route or an odd path.
fn wrong_method_request(rng: &mut Rng) -> Fuzzed {
    use reqwest::Method;
    let method = match rng.below(6) {
        0 => Method::PUT,
        1 => Method::DELETE,
        2 => Method::PATCH,
        3 => Method::OPTIONS,
        4 => Method::HEAD,
        _ => Method::from_bytes(b"BREW").unwrap(),
    };
    let path = match rng.below(6) {
        0 => "/api/v2/reservations".to_owned(),
        1 => "/api/v2/flavors".to_owned(),
        2 => format!("/api/v2/{}", enc(&odd_string(rng))),
        3 => format!("/{}", "seg/".repeat(rng.below(2000))),
        4 => "/api/v2/openapi.json".to_owned(),
        _ => format!("/api/v2/flavors/{}", enc(&odd_string(rng))),
    };
    Fuzzed::Http {
        method,
        path,
        body: rng.bytes(64),
        headers: Vec::new(),
    }
}

fn generate_uncut(rng: &mut Rng, known_tx: Option<&str>) -> Fuzzed {
    use reqwest::Method;
    let json = vec![("content-type", "application/json".to_owned())];
    // Weights: the API-server-bound routes (RESERVE, PURCHASE) take a
    // third, so the run measures the gateway rather than etcd.
    match rng.below(100) {
        0..=14 => {
            let valid = reserve_body(rng);
            Fuzzed::Http {
                method: Method::POST,
                path: "/api/v2/reservations".into(),
                body: post_body(rng, valid),
                headers: json,
            }
        }
        15..=29 => purchase_request(rng, known_tx),
        30..=64 => Fuzzed::Http {
            method: Method::GET,
            path: format!(
                "{}?{}",
                rng.pick(&[
                    "/api/v2/flavors",
                    "/api/v2/flavors/k8slice",
                    "/api/v2/flavors/service",
                    "/api/v2/flavors/vm",
                ]),
                query(rng)
            ),
            body: Vec::new(),
            headers: Vec::new(),
        },
        65..=77 => Fuzzed::Http {
            method: Method::GET,
            path: format!(
                "/api/v2/contracts/{}/service?buyerID={}",
                enc(&odd_string(rng)),
                enc(&odd_string(rng))
            ),
            body: Vec::new(),
            headers: vec![("x-fluidos-transaction-id", format!("{:x}", rng.next()))],
        },
        78..=92 => wrong_method_request(rng),
        93..=97 => {
            let method = if rng.chance(50) {
                Method::GET
            } else {
                Method::POST
            };
            Fuzzed::Http {
                method,
                path: format!("/{}", enc(&odd_string(rng))),
                body: Vec::new(),
                headers: vec![(
                    "content-type",
                    odd_string(rng)
                        .chars()
                        .filter(char::is_ascii_graphic)
                        .take(100)
                        .collect(),
                )],
            }
        }
        _ => Fuzzed::Raw(raw_request(rng)),
    }
}

/// A running fuzz target: a control plane with flavors and a gateway that
/// serves TLS (with the key whose fingerprint is `provider`) and plain HTTP.
pub struct Target {
    pub cp: ControlPlane,
    pub gw: Served,
    pub provider: Fingerprint,
}

/// How the fuzz reaches the gateway.
#[derive(Clone)]
pub enum Transport {
    /// Plain HTTP, as a Go node speaks REAR.
    Plain,
    /// TLS 1.3, presenting a buyer's certificate, pinned to the provider.
    Tls(Arc<rustls::ClientConfig>),
}

impl Transport {
    /// TLS as a freshly made buyer key, pinned to `provider`.
    pub fn tls(provider: Fingerprint) -> Transport {
        let buyer = NodeKey::generate("fuzz-buyer").unwrap();
        Transport::Tls(Arc::new(
            fluidos_rear_identity::tls::client_config(&buyer, provider).unwrap(),
        ))
    }

    fn name(&self) -> &'static str {
        match self {
            Transport::Plain => "plain HTTP",
            Transport::Tls(_) => "TLS 1.3 with a client certificate",
        }
    }
}

/// Starts a control plane with `K8SLICES` partitionable flavors and a
/// Service flavor, and a gateway whose rate limit is raised out of the way
/// (still applied: the limiter runs on every request).
pub async fn start() -> Target {
    let cp = crate::common::control_plane().await;
    let client = cp.client();
    namespace(&client, NS).await;
    for i in 0..K8SLICES {
        let p = partition(("1", "1"), ("1Gi", "1Gi"), ("1", "1"));
        let k = k8slice("amd64", "32", "64Gi", "500", None, None, p);
        create_flavor(
            &client,
            NS,
            &flavor_name(i),
            spec(FlavorType::k8slice(&k), true),
        )
        .await;
    }
    let s = service(
        "database",
        &["sql"],
        &[HostingPolicy::Provider],
        serde_json::json!({"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 1}},
            "additionalProperties": false}),
    );
    create_flavor(
        &client,
        NS,
        "fuzz-service-0",
        spec(FlavorType::service(&s), true),
    )
    .await;
    let mut cfg = config(&cp, NS);
    cfg.rate_limit = Some(RateLimit {
        per_second: 10_000_000,
        burst: 10_000_000,
    });
    // Holds come back quickly, so valid reserves keep finding capacity.
    cfg.transaction_ttl = Duration::from_secs(5);
    cfg.sweep_interval = Duration::from_secs(1);
    cfg.header_read_timeout = Duration::from_secs(2);
    let key = NodeKey::generate("fuzz-provider").unwrap();
    let provider = key.fingerprint();
    let cfg = cfg.with_node_key(&key).unwrap();
    let gw = serve(&client, cfg).await;
    Target { cp, gw, provider }
}

/// What a fuzz run saw.
#[derive(Debug, Default)]
pub struct Report {
    /// How the requests were sent.
    pub transport: &'static str,
    pub requests: u64,
    pub statuses: BTreeMap<u16, u64>,
    /// Raw requests the server closed without answering (fine for garbage).
    pub raw_closed: u64,
    /// Requests that got no HTTP answer (reqwest errors): none expected.
    pub transport_error_count: u64,
    /// A few of them, with the request.
    pub transport_errors: Vec<String>,
    /// Bodies over the limit whose connection was closed before the client
    /// read the 413 (the server does not read what it will refuse).
    pub oversized_closed: u64,
    /// 5xx answers with the request that caused them (a few kept).
    pub server_errors: Vec<String>,
    pub server_error_count: u64,
    pub panics: u64,
    pub elapsed: Duration,
    /// (requests done, VmRSS KiB) samples.
    pub rss: Vec<(u64, u64)>,
}

impl Report {
    /// Counts the outcome of `req`.
    fn record(&mut self, req: &Fuzzed, outcome: Result<Option<(u16, String)>, String>) {
        self.requests += 1;
        match outcome {
            Ok(Some((status, text))) => {
                *self.statuses.entry(status).or_default() += 1;
                if status >= 500 {
                    self.server_error_count += 1;
                    if self.server_errors.len() < 10 {
                        let t: String = text.chars().take(300).collect();
                        self.server_errors
                            .push(format!("{status} {t} <- {}", describe(req)));
                    }
                }
            }
            Ok(None) => self.raw_closed += 1,
            Err(_)
                if matches!(req, Fuzzed::Http { body, .. }
                    if body.len() > fluidos_rear_gateway::DEFAULT_BODY_LIMIT) =>
            {
                self.oversized_closed += 1;
            }
            Err(e) => {
                self.transport_error_count += 1;
                if self.transport_errors.len() < 10 {
                    let e: String = e.chars().take(300).collect();
                    self.transport_errors
                        .push(format!("{e} <- {}", describe(req)));
                }
            }
        }
    }

    pub fn five_xx(&self) -> u64 {
        self.server_error_count
    }

    /// RSS growth (KiB) from the first sample after warm-up to the largest later one.
    pub fn rss_growth_kib(&self) -> u64 {
        let skip = self.rss.len() / 10;
        let base = self.rss.get(skip).map_or(0, |s| s.1);
        let peak = self
            .rss
            .iter()
            .skip(skip)
            .map(|s| s.1)
            .max()
            .unwrap_or(base);
        peak.saturating_sub(base)
    }

    pub fn print(&self) {
        println!(
            "{} requests over {} in {:.1} s: {:.0} req/s",
            self.requests,
            self.transport,
            self.elapsed.as_secs_f64(),
            self.requests as f64 / self.elapsed.as_secs_f64()
        );
        println!("status histogram:");
        for (s, n) in &self.statuses {
            println!("  {s:>3}  {n:>9}");
        }
        println!(
            "  raw requests closed without an answer: {}",
            self.raw_closed
        );
        println!(
            "  oversized bodies cut off before the 413 was read: {}",
            self.oversized_closed
        );
        println!(
            "5xx: {}, transport errors: {}, panics: {}",
            self.server_error_count, self.transport_error_count, self.panics
        );
        for e in self
            .server_errors
            .iter()
            .chain(&self.transport_errors)
            .take(5)
        {
            println!("  e.g. {e}");
        }
        if let (Some(first), Some(last)) = (self.rss.first(), self.rss.last()) {
            let peak = self.rss.iter().map(|s| s.1).max().unwrap_or(0);
            println!(
                "RSS: {} MiB at start, {} MiB at the end, peak {} MiB; growth after warm-up {} MiB",
                first.1 / 1024,
                last.1 / 1024,
                peak / 1024,
                self.rss_growth_kib() / 1024
            );
        }
    }
}

/// VmRSS of this process in KiB.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn describe(f: &Fuzzed) -> String {
    match f {
        Fuzzed::Http {
            method, path, body, ..
        } => {
            let p: String = path.chars().take(160).collect();
            let b = String::from_utf8_lossy(&body[..body.len().min(160)]).into_owned();
            format!("{method} {p} ({} bytes: {b:?})", body.len())
        }
        Fuzzed::Raw(r) => format!("raw {:?}", String::from_utf8_lossy(&r[..r.len().min(160)])),
    }
}

/// Sends one raw request; the status code of the answer, or None if the
/// server closed without one.
async fn send_raw(addr: &str, bytes: &[u8], transport: &Transport) -> Result<Option<u16>, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    match transport {
        Transport::Plain => exchange_raw(tcp, bytes).await,
        Transport::Tls(config) => {
            let name = rustls::pki_types::ServerName::try_from("fluidos-provider")
                .map_err(|e| e.to_string())?;
            let tls = tokio_rustls::TlsConnector::from(config.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS handshake: {e}"))?;
            exchange_raw(tls, bytes).await
        }
    }
}

/// Writes `bytes` on `stream` and reads the status line of the answer.
async fn exchange_raw(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    bytes: &[u8],
) -> Result<Option<u16>, String> {
    // The server may answer and close before reading everything.
    let _ = stream.write_all(bytes).await;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => {
                head.extend_from_slice(&buf[..n]);
                if head.len() >= 12 {
                    break;
                }
            }
            Err(_) => return Err("no answer or close within 10 s".into()),
        }
    }
    if head.len() < 12 {
        return Ok(None);
    }
    let status = std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {:?}", String::from_utf8_lossy(&head)))?;
    Ok(Some(status))
}

/// An HTTP client over `transport`: reqwest for plain HTTP (as before),
/// hyper with a pinned rustls connector for TLS (reqwest's TLS features
/// stay off in this workspace).
#[derive(Clone)]
enum Http {
    Plain(reqwest::Client),
    Tls(HyperClient<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>),
}

impl Http {
    fn new(transport: &Transport, workers: usize) -> Http {
        match transport {
            Transport::Plain => Http::Plain(
                reqwest::Client::builder()
                    .pool_max_idle_per_host(workers)
                    .timeout(Duration::from_secs(60))
                    .build()
                    .unwrap(),
            ),
            Transport::Tls(config) => {
                let mut tcp = HttpConnector::new();
                tcp.enforce_http(false);
                tcp.set_nodelay(true);
                let mut https = hyper_rustls::HttpsConnector::from((tcp, config.as_ref().clone()));
                https.enforce_https();
                Http::Tls(
                    HyperClient::builder(hyper_util::rt::TokioExecutor::new())
                        .pool_max_idle_per_host(workers)
                        .build(https),
                )
            }
        }
    }
}

/// Sends one request: its status and body, `None` for a raw request the
/// server closed without answering, `Err` when no answer came.
async fn send(
    client: &Http,
    transport: &Transport,
    base: &str,
    addr: &str,
    req: &Fuzzed,
) -> Result<Option<(u16, String)>, String> {
    match (req, client) {
        (
            Fuzzed::Http {
                method,
                path,
                body,
                headers,
            },
            Http::Plain(client),
        ) => {
            let mut rb = client
                .request(method.clone(), format!("{base}{path}"))
                .body(body.clone());
            for (k, v) in headers {
                rb = rb.header(*k, v.as_str());
            }
            match rb.send().await {
                Ok(r) => {
                    let status = r.status().as_u16();
                    Ok(Some((status, r.text().await.unwrap_or_default())))
                }
                Err(e) => Err(format!("{e:?}")),
            }
        }
        (
            Fuzzed::Http {
                method,
                path,
                body,
                headers,
            },
            Http::Tls(client),
        ) => {
            // The URL parser reqwest uses, so that both transports send the
            // same (percent-encoded) request targets.
            let url = reqwest::Url::parse(&format!("https://{addr}{path}"))
                .map_err(|e| format!("bad URL: {e}"))?;
            let mut rb = hyper::Request::builder()
                .method(method.as_str())
                .uri(url.as_str());
            for (k, v) in headers {
                rb = rb.header(*k, v.as_str());
            }
            let request = rb
                .body(Full::new(Bytes::from(body.clone())))
                .map_err(|e| format!("request: {e}"))?;
            let answer = tokio::time::timeout(Duration::from_secs(60), client.request(request))
                .await
                .map_err(|_| "no answer within 60 s".to_owned())?
                .map_err(|e| format!("{e:?}"))?;
            let status = answer.status().as_u16();
            let text = answer
                .into_body()
                .collect()
                .await
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
                .unwrap_or_default();
            Ok(Some((status, text)))
        }
        (Fuzzed::Raw(bytes), _) => send_raw(addr, bytes, transport)
            .await
            .map(|s| s.map(|s| (s, String::new()))),
    }
}

/// Sends `total` generated requests over `workers` concurrent connections.
pub async fn run(
    base: &str,
    transport: &Transport,
    total: u64,
    workers: usize,
    seed: u64,
) -> Report {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::Relaxed);
        previous(info);
    }));
    let panics_before = PANICS.load(Ordering::Relaxed);
    let client = Http::new(transport, workers);
    let addr: Arc<str> = base.trim_start_matches("http://").into();
    let base: Arc<str> = base.into();
    let next = Arc::new(AtomicUsize::new(0));
    let report = Arc::new(std::sync::Mutex::new(Report::default()));
    let known_tx: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let sample_every = (total / 200).max(1);
    let started = Instant::now();
    report.lock().unwrap().rss.push((0, rss_kib()));
    let mut tasks = Vec::new();
    for w in 0..workers {
        let transport = transport.clone();
        let (client, base, addr, next, report, known_tx) = (
            client.clone(),
            base.clone(),
            addr.clone(),
            next.clone(),
            report.clone(),
            known_tx.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(seed ^ (w as u64).wrapping_mul(0xA076_1D64_78BD_642F));
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as u64;
                if i >= total {
                    break;
                }
                let tx = {
                    let k = known_tx.lock().unwrap();
                    (!k.is_empty()).then(|| k[rng.below(k.len())].clone())
                };
                let req = generate(&mut rng, tx.as_deref());
                let outcome = send(&client, &transport, &base, &addr, &req).await;
                if let (Ok(Some((200, text))), Fuzzed::Http { path, .. }) = (&outcome, &req)
                    && path == "/api/v2/reservations"
                    && let Some(id) = serde_json::from_str::<serde_json::Value>(text)
                        .ok()
                        .and_then(|v| v["transactionID"].as_str().map(str::to_owned))
                {
                    let mut k = known_tx.lock().unwrap();
                    if k.len() >= 256 {
                        k.remove(0);
                    }
                    k.push(id);
                }
                let mut rep = report.lock().unwrap();
                rep.record(&req, outcome);
                if (i + 1).is_multiple_of(sample_every) {
                    rep.rss.push((i + 1, rss_kib()));
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut rep = std::mem::take(&mut *report.lock().unwrap());
    rep.transport = transport.name();
    rep.elapsed = started.elapsed();
    rep.rss.push((rep.requests, rss_kib()));
    rep.panics = PANICS.load(Ordering::Relaxed) - panics_before;
    rep
}
