//! Tenant holds: pk=`HOLD#<tenant>`, sk=stack id, one per stack a tenant with a limit holds
//! (`STACK_TENANTS`), written before anything of the stack is made and deleted when its
//! objects are gone. A create is admitted when, after writing its hold, it counts at most
//! the limit (`stacks::tenant_limit` says why no tenant can pass it that way).

use aws_sdk_dynamodb::types::Select;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::item::{PK, key, read_item, s, to_item};
use super::{Store, StoreError};
use crate::model::StackId;
use crate::tenancy::TenantId;

const HOLD_PK_PREFIX: &str = "HOLD#";

fn partition(tenant: &TenantId) -> String {
    format!("{HOLD_PK_PREFIX}{tenant}")
}

/// One stack's hold on a slot of its tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantHold {
    pub stack_id: StackId,
    pub held_at: Timestamp,
}

impl Store {
    /// Writes `hold` (a hold already there is kept as it is written again: idempotent).
    /// `expires_at` bounds a hold that nothing released.
    pub async fn put_tenant_hold(
        &self,
        tenant: &TenantId,
        hold: &TenantHold,
        expires_at: Timestamp,
    ) -> Result<(), StoreError> {
        let item = to_item(
            &partition(tenant),
            hold.stack_id.as_str(),
            hold,
            Some(expires_at.as_second()),
        )?;
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| StoreError::backend("PutItem", e))?;
        Ok(())
    }

    /// How many holds `tenant` has (a strongly consistent count: it sees every hold written
    /// before it started).
    pub async fn count_tenant_holds(&self, tenant: &TenantId) -> Result<usize, StoreError> {
        let mut count = 0_usize;
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", PK)
                .expression_attribute_values(":pk", s(partition(tenant)))
                .consistent_read(true)
                .select(Select::Count)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| StoreError::backend("Query", e))?;
            count = count.saturating_add(usize::try_from(out.count).unwrap_or_default());
            match out.last_evaluated_key {
                Some(next) if !next.is_empty() => start = Some(next),
                _ => return Ok(count),
            }
        }
    }

    /// Every hold of `tenant` (the reconciler repairs them).
    pub async fn list_tenant_holds(&self, tenant: &TenantId) -> Result<Vec<TenantHold>, StoreError> {
        let (holds, unreadable) = self
            .query_partition(&partition(tenant), read_item::<TenantHold>)
            .await?;
        for item in unreadable {
            tracing::warn!(error = %item, "tenant hold does not read");
        }
        Ok(holds)
    }

    /// Deletes the hold of `stack_id`; a missing one counts as deleted.
    pub async fn delete_tenant_hold(&self, tenant: &TenantId, stack_id: &StackId) -> Result<(), StoreError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key(&partition(tenant), stack_id.as_str())))
            .send()
            .await
            .map_err(|e| StoreError::backend("DeleteItem", e))?;
        Ok(())
    }
}
