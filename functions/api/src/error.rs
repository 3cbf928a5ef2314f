//! Every error answers `{"error": "<message>"}` as JSON; 503 answers carry `Retry-After`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use stack_core::{ErrorClass, StackError, error_chain};

use crate::openapi::ErrorBody;

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

/// The HTTP status of each class of failure.
pub fn status_of(class: ErrorClass) -> StatusCode {
    match class {
        ErrorClass::Invalid => StatusCode::BAD_REQUEST,
        ErrorClass::NotFound => StatusCode::NOT_FOUND,
        ErrorClass::Conflict => StatusCode::CONFLICT,
        ErrorClass::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorClass::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<StackError> for ApiError {
    fn from(err: StackError) -> Self {
        let status = status_of(err.class());
        match (&err, status) {
            (_, StatusCode::INTERNAL_SERVER_ERROR) => {
                tracing::error!(error = %error_chain(&err), "request failed");
                // Internal details stay in the log.
                Self::new(status, "internal error")
            }
            (StackError::Store(_) | StackError::Cluster(_), _) => {
                tracing::warn!(error = %error_chain(&err), "dependency unavailable");
                Self::new(status, format!("cluster busy: {err}, retry"))
            }
            _ => Self::new(status, err.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(ErrorBody { error: self.message })).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_has_the_status_clients_expect() {
        let table = [
            (StackError::Invalid("x".into()), 400),
            (StackError::NotFound, 404),
            (StackError::JobNotFound, 404),
            (StackError::Conflict("x".into()), 409),
            (StackError::NoNodePort, 503),
            (StackError::Saturated("x".into()), 503),
            (StackError::Unavailable("x".into()), 503),
        ];
        for (err, status) in table {
            let shown = err.to_string();
            let api = ApiError::from(err);
            assert_eq!(api.status.as_u16(), status, "{shown}");
            assert_eq!(api.message, shown);
        }
    }

    #[test]
    fn a_struggling_dependency_is_a_503_with_retry_after() {
        let timed_out = kube::Error::Service(Box::new(std::io::Error::from(std::io::ErrorKind::TimedOut)));
        let err = StackError::from(stack_core::ClusterError::Unavailable {
            operation: "delete service",
            source: timed_out,
        });
        let response = ApiError::from(err).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], RETRY_AFTER_SECS);
    }

    #[test]
    fn our_own_defects_are_500_without_details() {
        let err = StackError::from(stack_core::ClusterError::Incomplete("created pod has no uid"));
        let api = ApiError::from(err);
        assert_eq!(api.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(api.message, "internal error");
    }
}
