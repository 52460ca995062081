//! Errors: the crate's own [`Error`] and the HTTP error answer [`ApiError`].

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::credentials::CredentialsError;

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

/// An HTTP error answer with a JSON [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// Status code.
    pub status: StatusCode,
    /// Body.
    pub body: ErrorBody,
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                error: message.into(),
                field: None,
            },
        }
    }

    /// Names the field at fault.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        let f = field.into();
        self.body.field = (!f.is_empty()).then_some(f);
        self
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

    /// 503: transient; the client may retry.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// A failed Kubernetes call, logged with its context.
    pub fn kube(context: &str, e: &kube::Error) -> Self {
        tracing::warn!(
            api_error = %fluidos_controller::api_error::classify(e),
            error = %e,
            "{context}"
        );
        Self::internal(format!("{context}: {e}"))
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
        tracing::warn!(error = %e, "peering credentials");
        ApiError::internal(format!("cannot issue peering credentials: {e}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let mut response = (status, axum::Json(self.body)).into_response();
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
