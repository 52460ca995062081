//! Typed async REAR client for the consumer side.
//!
//! Talks to Go and Rust FLUIDOS nodes alike: it accepts both forms they use
//! for an empty list (`204 No Content` and `200 []`/`null`) and both error
//! body styles (Go's `text/plain`, our JSON `{"error": ...}`). Every call has a
//! connect and a request timeout; only requests that cannot change provider
//! state twice are retried (listing always; reserve and purchase only when the
//! connection was never made, and both are idempotent on the provider anyway).
//!
//! A provider is a [`ProviderAddress`]: with the fingerprint of its key it is
//! called over TLS 1.3 that accepts only that key (and, from a client made
//! [`with_key`](RearClient::with_key), presents this node's certificate, so
//! the provider knows the buyer by its key); without, over plain HTTP, the
//! only scheme unmodified Go nodes serve. A server holding another key is
//! [`RearError::WrongKey`], never retried.
//!
//! HTTP is hyper's, not reqwest's: reqwest's TLS features are unified across
//! the workspace, and the one that would fit (`rustls-no-provider`) makes
//! every reqwest client panic unless a process-wide crypto provider is
//! installed (`docs/rear-identity.md`). Nothing process-wide is installed
//! here: the rustls configurations name the ring provider themselves.

mod address;
mod listing;

use std::collections::HashMap;
use std::error::Error as StdError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use fluidos_api::quantity::Amount;
use fluidos_api::rear::{
    PurchaseRequest, ReserveRequest, ServiceAccess, WireContract, WireTransaction,
};
use fluidos_api::solver::{FlavorSelector, QuantityFilter, StringFilter};
use fluidos_rear_identity::tls::{self, UnexpectedKey};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{self, connect::HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::de::DeserializeOwned;

pub use address::{ADDRESS_FORM, AddressError, ProviderAddress};
/// The identity types the API takes, re-exported so that callers need not
/// depend on `fluidos-rear-identity` for them.
pub use fluidos_rear_identity::{Fingerprint, NodeKey};
pub use listing::{
    FlavorListing, MAX_DECODED_BYTES, MAX_LIST_BYTES, MAX_LISTED_FLAVOR_BYTES, MAX_LISTED_FLAVORS,
};

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
        /// When to ask again, from a `Retry-After` header in seconds (429,
        /// 503), capped at [`MAX_RETRY_AFTER`].
        retry_after: Option<Duration>,
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
    /// The server at the address holds another key than the one pinned for
    /// the provider: whoever answers is not that provider. Never retried.
    #[error(
        "provider {address} presented key {presented}, not the pinned {expected}: \
         refusing to talk to it (the provider's key changed, or another server answers at that address)"
    )]
    WrongKey {
        /// `host:port` called.
        address: String,
        /// The fingerprint the provider was pinned to.
        expected: Fingerprint,
        /// The fingerprint of the key the server proved it holds.
        presented: Fingerprint,
    },
    /// The request could not be made from what was given (an address that
    /// is not `host:port`, a value that cannot be a header).
    #[error("cannot call provider {address}: {message}")]
    Invalid {
        /// `host:port` given.
        address: String,
        /// What is wrong.
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

    /// True when the provider presented another key than the pinned one.
    pub fn is_wrong_key(&self) -> bool {
        matches!(self, RearError::WrongKey { .. })
    }

    /// The HTTP status of a rejection.
    pub fn status(&self) -> Option<u16> {
        match self {
            RearError::Rejected { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// How long the provider asked to wait before asking again, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            RearError::Rejected { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Longest `Retry-After` taken from a provider: a peer cannot park a
/// caller for hours.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A `Retry-After` value in whole seconds (the HTTP-date form is not used
/// by REAR providers and is ignored), capped at [`MAX_RETRY_AFTER`] (pure).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value
        .trim()
        .parse::<u64>()
        .ok()
        .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER))
}

/// A request body (JSON, or empty).
type RequestBody = Full<Bytes>;
/// Plain HTTP connections, one pool for every provider without a fingerprint.
type PlainPool = legacy::Client<HttpConnector, RequestBody>;
/// TLS connections accepting one key only.
type PinnedPool = legacy::Client<HttpsConnector<HttpConnector>, RequestBody>;

/// The connection pool a call goes through.
#[derive(Clone)]
enum Pool {
    Plain(PlainPool),
    Pinned(PinnedPool),
}

impl Pool {
    fn request(&self, request: Request<RequestBody>) -> legacy::ResponseFuture {
        match self {
            Pool::Plain(c) => c.request(request),
            Pool::Pinned(c) => c.request(request),
        }
    }
}

/// Most providers' keys with a connection pool at once.
const MAX_PINNED_POOLS: usize = 256;

struct Shared {
    config: ClientConfig,
    key: Option<Arc<NodeKey>>,
    plain: PlainPool,
    /// One pool per pinned key, so that keep-alive connections are reused;
    /// a pool only ever talks to servers holding its key.
    pinned: Mutex<HashMap<Fingerprint, PinnedPool>>,
}

/// The REAR client; cheap to clone (the clones share their connection pools).
///
/// A [`ProviderAddress`] with a fingerprint is called over TLS 1.3 that
/// accepts only that key; one without is called over plain HTTP.
#[derive(Clone)]
pub struct RearClient {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RearClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RearClient")
            .field("config", &self.shared.config)
            .field("key", &self.key_fingerprint())
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy)]
enum Retry {
    /// Idempotent read: retry on any transport failure and on 5xx/503.
    Always,
    /// State-changing call: retry only when no connection was made.
    ConnectOnly,
}

/// One REAR call, rebuilt for each attempt.
struct Call<'a> {
    method: Method,
    path: String,
    json: Option<Bytes>,
    transaction_id: Option<&'a str>,
    timeout: Duration,
    retry: Retry,
    /// The most bytes of answer read; a longer one is refused, not retried.
    body_limit: usize,
}

impl Call<'_> {
    fn get(path: String, timeout: Duration) -> Self {
        Call {
            method: Method::GET,
            path,
            json: None,
            transaction_id: None,
            timeout,
            retry: Retry::Always,
            body_limit: MAX_ANSWER_BYTES,
        }
    }

    fn post(
        address: &str,
        path: String,
        body: &impl serde::Serialize,
        timeout: Duration,
    ) -> Result<Self, RearError> {
        let json = serde_json::to_vec(body).map_err(|e| RearError::Invalid {
            address: address.to_owned(),
            message: format!("the request body cannot be encoded: {e}"),
        })?;
        Ok(Call {
            method: Method::POST,
            path,
            json: Some(Bytes::from(json)),
            transaction_id: None,
            timeout,
            retry: Retry::ConnectOnly,
            body_limit: MAX_ANSWER_BYTES,
        })
    }

    fn request(&self, uri: Uri) -> Result<Request<RequestBody>, http::Error> {
        let mut builder = Request::builder().method(self.method.clone()).uri(uri);
        if let Some(id) = self.transaction_id {
            builder = builder.header(fluidos_api::rear::TRANSACTION_ID_HEADER, id);
        }
        let body = match &self.json {
            Some(json) => {
                builder = builder.header(http::header::CONTENT_TYPE, "application/json");
                Full::new(json.clone())
            }
            None => Full::new(Bytes::new()),
        };
        builder.body(body)
    }
}

/// A TCP connector with the configured connect timeout.
fn tcp_connector(config: &ClientConfig) -> HttpConnector {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(config.connect_timeout));
    http.set_nodelay(true);
    http
}

fn pool_builder() -> legacy::Builder {
    let mut builder = legacy::Client::builder(TokioExecutor::new());
    builder.pool_timer(TokioTimer::new());
    builder
}

impl RearClient {
    /// An anonymous client with these timeouts: pinned providers are called
    /// over TLS without a client certificate.
    pub fn new(config: ClientConfig) -> Result<Self, RearError> {
        Ok(Self::build(config, None))
    }

    /// A client that presents `key`'s certificate to pinned providers, which
    /// then know this node by its key's fingerprint.
    pub fn with_key(config: ClientConfig, key: Arc<NodeKey>) -> Result<Self, RearError> {
        Ok(Self::build(config, Some(key)))
    }

    fn build(config: ClientConfig, key: Option<Arc<NodeKey>>) -> Self {
        let plain = pool_builder().build(tcp_connector(&config));
        RearClient {
            shared: Arc::new(Shared {
                config,
                key,
                plain,
                pinned: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The timeouts and retries in use.
    pub fn config(&self) -> &ClientConfig {
        &self.shared.config
    }

    /// The fingerprint of the key presented to pinned providers (`None`:
    /// anonymous).
    pub fn key_fingerprint(&self) -> Option<Fingerprint> {
        self.shared.key.as_ref().map(|k| k.fingerprint())
    }

    /// The pool for `provider`: the plain one, or the one for its key (made
    /// on first use).
    fn pool(&self, provider: &ProviderAddress) -> Result<Pool, RearError> {
        let Some(expected) = provider.fingerprint else {
            return Ok(Pool::Plain(self.shared.plain.clone()));
        };
        let mut pools = self
            .shared
            .pinned
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(pool) = pools.get(&expected) {
            return Ok(Pool::Pinned(pool.clone()));
        }
        let tls = match &self.shared.key {
            Some(key) => tls::client_config(key, expected),
            None => tls::anonymous_client_config(expected),
        }
        .map_err(|e| RearError::Build(e.to_string()))?;
        let mut tcp = tcp_connector(&self.shared.config);
        // The TLS layer above it takes https:// URIs.
        tcp.enforce_http(false);
        // Not hyper-rustls's builder: it refuses a configuration that
        // already offers ALPN (ours offers `http/1.1`, as the gateway's does).
        let mut connector = HttpsConnector::from((tcp, tls));
        connector.enforce_https();
        let pool = pool_builder().build(connector);
        // Keys come and go with KnownClusters (anyone on the LAN can
        // announce new ones): the pools are bounded, the oldest idle
        // connections simply dropped with their pool.
        if pools.len() >= MAX_PINNED_POOLS {
            pools.clear();
        }
        pools.insert(expected, pool.clone());
        Ok(Pool::Pinned(pool))
    }

    /// Lists flavors: the typed route with the selector's filters, or
    /// `/api/v2/flavors` without a selector.
    pub async fn list_flavors(
        &self,
        provider: &ProviderAddress,
        selector: Option<&FlavorSelector>,
    ) -> Result<FlavorListing, RearError> {
        let path = match selector {
            None => "/api/v2/flavors".to_owned(),
            Some(sel) => {
                let route = sel.flavor_type().wire_name();
                format!("/api/v2/flavors/{route}?{}", encode_selector(sel))
            }
        };
        let mut call = Call::get(path, self.config().list_timeout);
        call.body_limit = MAX_LIST_BYTES;
        let body = self.send(provider, &call).await?;
        match body {
            None => Ok(FlavorListing::default()),
            Some(bytes) => {
                listing::decode(&bytes).map_err(|e| malformed(&provider.address, "flavor list", &e))
            }
        }
    }

    /// RESERVE: `POST /api/v2/reservations`.
    pub async fn reserve(
        &self,
        provider: &ProviderAddress,
        request: &ReserveRequest,
    ) -> Result<WireTransaction, RearError> {
        let address = provider.address.as_str();
        let call = Call::post(
            address,
            "/api/v2/reservations".to_owned(),
            request,
            self.config().reserve_timeout,
        )?;
        let body = self.send(provider, &call).await?;
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
        provider: &ProviderAddress,
        transaction_id: &str,
        request: &PurchaseRequest,
    ) -> Result<WireContract, RearError> {
        let id: String = form_urlencoded::byte_serialize(transaction_id.as_bytes()).collect();
        let path = format!("/api/v2/transactions/{id}/purchase");
        let call = Call::post(
            &provider.address,
            path,
            request,
            self.config().purchase_timeout,
        )?;
        let body = self.send(provider, &call).await?;
        decode_required(&provider.address, "contract", body)
    }

    /// How the buyer `buyer_id` reaches the service of contract `contract_id`:
    /// `GET /api/v2/contracts/{contractID}/service?buyerID=` with the
    /// contract's `transaction_id` in the `X-Fluidos-Transaction-Id` header
    /// (a FLUIDOS-rs provider only). 404 means unknown or not ours, 409 not
    /// ready yet, 410 that it will not come.
    pub async fn service_access(
        &self,
        provider: &ProviderAddress,
        contract_id: &str,
        buyer_id: &str,
        transaction_id: &str,
    ) -> Result<ServiceAccess, RearError> {
        let id: String = form_urlencoded::byte_serialize(contract_id.as_bytes()).collect();
        let buyer: String = form_urlencoded::byte_serialize(buyer_id.as_bytes()).collect();
        let path = format!("/api/v2/contracts/{id}/service?buyerID={buyer}");
        let mut call = Call::get(path, self.config().list_timeout);
        call.transaction_id = Some(transaction_id);
        let body = self.send(provider, &call).await?;
        decode_required(&provider.address, "service access", body)
    }

    /// Sends with retries; `Ok(None)` is a 204.
    async fn send(
        &self,
        provider: &ProviderAddress,
        call: &Call<'_>,
    ) -> Result<Option<Vec<u8>>, RearError> {
        let address = provider.address.as_str();
        let invalid = |message: String| RearError::Invalid {
            address: address.chars().take(MAX_ERROR_CHARS).collect(),
            message,
        };
        let scheme = if provider.is_pinned() {
            "https"
        } else {
            "http"
        };
        let uri: Uri = format!("{scheme}://{address}{}", call.path)
            .parse()
            .map_err(|e| invalid(format!("not a host:port address ({e})")))?;
        let pool = self.pool(provider)?;
        let config = self.config();
        let mut delay = config.backoff;
        let mut attempt = 0;
        loop {
            let request = call
                .request(uri.clone())
                .map_err(|e| invalid(format!("the request cannot be built: {e}")))?;
            let attempt_once = once(&pool, request, call.body_limit);
            let outcome = match tokio::time::timeout(call.timeout, attempt_once).await {
                Ok(outcome) => outcome,
                Err(_) => Err(Failure::Transport(
                    format!("no complete answer within {:?}", call.timeout),
                    true,
                )),
            };
            let retryable = match (&outcome, call.retry) {
                (Ok(_) | Err(Failure::WrongKey { .. }), _) => false,
                (Err(Failure::Connect(_)), _) => true,
                (Err(Failure::Transport(_, _)), Retry::Always) => true,
                (Err(Failure::Status(s, _, _)), Retry::Always) => *s >= 500,
                _ => false,
            };
            if !retryable || attempt >= config.retries {
                return outcome.map_err(|f| f.into_error(address));
            }
            attempt += 1;
            tracing::debug!(address, path = call.path, attempt, "retrying REAR request");
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
    }
}

/// One attempt: the status and the whole (capped) body.
async fn once(
    pool: &Pool,
    request: Request<RequestBody>,
    limit: usize,
) -> Result<Option<Vec<u8>>, Failure> {
    let response = pool.request(request).await.map_err(Failure::of_request)?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    let length = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if !status.is_success() && status != StatusCode::NO_CONTENT {
        // Only its first MAX_ERROR_CHARS are kept: a long error body is
        // not read, and the status still says what happened.
        let message = match read_capped(response.into_body(), length, MAX_ERROR_BODY_BYTES).await {
            Ok(bytes) => error_message(&bytes),
            Err(Failure::TooLarge(_)) => format!("(error body over {MAX_ERROR_BODY_BYTES} bytes)"),
            // The status is the answer; a body cut short does not make it
            // a transport failure (which a read would retry).
            Err(_) => "(error body unreadable)".to_owned(),
        };
        return Err(Failure::Status(status.as_u16(), message, retry_after));
    }
    let bytes = read_capped(response.into_body(), length, limit).await?;
    if status == StatusCode::NO_CONTENT {
        return Ok(None);
    }
    Ok(Some(bytes))
}

/// The largest REAR answer read but for listings ([`MAX_LIST_BYTES`]): a
/// transaction, a contract with its kubeconfig or a service's access are a
/// few KiB; a peer streaming more is cut off, not buffered, and not asked
/// again.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// The most of a provider's error text kept (it reaches statuses and logs).
const MAX_ERROR_CHARS: usize = 500;
/// The longest error body read (a JSON `error` may escape its text).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The body, read frame by frame and refused once over `limit` bytes.
async fn read_capped(
    mut body: Incoming,
    content_length: Option<u64>,
    limit: usize,
) -> Result<Vec<u8>, Failure> {
    if content_length.is_some_and(|n| n > limit as u64) {
        return Err(Failure::TooLarge(format!(
            "the answer is over {limit} bytes (Content-Length)"
        )));
    }
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Failure::Transport(error_chain(&e), false))?;
        let Ok(chunk) = frame.into_data() else {
            continue; // trailers
        };
        if out.len() + chunk.len() > limit {
            return Err(Failure::TooLarge(format!(
                "the answer is over {limit} bytes"
            )));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

enum Failure {
    Connect(String),
    Transport(String, bool),
    /// Longer than the call reads: the provider chose to send it, so asking
    /// again would only get it again.
    TooLarge(String),
    Status(u16, String, Option<Duration>),
    WrongKey {
        expected: Fingerprint,
        presented: Fingerprint,
    },
}

impl Failure {
    /// A failed request: the wrong key, no connection, or a broken one.
    fn of_request(e: legacy::Error) -> Failure {
        if let Some(k) = unexpected_key(&e) {
            return Failure::WrongKey {
                expected: k.expected,
                presented: k.got,
            };
        }
        let message = error_chain(&e);
        if e.is_connect() {
            Failure::Connect(message)
        } else {
            Failure::Transport(message, false)
        }
    }

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
            Failure::TooLarge(message) => RearError::Malformed {
                address,
                what: "answer",
                message,
            },
            Failure::Status(status, message, retry_after) => RearError::Rejected {
                address,
                status,
                message,
                retry_after,
            },
            Failure::WrongKey {
                expected,
                presented,
            } => RearError::WrongKey {
                address,
                expected,
                presented,
            },
        }
    }
}

/// The pinned-key refusal somewhere in `e`'s causes. rustls reports it as
/// `InvalidCertificate(Other(UnexpectedKey))`, which tokio-rustls and
/// hyper-rustls wrap in `io::Error`s; an `io::Error`'s `source()` skips
/// the error it wraps, so each is opened with `get_ref()`.
fn unexpected_key<'e>(e: &'e (dyn StdError + 'static)) -> Option<&'e UnexpectedKey> {
    let mut cause = Some(e);
    while let Some(err) = cause {
        if let Some(found) = err.downcast_ref::<UnexpectedKey>() {
            return Some(found);
        }
        if let Some(rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other))) =
            err.downcast_ref::<rustls::Error>()
        {
            let inner: &(dyn StdError + 'static) = &*other.0;
            if let Some(found) = unexpected_key(inner) {
                return Some(found);
            }
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            let inner: &(dyn StdError + 'static) = inner;
            if let Some(found) = unexpected_key(inner) {
                return Some(found);
            }
        }
        cause = err.source();
    }
    None
}

/// `e` and its causes, `: `-separated (hyper's own text is only "client
/// error (Connect)"), without control characters and bounded.
fn error_chain(e: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cause = Some(e);
    while let Some(err) = cause {
        let text = err.to_string();
        // An io::Error shows the error it wraps: do not repeat it.
        if !parts.last().is_some_and(|last| last.contains(&text)) {
            parts.push(text);
        }
        cause = err.source();
    }
    parts
        .join(": ")
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_ERROR_CHARS)
        .collect()
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
    serde_json::from_slice(bytes).map_err(|e| malformed(address, what, &e))
}

fn malformed(address: &str, what: &'static str, e: &serde_json::Error) -> RearError {
    RearError::Malformed {
        address: address.to_owned(),
        what,
        // serde quotes the offending value, which the provider chose: as
        // its error texts, bounded and without control characters.
        message: e
            .to_string()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(MAX_ERROR_CHARS)
            .collect(),
    }
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

    #[test]
    fn a_malformed_answer_is_described_within_bounds() {
        let body = serde_json::to_vec(&format!("{}\u{1b}[2J", "x".repeat(100_000))).unwrap();
        let Err(RearError::Malformed { message, .. }) = decode::<Vec<u8>>("p:1", "flavors", &body)
        else {
            panic!("a string is not a list");
        };
        assert!(
            message.chars().count() <= MAX_ERROR_CHARS,
            "{}",
            message.len()
        );
        assert!(!message.chars().any(char::is_control), "{message:?}");
    }
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

    /// A refused connection is unreachable, and says why (hyper's own text
    /// is only "client error (Connect)").
    #[tokio::test]
    async fn a_refused_connection_is_unreachable_and_says_why() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let client = RearClient::new(ClientConfig {
            retries: 0,
            ..ClientConfig::default()
        })
        .unwrap();
        let e = client
            .list_flavors(&ProviderAddress::plain(addr.clone()), None)
            .await
            .unwrap_err();
        assert!(e.is_unreachable(), "{e:?}");
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("provider {addr} is unreachable: ")),
            "{text}"
        );
        assert!(text.to_lowercase().contains("refused"), "{text}");
    }

    #[test]
    fn an_address_that_is_not_host_port_is_refused_before_any_call() {
        let client = RearClient::new(ClientConfig::default()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let e = runtime
            .block_on(client.list_flavors(&ProviderAddress::plain("bad host:1"), None))
            .unwrap_err();
        assert!(matches!(e, RearError::Invalid { .. }), "{e:?}");
    }

    /// A peer that streams an endless answer is cut off at the listing
    /// limit, and not asked again (it would only send it again).
    #[tokio::test]
    async fn an_endless_answer_is_cut_off_and_not_retried() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let asked = Arc::new(AtomicUsize::new(0));
        let counted = asked.clone();
        tokio::spawn(async move {
            // Every attempt, were there any, would get the same answer.
            while let Ok((mut s, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
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
        let e = client
            .list_flavors(&ProviderAddress::plain(addr), None)
            .await
            .unwrap_err();
        assert!(
            matches!(e, RearError::Malformed { what: "answer", .. }),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains(&format!("over {MAX_LIST_BYTES} bytes")),
            "{e}"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 1, "asked again");
    }

    /// A listing past the count is read up to it and says how many were left.
    #[tokio::test]
    async fn a_long_listing_is_read_up_to_the_count() {
        let flavor = |i: usize| {
            serde_json::json!({
                "flavorID": format!("f{i}"), "providerID": "p",
                "type": {"name": "Other", "data": {}}, "timestamp": "",
                "price": {"amount": "1", "currency": "EUR", "period": "hourly"},
                "owner": {"domain": "d", "nodeID": "p", "ip": "h:1"},
                "availability": true,
            })
        };
        let body: Vec<_> = (0..MAX_LISTED_FLAVORS + 7).map(flavor).collect();
        let app = axum::Router::new().route(
            "/api/v2/flavors",
            axum::routing::get(move || {
                let body = body.clone();
                async move { axum::Json(body) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = RearClient::new(ClientConfig::default()).unwrap();
        let listing = client
            .list_flavors(&ProviderAddress::plain(addr), None)
            .await
            .unwrap();
        assert_eq!(listing.flavors.len(), MAX_LISTED_FLAVORS);
        assert_eq!(listing.unread, 7);
        assert!(listing.unread_reason().is_some());
    }

    /// A provider's `Retry-After` reaches the caller, capped.
    #[tokio::test]
    async fn a_retry_after_is_kept_with_the_rejection() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await;
                let body = r#"{"error":"slow down"}"#;
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
        let client = RearClient::new(ClientConfig::default()).unwrap();
        let request: ReserveRequest = serde_json::from_value(serde_json::json!({
            "flavorID": "f", "buyerID": {"ID": "b", "IP": "h:1", "domain": "d"}
        }))
        .unwrap();
        let e = client
            .reserve(&ProviderAddress::plain(addr), &request)
            .await
            .unwrap_err();
        assert_eq!(e.status(), Some(429), "{e}");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(" 3600 "), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}
