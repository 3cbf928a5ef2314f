use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::json;
use sha2::{Digest, Sha256};
use stack_core::{CreateOutcome, CreateRequest, ListCursor, Principal, StackId, StackRecord};

use crate::error::ApiError;
use crate::request_log::LoggedStackId;
use crate::state::AppState;
use crate::wire::{
    MAX_PAGE_PAYLOAD_BYTES, StackPage, StackView, StatusView, parse_create_body, parse_list_query, payload_bytes,
};

/// Longest `Idempotency-Key` accepted.
const MAX_IDEMPOTENCY_KEY_LEN: usize = 256;

/// Creates a stack from a Pod manifest.
#[utoipa::path(
    post,
    path = "/stacks",
    operation_id = "createStack",
    request_body = crate::openapi::CreateStackRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "Same key and body: same stack")),
    responses(
        (status = 201, description = "Success", body = StackView),
        (status = 400, description = "Invalid spec or body", body = crate::openapi::ErrorBody),
        crate::openapi::KeyRefused,
        (status = 409, description = "Idempotency key reused with another body", body = crate::openapi::ErrorBody),
        (status = 413, description = "Body over 1 MiB", body = crate::openapi::ErrorBody),
        (status = 503, description = "No capacity, or a dependency is unavailable",
            headers(("Retry-After" = String)), body = crate::openapi::ErrorBody),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let parsed = parse_create_body(&body)?;
    let idempotency_key = idempotency_key(&headers)?;
    let request = CreateRequest {
        tenant: principal.tenant_for_create(),
        manifest: parsed.pod_spec,
        target_ports: parsed.target_ports,
        idempotency_key,
        body_sha256: hex::encode(Sha256::digest(&body)),
    };
    let record = match state.stacks.create(request).await {
        Ok(CreateOutcome::Created(record) | CreateOutcome::Replayed(record)) => record,
        Err(err) => {
            crate::refusals::count(&state, principal.tenant_for_create(), &err);
            return Err(err.into());
        }
    };
    Ok(stack_response(StatusCode::CREATED, &record))
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .map_err(|_| ApiError::bad_request("invalid Idempotency-Key"))?
        .trim();
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN {
        return Err(ApiError::bad_request("invalid Idempotency-Key"));
    }
    Ok(Some(key.to_owned()))
}

/// One page of stacks, oldest first, bounded by `limit` and by its size in the response.
#[utoipa::path(
    get,
    path = "/stacks",
    operation_id = "listStacks",
    params(
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 1000, description = "Stacks per page, 1 to 1000 (default 100); a page can be shorter to stay under 4 MiB"),
        ("cursor" = Option<String>, Query, description = "The `next_cursor` of the previous page"),
    ),
    responses(
        (status = 200, description = "Success", body = crate::wire::StackPage),
        (status = 400, description = "Invalid limit or cursor", body = crate::openapi::ErrorBody),
        crate::openapi::KeyRefused,
        crate::openapi::Unavailable,
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let query = parse_list_query(query.as_deref())?;
    let page = state
        .stacks
        .list_page(
            &principal.scope,
            query.cursor.as_ref(),
            query.limit,
            MAX_PAGE_PAYLOAD_BYTES,
            |record| payload_bytes(&StackView::from(record)),
        )
        .await?;
    let body = StackPage {
        stacks: page.stacks.iter().map(StackView::from).collect(),
        next_cursor: page.next.as_ref().map(ListCursor::encode),
    };
    Ok(Json(body).into_response())
}

#[utoipa::path(
    get,
    path = "/stacks/{stack_id}",
    operation_id = "getStack",
    params(("stack_id" = String, Path, description = "stack- and 16 lowercase hex digits")),
    responses(
        (status = 200, description = "Success", body = StackView),
        crate::openapi::KeyRefused,
        crate::openapi::StackGone,
        crate::openapi::Unavailable,
    ),
)]
pub async fn get(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(stack_id): Path<String>,
) -> Result<Response, ApiError> {
    let record = state.stacks.get(&parse_id(&stack_id)?, &principal.scope).await?;
    Ok(stack_response(StatusCode::OK, &record))
}

#[utoipa::path(
    get,
    path = "/stacks/{stack_id}/status",
    operation_id = "getStackStatus",
    params(("stack_id" = String, Path, description = "stack- and 16 lowercase hex digits")),
    responses(
        (status = 200, description = "Success", body = StatusView),
        crate::openapi::KeyRefused,
        crate::openapi::StackGone,
        crate::openapi::Unavailable,
    ),
)]
pub async fn status(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(stack_id): Path<String>,
) -> Result<Response, ApiError> {
    let record = state.stacks.status(&parse_id(&stack_id)?, &principal.scope).await?;
    Ok(with_stack_id(Json(StatusView::from(&record)).into_response(), &record))
}

#[utoipa::path(
    delete,
    path = "/stacks/{stack_id}",
    operation_id = "deleteStack",
    params(("stack_id" = String, Path, description = "stack- and 16 lowercase hex digits")),
    responses(
        (status = 200, description = "Success", body = crate::openapi::Deleted),
        crate::openapi::KeyRefused,
        crate::openapi::StackGone,
        crate::openapi::Unavailable,
    ),
)]
pub async fn delete(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(stack_id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&stack_id)?;
    state.stacks.delete(&id, &principal.scope).await?;
    Ok(Json(json!({ "deleted": true, "stack_id": id })).into_response())
}

#[utoipa::path(
    post,
    path = "/stacks/{stack_id}/renew",
    operation_id = "renewStack",
    params(("stack_id" = String, Path, description = "stack- and 16 lowercase hex digits")),
    responses(
        (status = 200, description = "Success", body = StackView),
        crate::openapi::KeyRefused,
        crate::openapi::StackGone,
        (status = 409, description = "Maximum lifetime reached", body = crate::openapi::ErrorBody),
        crate::openapi::Unavailable,
    ),
)]
pub async fn renew(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(stack_id): Path<String>,
) -> Result<Response, ApiError> {
    let record = state.stacks.renew(&parse_id(&stack_id)?, &principal.scope).await?;
    Ok(stack_response(StatusCode::OK, &record))
}

/// Counts, placement and headroom.
#[utoipa::path(
    get,
    path = "/stats",
    operation_id = "getStats",
    responses(
        (status = 200, description = "Success", body = stack_core::Stats),
        crate::openapi::KeyRefused,
        crate::openapi::Unavailable,
    ),
)]
pub async fn stats(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> Result<Response, ApiError> {
    Ok(Json(state.stacks.stats(&principal.scope).await?).into_response())
}

/// An id that is not of our form can name no stack.
fn parse_id(raw: &str) -> Result<StackId, ApiError> {
    raw.parse().map_err(|_| ApiError::stack_not_found())
}

fn stack_response(status: StatusCode, record: &StackRecord) -> Response {
    with_stack_id((status, Json(StackView::from(record))).into_response(), record)
}

fn with_stack_id(mut response: Response, record: &StackRecord) -> Response {
    response
        .extensions_mut()
        .insert(LoggedStackId(record.stack_id.to_string()));
    response
}
