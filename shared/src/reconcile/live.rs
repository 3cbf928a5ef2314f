//! The plan's side effects beyond removals, against DynamoDB and the apiserver.

use std::time::Duration;

use super::apply::{ApplyError, Effects};
use crate::model::{BatchDeleteJob, StackId};
use crate::stacks::{JobProgress, Stacks};

impl Effects for Stacks {
    async fn release_claim(&self, key: &str, stack_id: &StackId) -> Result<(), ApplyError> {
        Ok(self.store().release_idempotency_key(key, stack_id).await?)
    }

    async fn advance_job(&self, job: BatchDeleteJob, budget: Duration) -> Result<JobProgress, ApplyError> {
        Stacks::advance_job(self, job, budget)
            .await
            .map_err(|err| ApplyError::Job(err.to_string()))
    }
}
