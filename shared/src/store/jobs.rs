//! Batch-delete jobs: pk=`JOB`, sk=job id, expiring one day after their last update.

use jiff::{SignedDuration, Timestamp};

use super::item::{PK, from_item, read_item, s, to_item};
use super::{Store, StoreError};
use crate::model::BatchDeleteJob;

const JOB_PK: &str = "JOB";
const JOB_RETENTION: SignedDuration = SignedDuration::from_hours(24);

impl Store {
    /// Writes a new job; `ConditionFailed` if the id exists.
    pub async fn put_new_job(&self, job: &BatchDeleteJob) -> Result<(), StoreError> {
        self.write_job(job, "attribute_not_exists(#pk)", None).await
    }

    /// Saves progress if nobody else saved since `previous_update` (optimistic lock).
    pub(crate) async fn save_job(&self, job: &BatchDeleteJob, previous_update: Timestamp) -> Result<(), StoreError> {
        self.write_job(job, "#updated = :previous", Some(previous_update)).await
    }

    async fn write_job(
        &self,
        job: &BatchDeleteJob,
        condition: &str,
        previous_update: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        let expires_at = job
            .updated_at
            .saturating_add(JOB_RETENTION)
            .map_err(|e| StoreError::Malformed(e.to_string()))?;
        let item = to_item(JOB_PK, &job.job_id, job, Some(expires_at.as_second()))?;
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition);
        // DynamoDB rejects names and values the expression does not use.
        let request = match previous_update {
            None => request.expression_attribute_names("#pk", PK),
            Some(previous) => request
                .expression_attribute_names("#updated", "updated_at")
                .expression_attribute_values(":previous", s(previous.to_string())),
        };
        request
            .send()
            .await
            .map_err(|e| StoreError::conditional("PutItem", e))?;
        Ok(())
    }

    pub async fn get_job(&self, job_id: &str) -> Result<Option<BatchDeleteJob>, StoreError> {
        let item = self.get_item(JOB_PK, job_id, true).await?;
        item.map(from_item).transpose()
    }

    /// Jobs not yet completed or failed (the partition only holds a day of jobs).
    pub async fn list_unfinished_jobs(&self) -> Result<Vec<BatchDeleteJob>, StoreError> {
        self.query_all(
            || {
                self.partition_query(JOB_PK, true)
                    .filter_expression("#status IN (:queued, :running)")
                    .expression_attribute_names("#status", "status")
                    .expression_attribute_values(":queued", s("queued"))
                    .expression_attribute_values(":running", s("running"))
            },
            read_item,
        )
        .await
        .map(|(jobs, _)| jobs)
    }
}
