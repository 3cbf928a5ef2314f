//! `POST /preflight`: before an event's start gun, whether the stacks it expects fit, limit by
//! limit ([`stack_core::Forecast`]).

use axum::Json;
use axum::body::Bytes;
use stack_core::Forecast;

use crate::error::ApiError;
use crate::extract::Caller;
use crate::wire::parse_preflight_body;

/// Go or no-go, per limit with the headroom left, for the stacks an event expects.
#[utoipa::path(
    post,
    path = "/preflight",
    operation_id = "preflight",
    request_body = crate::openapi::PreflightRequest,
    responses(
        (status = 200, description = "Success (go or no-go)", body = Forecast),
        (status = 400, description = "Invalid body, or a manifest a create would refuse", body = crate::openapi::ErrorBody),
        crate::openapi::BodyRouteErrors,
    ),
)]
pub async fn preflight(caller: Caller, body: Bytes) -> Result<Json<Forecast>, ApiError> {
    let plan = parse_preflight_body(&body)?;
    Ok(Json(caller.stacks.preflight(&plan, caller.scope()).await?))
}
