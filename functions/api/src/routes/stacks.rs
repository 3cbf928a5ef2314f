use axum::Json;
use axum::body::Bytes;
use axum::extract::RawQuery;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use stack_core::{CreateOutcome, CreateRequest, ListCursor, StackRecord};

use crate::error::ApiError;
use crate::extract::{Caller, StackIdPath};
use crate::openapi::Deleted;
use crate::request_log::LoggedStackId;
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
    params(("Idempotency-Key" = Option<String>, Header, pattern = "^[\\t -~]*[!-~][\\t -~]*$", description = "Same key and body: same stack. Visible ASCII, at most 256 characters once trimmed")),
    responses(
        (status = 201, description = "Success", body = StackView),
        (status = 400, description = "Invalid spec or body", body = crate::openapi::ErrorBody),
        crate::openapi::KeyRefused,
        (status = 409, description = "Idempotency key reused with another body", body = crate::openapi::ErrorBody),
        crate::openapi::BodyTooLarge,
        (status = 503, description = "No capacity, or a dependency is unavailable",
            headers(("Retry-After" = String)), body = crate::openapi::ErrorBody),
    ),
)]
pub async fn create(caller: Caller, headers: HeaderMap, body: Bytes) -> Result<Response, ApiError> {
    let parsed = parse_create_body(&body)?;
    let idempotency_key = idempotency_key(&headers)?;
    let request = CreateRequest {
        tenant: caller.principal.tenant_for_create(),
        manifest: parsed.pod_spec,
        target_ports: parsed.target_ports,
        idempotency_key,
        body_sha256: hex::encode(Sha256::digest(&body)),
    };
    let record = match caller.stacks.create(request).await {
        Ok(CreateOutcome::Created(record) | CreateOutcome::Replayed(record)) => record,
        Err(err) => {
            crate::refusals::count(&caller.stacks, caller.principal.tenant_for_create(), &err);
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
        ("cursor" = Option<String>, Query, pattern = "^[A-Za-z0-9_-]{1,256}$", description = "The `next_cursor` of the previous page"),
    ),
    responses(
        (status = 200, description = "Success", body = crate::wire::StackPage),
        (status = 400, description = "Invalid limit or cursor", body = crate::openapi::ErrorBody),
        crate::openapi::KeyedRouteErrors,
    ),
)]
pub async fn list(caller: Caller, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let query = parse_list_query(query.as_deref())?;
    let page = caller
        .stacks
        .list_page(
            caller.scope(),
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
    params(StackIdPath),
    responses(
        (status = 200, description = "Success", body = StackView),
        crate::openapi::StackRouteErrors,
    ),
)]
pub async fn get(caller: Caller, StackIdPath(id): StackIdPath) -> Result<Response, ApiError> {
    let record = caller.stacks.get(&id, caller.scope()).await?;
    Ok(stack_response(StatusCode::OK, &record))
}

#[utoipa::path(
    get,
    path = "/stacks/{stack_id}/status",
    operation_id = "getStackStatus",
    params(StackIdPath),
    responses(
        (status = 200, description = "Success", body = StatusView),
        crate::openapi::StackRouteErrors,
    ),
)]
pub async fn status(caller: Caller, StackIdPath(id): StackIdPath) -> Result<Response, ApiError> {
    let record = caller.stacks.status(&id, caller.scope()).await?;
    Ok(with_stack_id(Json(StatusView::from(&record)).into_response(), &record))
}

#[utoipa::path(
    delete,
    path = "/stacks/{stack_id}",
    operation_id = "deleteStack",
    params(StackIdPath),
    responses(
        (status = 200, description = "Success", body = crate::openapi::Deleted),
        crate::openapi::StackRouteErrors,
    ),
)]
pub async fn delete(caller: Caller, StackIdPath(id): StackIdPath) -> Result<Response, ApiError> {
    caller.stacks.delete(&id, caller.scope()).await?;
    let deleted = Deleted {
        deleted: true,
        stack_id: id.to_string(),
    };
    Ok(Json(deleted).into_response())
}

#[utoipa::path(
    post,
    path = "/stacks/{stack_id}/renew",
    operation_id = "renewStack",
    params(StackIdPath),
    responses(
        (status = 200, description = "Success", body = StackView),
        (status = 409, description = "Maximum lifetime reached", body = crate::openapi::ErrorBody),
        crate::openapi::StackRouteErrors,
    ),
)]
pub async fn renew(caller: Caller, StackIdPath(id): StackIdPath) -> Result<Response, ApiError> {
    let record = caller.stacks.renew(&id, caller.scope()).await?;
    Ok(stack_response(StatusCode::OK, &record))
}

/// Counts, placement and headroom.
#[utoipa::path(
    get,
    path = "/stats",
    operation_id = "getStats",
    responses(
        (status = 200, description = "Success", body = stack_core::Stats),
        crate::openapi::KeyedRouteErrors,
    ),
)]
pub async fn stats(caller: Caller) -> Result<Response, ApiError> {
    Ok(Json(caller.stacks.stats(caller.scope()).await?).into_response())
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
