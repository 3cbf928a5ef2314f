//! Who a request is and whether its role allows the route.
//!
//! The key comes in header `X-API-KEY`, or in the `api_key` query parameter only when the
//! header is absent or blank (the Go clients' contract). It is hashed and compared with every
//! configured hash in constant time ([`KeyRing::identify`]); neither the key nor the query
//! value is ever logged, only the key's short id. The [`Principal`] goes to the handlers as a
//! request extension; what each route needs is [`action_of`], the one table of it.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use stack_core::{Action, Principal};

use crate::error::ApiError;
use crate::state::AppState;

/// Identifies the caller (401 if no key matches), then checks its role against the route
/// (403 if the role may not).
pub async fn authorize(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    if request.method() == Method::GET && crate::router::is_public(request.uri().path()) {
        return next.run(request).await;
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_default();
    let principal = if state.api_key_enabled {
        match presented_key(&request).and_then(|key| state.keys.identify(&key)) {
            Some(principal) => principal.clone(),
            None => return ApiError::new(StatusCode::UNAUTHORIZED, "invalid api key").into_response(),
        }
    } else {
        Principal::unauthenticated()
    };
    let action = action_of(request.method(), &route);
    if !principal.may(action) {
        let message = format!("a {} key may not do this", principal.role.as_str());
        return ApiError::new(StatusCode::FORBIDDEN, message).into_response();
    }
    let key_id = LoggedKeyId(principal.key_id.clone());
    request.extensions_mut().insert(principal);
    let mut response = next.run(request).await;
    response.extensions_mut().insert(key_id);
    response
}

/// The short id of the request's key, for its log line.
#[derive(Debug, Clone)]
pub struct LoggedKeyId(pub String);

/// What each route does, as far as roles are concerned.
fn action_of(method: &Method, route: &str) -> Action {
    match (method, route) {
        (&Method::POST, "/stacks") => Action::Create,
        (&Method::DELETE, "/stacks/{stack_id}") | (&Method::POST, "/stacks/{stack_id}/renew") => Action::Change,
        (_, "/stacks/batch-delete" | "/stacks/batch-delete/{job_id}") => Action::BatchDelete,
        (&Method::PUT, "/prepull") => Action::Prepare,
        (_, "/stats" | "/history" | "/preflight" | "/prepull") => Action::Observe,
        _ => Action::Read,
    }
}

fn presented_key(request: &Request) -> Option<String> {
    let from_header = request
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty());
    from_header
        .map(str::to_owned)
        .or_else(|| query_api_key(request.uri().query()))
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

    #[test]
    fn every_route_needs_the_action_its_effect_calls_for() {
        let cases = [
            (Method::POST, "/stacks", Action::Create),
            (Method::GET, "/stacks", Action::Read),
            (Method::GET, "/stacks/{stack_id}", Action::Read),
            (Method::GET, "/stacks/{stack_id}/status", Action::Read),
            (Method::DELETE, "/stacks/{stack_id}", Action::Change),
            (Method::POST, "/stacks/{stack_id}/renew", Action::Change),
            (Method::POST, "/stacks/batch-delete", Action::BatchDelete),
            (Method::GET, "/stacks/batch-delete/{job_id}", Action::BatchDelete),
            (Method::GET, "/stats", Action::Observe),
            (Method::GET, "/history", Action::Observe),
            (Method::POST, "/preflight", Action::Observe),
            (Method::GET, "/prepull", Action::Observe),
            (Method::PUT, "/prepull", Action::Prepare),
            (Method::GET, "/healthz", Action::Read),
            (Method::GET, "/identity", Action::Read),
        ];
        for (method, route, action) in cases {
            assert_eq!(action_of(&method, route), action, "{method} {route}");
        }
    }
}
