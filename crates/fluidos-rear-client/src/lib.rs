//! Typed async REAR client for the consumer side.
//!
//! Talks to Go and Rust FLUIDOS nodes alike: it accepts both forms they use
//! for an empty list (`204 No Content` and `200 []`/`null`) and both error
//! body styles (Go's `text/plain`, our JSON `{"error": ...}`). Every call has a
//! connect and a request timeout; only requests that cannot change provider
//! state twice are retried (listing always; reserve and purchase only when the
//! connection was never made, and both are idempotent on the provider anyway).

use std::time::Duration;

use fluidos_api::quantity::Amount;
use fluidos_api::rear::{
    PurchaseRequest, ReserveRequest, ServiceAccess, WireContract, WireFlavor, WireTransaction,
};
use fluidos_api::solver::{FlavorSelector, QuantityFilter, StringFilter};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::de::DeserializeOwned;

/// Timeouts and retries.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Whole-request timeout of a flavor listing.
    pub list_timeout: Duration,
    /// Whole-request timeout of a RESERVE.
    pub reserve_timeout: Duration,
    /// Whole-request timeout of a PURCHASE. A Go provider takes 10–17 s to
    /// answer one (it sleeps twice while minting the buyer's credentials).
    pub purchase_timeout: Duration,
    /// Extra attempts for retryable failures.
    pub retries: u32,
    /// Pause before the first retry; doubles each time.
    pub backoff: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            connect_timeout: Duration::from_secs(2),
            list_timeout: Duration::from_secs(10),
            reserve_timeout: Duration::from_secs(10),
            purchase_timeout: Duration::from_secs(60),
            retries: 2,
            backoff: Duration::from_millis(100),
        }
    }
}

/// What went wrong talking to a provider.
#[derive(Debug, thiserror::Error)]
pub enum RearError {
    /// No answer: connection refused, DNS, timeout.
    #[error("provider {address} is unreachable: {message}")]
    Unreachable {
        /// `host:port` called.
        address: String,
        /// Transport error text.
        message: String,
        /// True when the request timed out (rather than being refused).
        timed_out: bool,
    },
    /// The provider answered with an error status.
    #[error("provider {address} rejected the request with {status}: {message}")]
    Rejected {
        /// `host:port` called.
        address: String,
        /// HTTP status code.
        status: u16,
        /// The provider's message (JSON `error` field or plain text).
        message: String,
    },
    /// The provider answered 2xx with a body we cannot decode.
    #[error("provider {address} sent a malformed {what}: {message}")]
    Malformed {
        /// `host:port` called.
        address: String,
        /// What was expected.
        what: &'static str,
        /// Decoder error.
        message: String,
    },
    /// The client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Build(String),
}

impl RearError {
    /// True when the provider did not answer at all.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, RearError::Unreachable { .. })
    }

    /// The HTTP status of a rejection.
    pub fn status(&self) -> Option<u16> {
        match self {
            RearError::Rejected { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// The REAR client; cheap to clone (one connection pool).
#[derive(Clone, Debug)]
pub struct RearClient {
    http: reqwest::Client,
    config: ClientConfig,
}

enum Retry {
    /// Idempotent read: retry on any transport failure and on 5xx/503.
    Always,
    /// State-changing call: retry only when no connection was made.
    ConnectOnly,
}

impl RearClient {
    /// A client with these timeouts.
    pub fn new(config: ClientConfig) -> Result<Self, RearError> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|e| RearError::Build(e.to_string()))?;
        Ok(RearClient { http, config })
    }

    /// The timeouts and retries in use.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Lists flavors: the typed route with the selector's filters, or
    /// `/api/v2/flavors` without a selector.
    pub async fn list_flavors(
        &self,
        address: &str,
        selector: Option<&FlavorSelector>,
    ) -> Result<Vec<WireFlavor>, RearError> {
        let path = match selector {
            None => "/api/v2/flavors".to_owned(),
            Some(sel) => {
                let route = sel.flavor_type().wire_name();
                format!("/api/v2/flavors/{route}?{}", encode_selector(sel))
            }
        };
        let body = self
            .send(
                address,
                Retry::Always,
                |c, url| c.get(url).timeout(self.config.list_timeout),
                &path,
            )
            .await?;
        match body {
            None => Ok(Vec::new()),
            Some(bytes) => {
                let list: Option<Vec<WireFlavor>> = decode(address, "flavor list", &bytes)?;
                Ok(list.unwrap_or_default())
            }
        }
    }

    /// RESERVE: `POST /api/v2/reservations`.
    pub async fn reserve(
        &self,
        address: &str,
        request: &ReserveRequest,
    ) -> Result<WireTransaction, RearError> {
        let body = self
            .send(
                address,
                Retry::ConnectOnly,
                |c, url| {
                    c.post(url)
                        .timeout(self.config.reserve_timeout)
                        .json(request)
                },
                "/api/v2/reservations",
            )
            .await?;
        let tx: WireTransaction = decode_required(address, "transaction", body)?;
        if tx.transaction_id.is_empty() {
            return Err(RearError::Malformed {
                address: address.to_owned(),
                what: "transaction",
                message: "empty transactionID".into(),
            });
        }
        Ok(tx)
    }

    /// PURCHASE: `POST /api/v2/transactions/{id}/purchase`.
    pub async fn purchase(
        &self,
        address: &str,
        transaction_id: &str,
        request: &PurchaseRequest,
    ) -> Result<WireContract, RearError> {
        let id: String = form_urlencoded::byte_serialize(transaction_id.as_bytes()).collect();
        let path = format!("/api/v2/transactions/{id}/purchase");
        let body = self
            .send(
                address,
                Retry::ConnectOnly,
                |c, url| {
                    c.post(url)
                        .timeout(self.config.purchase_timeout)
                        .json(request)
                },
                &path,
            )
            .await?;
        decode_required(address, "contract", body)
    }

    /// How the buyer `buyer_id` reaches the service of contract `contract_id`:
    /// `GET /api/v2/contracts/{contractID}/service?buyerID=` with the
    /// contract's `transaction_id` in the `X-Fluidos-Transaction-Id` header
    /// (a FLUIDOS-rs provider only). 404 means unknown or not ours, 409 not
    /// ready yet, 410 that it will not come.
    pub async fn service_access(
        &self,
        address: &str,
        contract_id: &str,
        buyer_id: &str,
        transaction_id: &str,
    ) -> Result<ServiceAccess, RearError> {
        let id: String = form_urlencoded::byte_serialize(contract_id.as_bytes()).collect();
        let buyer: String = form_urlencoded::byte_serialize(buyer_id.as_bytes()).collect();
        let path = format!("/api/v2/contracts/{id}/service?buyerID={buyer}");
        let body = self
            .send(
                address,
                Retry::Always,
                |c, url| {
                    c.get(url)
                        .header(fluidos_api::rear::TRANSACTION_ID_HEADER, transaction_id)
                        .timeout(self.config.list_timeout)
                },
                &path,
            )
            .await?;
        decode_required(address, "service access", body)
    }

    /// Sends with retries; `Ok(None)` is a 204.
    async fn send(
        &self,
        address: &str,
        retry: Retry,
        build: impl Fn(&reqwest::Client, String) -> reqwest::RequestBuilder,
        path: &str,
    ) -> Result<Option<Vec<u8>>, RearError> {
        let url = format!("http://{address}{path}");
        let mut delay = self.config.backoff;
        let mut attempt = 0;
        loop {
            let outcome = self.once(address, build(&self.http, url.clone())).await;
            let retryable = match (&outcome, &retry) {
                (Ok(_), _) => false,
                (Err(Failure::Connect(_)), _) => true,
                (Err(Failure::Transport(_, _)), Retry::Always) => true,
                (Err(Failure::Status(s, _)), Retry::Always) => *s >= 500,
                _ => false,
            };
            if !retryable || attempt >= self.config.retries {
                return outcome.map_err(|f| f.into_error(address));
            }
            attempt += 1;
            tracing::debug!(address, path, attempt, "retrying REAR request");
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
    }

    async fn once(
        &self,
        _address: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<Option<Vec<u8>>, Failure> {
        let response = request.send().await.map_err(|e| {
            if e.is_connect() {
                Failure::Connect(e.to_string())
            } else {
                Failure::Transport(e.to_string(), e.is_timeout())
            }
        })?;
        let status = response.status();
        let bytes = read_capped(response, MAX_RESPONSE_BYTES).await?;
        if status == reqwest::StatusCode::NO_CONTENT {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(Failure::Status(status.as_u16(), error_message(&bytes)));
        }
        Ok(Some(bytes.to_vec()))
    }
}

/// The largest REAR answer read: a flavor list of several thousand flavors
/// fits many times over; a peer streaming more is cut off, not buffered.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// The most of a provider's error text kept (it reaches statuses and logs).
const MAX_ERROR_CHARS: usize = 500;

/// The body, read chunk by chunk and refused once over `limit` bytes.
async fn read_capped(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, Failure> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(Failure::Transport(
            format!("the answer is over {limit} bytes (Content-Length)"),
            false,
        ));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| Failure::Transport(e.to_string(), e.is_timeout()))?
    {
        if body.len() + chunk.len() > limit {
            return Err(Failure::Transport(
                format!("the answer is over {limit} bytes"),
                false,
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

enum Failure {
    Connect(String),
    Transport(String, bool),
    Status(u16, String),
}

impl Failure {
    fn into_error(self, address: &str) -> RearError {
        let address = address.to_owned();
        match self {
            Failure::Connect(message) => RearError::Unreachable {
                address,
                message,
                timed_out: false,
            },
            Failure::Transport(message, timed_out) => RearError::Unreachable {
                address,
                message,
                timed_out,
            },
            Failure::Status(status, message) => RearError::Rejected {
                address,
                status,
                message,
            },
        }
    }
}

/// The provider's error text: JSON `{"error": ...}` (ours) or plain text (Go).
fn error_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct JsonError {
        error: String,
    }
    let text = match serde_json::from_slice::<JsonError>(body) {
        Ok(e) => e.error,
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    // A peer's text goes into statuses, events and terminals: no control
    // characters (escape sequences), bounded.
    let text: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_ERROR_CHARS)
        .collect();
    if text.is_empty() {
        "(empty body)".to_owned()
    } else {
        text
    }
}

fn decode<T: DeserializeOwned>(
    address: &str,
    what: &'static str,
    bytes: &[u8],
) -> Result<T, RearError> {
    serde_json::from_slice(bytes).map_err(|e| RearError::Malformed {
        address: address.to_owned(),
        what,
        message: e.to_string(),
    })
}

fn decode_required<T: DeserializeOwned>(
    address: &str,
    what: &'static str,
    body: Option<Vec<u8>>,
) -> Result<T, RearError> {
    match body {
        Some(bytes) => decode(address, what, &bytes),
        None => Err(RearError::Malformed {
            address: address.to_owned(),
            what,
            message: "empty response (204)".into(),
        }),
    }
}

/// Encodes a selector as the provider's query grammar.
///
/// Unlike the Go client this writes the `filter` prefix for storage and
/// URL-escapes values. String `Range` (regex) filters have no query form: they
/// are left out, and the consumer re-filters candidates locally.
pub fn encode_selector(sel: &FlavorSelector) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    let mut string = |name: &str, f: &Option<StringFilter>| {
        if let Some(StringFilter::Match(v)) = f {
            q.append_pair(&format!("filter[{name}][match]"), v);
        }
    };
    match sel {
        FlavorSelector::K8Slice(k) => {
            string("architecture", &k.architecture);
            for (name, f) in [
                ("cpu", &k.cpu),
                ("memory", &k.memory),
                ("pods", &k.pods),
                ("storage", &k.storage),
            ] {
                let canon = |v: &Quantity| {
                    Amount::of(v)
                        .map(|a| a.to_string())
                        .unwrap_or_else(|_| v.0.clone())
                };
                match f {
                    Some(QuantityFilter::Match(v)) => {
                        q.append_pair(&format!("filter[{name}][match]"), &canon(v));
                    }
                    Some(QuantityFilter::Range { min, max }) => {
                        if let Some(v) = min {
                            q.append_pair(&format!("filter[{name}][range][min]"), &canon(v));
                        }
                        if let Some(v) = max {
                            q.append_pair(&format!("filter[{name}][range][max]"), &canon(v));
                        }
                    }
                    None => {}
                }
            }
        }
        FlavorSelector::Service(s) => {
            string("category", &s.category);
            string("tags", &s.tags);
        }
    }
    q.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluidos_api::solver::Selector;

    fn sel(t: &str, f: serde_json::Value) -> FlavorSelector {
        Selector {
            flavor_type: t.into(),
            filters: Some(f),
        }
        .parse()
        .unwrap()
    }

    #[test]
    fn encodes_the_sample_selector_in_go_order() {
        let s = sel(
            "K8Slice",
            serde_json::json!({
                "architectureFilter": {"name": "Match", "data": {"value": "amd64"}},
                "cpuFilter": {"name": "Range", "data": {"min": "1000m"}},
                "memoryFilter": {"name": "Range", "data": {"min": "1Gi", "max": "100Gi"}},
                "podsFilter": {"name": "Match", "data": {"value": 110}},
                "storageFilter": {"name": "Range", "data": {"min": "10Gi"}}
            }),
        );
        assert_eq!(
            encode_selector(&s),
            "filter%5Barchitecture%5D%5Bmatch%5D=amd64&filter%5Bcpu%5D%5Brange%5D%5Bmin%5D=1\
             &filter%5Bmemory%5D%5Brange%5D%5Bmin%5D=1Gi&filter%5Bmemory%5D%5Brange%5D%5Bmax%5D=100Gi\
             &filter%5Bpods%5D%5Bmatch%5D=110&filter%5Bstorage%5D%5Brange%5D%5Bmin%5D=10Gi"
        );
    }

    #[test]
    fn regex_filters_stay_local() {
        let s = sel(
            "Service",
            serde_json::json!({"categoryFilter": {"name": "Match", "data": {"value": "database"}},
                "tagsFilter": {"name": "Range", "data": {"regex": "sql$"}}}),
        );
        assert_eq!(
            encode_selector(&s),
            "filter%5Bcategory%5D%5Bmatch%5D=database"
        );
    }

    #[test]
    fn error_bodies_of_both_styles() {
        assert_eq!(
            error_message(br#"{"error":"flavor x not found","field":"flavorID"}"#),
            "flavor x not found"
        );
        assert_eq!(
            error_message(b"Error: transaction Timeout\n"),
            "Error: transaction Timeout"
        );
        assert_eq!(error_message(b""), "(empty body)");
    }

    #[test]
    fn a_peers_error_text_is_bounded_and_has_no_control_characters() {
        let hostile = format!(
            r#"{{"error":"\u001b]52;c;cGF5bG9hZA==\u0007{}"}}"#,
            "x".repeat(10_000)
        );
        let m = error_message(hostile.as_bytes());
        assert!(m.chars().all(|c| !c.is_control()), "{m:?}");
        assert_eq!(m.chars().count(), MAX_ERROR_CHARS);
        let m = error_message(b"Error:\x1b[2J gone\r\n");
        assert!(!m.contains('\u{1b}'), "{m:?}");
    }

    /// A peer that streams an endless answer is cut off at the limit.
    #[tokio::test]
    async fn an_endless_answer_is_cut_off() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            // Every attempt (list requests are retried) gets the same answer.
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let _ = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await;
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                        .await;
                    let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, "[".repeat(64 * 1024));
                    // 1 GiB if nobody stops reading.
                    for _ in 0..16 * 1024 {
                        if s.write_all(chunk.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let client = RearClient::new(ClientConfig::default()).unwrap();
        let e = client.list_flavors(&addr, None).await.unwrap_err();
        assert!(e.to_string().contains("over 16777216 bytes"), "{e}");
    }
}
