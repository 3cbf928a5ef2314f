//! Stack records: pk=`STACK`, sk=stack id.

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{Delete, TransactWriteItem};
use jiff::Timestamp;

use super::item::{PK, from_item, key, s, to_item};
use super::{Store, StoreError, idempotency};
use crate::model::{StackId, StackRecord, StackStatus};

const STACK_PK: &str = "STACK";
/// Every attribute of a stack item except `pod_spec` (a unit test keeps it in step with
/// [`StackRecord`]).
const ATTRIBUTES_BUT_MANIFEST: [&str; 14] = [
    "stack_id",
    "pod_id",
    "namespace",
    "node_id",
    "node_public_ip",
    "ports",
    "service_name",
    "status",
    "ttl_expires_at",
    "created_at",
    "updated_at",
    "requested_cpu_milli",
    "requested_memory_bytes",
    "idempotency_key",
];

/// What the cluster showed about a stack; written back only when it differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedState {
    pub status: StackStatus,
    pub node_id: String,
    pub node_public_ip: Option<String>,
}

impl ObservedState {
    pub fn of(record: &StackRecord) -> Self {
        Self {
            status: record.status,
            node_id: record.node_id.clone(),
            node_public_ip: record.node_public_ip.clone(),
        }
    }
}

impl Store {
    /// Writes a new record; fails with `ConditionFailed` if the id exists.
    pub async fn put_new_stack(&self, record: &StackRecord) -> Result<(), StoreError> {
        let item = to_item(STACK_PK, record.stack_id.as_str(), record, None)?;
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", PK)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(_)) => StoreError::ConditionFailed,
                _ => StoreError::backend("PutItem", e),
            })?;
        Ok(())
    }

    pub async fn get_stack(&self, id: &StackId) -> Result<Option<StackRecord>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(STACK_PK, id.as_str())))
            .consistent_read(self.consistent_read)
            .send()
            .await
            .map_err(|e| StoreError::backend("GetItem", e))?;
        out.item.map(from_item).transpose()
    }

    /// Every stack record, oldest first (one paginated query).
    pub async fn list_stacks(&self) -> Result<Vec<StackRecord>, StoreError> {
        self.query_stacks(false).await
    }

    /// Like [`Self::list_stacks`] but with `pod_spec` left empty: the manifest is most of a
    /// record's size, so the reconciler reads several times fewer pages and holds less.
    pub async fn list_stacks_without_manifest(&self) -> Result<Vec<StackRecord>, StoreError> {
        self.query_stacks(true).await
    }

    async fn query_stacks(&self, without_manifest: bool) -> Result<Vec<StackRecord>, StoreError> {
        let mut records: Vec<StackRecord> = Vec::new();
        let mut start = None;
        loop {
            let mut query = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", PK)
                .expression_attribute_values(":pk", s(STACK_PK))
                .consistent_read(self.consistent_read)
                .set_exclusive_start_key(start);
            if without_manifest {
                // Placeholders for every name: several (status, namespace, ...) are reserved words.
                let mut projection = Vec::with_capacity(ATTRIBUTES_BUT_MANIFEST.len());
                for (i, name) in ATTRIBUTES_BUT_MANIFEST.iter().enumerate() {
                    let placeholder = format!("#a{i}");
                    query = query.expression_attribute_names(&placeholder, *name);
                    projection.push(placeholder);
                }
                query = query.projection_expression(projection.join(", "));
            }
            let out = query.send().await.map_err(|e| StoreError::backend("Query", e))?;
            for item in out.items.unwrap_or_default() {
                records.push(from_item(item)?);
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        records.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then_with(|| a.stack_id.cmp(&b.stack_id))
        });
        Ok(records)
    }

    /// Writes back what the cluster showed; `ConditionFailed` if the record is gone.
    pub async fn update_observed(
        &self,
        id: &StackId,
        observed: &ObservedState,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(STACK_PK, id.as_str())))
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#node_id", "node_id")
            .expression_attribute_names("#ip", "node_public_ip")
            .expression_attribute_names("#updated", "updated_at")
            .expression_attribute_values(":status", s(observed.status.as_str()))
            .expression_attribute_values(":node_id", s(observed.node_id.clone()))
            .expression_attribute_values(":updated", s(now.to_string()));
        update = match &observed.node_public_ip {
            Some(ip) => update.expression_attribute_values(":ip", s(ip.clone())),
            None => update.expression_attribute_values(":ip", aws_sdk_dynamodb::types::AttributeValue::Null(true)),
        };
        update
            .update_expression("SET #status = :status, #node_id = :node_id, #ip = :ip, #updated = :updated")
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(_)) => StoreError::ConditionFailed,
                _ => StoreError::backend("UpdateItem", e),
            })?;
        Ok(())
    }

    /// Moves `ttl_expires_at` to `new_expiry` if the record still has `current_expiry` (so two
    /// renewals never race each other past the cap) and has not expired by `now` (so a renewal
    /// never revives a stack the reconciler is already removing).
    pub async fn renew_stack(
        &self,
        id: &StackId,
        current_expiry: Timestamp,
        new_expiry: Timestamp,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(STACK_PK, id.as_str())))
            .condition_expression("#ttl = :current AND #ttl > :now")
            .update_expression("SET #ttl = :new, #updated = :updated")
            .expression_attribute_names("#ttl", "ttl_expires_at")
            .expression_attribute_names("#updated", "updated_at")
            .expression_attribute_values(":current", s(current_expiry.to_string()))
            .expression_attribute_values(":new", s(new_expiry.to_string()))
            .expression_attribute_values(":updated", s(now.to_string()))
            .expression_attribute_values(":now", s(whole_second_after(now)))
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(_)) => StoreError::ConditionFailed,
                _ => StoreError::backend("UpdateItem", e),
            })?;
        Ok(())
    }

    /// Removes the record and its idempotency key together. Call only once the cluster
    /// objects are confirmed gone. Deleting a missing record succeeds.
    pub async fn delete_stack(&self, record: &StackRecord) -> Result<(), StoreError> {
        let Some(idem_key) = &record.idempotency_key else {
            return self.delete_stack_by_id(&record.stack_id).await;
        };
        let delete = |k| {
            Delete::builder()
                .table_name(&self.table)
                .set_key(Some(k))
                .build()
                .map(|d| TransactWriteItem::builder().delete(d).build())
                .map_err(|e| StoreError::Malformed(e.to_string()))
        };
        self.client
            .transact_write_items()
            .transact_items(delete(key(STACK_PK, record.stack_id.as_str()))?)
            .transact_items(delete(idempotency::key_of(idem_key))?)
            .send()
            .await
            .map_err(|e| StoreError::backend("TransactWriteItems", e))?;
        Ok(())
    }

    pub async fn delete_stack_by_id(&self, id: &StackId) -> Result<(), StoreError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key(STACK_PK, id.as_str())))
            .send()
            .await
            .map_err(|e: aws_sdk_dynamodb::error::SdkError<DeleteItemError, _>| StoreError::backend("DeleteItem", e))?;
        Ok(())
    }
}

/// `now` rounded up to a whole second, as RFC 3339 without a fraction. Stored timestamps are
/// compared as strings and carry a fraction only when it is non-zero, so `…:00Z` sorts after
/// `…:00.5Z`. Against a whole second, no expiry at or before `now` compares greater, so a
/// renewal is never granted late; it is refused up to two seconds early instead (a fraction
/// sorts below its whole second).
fn whole_second_after(now: Timestamp) -> String {
    let second = now.as_second();
    let ceiling = if now.subsec_nanosecond() > 0 {
        second + 1
    } else {
        second
    };
    Timestamp::from_second(ceiling).unwrap_or(now).to_string()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::model::{PortMapping, Protocol};
    use crate::store::item::SK;

    #[test]
    fn projection_names_every_attribute_but_the_manifest() {
        let now = Timestamp::now();
        let record = StackRecord {
            stack_id: StackId::generate(),
            pod_id: "pod".into(),
            namespace: "ns".into(),
            node_id: "node".into(),
            node_public_ip: Some("203.0.113.1".into()),
            pod_spec: "kind: Pod".into(),
            ports: vec![PortMapping {
                container_port: 80,
                protocol: Protocol::Tcp,
                node_port: 30000,
            }],
            service_name: "svc".into(),
            status: StackStatus::Running,
            ttl_expires_at: now,
            created_at: now,
            updated_at: now,
            requested_cpu_milli: 100,
            requested_memory_bytes: 1,
            idempotency_key: Some("key".into()),
        };
        let item = to_item(STACK_PK, record.stack_id.as_str(), &record, None).unwrap();
        let stored: BTreeSet<&str> = item
            .keys()
            .map(String::as_str)
            .filter(|k| ![PK, SK, "pod_spec"].contains(k))
            .collect();
        assert_eq!(stored, BTreeSet::from(ATTRIBUTES_BUT_MANIFEST));
    }

    #[test]
    fn renew_cutoff_orders_like_time_as_a_string() {
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        let now = at("2026-11-22T10:00:00.5Z");
        let cutoff = whole_second_after(now);
        assert_eq!(cutoff, "2026-11-22T10:00:01Z");
        // Expiries at or before `now` never compare greater than the cutoff...
        for expired in [
            "2026-11-22T10:00:00Z",
            "2026-11-22T10:00:00.5Z",
            "2026-11-22T09:59:59.999Z",
        ] {
            assert!(at(expired).to_string() <= cutoff, "{expired}");
        }
        // ...expiries from the second after it on always do...
        for alive in ["2026-11-22T10:00:02Z", "2026-11-22T10:00:02.5Z", "2026-11-22T11:00:00Z"] {
            assert!(at(alive).to_string() > cutoff, "{alive}");
        }
        // ...and in between the renewal is refused, early rather than late.
        assert!(at("2026-11-22T10:00:01.5Z").to_string() < cutoff);
        assert_eq!(whole_second_after(at("2026-11-22T10:00:00Z")), "2026-11-22T10:00:00Z");
    }
}
