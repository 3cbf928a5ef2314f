use stack_core::{BATCH_JOB_BUDGET, BatchDeleteJob, JobError, JobStatus};

use axum::Json;
use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::extract::Caller;
use crate::openapi::JobAccepted;

/// Accepts `{"stack_ids": [...]}`, stores a durable job and starts it in the background.
#[utoipa::path(
    post,
    path = "/stacks/batch-delete",
    operation_id = "startBatchDelete",
    request_body = crate::openapi::BatchDeleteRequest,
    responses(
        (status = 202, description = "Success", body = crate::openapi::JobAccepted),
        (status = 400, description = "No ids, a blank id, more than 10,000 ids or a bad body", body = crate::openapi::ErrorBody),
        crate::openapi::BodyRouteErrors,
    ),
)]
pub async fn start(caller: Caller, body: Bytes) -> Result<Response, ApiError> {
    let value: Value = serde_json::from_slice(&body).map_err(|_| ApiError::invalid_json())?;
    let ids = match value.get("stack_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::bad_request("invalid stack_ids"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ApiError::invalid_json()),
    };
    let job = caller.stacks.start_batch_delete(&ids, caller.scope()).await?;
    let job_id = job.job_id.clone();
    let stacks = caller.stacks;
    tokio::spawn(async move {
        if let Err(err) = stacks.advance_job(job, BATCH_JOB_BUDGET).await {
            tracing::warn!(error = %err, "batch delete paused; the reconciler will finish it");
        }
    });
    Ok((StatusCode::ACCEPTED, Json(JobAccepted { job_id })).into_response())
}

#[utoipa::path(
    get,
    path = "/stacks/batch-delete/{job_id}",
    operation_id = "getBatchDeleteJob",
    params(("job_id" = String, Path)),
    responses(
        (status = 200, description = "Success", body = JobView),
        (status = 404, description = "Unknown job", body = crate::openapi::ErrorBody),
        crate::openapi::KeyedRouteErrors,
    ),
)]
pub async fn get(caller: Caller, Path(job_id): Path<String>) -> Result<Response, ApiError> {
    let job = caller.stacks.get_job(&job_id, caller.scope()).await?;
    Ok(Json(JobView::from(&job)).into_response())
}

/// The contract's BatchDeleteJob object.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = BatchDeleteJob)]
pub struct JobView<'a> {
    job_id: &'a str,
    status: JobStatus,
    total: u32,
    deleted: u32,
    not_found: u32,
    failed: u32,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    errors: &'a [JobError],
    created_at: jiff::Timestamp,
    updated_at: jiff::Timestamp,
}

impl<'a> From<&'a BatchDeleteJob> for JobView<'a> {
    fn from(job: &'a BatchDeleteJob) -> Self {
        Self {
            job_id: &job.job_id,
            status: job.status,
            total: job.total,
            deleted: job.deleted,
            not_found: job.not_found,
            failed: job.failed,
            errors: &job.errors,
            created_at: job.created_at,
            updated_at: job.updated_at,
        }
    }
}
