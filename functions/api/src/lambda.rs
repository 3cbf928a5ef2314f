//! Serving the router as a Lambda function behind an API Gateway REST API.

use axum::Router;
use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};

/// Runs until the Lambda runtime stops the process.
pub async fn run(router: Router) -> Result<(), lambda_http::Error> {
    let service = tower::ServiceBuilder::new().map_request(strip_stage).service(router);
    lambda_http::run(service).await
}

/// lambda_http prefixes REST API paths with the stage (`/prod/stacks`); the routes are
/// stage-agnostic, so the prefix goes.
pub fn strip_stage(mut request: Request) -> Request {
    let stage = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV1(ctx)) => ctx.stage.clone(),
        _ => None,
    };
    let Some(stage) = stage else { return request };
    let prefix = format!("/{stage}");
    let path = request.uri().path();
    let stripped = match path.strip_prefix(&prefix) {
        Some("") => "/".to_owned(),
        Some(rest) if rest.starts_with('/') => rest.to_owned(),
        _ => return request,
    };
    let path_and_query = match request.uri().query() {
        Some(q) => format!("{stripped}?{q}"),
        None => stripped,
    };
    let mut parts = request.uri().clone().into_parts();
    match path_and_query.parse() {
        Ok(pq) => parts.path_and_query = Some(pq),
        Err(_) => return request,
    }
    if let Ok(uri) = axum::http::Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
    request
}
