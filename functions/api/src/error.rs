//! Every error answers `{"error": "<message>"}` as JSON; 503 answers carry `Retry-After`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use stack_core::stacks::StackError;

/// Seconds a client is asked to wait after a 503.
const RETRY_AFTER_SECS: &str = "5";

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn invalid_json() -> Self {
        Self::bad_request("invalid json body")
    }

    pub fn stack_not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "stack not found")
    }
}

impl From<StackError> for ApiError {
    fn from(err: StackError) -> Self {
        let status = match &err {
            StackError::Invalid(_) => StatusCode::BAD_REQUEST,
            StackError::NotFound | StackError::JobNotFound => StatusCode::NOT_FOUND,
            StackError::Conflict(_) => StatusCode::CONFLICT,
            StackError::NoNodePort | StackError::Saturated(_) | StackError::Unavailable(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            StackError::Store(_) | StackError::Cluster(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
            tracing::error!(error = %err, "request failed");
            // Internal details stay in the log.
            return Self::new(status, "internal error");
        }
        Self::new(status, err.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(json!({ "error": self.message }))).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
        }
        response
    }
}
