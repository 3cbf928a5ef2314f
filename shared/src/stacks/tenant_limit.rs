//! The most stacks a tenant may hold at once (`STACK_TENANTS`, `ctf=500`).
//!
//! Admission is write-then-count: a create writes its hold, then counts its tenant's holds
//! (strongly consistent) and goes on only if the count is within the limit; otherwise it
//! deletes its hold and answers 503 before anything else is made. No tenant passes its
//! limit this way, however many creates run at once in however many processes: of the
//! creates admitted, take the one whose count ran last; every admitted create wrote its hold
//! before its own count, so that last count saw all of them, and it was within the limit.
//! Creates racing at the edge may all count over and all be refused (a 503, "try later"),
//! never all admitted.
//!
//! A hold goes when its stack's objects are gone (the removal path, [`super::Stacks::remove`])
//! or its create fails (the undo path); what a killed process leaves, the reconciler removes
//! (a hold without a live record), and it adds the holds of live stacks made before the
//! tenant had a limit.

use jiff::Timestamp;

use super::{StackError, Stacks, signed};
use crate::model::StackId;
use crate::store::TenantHold;
use crate::tenancy::TenantId;

impl Stacks {
    /// Takes one of `tenant`'s slots for `id`, or refuses with [`StackError::TenantLimit`].
    pub(super) async fn hold_tenant_slot(&self, tenant: &TenantId, id: &StackId) -> Result<(), StackError> {
        let Some(limit) = self.config.tenants.limit(tenant) else {
            return Ok(());
        };
        let now = Timestamp::now();
        let hold = TenantHold {
            stack_id: id.clone(),
            held_at: now,
        };
        let expires_at = now.saturating_add(signed(self.config.max_lifetime)).unwrap_or(now);
        self.store.put_tenant_hold(tenant, &hold, expires_at).await?;
        let held = self.store.count_tenant_holds(tenant).await?;
        if held <= usize::try_from(limit).unwrap_or(usize::MAX) {
            return Ok(());
        }
        // The caller's undo deletes the hold (it reached the hold step).
        Err(StackError::TenantLimit {
            tenant: tenant.clone(),
            limit,
        })
    }

    /// Gives `id`'s slot back; a failure is left to the reconciler (a hold without a live
    /// record), so it never fails a delete.
    pub(crate) async fn release_tenant_slot(&self, tenant: &TenantId, id: &StackId) {
        if self.config.tenants.limit(tenant).is_none() {
            return;
        }
        if let Err(err) = self.store.delete_tenant_hold(tenant, id).await {
            tracing::warn!(stack_id = %id, %tenant, error = %err, "could not release the tenant hold; the reconciler will");
        }
    }
}
