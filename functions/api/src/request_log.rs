//! One JSON log line per request: method, route, status, latency, stack id and the short id
//! of the key (a prefix of its hash). Never the API key, never a body.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;

/// Set by handlers on their response so that the log line names the stack.
#[derive(Debug, Clone)]
pub struct LoggedStackId(pub String);

pub async fn log_request(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let path_stack_id = route
        .contains("{stack_id}")
        .then(|| stack_id_in_path(request.uri().path()))
        .flatten();
    let response = next.run(request).await;
    let stack_id = response
        .extensions()
        .get::<LoggedStackId>()
        .map(|s| s.0.clone())
        .or(path_stack_id)
        .unwrap_or_default();
    let key_id = response
        .extensions()
        .get::<crate::auth::LoggedKeyId>()
        .map(|k| k.0.clone())
        .unwrap_or_default();
    tracing::info!(
        method = %method,
        route = %route,
        status = response.status().as_u16(),
        latency_ms = started.elapsed().as_secs_f64() * 1000.0,
        stack_id = %stack_id,
        key_id = %key_id,
        "request"
    );
    response
}

fn stack_id_in_path(path: &str) -> Option<String> {
    path.split('/')
        .find(|seg| seg.starts_with("stack-"))
        .map(|s| s.chars().take(64).collect())
}
