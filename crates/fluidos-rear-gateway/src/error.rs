//! Errors: the crate's own [`Error`] and the HTTP error answer [`ApiError`].

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use fluidos_controller::api_error::ApiErrorKind;

use fluidos_peer_access::credentials::CredentialsError;

/// Why the gateway could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding or serving the HTTP listener failed.
    #[error("REAR gateway I/O on {context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The Flavor watch stopped before it ever synced.
    #[error("the Flavor watch cache never synced: {0}")]
    WatchNeverSynced(String),
}

/// JSON body of every error answer: `{"error": "...", "field": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong, for a human.
    pub error: String,
    /// The offending request field or query key, when one is to blame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// Longest `error` message sent, in bytes: a message that quotes what a
/// client sent (or what a dependency answered) must not grow the answer
/// without bound. Longer ones are cut at a character boundary and end in `…`.
pub const MAX_ERROR_MESSAGE: usize = 1024;

/// Longest `field` sent, in bytes (a JSON path a client chose).
pub const MAX_ERROR_FIELD: usize = 256;

/// Seconds a client is asked to wait before retrying a 503 caused by the
/// API server (conflict, throttling, outage): the consumer retries purchases
/// every second, so one second keeps sales fast once the API server is back.
pub const KUBE_RETRY_AFTER_SECS: u64 = 1;

/// An HTTP error answer with a JSON [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// Status code.
    pub status: StatusCode,
    /// Body.
    pub body: ErrorBody,
    /// Seconds for the `Retry-After` header (429 and 503 answers).
    pub retry_after: Option<u64>,
}

/// `s` cut to at most `max` bytes at a character boundary, marked with `…` (pure).
pub(crate) fn truncate_message(mut s: String, max: usize) -> String {
    const MARK: &str = "…";
    if s.len() <= max {
        return s;
    }
    let mut cut = max.saturating_sub(MARK.len());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push_str(MARK);
    s
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                error: truncate_message(message.into(), MAX_ERROR_MESSAGE),
                field: None,
            },
            retry_after: None,
        }
    }

    /// Names the field at fault.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        let f = truncate_message(field.into(), MAX_ERROR_FIELD);
        self.body.field = (!f.is_empty()).then_some(f);
        self
    }

    /// Sets the `Retry-After` header, in seconds.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// 429: this peer sent too many requests; retry after `seconds`.
    pub fn too_many_requests(message: impl Into<String>, seconds: u64) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, message).retry_after(seconds)
    }

    /// 400 Bad Request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404 Not Found.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 409 Conflict.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    /// 500: something on our side, never the client's fault.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// 503: transient; the client may retry (after a second, says `Retry-After`).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message).retry_after(KUBE_RETRY_AFTER_SECS)
    }

    /// A failed Kubernetes call, logged with its context and full error.
    ///
    /// The answer never carries the API server's text (it names objects,
    /// namespaces and service accounts of this cluster): only the step and
    /// the kind of failure. What may pass by itself (409 Conflict, 429, 5xx,
    /// no answer at all) is a 503 with `Retry-After`, so buyers retry (a
    /// purchase is idempotent); anything else is a 500.
    pub fn kube(context: &str, e: &kube::Error) -> Self {
        let kind = fluidos_controller::api_error::classify(e);
        tracing::warn!(api_error = %kind, error = %e, "{context}");
        Self::from_kube_kind(context, kind)
    }

    /// The answer to a Kubernetes failure of `kind` during `context` (pure).
    pub(crate) fn from_kube_kind(context: &str, kind: ApiErrorKind) -> Self {
        match kind {
            ApiErrorKind::Conflict | ApiErrorKind::AlreadyExists => Self::unavailable(format!(
                "{context}: a concurrent change got there first; retry"
            )),
            ApiErrorKind::Throttled => Self::unavailable(format!(
                "{context}: the provider's Kubernetes API server is throttling requests; retry"
            )),
            ApiErrorKind::Unavailable => Self::unavailable(format!(
                "{context}: the provider's Kubernetes API server is unavailable; retry"
            )),
            other => Self::internal(format!(
                "{context}: the provider's Kubernetes API server refused the request ({other})"
            )),
        }
    }
}

impl From<fluidos_api::DecodeError> for ApiError {
    fn from(e: fluidos_api::DecodeError) -> Self {
        ApiError::bad_request(e.message).field(e.field)
    }
}

impl From<CredentialsError> for ApiError {
    fn from(e: CredentialsError) -> Self {
        if let CredentialsError::TenantTaken { .. } = e {
            return ApiError::conflict(e.to_string());
        }
        if let CredentialsError::GoPeeringGuardNotReady | CredentialsError::AccountChanged { .. } =
            e
        {
            return ApiError::unavailable(e.to_string());
        }
        if let CredentialsError::OwnerMismatch { .. } = e {
            return ApiError::new(axum::http::StatusCode::FORBIDDEN, e.to_string());
        }
        tracing::warn!(error = %e, "peering credentials");
        match &e {
            // The API server's text stays in the log (see `ApiError::kube`).
            CredentialsError::Kube { step, source } => Self::from_kube_kind(
                &format!("cannot issue peering credentials ({step})"),
                fluidos_controller::api_error::classify(source),
            ),
            _ => ApiError::internal(format!("cannot issue peering credentials: {e}")),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let mut response = (status, axum::Json(self.body)).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(secs),
            );
        }
        if status == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            // The rest of the body was never read, so the connection cannot
            // carry another request; saying so keeps clients from reusing it
            // (and failing their next request on it).
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn long_messages_are_cut_at_a_char_boundary() {
        let e = ApiError::bad_request("é".repeat(5000)).field("x".repeat(1000));
        assert!(
            e.body.error.len() <= MAX_ERROR_MESSAGE,
            "{}",
            e.body.error.len()
        );
        assert!(e.body.error.ends_with('…'));
        assert!(e.body.field.as_ref().unwrap().len() <= MAX_ERROR_FIELD);
        assert_eq!(ApiError::bad_request("short").body.error, "short");
        assert_eq!(truncate_message("abcdef".into(), 6), "abcdef");
    }

    #[test]
    fn retryable_api_server_failures_are_503_with_retry_after() {
        for kind in [
            ApiErrorKind::Conflict,
            ApiErrorKind::AlreadyExists,
            ApiErrorKind::Throttled,
            ApiErrorKind::Unavailable,
        ] {
            let e = ApiError::from_kube_kind("creating the Contract", kind);
            assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE, "{kind}");
            assert_eq!(e.retry_after, Some(KUBE_RETRY_AFTER_SECS));
            assert!(e.body.error.starts_with("creating the Contract"), "{e:?}");
        }
        for kind in [
            ApiErrorKind::Invalid,
            ApiErrorKind::Forbidden,
            ApiErrorKind::Other,
        ] {
            let e = ApiError::from_kube_kind("creating the Contract", kind);
            assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR, "{kind}");
            assert_eq!(e.retry_after, None);
        }
    }

    /// The API server's own words (object names, RBAC subjects) never reach the client.
    #[test]
    fn kube_errors_do_not_leak_the_api_server_text() {
        for code in [409, 429, 500, 503, 403, 422] {
            let e = kube::Error::Api(
                kube::core::Status::failure(
                    "secrets \"peer-token\" is forbidden: User system:serviceaccount:fluidos:x",
                    "Forbidden",
                )
                .with_code(code)
                .boxed(),
            );
            let answer = ApiError::kube("creating the Contract", &e);
            assert!(
                !answer.body.error.contains("peer-token"),
                "{code}: {answer:?}"
            );
            let response = answer.clone().into_response();
            assert_eq!(
                response
                    .headers()
                    .contains_key(axum::http::header::RETRY_AFTER),
                matches!(code, 409 | 429 | 500 | 503),
                "{code}"
            );
        }
    }
}
