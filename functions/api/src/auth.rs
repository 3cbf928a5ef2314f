//! API key check: header `X-API-KEY`, or the `api_key` query parameter only when the header
//! is absent or blank. Compared in constant time; neither value is ever logged.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::state::AppState;

pub async fn require_api_key(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(expected) = state.api_key.as_deref() else {
        return next.run(request).await;
    };
    if request.method() == axum::http::Method::GET && crate::router::is_public(request.uri().path()) {
        return next.run(request).await;
    }
    let from_header = request
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let presented = from_header
        .map(str::to_owned)
        .or_else(|| query_api_key(request.uri().query()));
    let valid = presented.is_some_and(|key| bool::from(key.as_bytes().ct_eq(expected.as_bytes())));
    if valid {
        next.run(request).await
    } else {
        ApiError::new(StatusCode::UNAUTHORIZED, "invalid api key").into_response()
    }
}

fn query_api_key(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == "api_key")
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_key_is_decoded() {
        assert_eq!(query_api_key(Some("a=1&api_key=s%20ecret")), Some("s ecret".into()));
        assert_eq!(query_api_key(Some("api_key=")), None);
        assert_eq!(query_api_key(None), None);
    }
}
