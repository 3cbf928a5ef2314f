//! The operator's dashboard: a static page embedded in the binary (no CDN, no external
//! font or script) under a strict Content-Security-Policy. Loading it needs no key; the page
//! asks for the key and sends it as `X-API-KEY` on every data call.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Same origin only; no inline script or style, no framing, no plugins.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const INDEX: &str = include_str!("../../dashboard/index.html");
const SCRIPT: &str = include_str!("../../dashboard/app.js");
const STYLE: &str = include_str!("../../dashboard/app.css");

/// The page.
#[utoipa::path(
    get,
    path = "/dashboard",
    operation_id = "dashboard",
    security(()),
    responses((status = 200, description = "The dashboard page", content_type = "text/html", body = String)),
)]
pub async fn page() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// Its script and style sheet (`/dashboard/app.js`, `/dashboard/app.css`).
pub async fn file(Path(name): Path<String>) -> Response {
    match name.as_str() {
        "app.js" => asset("text/javascript; charset=utf-8", SCRIPT),
        "app.css" => asset("text/css; charset=utf-8", STYLE),
        _ => ApiError::new(StatusCode::NOT_FOUND, "route not found").into_response(),
    }
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
