use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::error::ApiError;
use crate::openapi::Health;
use crate::state::AppState;

/// `{"status":"ok"}` once DynamoDB and the apiserver both answer.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    responses(
        (status = 200, description = "Success", body = crate::openapi::Health),
        crate::openapi::KeyMissing,
        (status = 503, description = "DynamoDB or the apiserver does not answer", headers(("Retry-After" = String)), body = crate::openapi::ErrorBody),
    ),
)]
pub async fn healthz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    let store = state.stacks.store();
    let cluster = state.stacks.cluster();
    let (table, apiserver) = tokio::join!(store.ping(), cluster.ping());
    if let Err(err) = table {
        tracing::error!(error = %err, "healthz: dynamodb check failed");
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "dynamodb unavailable"));
    }
    if let Err(err) = apiserver {
        tracing::error!(error = %err, "healthz: apiserver check failed");
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "kubernetes apiserver unavailable",
        ));
    }
    Ok(Json(Health {
        status: "ok".to_owned(),
    }))
}
