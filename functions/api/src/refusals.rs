//! Create refusals counted per minute and reason for the dashboard. Only the failure path
//! counts, in a task of its own: a successful create does no extra work, and a refusal is
//! answered without waiting for the count (one atomic DynamoDB update, no read). Under a
//! flood of refusals the minute's item is hot; a count DynamoDB throttles is dropped.

use stack_core::{RefusalReason, StackError, TenantId};

use crate::state::AppState;

pub fn count(state: &AppState, tenant: TenantId, err: &StackError) {
    let reason = RefusalReason::of(err);
    let stacks = state.stacks.clone();
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
