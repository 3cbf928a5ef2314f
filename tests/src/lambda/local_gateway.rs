//! A local stand-in for the deployed REST API in front of one sandbox of the API function:
//! every HTTP request becomes the event API Gateway sends ([`RestRequest`]), the answer is read
//! as API Gateway reads it ([`Gateway`]) and sent back. One invocation at a time, as a
//! sandbox serves them. What it does not stand in for: API Gateway's own key check, usage
//! plan and gateway responses (`template.yaml`'s `GatewayResponses`).
//!
//! The contract checks (`tests/env/contract`) run Schemathesis through it.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use tokio::net::TcpListener;
use tokio::sync::Mutex;

use super::gateway::{Gateway, GatewayResponse};
use super::rest_event::RestRequest;
use super::sandbox::Sandbox;

/// What API Gateway answers when the integration fails (its DEFAULT_5XX).
const BAD_GATEWAY_BODY: &str = r#"{"message": "Internal server error"}"#;

struct Front {
    sandbox: Mutex<Sandbox>,
    gateway: Gateway,
}

/// Serves `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, sandbox: Sandbox, gateway: Gateway) -> std::io::Result<()> {
    let front = Arc::new(Front {
        sandbox: Mutex::new(sandbox),
        gateway,
    });
    let router = Router::new().fallback(forward).with_state(front);
    axum::serve(listener, router).await
}

async fn forward(State(front): State<Arc<Front>>, request: Request) -> Response {
    let Some(rest) = rest_request(request).await else {
        return (StatusCode::BAD_REQUEST, "unreadable request").into_response();
    };
    let sandbox = front.sandbox.lock().await;
    match front.gateway.call(&sandbox, &rest).await {
        Ok(answer) => http_response(answer),
        Err(err) => {
            tracing::warn!(error = %err, log = %sandbox.log(), "the API function failed");
            (
                StatusCode::BAD_GATEWAY,
                [("content-type", "application/json")],
                BAD_GATEWAY_BODY,
            )
                .into_response()
        }
    }
}

async fn rest_request(request: Request) -> Option<RestRequest> {
    let (parts, body) = request.into_parts();
    let mut rest = RestRequest::new(parts.method.as_str(), parts.uri.path());
    for (name, value) in url::form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes()) {
        rest = rest.query(&name, &value);
    }
    for (name, value) in &parts.headers {
        rest = rest.header(name.as_str(), value.to_str().ok()?);
    }
    let bytes: Bytes = body.collect().await.ok()?.to_bytes();
    if !bytes.is_empty() {
        // The API's request bodies are JSON: API Gateway passes them as text.
        rest = rest.body(String::from_utf8_lossy(&bytes).into_owned());
    }
    Some(rest)
}

fn http_response(answer: GatewayResponse) -> Response {
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (name, values) in answer.headers {
        // API Gateway frames the body itself.
        if name == "content-length" || name == "transfer-encoding" {
            continue;
        }
        let Ok(name) = HeaderName::try_from(name) else { continue };
        for value in values {
            if let Ok(value) = HeaderValue::try_from(value) {
                response.headers_mut().append(name.clone(), value);
            }
        }
    }
    response
}
