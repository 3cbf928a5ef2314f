//! `GET /prepull` and `PUT /prepull`: the images kept on every stack node before the start gun,
//! and where they stand ([`stack_core::Readiness`]).

use axum::body::Bytes;
use axum::extract::State;
use axum::{Extension, Json};
use stack_core::{Principal, Readiness};

use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::parse_prepull_body;

/// Per image, how many stack nodes hold it, which are pulling, which failed and why; `go` once
/// every image is on every node. A key of one tenant sees the images its tenant declared.
#[utoipa::path(
    get,
    path = "/prepull",
    operation_id = "prepullReadiness",
    responses(
        (status = 200, description = "Success", body = Readiness),
        crate::openapi::KeyRefused,
        crate::openapi::Unavailable,
    ),
)]
pub async fn readiness(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> Result<Json<Readiness>, ApiError> {
    Ok(Json(state.stacks.prepull_readiness(&principal.scope).await?))
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
        crate::openapi::KeyRefused,
        crate::openapi::Unavailable,
    ),
)]
pub async fn declare(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    body: Bytes,
) -> Result<Json<Readiness>, ApiError> {
    let images = parse_prepull_body(&body)?;
    Ok(Json(state.stacks.declare_prepull(&images, &principal.scope).await?))
}
