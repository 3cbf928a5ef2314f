//! The most stacks a tenant may hold at once (`STACK_TENANTS`, `ctf=500`).
//!
//! Admission is one atomic step: a conditional increment of the tenant's counter (`held <
//! limit`), so however many creates run at once in however many processes, no tenant passes
//! its limit, and a burst larger than the room left fills it exactly. Each admitted stack also
//! has a hold item, written before the increment; the holds are the truth the reconciler
//! recounts the counter from, because a process can die between two writes.
//!
//! Every write is ordered so that whatever is interrupted leaves the counter too high, never
//! too low (a tenant refused a slot for up to a pass, never given one too many):
//! - admission: hold first, then the increment; refused: the hold is deleted;
//! - release (the removal path, [`super::Stacks::remove`], and a failed create's undo): mark
//!   the hold released (one release wins), decrement, delete the hold;
//! - an admission whose increment may or may not have landed (an error, a timeout) deletes
//!   its hold without decrementing;
//! - the reconciler deletes holds without a live record (older than the orphan grace) and
//!   sets the counter to the number of holds, only if the counter is still what it read
//!   before listing them: a concurrent increment or decrement makes it skip to the next pass,
//!   and a hold listed but not yet counted (or already decremented) only errs high.

use jiff::Timestamp;

use super::{StackError, Stacks, signed};
use crate::model::StackId;
use crate::store::TenantHold;
use crate::tenancy::TenantId;

impl Stacks {
    /// Takes one of `tenant`'s slots for `id`, or refuses with [`StackError::TenantLimit`].
    /// `Ok(true)` once admitted (the counter counts it); `Ok(false)` when the tenant has no
    /// limit (nothing was written).
    pub(super) async fn hold_tenant_slot(&self, tenant: &TenantId, id: &StackId) -> Result<bool, StackError> {
        let Some(limit) = self.config.tenants.limit(tenant) else {
            return Ok(false);
        };
        let now = Timestamp::now();
        let hold = TenantHold {
            stack_id: id.clone(),
            held_at: now,
            released: false,
        };
        let expires_at = now.saturating_add(signed(self.config.max_lifetime)).unwrap_or(now);
        self.store.put_tenant_hold(tenant, &hold, expires_at).await?;
        if self.store.increment_tenant_held(tenant, limit).await? {
            return Ok(true);
        }
        self.drop_unadmitted_hold(tenant, id).await;
        Err(StackError::TenantLimit {
            tenant: tenant.clone(),
            limit,
        })
    }

    /// Removes the hold of a create that was not (or not surely) admitted: the counter is
    /// left as it is, for the reconciler to recount if it counted this one.
    pub(super) async fn drop_unadmitted_hold(&self, tenant: &TenantId, id: &StackId) {
        if let Err(err) = self.store.delete_tenant_hold(tenant, id).await {
            tracing::warn!(stack_id = %id, %tenant, error = %err, "could not delete a tenant hold; the reconciler will");
        }
    }

    /// Gives `id`'s slot back; a failure is left to the reconciler, so it never fails a delete.
    pub(crate) async fn release_tenant_slot(&self, tenant: &TenantId, id: &StackId) {
        if self.config.tenants.limit(tenant).is_none() {
            return;
        }
        if let Err(err) = self.store.release_tenant_hold(tenant, id).await {
            tracing::warn!(stack_id = %id, %tenant, error = %err, "could not release the tenant hold; the reconciler will");
        }
    }
}
