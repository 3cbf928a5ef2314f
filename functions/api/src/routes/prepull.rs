//! `GET /prepull` and `PUT /prepull`: the images kept on every stack node before the start gun,
//! and where they stand ([`stack_core::Readiness`]).

use axum::Json;
use axum::body::Bytes;
use stack_core::Readiness;

use crate::error::ApiError;
use crate::extract::Caller;
use crate::wire::parse_prepull_body;

/// Per image, how many stack nodes hold it, which are pulling, which failed and why; `go` once
/// every image is on every node. A key of one tenant sees the images its tenant declared.
#[utoipa::path(
    get,
    path = "/prepull",
    operation_id = "prepullReadiness",
    responses(
        (status = 200, description = "Success", body = Readiness),
        crate::openapi::KeyedRouteErrors,
    ),
)]
pub async fn readiness(caller: Caller) -> Result<Json<Readiness>, ApiError> {
    Ok(Json(caller.stacks.prepull_readiness(caller.scope()).await?))
}

/// Declares the images an event will need, replacing the key's tenant's previous list (`[]`
/// clears it; a key of every tenant declares the deployment's own list). The pre-pull starts at
/// once on every stack node, nodes that join later included.
#[utoipa::path(
    put,
    path = "/prepull",
    operation_id = "declarePrepull",
    request_body = crate::openapi::PrepullRequest,
    responses(
        (status = 200, description = "Declared; where the images stand now", body = Readiness),
        (status = 400, description = "Invalid body, or an image a manifest could not use", body = crate::openapi::ErrorBody),
        crate::openapi::BodyRouteErrors,
    ),
)]
pub async fn declare(caller: Caller, body: Bytes) -> Result<Json<Readiness>, ApiError> {
    let images = parse_prepull_body(&body)?;
    Ok(Json(caller.stacks.declare_prepull(&images, caller.scope()).await?))
}
