//! Create refusals counted per minute and reason for the dashboard. Only the failure path
//! counts, in a task of its own: a successful create does no extra work, and a refusal is
//! answered without waiting for the count (one atomic DynamoDB update, no read). Under a
//! flood of refusals the minute's item is hot; a count DynamoDB throttles is dropped.

use std::sync::Arc;

use stack_core::{RefusalReason, StackError, Stacks, TenantId};

pub fn count(stacks: &Arc<Stacks>, tenant: TenantId, err: &StackError) {
    let reason = RefusalReason::of(err);
    let stacks = Arc::clone(stacks);
    tokio::spawn(async move {
        if let Err(err) = stacks
            .store()
            .count_refusal(reason, &tenant, jiff::Timestamp::now())
            .await
        {
            tracing::debug!(error = %err, "counting a create refusal failed");
        }
    });
}
