//! The plan's side effects against DynamoDB and the apiserver.

use std::time::Duration;

use jiff::Timestamp;

use super::apply::{ApplyError, Effects, RecordWrite};
use super::plan::ObjectKind;
use crate::model::{BatchDeleteJob, StackId, StackRecord};
use crate::stacks::{JobProgress, Stacks};
use crate::store::{ObservedState, StoreError};

pub struct LiveEffects<'a> {
    stacks: &'a Stacks,
}

impl<'a> LiveEffects<'a> {
    pub fn new(stacks: &'a Stacks) -> Self {
        Self { stacks }
    }
}

impl Effects for LiveEffects<'_> {
    async fn delete_object(&self, kind: ObjectKind, name: &str) -> Result<(), ApplyError> {
        let cluster = self.stacks.cluster();
        match kind {
            ObjectKind::Pod => cluster.delete_pod(name).await?,
            ObjectKind::Service => cluster.delete_service(name).await?,
        }
        Ok(())
    }

    async fn delete_record(&self, record: &StackRecord) -> Result<(), ApplyError> {
        Ok(self.stacks.store().delete_stack(record).await?)
    }

    async fn write_observed(
        &self,
        id: &StackId,
        observed: &ObservedState,
        now: Timestamp,
    ) -> Result<RecordWrite, ApplyError> {
        match self.stacks.store().update_observed(id, observed, now).await {
            Ok(()) => Ok(RecordWrite::Written),
            Err(StoreError::ConditionFailed) => Ok(RecordWrite::Gone),
            Err(err) => Err(err.into()),
        }
    }

    async fn release_claim(&self, key: &str, stack_id: &StackId) -> Result<(), ApplyError> {
        Ok(self.stacks.store().release_idempotency_key(key, stack_id).await?)
    }

    async fn advance_job(&self, job: BatchDeleteJob, budget: Duration) -> Result<JobProgress, ApplyError> {
        self.stacks
            .advance_job(job, budget)
            .await
            .map_err(|err| ApplyError::Job(err.to_string()))
    }
}
