//! Tenant holds, for tenants with a limit (`STACK_TENANTS`): one hold item per stack
//! (pk=`HOLD#<tenant>`, sk=stack id) and one counter per tenant (pk=`HELD`, sk=tenant,
//! attribute `held`) that admission increments atomically. How they stay in step, and why no
//! race lets a tenant past its limit: `stacks::tenant_limit`.

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::item::{PK, key, n, read_item, to_item};
use super::{Store, StoreError};
use crate::model::StackId;
use crate::tenancy::TenantId;

const HOLD_PK_PREFIX: &str = "HOLD#";
const HELD_PK: &str = "HELD";
const HELD_ATTR: &str = "held";
const RELEASED_ATTR: &str = "released";

fn partition(tenant: &TenantId) -> String {
    format!("{HOLD_PK_PREFIX}{tenant}")
}

/// One stack's hold on a slot of its tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantHold {
    pub stack_id: StackId,
    pub held_at: Timestamp,
    /// Set by the one release that decrements the counter, just before it does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
}

impl Store {
    /// Writes `hold`; `expires_at` bounds a hold that nothing released.
    pub(crate) async fn put_tenant_hold(
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
        self.put(item).await
    }

    /// Adds one to `tenant`'s counter if it is below `limit`; `false` if it is not.
    pub(crate) async fn increment_tenant_held(&self, tenant: &TenantId, limit: u32) -> Result<bool, StoreError> {
        let result = self
            .update_counter(tenant)
            .update_expression("ADD #held :one")
            .condition_expression("attribute_not_exists(#held) OR #held < :limit")
            .expression_attribute_names("#held", HELD_ATTR)
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":limit", n(i64::from(limit)))
            .send()
            .await;
        StoreError::condition_held("UpdateItem", result)
    }

    /// Releases the hold of `stack_id`: marks it (only one release wins), takes one from the
    /// counter, deletes it. A hold already gone or being released by someone else: nothing.
    pub(crate) async fn release_tenant_hold(&self, tenant: &TenantId, stack_id: &StackId) -> Result<(), StoreError> {
        let marked = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(&partition(tenant), stack_id.as_str())))
            .update_expression("SET #released = :yes")
            .condition_expression("attribute_exists(#pk) AND attribute_not_exists(#released)")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#released", RELEASED_ATTR)
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
            .send()
            .await;
        if !StoreError::condition_held("UpdateItem", marked)? {
            return Ok(());
        }
        self.update_counter(tenant)
            .update_expression("ADD #held :minus_one")
            .expression_attribute_names("#held", HELD_ATTR)
            .expression_attribute_values(":minus_one", n(-1))
            .send()
            .await
            .map_err(|e| StoreError::backend("UpdateItem", e))?;
        self.delete_tenant_hold(tenant, stack_id).await
    }

    /// Deletes a hold without touching the counter (a failed admission's, or a stale one the
    /// reconciler removes before it recounts); a missing one counts as deleted.
    pub(crate) async fn delete_tenant_hold(&self, tenant: &TenantId, stack_id: &StackId) -> Result<(), StoreError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key(&partition(tenant), stack_id.as_str())))
            .send()
            .await
            .map_err(|e| StoreError::backend("DeleteItem", e))?;
        Ok(())
    }

    /// An update of `tenant`'s counter, to which the caller adds its expression.
    fn update_counter(&self, tenant: &TenantId) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(HELD_PK, tenant.as_str())))
    }

    /// `tenant`'s counter (`None` before its first create).
    pub async fn tenant_held(&self, tenant: &TenantId) -> Result<Option<u64>, StoreError> {
        let item = self.get_item(HELD_PK, tenant.as_str(), true).await?;
        Ok(item
            .and_then(|item| match item.get(HELD_ATTR) {
                Some(AttributeValue::N(v)) => v.parse::<i64>().ok(),
                _ => None,
            })
            .map(|held| u64::try_from(held).unwrap_or(0)))
    }

    /// Every hold of `tenant`, strongly consistent (the reconciler recounts from them).
    pub async fn list_tenant_holds(&self, tenant: &TenantId) -> Result<Vec<TenantHold>, StoreError> {
        // Strongly consistent whatever DDB_CONSISTENT_READ says: the recount relies on it.
        let (holds, unreadable) = self
            .query_partition_read(&partition(tenant), true, read_item::<TenantHold>)
            .await?;
        for item in unreadable {
            tracing::warn!(error = %item, "tenant hold does not read");
        }
        Ok(holds)
    }

    /// Sets `tenant`'s counter to `held`, only if it still is `seen` (read before the holds
    /// were listed); `false` if it changed meanwhile (the next pass tries again).
    pub(crate) async fn recount_tenant_held(
        &self,
        tenant: &TenantId,
        seen: Option<u64>,
        held: u64,
    ) -> Result<bool, StoreError> {
        let request = self
            .update_counter(tenant)
            .update_expression("SET #held = :held")
            .expression_attribute_names("#held", HELD_ATTR)
            .expression_attribute_values(":held", n(i64::try_from(held).unwrap_or(i64::MAX)));
        let request = match seen {
            None => request.condition_expression("attribute_not_exists(#held)"),
            Some(seen) => request
                .condition_expression("#held = :seen")
                .expression_attribute_values(":seen", n(i64::try_from(seen).unwrap_or(i64::MAX))),
        };
        StoreError::condition_held("UpdateItem", request.send().await)
    }
}
