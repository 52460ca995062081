//! The axum routes and their OpenAPI description.

use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{
    ConnectInfo, DefaultBodyLimit, MatchedPath, Path, RawQuery, Request, State as AxState,
};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use fluidos_api::FlavorTypeIdentifier;
use utoipa::OpenApi;

use crate::State;
use crate::buyer::{self, Caller};
use crate::error::{ApiError, ErrorBody};
use crate::openapi::{
    ContractDoc, FlavorDoc, PurchaseRequestDoc, ReserveRequestDoc, ServiceAccessDoc, TransactionDoc,
};
use crate::query;

/// The OpenAPI document of the REAR routes.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "FLUIDOS REAR gateway",
        description = "REAR v2 as served by the FLUIDOS node (wire-compatible with the Go node)."
    ),
    paths(
        list_flavors,
        list_k8slice,
        list_service,
        reserve,
        purchase,
        service_access
    ),
    components(schemas(ErrorBody, ServiceAccessDoc))
)]
pub struct ApiDoc;

fn json_bytes(status: StatusCode, body: Bytes) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn wire_response(json: Result<String, serde_json::Error>) -> Result<Response, ApiError> {
    json.map(|s| json_bytes(StatusCode::OK, Bytes::from(s)))
        .map_err(|e| ApiError::internal(format!("serializing the answer: {e}")))
}

/// The body, or the matching 4xx (413 when over the limit) as JSON.
fn body_or_error(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|r| ApiError::new(r.status(), r.body_text()))
}

/// What the connection proved about the sender; a request that came in
/// without the server loop (the router called in-process) is plain HTTP
/// from nowhere, which only `PlainHttpSales::All` lets buy.
fn caller_of(caller: Option<Extension<Caller>>) -> Caller {
    caller.map_or(Caller::Plain(None), |Extension(c)| c)
}

/// Every available flavor.
#[utoipa::path(get, path = "/api/v2/flavors",
    responses(
        (status = 200, description = "Flavors for sale (K8Slice amounts are what remains)", body = [FlavorDoc]),
        (status = 204, description = "No flavor is for sale (as upstream)"),
        (status = 429, description = "Over the per-peer request rate", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "Watch cache not synced yet", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
    ))]
#[tracing::instrument(skip_all)]
async fn list_flavors(AxState(st): AxState<Arc<State>>) -> Response {
    match st.catalog.list_all() {
        Some(body) => json_bytes(StatusCode::OK, body),
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

fn list_typed(st: &State, raw: Option<String>, t: FlavorTypeIdentifier) -> Response {
    match query::parse(raw.as_deref().unwrap_or_default(), t) {
        Ok(sel) => json_bytes(StatusCode::OK, st.catalog.list_matching(&sel)),
        Err(e) => ApiError::bad_request(format!(
            "Error building the selector from the URL query parameters: {}",
            e.message
        ))
        .field(e.key)
        .into_response(),
    }
}

/// K8Slice flavors passing the query filters.
#[utoipa::path(get, path = "/api/v2/flavors/k8slice",
    params(("filter[...]" = Option<String>, Query, description = "filter[architecture|cpu|memory|pods|gpu|storage][match]=v, filter[<quantity>][range][min|max]=q")),
    responses(
        (status = 200, description = "Matching flavors, maybe []", body = [FlavorDoc]),
        (status = 400, description = "Bad filter key or value", body = ErrorBody),
        (status = 429, description = "Over the per-peer request rate", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "Starting, or the provider's Kubernetes API server is busy or unavailable (conflict, throttling, 5xx, timeout); retry", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
    ))]
#[tracing::instrument(skip_all, fields(query = q.as_deref().unwrap_or_default()))]
async fn list_k8slice(AxState(st): AxState<Arc<State>>, RawQuery(q): RawQuery) -> Response {
    list_typed(&st, q, FlavorTypeIdentifier::K8Slice)
}

/// Service flavors passing the query filters.
#[utoipa::path(get, path = "/api/v2/flavors/service",
    params(("filter[...]" = Option<String>, Query, description = "filter[category|tags][match]=v")),
    responses(
        (status = 200, description = "Matching flavors, maybe []", body = [FlavorDoc]),
        (status = 400, description = "Bad filter key", body = ErrorBody),
        (status = 429, description = "Over the per-peer request rate", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "Starting, or the provider's Kubernetes API server is busy or unavailable (conflict, throttling, 5xx, timeout); retry", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
    ))]
#[tracing::instrument(skip_all, fields(query = q.as_deref().unwrap_or_default()))]
async fn list_service(AxState(st): AxState<Arc<State>>, RawQuery(q): RawQuery) -> Response {
    list_typed(&st, q, FlavorTypeIdentifier::Service)
}

/// Reserve (part of) a flavor.
#[utoipa::path(post, path = "/api/v2/reservations",
    request_body = ReserveRequestDoc,
    responses(
        (status = 200, description = "The transaction (the same one for a repeated request of the buyer)", body = TransactionDoc),
        (status = 400, description = "Malformed body, bad configuration, unsupported type, missing liqoID, a field over its size or format (named in `field`), a flavorID that is not a Kubernetes name, a zero-size partition", body = ErrorBody),
        (status = 403, description = "Plain HTTP while plain-HTTP sales are off for the caller's address (the message says how to enable them), TLS without a client certificate, a repeated reserve of a hold made with another key, or a K8Slice buyer `--rear-k8slice-buyers` does not admit", body = ErrorBody),
        (status = 404, description = "Unknown flavor", body = ErrorBody),
        (status = 408, description = "The body did not arrive in time", body = ErrorBody),
        (status = 409, description = "Not available, or not enough left, or the buyer already holds the flavor with another configuration (field configuration)", body = ErrorBody),
        (status = 413, description = "Body over the limit", body = ErrorBody),
        (status = 429, description = "Over the per-peer request rate", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "Starting, or the provider's Kubernetes API server is busy or unavailable (conflict, throttling, 5xx, timeout); retry", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
    ))]
// The flavor is recorded by `State::reserve` once the body is decoded. No
// transaction ID in spans: it is what buys the hold and reads a service's
// credentials, and span fields go out with every event logged inside.
#[tracing::instrument(skip_all, fields(flavor_id = tracing::field::Empty))]
async fn reserve(
    AxState(st): AxState<Arc<State>>,
    caller: Option<Extension<Caller>>,
    peer: Option<Extension<ConnectInfo<std::net::SocketAddr>>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let owner = buyer::owner_of(caller_of(caller), &st.cfg.plain_http_sales)?;
    let body = body_or_error(body)?;
    let source = peer.map(|Extension(ConnectInfo(a))| a.ip());
    let tx = st.reserve(&body, owner, source).await?;
    wire_response(serde_json::to_string(&tx))
}

/// Buy a reserved transaction.
#[utoipa::path(post, path = "/api/v2/transactions/{transactionID}/purchase",
    params(("transactionID" = String, Path, description = "From the RESERVE answer")),
    request_body = PurchaseRequestDoc,
    responses(
        (status = 200, description = "The contract (the same one when bought again)", body = ContractDoc),
        (status = 400, description = "Malformed body; Service without liqoCredentials; a field over its size or format (named in `field`)", body = ErrorBody),
        (status = 403, description = "The transaction was reserved with another key (or over plain HTTP, or this is plain HTTP and it was reserved over TLS or from another address); or plain-HTTP sales are off, or TLS without a client certificate", body = ErrorBody),
        (status = 404, description = "Unknown transaction", body = ErrorBody),
        (status = 408, description = "The transaction expired (upstream's code), or the body did not arrive in time", body = ErrorBody),
        (status = 413, description = "Body over the limit", body = ErrorBody),
        (status = 429, description = "Over the per-peer request rate", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "Starting, or the provider's Kubernetes API server is busy or unavailable (conflict, throttling, 5xx, timeout); retry", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
    ))]
// No transaction ID in the span (see `reserve`).
#[tracing::instrument(skip_all)]
async fn purchase(
    AxState(st): AxState<Arc<State>>,
    caller: Option<Extension<Caller>>,
    peer: Option<Extension<ConnectInfo<std::net::SocketAddr>>>,
    Path(tx_id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let caller = caller_of(caller);
    let owner = buyer::owner_of(caller, &st.cfg.plain_http_sales)?;
    let go_consumer = st.cfg.go_peering_grant.covers(caller);
    let body = body_or_error(body)?;
    let source = peer.map(|Extension(ConnectInfo(a))| a.ip());
    let contract = st
        .purchase(&tx_id, &body, (owner, source), go_consumer)
        .await?;
    wire_response(serde_json::to_string(&contract))
}

/// Query of the service route.
#[derive(serde::Deserialize)]
struct BuyerQuery {
    #[serde(rename = "buyerID", default)]
    buyer_id: String,
}

/// How the buyer of a Service contract reaches its service (not in the Go node's REAR).
///
/// Answered only to the contract's buyer, once the provider's Allocation is
/// Active: the node ID given as `buyerID` must be the contract's buyer, the
/// contract's `transactionID` must come in the `X-Fluidos-Transaction-Id`
/// header (compared in constant time), and the caller must hold the key
/// the contract was bought with (over TLS; a plain-HTTP sale only over
/// plain HTTP). An unknown contract, another buyer and a wrong or missing
/// transaction ID get the same 404, so the route is no oracle of contract
/// names; only a caller that knew both and has the wrong key gets 403.
#[utoipa::path(get, path = "/api/v2/contracts/{contractID}/service",
    params(
        ("contractID" = String, Path, description = "The Contract's name (the wire contractID)"),
        ("buyerID" = String, Query, description = "The caller's node ID; must be the contract's buyer"),
        ("X-Fluidos-Transaction-Id" = String, Header, description = "The contract's transactionID (spec.transactionID), proving the caller bought it"),
    ),
    responses(
        (status = 200, description = "Endpoints reachable from outside the provider's cluster, and the credentials", body = ServiceAccessDoc),
        (status = 400, description = "No buyerID, or not a Service contract", body = ErrorBody),
        (status = 403, description = "buyerID and the transaction ID are right but the contract was bought with another key (or over the other transport); or plain-HTTP sales are off, or TLS without a client certificate", body = ErrorBody),
        (status = 404, description = "Unknown contract, not bought by buyerID, or wrong or missing X-Fluidos-Transaction-Id (one answer for all)", body = ErrorBody),
        (status = 409, description = "Not ready yet (being created, waiting for its workloads or its external address, degraded); ask again", body = ErrorBody),
        (status = 410, description = "The service failed to be created, or was removed; it will not come", body = ErrorBody),
        (status = 429, description = "Over the per-peer request rate", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "Starting, or the provider's Kubernetes API server is busy or unavailable (conflict, throttling, 5xx, timeout); retry", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
    ))]
#[tracing::instrument(skip_all, fields(contract = %id, buyer = %q.buyer_id))]
async fn service_access(
    AxState(st): AxState<Arc<State>>,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
    axum::extract::Query(q): axum::extract::Query<BuyerQuery>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let tx = headers
        .get(fluidos_api::rear::TRANSACTION_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let owner = buyer::owner_of(caller_of(caller), &st.cfg.plain_http_sales)?;
    let access = st.service_access(&id, &q.buyer_id, tx, owner).await?;
    wire_response(serde_json::to_string(&access))
}

#[tracing::instrument]
async fn openapi_json() -> Response {
    match ApiDoc::openapi().to_json() {
        Ok(s) => json_bytes(StatusCode::OK, Bytes::from(s)),
        Err(e) => ApiError::internal(e.to_string()).into_response(),
    }
}

async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route for {} {}",
        req.method(),
        req.uri().path()
    ))
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "method {} not allowed on {}",
            req.method(),
            req.uri().path()
        ),
    )
}

/// 503 until the watch cache has synced, as upstream answers 503 until it is ready.
async fn readiness_gate(
    AxState(st): AxState<Arc<State>>,
    req: Request<Body>,
    next: Next,
) -> Response {
    if *st.ready.borrow() {
        next.run(req).await
    } else {
        ApiError::unavailable("the REAR gateway is starting (flavor cache not synced)")
            .into_response()
    }
}

/// 429 for a peer over its request rate. Requests without a peer address
/// (the router called in-process) are not limited.
async fn limit_rate(AxState(st): AxState<Arc<State>>, req: Request<Body>, next: Next) -> Response {
    if let (Some(limiter), Some(ConnectInfo(peer))) = (
        &st.limiter,
        req.extensions().get::<ConnectInfo<std::net::SocketAddr>>(),
    ) && let Err(e) = limiter.check(peer.ip())
    {
        return e.into_response();
    }
    next.run(req).await
}

/// 503 with `Retry-After` for a request still unanswered after
/// `request_timeout` (a slow API server): the buyer retries, and every step
/// of a sale is idempotent, so the abandoned one does no harm.
async fn deadline(AxState(st): AxState<Arc<State>>, req: Request<Body>, next: Next) -> Response {
    let limit = st.cfg.request_timeout;
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => ApiError::unavailable(format!(
            "the request was not answered within {} s; retry",
            limit.as_secs_f64()
        ))
        .into_response(),
    }
}

/// Whether reading a body failed on the size limit (413) rather than the connection.
fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = err.source();
    }
    false
}

/// Largest body of a request that is not a POST (REAR's GETs carry none).
const MAX_OTHER_BODY: usize = 1024;

/// Whether `path` is a route that sells (RESERVE, PURCHASE), whose caller
/// must be allowed to buy before its body is read.
fn is_sale_route(path: &str) -> bool {
    path == "/api/v2/reservations"
        || path
            .strip_prefix("/api/v2/transactions/")
            .is_some_and(|rest| rest.ends_with("/purchase"))
}

/// Why a body was not read.
enum Unread {
    /// No permit: the peer reads its share of bodies already.
    Busy(ApiError),
    /// The connection or the size limit.
    Body(axum::Error),
}

/// An answer sent without reading the body: the connection cannot carry
/// another request, since the body may still be coming.
fn closing(e: ApiError) -> Response {
    let mut response = e.into_response();
    response.headers_mut().insert(
        header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

/// Reads the whole body before routing, within `body_read_timeout` and
/// `body_limit`: a client dripping its body slowly gets 408 and loses the
/// connection; one over the limit gets 413. Only POSTs may carry more than
/// [`MAX_OTHER_BODY`]. A caller that may not buy is refused (403) on a sale
/// route before anything of its body is read, and a POST body is read only
/// with one of the permits of [`crate::body_permits`] (429 when the peer's
/// address reads its share already; the others wait, within the same time
/// limit).
async fn read_body(AxState(st): AxState<Arc<State>>, req: Request<Body>, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let limit = st.cfg.body_read_timeout;
    let post = parts.method == axum::http::Method::POST;
    if post && is_sale_route(parts.uri.path()) {
        let caller = parts
            .extensions
            .get::<Caller>()
            .cloned()
            .unwrap_or(Caller::Plain(None));
        if let Err(e) = buyer::owner_of(caller, &st.cfg.plain_http_sales) {
            return closing(e);
        }
    }
    let peer = parts
        .extensions
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|ConnectInfo(a)| a.ip());
    let body_limit = if post {
        st.cfg.body_limit
    } else {
        MAX_OTHER_BODY.min(st.cfg.body_limit)
    };
    let read = async {
        // Only a POST's body (up to `body_limit`) takes a permit; the
        // 1 KiB of another request never does, so slow POST bodies cannot
        // hold up listings.
        let _permit = if post {
            Some(st.body_permits.acquire(peer).await.map_err(Unread::Busy)?)
        } else {
            None
        };
        axum::body::to_bytes(body, body_limit)
            .await
            .map_err(Unread::Body)
    };
    match tokio::time::timeout(limit, read).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(Unread::Busy(e))) => closing(e),
        Ok(Err(Unread::Body(e))) if is_length_limit(&e) => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is over {body_limit} bytes"),
        )
        .into_response(),
        Ok(Err(Unread::Body(e))) => {
            ApiError::bad_request(format!("reading the request body: {e}")).into_response()
        }
        // The rest of the body is still coming.
        Err(_) => closing(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} s",
                limit.as_secs_f64()
            ),
        )),
    }
}

/// Route label of requests no route matched (one label, whatever the path).
const UNMATCHED_ROUTE: &str = "unmatched";

/// The method as a metric label: the standard ones, anything else as `OTHER` (pure).
fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// Counts and times every request by route template (never the raw path,
/// which would give a series per transaction id), method and status.
async fn record_request(
    AxState(st): AxState<Arc<State>>,
    matched: Option<MatchedPath>,
    req: Request<Body>,
    next: Next,
) -> Response {
    let method = method_label(req.method());
    let started = std::time::Instant::now();
    let response = next.run(req).await;
    let route = matched
        .as_ref()
        .map_or(UNMATCHED_ROUTE, MatchedPath::as_str);
    st.cfg
        .metrics
        .rear
        .observe(route, method, response.status().as_u16(), started.elapsed());
    response
}

/// All REAR routes over `state`.
pub(crate) fn router(state: Arc<State>) -> Router {
    let limit = state.cfg.body_limit;
    Router::new()
        .route("/api/v2/flavors", get(list_flavors))
        .route("/api/v2/flavors/k8slice", get(list_k8slice))
        .route("/api/v2/flavors/service", get(list_service))
        // `/api/v2/flavors/vm` and `/sensors` are not registered, as upstream: 404.
        .route("/api/v2/reservations", post(reserve))
        .route(
            "/api/v2/transactions/{transactionID}/purchase",
            post(purchase),
        )
        .route(
            "/api/v2/contracts/{contractID}/service",
            get(service_access),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            readiness_gate,
        ))
        .route("/api/v2/openapi.json", get(openapi_json))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), read_body))
        .layer(middleware::from_fn_with_state(state.clone(), deadline))
        // Outside the deadline and the body: a limited peer costs no read.
        .layer(middleware::from_fn_with_state(state.clone(), limit_rate))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            record_request,
        ))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeSet;

    use super::*;

    fn schema_keys(doc: &serde_json::Value, name: &str) -> BTreeSet<String> {
        doc["components"]["schemas"][name]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("no schema {name}"))
            .keys()
            .cloned()
            .collect()
    }

    fn keys(v: &serde_json::Value) -> BTreeSet<String> {
        v.as_object().unwrap().keys().cloned().collect()
    }

    /// Every REAR route documents the limit answers: 429 and 503, both with `Retry-After`.
    #[test]
    fn every_route_documents_429_and_503_with_retry_after() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        assert!(paths.len() >= 6);
        for (path, item) in paths {
            for (method, op) in item.as_object().unwrap() {
                for status in ["429", "503"] {
                    let r = &op["responses"][status];
                    assert!(
                        r["headers"]["Retry-After"].is_object(),
                        "{method} {path}: {status} without Retry-After: {r}"
                    );
                }
            }
        }
    }

    /// The OpenAPI mirrors carry exactly the keys the real wire types write.
    #[test]
    fn openapi_schemas_match_the_wire_types() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let identity = serde_json::json!({"ID": "b", "IP": "i", "domain": "d",
            "additionalInformation": {"liqoID": "l", "kubeconfig": "k"}});
        let config = serde_json::json!({"type": "k8slice", "data": {"cpu": "1", "memory": "1Gi", "pods": "1"}});
        let flavor = serde_json::json!({"flavorID": "f", "providerID": "p",
            "type": {"name": "service", "data": {"name": "n", "description": "d", "category": "c",
                "tags": [], "hostingPolicies": ["Provider"], "configurationTemplate": {"type": "object"}}},
            "networkPropertyType": "n", "timestamp": "t", "location": {"city": "Turin"},
            "price": {"amount": "", "currency": "", "period": ""}, "owner": identity, "availability": true});
        let wf: fluidos_api::rear::WireFlavor = serde_json::from_value(flavor.clone()).unwrap();
        assert_eq!(
            schema_keys(&doc, "Flavor"),
            keys(&serde_json::to_value(&wf).unwrap())
        );
        let tx: fluidos_api::rear::WireTransaction = serde_json::from_value(serde_json::json!({
            "transactionID": "t", "flavorID": "f", "configuration": config, "buyer": identity,
            "clusterID": "c", "expirationTime": "e"}))
        .unwrap();
        assert_eq!(
            schema_keys(&doc, "Transaction"),
            keys(&serde_json::to_value(&tx).unwrap())
        );
        let rr: fluidos_api::rear::ReserveRequest = serde_json::from_value(serde_json::json!({
            "flavorID": "f", "buyerID": identity, "configuration": config}))
        .unwrap();
        assert_eq!(
            schema_keys(&doc, "ReserveRequest"),
            keys(&serde_json::to_value(&rr).unwrap())
        );
        let pr: fluidos_api::rear::PurchaseRequest = serde_json::from_value(serde_json::json!({
            "liqoCredentials": {"clusterID": "c", "kubeconfig": "k"},
            "ingressTelemetryEndpoint": {"endpoint": "e", "intents": ["i"]}}))
        .unwrap();
        assert_eq!(
            schema_keys(&doc, "PurchaseRequest"),
            keys(&serde_json::to_value(&pr).unwrap())
        );
        let ct: fluidos_api::rear::WireContract = serde_json::from_value(serde_json::json!({
            "contractID": "c", "transactionID": "t", "flavor": flavor, "buyerID": identity,
            "buyerClusterID": "b", "seller": identity,
            "peeringTargetCredentials": {"clusterID": "c", "kubeconfig": "k"},
            "expirationTime": "e", "extraInformation": {"k": "v"}, "configuration": config,
            "networkAuthorizations": "n", "ingressTelemetryEndpoint": {"endpoint": "e", "intents": null}}))
            .unwrap();
        assert_eq!(
            schema_keys(&doc, "Contract"),
            keys(&serde_json::to_value(&ct).unwrap())
        );
        let sa = fluidos_api::rear::ServiceAccess {
            contract_id: "c".into(),
            endpoints: "h:1".into(),
            cluster_endpoints: "s:1".into(),
            credentials: [("username".to_owned(), "u".to_owned())].into(),
        };
        assert_eq!(
            schema_keys(&doc, "ServiceAccess"),
            keys(&serde_json::to_value(&sa).unwrap())
        );
        let route = &doc["paths"]["/api/v2/contracts/{contractID}/service"]["get"];
        assert!(
            route["responses"]["404"]["description"]
                .as_str()
                .is_some_and(|d| d.contains("one answer for all")),
            "one 404 for unknown and not bought (no oracle of contract names)"
        );
        assert!(
            route["responses"]["403"]["description"]
                .as_str()
                .is_some_and(|d| d.contains("another key")),
            "403 only once the caller proved buyer and transaction"
        );
        assert!(
            route["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == fluidos_api::rear::TRANSACTION_ID_HEADER
                    && p["in"] == "header"
                    && p["required"] == true),
            "the transaction ID header is documented"
        );
        assert_eq!(
            schema_keys(&doc, "NodeIdentity"),
            keys(&serde_json::to_value(&wf.owner).unwrap())
        );
    }
}
