//! The one router served both in Lambda and by the local HTTP server.

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::error::ApiError;
use crate::routes::{batch, dashboard, health, history, identity, preflight, prepull, stacks};
use crate::state::AppState;
use crate::{auth, deadline, request_log};

/// Served without the key (the page asks for it; the document describes it). Every data
/// route needs it. Also exempted from API Gateway's key in template.yaml.
pub fn is_public(path: &str) -> bool {
    matches!(
        path,
        "/openapi.json" | "/dashboard" | "/dashboard/app.js" | "/dashboard/app.css"
    )
}

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/stacks", get(stacks::list).post(stacks::create))
        .route("/stacks/batch-delete", post(batch::start))
        .route("/stacks/batch-delete/{job_id}", get(batch::get))
        .route("/stacks/{stack_id}", get(stacks::get).delete(stacks::delete))
        .route("/stacks/{stack_id}/status", get(stacks::status))
        .route("/stacks/{stack_id}/renew", post(stacks::renew))
        .route("/stats", get(stacks::stats))
        .route("/history", get(history::history))
        .route("/identity", get(identity::identity))
        .route("/preflight", post(preflight::preflight))
        .route("/prepull", get(prepull::readiness).put(prepull::declare))
        .route("/openapi.json", get(crate::openapi::openapi_json))
        .route("/dashboard", get(dashboard::page))
        .route("/dashboard/{file}", get(dashboard::file))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "route not found") })
        .method_not_allowed_fallback(|| async { ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed") })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), auth::authorize))
        .layer(middleware::from_fn(deadline::enforce))
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn(request_log::log_request))
        .with_state(state)
}

/// Framework rejections (body too large, bad content) come as plain text: answer JSON instead.
async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response.headers().get(header::CONTENT_TYPE) == Some(&HeaderValue::from_static("application/json"));
    if !status.is_client_error() && !status.is_server_error() || is_json {
        return response;
    }
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "request body too large".to_owned(),
        other => other.canonical_reason().unwrap_or("error").to_ascii_lowercase(),
    };
    ApiError::new(status, message).into_response()
}
