//! The plan's side effects beyond removals, against DynamoDB and the apiserver.

use std::time::Duration;

use jiff::SignedDuration;

use super::apply::{ApplyError, Effects};
use super::plan::HoldRepair;
use crate::model::{BatchDeleteJob, StackId};
use crate::stacks::{JobProgress, Stacks};

impl Effects for Stacks {
    async fn release_claim(&self, key: &str, stack_id: &StackId) -> Result<(), ApplyError> {
        Ok(self.store().release_idempotency_key(key, stack_id).await?)
    }

    async fn repair_hold(&self, repair: &HoldRepair) -> Result<(), ApplyError> {
        match repair {
            HoldRepair::Delete { tenant, stack_id } => self.store().delete_tenant_hold(tenant, stack_id).await?,
            HoldRepair::Recount { tenant, seen, held } => {
                if !self.store().recount_tenant_held(tenant, *seen, *held).await? {
                    tracing::debug!(%tenant, "tenant counter changed meanwhile; recounted next pass");
                }
            }
            HoldRepair::Add { tenant, hold } => {
                let lifetime = SignedDuration::try_from(self.config().max_lifetime).unwrap_or(SignedDuration::MAX);
                let expires_at = hold.held_at.saturating_add(lifetime).unwrap_or(hold.held_at);
                self.store().put_tenant_hold(tenant, hold, expires_at).await?;
            }
        }
        Ok(())
    }

    async fn advance_job(&self, job: BatchDeleteJob, budget: Duration) -> Result<JobProgress, ApplyError> {
        Stacks::advance_job(self, job, budget)
            .await
            .map_err(|err| ApplyError::Job(err.to_string()))
    }
}
