//! Dashboard history: pk=`HISTORY`, sk=pass time; pk=`REFUSALS`, sk=minute. Sort keys are
//! zero-padded epoch milliseconds so that a range query over the last day reads them in
//! order. Both expire through `expires_at` after [`RETENTION`](crate::history::RETENTION).

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use jiff::Timestamp;

use super::item::{EXPIRES_AT, Item, PK, SK, Unreadable, n, read_item, s, take_key, to_item};
use super::{Store, StoreError};
use crate::history::{PassSnapshot, RETENTION, RefusalMinute, RefusalReason, minute_of, tenant_count};
use crate::tenancy::TenantId;

const HISTORY_PK: &str = "HISTORY";
const REFUSALS_PK: &str = "REFUSALS";
const MINUTE: &str = "minute";

fn sort_key(at: Timestamp) -> String {
    format!("{:015}", at.as_millisecond().max(0))
}

fn expiry(at: Timestamp) -> i64 {
    at.saturating_add(RETENTION).unwrap_or(at).as_second()
}

impl Store {
    /// One small item per reconcile pass.
    pub(crate) async fn put_pass_snapshot(&self, snapshot: &PassSnapshot) -> Result<(), StoreError> {
        let item = to_item(HISTORY_PK, &sort_key(snapshot.at), snapshot, Some(expiry(snapshot.at)))?;
        self.put(item).await
    }

    /// Snapshots taken at or after `since`, oldest first.
    pub async fn pass_snapshots_since(&self, since: Timestamp) -> Result<Vec<PassSnapshot>, StoreError> {
        self.query_since(HISTORY_PK, since, read_item).await
    }

    /// Adds one refusal of `tenant`'s create to the count of `at`'s minute, the deployment's
    /// and the tenant's ([`RefusalMinute::of_scope`] reads them apart): one atomic update, no
    /// read.
    pub async fn count_refusal(
        &self,
        reason: RefusalReason,
        tenant: &TenantId,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let minute = minute_of(at);
        self.client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(REFUSALS_PK))
            .key(SK, s(sort_key(minute)))
            .update_expression("ADD #reason :one, #tenant_reason :one SET #minute = :minute, #expires = :expires")
            .expression_attribute_names("#reason", reason.as_str())
            .expression_attribute_names("#tenant_reason", tenant_count(tenant, reason))
            .expression_attribute_names("#minute", MINUTE)
            .expression_attribute_names("#expires", EXPIRES_AT)
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":minute", s(minute.to_string()))
            .expression_attribute_values(":expires", n(expiry(minute)))
            .send()
            .await
            .map_err(|e| StoreError::backend("UpdateItem", e))?;
        Ok(())
    }

    /// Refusal counts of the minutes at or after `since`, oldest first.
    pub async fn refusals_since(&self, since: Timestamp) -> Result<Vec<RefusalMinute>, StoreError> {
        self.query_since(REFUSALS_PK, since, refusal_minute).await
    }

    /// Items that do not read are left out (logged): a chart misses a point.
    async fn query_since<T>(
        &self,
        pk: &str,
        since: Timestamp,
        parse: impl FnMut(Item) -> Result<T, Unreadable>,
    ) -> Result<Vec<T>, StoreError> {
        let (items, _) = self
            .query_all(
                || {
                    self.client
                        .query()
                        .table_name(&self.table)
                        .key_condition_expression("#pk = :pk AND #sk >= :since")
                        .expression_attribute_names("#pk", PK)
                        .expression_attribute_names("#sk", SK)
                        .expression_attribute_values(":pk", s(pk))
                        .expression_attribute_values(":since", s(sort_key(since)))
                },
                parse,
            )
            .await?;
        Ok(items)
    }
}

fn refusal_minute(mut item: Item) -> Result<RefusalMinute, Unreadable> {
    let (pk, sk) = take_key(&mut item);
    let minute = match item.remove(MINUTE) {
        Some(AttributeValue::S(m)) => m.parse().ok(),
        _ => None,
    };
    let Some(minute) = minute else {
        return Err(Unreadable {
            pk,
            sk,
            reason: "no minute, or not a time".into(),
        });
    };
    item.remove(EXPIRES_AT);
    let counts: BTreeMap<String, u64> = item
        .into_iter()
        .filter_map(|(reason, value)| match value {
            AttributeValue::N(count) => Some((reason, count.parse().ok()?)),
            _ => None,
        })
        .collect();
    Ok(RefusalMinute { minute, counts })
}
