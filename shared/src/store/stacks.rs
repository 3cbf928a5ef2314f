//! Stack records: pk=`STACK`, sk=stack id; their manifests apart: pk=`MANIFEST`, sk=stack id.
//!
//! The manifest is most of a stack's size. Kept out of the record, a query over every stack
//! (the reconciler's, every minute) reads a few pages whatever the challenges' manifests are.
//! Record and manifest are written and deleted together, in one transaction, and read
//! record first: a listed record's manifest is read by its key, never from a second listing
//! that may have seen other stacks.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, KeysAndAttributes, Put, TransactWriteItem};
use jiff::Timestamp;

use super::cursor::ListCursor;
use super::item::{Item, PK, SK, Unreadable, key, read_item, readable, s, take_key, to_item};
use super::manifest::{self, MANIFEST_ATTR, StoredManifest};
use super::{Store, StoreError, idempotency};
use crate::late_writes::Writes;
use crate::model::{ObservedState, StackId, StackRecord, StackStatus, StackUsage};

const STACK_PK: &str = "STACK";
const MANIFEST_PK: &str = "MANIFEST";
/// The index ordering items of a partition by `created_at` (template.yaml, keys only). It
/// orders the stored strings (RFC 3339, a fraction only when non-zero): a stack created on an
/// exact whole second sorts after the others of that second. Paging stays exact either way.
const CREATED_INDEX: &str = "created_at";
const CREATED_ATTR: &str = "created_at";
/// The record's own id attribute (`StackRecord::stack_id`), the `usage` index's sort key.
const STACK_ID_ATTR: &str = "stack_id";
/// The index holding each stack's [`StackUsage`] (template.yaml: pk and `stack_id`,
/// projecting only those attributes), so that reading every stack's usage reads items of
/// about 200 bytes (keys included) instead of the records.
const USAGE_INDEX: &str = "usage";
/// Most keys one BatchGetItem takes.
const BATCH_GET_KEYS: usize = 100;
/// BatchGetItem rounds for one set of keys (DynamoDB hands back what it could not read).
const BATCH_GET_ROUNDS: u32 = 8;

/// Whether a read fetches the stack's manifest (`pod_spec`) too: one more read, needed only
/// where the manifest is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manifest {
    Include,
    /// `pod_spec` is left empty.
    Omit,
}

/// Every stack record, and those that do not read as one (left out of `records`, logged).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackListing {
    /// Oldest first.
    pub records: Vec<StackRecord>,
    pub unreadable: Vec<Unreadable>,
}

impl Store {
    /// Writes a new record and its manifest; fails with `ConditionFailed` if the id exists.
    #[cfg(any(test, feature = "test-fixtures"))]
    pub async fn put_new_stack(&self, record: &StackRecord) -> Result<(), StoreError> {
        let manifest = StoredManifest::encode(&record.pod_spec)?;
        self.put_new_stack_with(record, &manifest, &Writes::default()).await
    }

    /// [`put_new_stack`](Self::put_new_stack) with the manifest already encoded (it must be
    /// `record.pod_spec`'s).
    /// It is one of `puts`: it goes on to its answer however long after the caller gave up,
    /// and removes what it wrote if it landed after that (see [`crate::late_writes`]).
    pub(crate) async fn put_new_stack_with(
        &self,
        record: &StackRecord,
        stored: &StoredManifest,
        puts: &Writes,
    ) -> Result<(), StoreError> {
        let id = record.stack_id.as_str();
        let mut item = to_item(STACK_PK, id, record, None)?;
        item.remove(MANIFEST_ATTR);
        let mut manifest = key(MANIFEST_PK, id);
        manifest.insert(MANIFEST_ATTR.to_owned(), stored.attribute());
        let put_record = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", PK)
            .build()
            .map_err(|e| StoreError::Malformed(e.to_string()))?;
        let put_manifest = Put::builder()
            .table_name(&self.table)
            .set_item(Some(manifest))
            .build()
            .map_err(|e| StoreError::Malformed(e.to_string()))?;
        let transaction = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(put_record).build())
            .transact_items(TransactWriteItem::builder().put(put_manifest).build());
        let (store, id) = (self.clone(), record.stack_id.clone());
        let put = async move { transaction.send().await.map_err(transaction_error).map(drop) };
        puts.run(put, move |put| {
            put.is_ok().then_some(async move {
                if let Err(err) = store.delete_stack_items(&id, None).await {
                    tracing::warn!(stack_id = %id, error = %err, "could not remove a record that landed late; the reconciler will");
                }
            })
        })
        .await
        .map_err(|source| StoreError::Interrupted {
            operation: "transact write",
            source,
        })?
    }

    pub async fn get_stack(&self, id: &StackId, manifest: Manifest) -> Result<Option<StackRecord>, StoreError> {
        let read_record = async {
            let item = self.get_item(STACK_PK, id.as_str(), self.consistent_read).await?;
            Ok::<_, StoreError>(item.map(read_item::<StackRecord>).transpose()?)
        };
        let read_manifest = async {
            if manifest == Manifest::Omit {
                return Ok(None);
            }
            Ok(self
                .get_item(MANIFEST_PK, id.as_str(), self.consistent_read)
                .await?
                .map(manifest_of)
                .transpose()?)
        };
        let (record, spec) = tokio::try_join!(read_record, read_manifest)?;
        Ok(record.map(|mut record| {
            if let Some(spec) = spec {
                record.pod_spec = spec;
            }
            record
        }))
    }

    /// Every stack record, oldest first (one paginated query; with manifests, then read by key).
    pub async fn list_stacks(&self, manifest: Manifest) -> Result<StackListing, StoreError> {
        let (mut records, unreadable) = self.query_partition(STACK_PK, read_item::<StackRecord>).await?;
        if manifest == Manifest::Include {
            let ids: Vec<StackId> = records.iter().map(|r| r.stack_id.clone()).collect();
            let mut specs = self.get_manifests(&ids).await?;
            for record in &mut records {
                if let Some(spec) = specs.remove(record.stack_id.as_str()) {
                    record.pod_spec = spec;
                }
            }
        }
        records.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then_with(|| a.stack_id.cmp(&b.stack_id))
        });
        Ok(StackListing { records, unreadable })
    }

    /// What every stack holds of the cluster, from the `usage` index: one query per leading
    /// digit of the ids ([`StackId::leading_digit_prefixes`]; 10,000 stacks: 16 queries of ~625
    /// items, one page each), all at once, of small items, neither the records nor their
    /// manifests. DynamoDB keeps the index eventually consistent: a write shows there within a
    /// moment (DynamoDB Local: at once). While the index does not exist or is still being built (the first deploy that
    /// adds it returns before DynamoDB has filled it), the records are read instead.
    pub async fn list_stack_usage(&self) -> Result<Vec<StackUsage>, StoreError> {
        let prefixes: Vec<String> = StackId::leading_digit_prefixes().collect();
        let segments = futures::future::try_join_all(prefixes.iter().map(|prefix| {
            self.query_all(
                || {
                    self.client
                        .query()
                        .table_name(&self.table)
                        .index_name(USAGE_INDEX)
                        .key_condition_expression("#pk = :pk AND begins_with(#id, :prefix)")
                        .expression_attribute_names("#pk", PK)
                        .expression_attribute_names("#id", STACK_ID_ATTR)
                        .expression_attribute_values(":pk", s(STACK_PK))
                        .expression_attribute_values(":prefix", s(prefix.as_str()))
                },
                read_item::<StackUsage>,
            )
        }));
        match segments.await {
            Ok(segments) => Ok(segments.into_iter().flat_map(|(usage, _)| usage).collect()),
            Err(err) if is_index_unready(&err) => {
                tracing::warn!(error = %err, index = USAGE_INDEX, "index not readable yet, reading the records");
                let listing = self.list_stacks(Manifest::Omit).await?;
                Ok(listing.records.iter().map(StackUsage::from).collect())
            }
            Err(err) => Err(err),
        }
    }

    /// Up to `limit` stack keys, oldest first, after `after` (from the start without it), and
    /// whether more follow. Reads the `created_at` index, whose membership may lag a write by
    /// a moment; read the stacks themselves with [`get_stacks`](Self::get_stacks).
    pub async fn list_stack_keys(
        &self,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<(Vec<ListCursor>, bool), StoreError> {
        let mut keys = Vec::with_capacity(limit.min(1000) + 1);
        let mut start = after.map(index_key);
        loop {
            // One more than asked tells whether another page exists.
            let wanted = i32::try_from(limit + 1 - keys.len()).unwrap_or(i32::MAX);
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(CREATED_INDEX)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", PK)
                .expression_attribute_values(":pk", s(STACK_PK))
                .limit(wanted)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| StoreError::backend("Query", e))?;
            for item in out.items.unwrap_or_default() {
                keys.push(cursor_of(&item)?);
            }
            if keys.len() > limit {
                keys.truncate(limit);
                return Ok((keys, true));
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                return Ok((keys, false));
            }
        }
    }

    /// The stacks `ids` with their manifests, in the order given; ids without a record (or
    /// whose record was deleted while they were read, or does not read) are left out.
    pub async fn get_stacks(&self, ids: &[StackId]) -> Result<Vec<StackRecord>, StoreError> {
        let keys = ids
            .iter()
            .flat_map(|id| [key(STACK_PK, id.as_str()), key(MANIFEST_PK, id.as_str())])
            .collect();
        let (mut records, mut specs) = (Vec::new(), Vec::new());
        for item in self.batch_get(keys).await? {
            match item_key(&item)? {
                (STACK_PK, _) => records.push(read_item::<StackRecord>(item)),
                (MANIFEST_PK, id) => {
                    let id = id.to_owned();
                    specs.push(manifest_of(item).map(|spec| (id, spec)));
                }
                _ => {}
            }
        }
        let mut records: HashMap<String, StackRecord> = readable(records)
            .0
            .into_iter()
            .map(|record| (record.stack_id.to_string(), record))
            .collect();
        // A stack whose manifest does not read is left out like one whose record does not.
        let mut specs: HashMap<String, String> = readable(specs).0.into_iter().collect();
        Ok(ids
            .iter()
            .filter_map(|id| {
                let mut record = records.remove(id.as_str())?;
                match specs.remove(id.as_str()) {
                    Some(spec) => record.pod_spec = spec,
                    // Record and manifest go together: the stack was deleted between the reads
                    // (or its manifest does not read).
                    None if record.pod_spec.is_empty() => return None,
                    None => {}
                }
                Some(record)
            })
            .collect())
    }

    /// The manifests of `ids` that exist, by stack id.
    async fn get_manifests(&self, ids: &[StackId]) -> Result<HashMap<String, String>, StoreError> {
        let keys = ids.iter().map(|id| key(MANIFEST_PK, id.as_str())).collect();
        let mut specs = HashMap::new();
        for item in self.batch_get(keys).await? {
            let id = item_key(&item)?.1.to_owned();
            specs.insert(id, manifest_of(item)?);
        }
        Ok(specs)
    }

    /// The items at `keys` that exist, in any order (BatchGetItem, consistent as configured).
    async fn batch_get(&self, keys: Vec<Item>) -> Result<Vec<Item>, StoreError> {
        let mut found = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            let mut pending = Some(chunk.to_vec());
            let mut round = 0;
            while let Some(keys) = pending.take() {
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(self.consistent_read)
                    .build()
                    .map_err(|e| StoreError::Malformed(e.to_string()))?;
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(|e| StoreError::backend("BatchGetItem", e))?;
                let items = out
                    .responses
                    .and_then(|mut r| r.remove(&self.table))
                    .unwrap_or_default();
                let progressed = !items.is_empty();
                found.extend(items);
                pending = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.table))
                    .map(|k| k.keys)
                    .filter(|k| !k.is_empty());
                if pending.is_some() {
                    round += 1;
                    if round >= BATCH_GET_ROUNDS {
                        // DynamoDB left keys unread (throttling): try later.
                        return Err(StoreError::Unavailable {
                            operation: "BatchGetItem",
                            source: "keys left unprocessed after retries".into(),
                        });
                    }
                    // Nothing read at all means throttling: back off. A partial answer (its
                    // 16 MB cap) is simply continued.
                    if !progressed {
                        tokio::time::sleep(Duration::from_millis(25 << round)).await;
                    }
                }
            }
        }
        Ok(found)
    }

    /// Every item of partition `pk`, through `parse` (a paginated query), and those that do
    /// not read.
    pub(super) async fn query_partition<T>(
        &self,
        pk: &str,
        parse: impl FnMut(Item) -> Result<T, Unreadable>,
    ) -> Result<(Vec<T>, Vec<Unreadable>), StoreError> {
        self.query_partition_read(pk, self.consistent_read, parse).await
    }

    /// [`query_partition`](Self::query_partition) with the consistency given, not
    /// `DDB_CONSISTENT_READ`'s.
    pub(super) async fn query_partition_read<T>(
        &self,
        pk: &str,
        consistent: bool,
        parse: impl FnMut(Item) -> Result<T, Unreadable>,
    ) -> Result<(Vec<T>, Vec<Unreadable>), StoreError> {
        self.query_all(|| self.partition_query(pk, consistent), parse).await
    }

    /// Writes back what the cluster showed (a failure with its reason, message and `now` as
    /// `failed_at`); `ConditionFailed` if the record is gone, or is a tombstone and this is
    /// not a failure: a failed stack is final, and a write-back planned from an older read
    /// must not revive it.
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
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#node_id", "node_id")
            .expression_attribute_names("#ip", "node_public_ip")
            .expression_attribute_names("#updated", "updated_at")
            .expression_attribute_names("#reason", "reason")
            .expression_attribute_names("#message", "message")
            .expression_attribute_names("#failed_at", "failed_at")
            .expression_attribute_values(":status", s(observed.status.as_str()))
            .expression_attribute_values(":node_id", s(observed.node_id.clone()))
            .expression_attribute_values(":updated", s(now.to_string()));
        update = match &observed.node_public_ip {
            Some(ip) => update.expression_attribute_values(":ip", s(ip.clone())),
            None => update.expression_attribute_values(":ip", aws_sdk_dynamodb::types::AttributeValue::Null(true)),
        };
        let set = "SET #status = :status, #node_id = :node_id, #ip = :ip, #updated = :updated";
        update = match &observed.failure {
            Some(failure) => update
                .condition_expression("attribute_exists(#pk)")
                .expression_attribute_values(":reason", s(failure.reason.as_str()))
                .expression_attribute_values(":message", s(failure.message.clone()))
                .expression_attribute_values(":failed_at", s(now.to_string()))
                .update_expression(format!(
                    "{set}, #reason = :reason, #message = :message, #failed_at = :failed_at"
                )),
            None => update
                .condition_expression("attribute_exists(#pk) AND #status <> :failed")
                .expression_attribute_values(":failed", s(StackStatus::Failed.as_str()))
                .update_expression(format!("{set} REMOVE #reason, #message, #failed_at")),
        };
        update
            .send()
            .await
            .map_err(|e| StoreError::conditional("UpdateItem", e))?;
        Ok(())
    }

    /// Moves `ttl_expires_at` to `new_expiry` if the record still has `current_expiry` (so two
    /// renewals never race each other past the cap) and has not expired by `now` (so a renewal
    /// never revives a stack the reconciler is already removing).
    pub(crate) async fn renew_stack(
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
            .map_err(|e| StoreError::conditional("UpdateItem", e))?;
        Ok(())
    }

    /// Removes the record with its manifest and idempotency key, together. Call only once the
    /// cluster objects are confirmed gone. Deleting a missing record succeeds.
    pub async fn delete_stack(&self, record: &StackRecord) -> Result<(), StoreError> {
        self.delete_items(&record.stack_id, record.idempotency_key.as_deref(), false)
            .await
    }

    /// [`delete_stack`](Self::delete_stack), unless the record has become a tombstone since
    /// it was read (a concurrent read or pass found the stack failed): then everything
    /// stays and the answer is `ConditionFailed`.
    pub(crate) async fn delete_stack_unless_failed(&self, record: &StackRecord) -> Result<(), StoreError> {
        self.delete_items(&record.stack_id, record.idempotency_key.as_deref(), true)
            .await
    }

    /// Removes the record and manifest of `id`, and the idempotency key if given, together.
    /// Deleting missing items succeeds.
    pub(crate) async fn delete_stack_items(
        &self,
        id: &StackId,
        idempotency_key: Option<&str>,
    ) -> Result<(), StoreError> {
        self.delete_items(id, idempotency_key, false).await
    }

    async fn delete_items(
        &self,
        id: &StackId,
        idempotency_key: Option<&str>,
        unless_failed: bool,
    ) -> Result<(), StoreError> {
        let id = id.as_str();
        let mut record = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(key(STACK_PK, id)));
        if unless_failed {
            record = record
                .condition_expression("attribute_not_exists(#pk) OR #status <> :failed")
                .expression_attribute_names("#pk", PK)
                .expression_attribute_names("#status", "status")
                .expression_attribute_values(":failed", s(StackStatus::Failed.as_str()));
        }
        let mut deletes = vec![record];
        for k in std::iter::once(key(MANIFEST_PK, id)).chain(idempotency_key.map(idempotency::key_of)) {
            deletes.push(Delete::builder().table_name(&self.table).set_key(Some(k)));
        }
        let mut transaction = self.client.transact_write_items();
        for delete in deletes {
            let delete = delete.build().map_err(|e| StoreError::Malformed(e.to_string()))?;
            transaction = transaction.transact_items(TransactWriteItem::builder().delete(delete).build());
        }
        transaction.send().await.map_err(transaction_error)?;
        Ok(())
    }

    /// How many manifests are stored (used by tests: one per record, none left over).
    #[cfg(any(test, feature = "test-fixtures"))]
    pub async fn count_manifests(&self) -> Result<usize, StoreError> {
        Ok(self.query_partition(MANIFEST_PK, |_| Ok(())).await?.0.len())
    }
}

/// The `pod_spec` of a manifest item.
/// The text of a manifest item, or what names the item if it does not read (as
/// [`read_item`] does for the other items).
fn manifest_of(mut item: Item) -> Result<String, Unreadable> {
    let (pk, sk) = take_key(&mut item);
    let text = match item.get(MANIFEST_ATTR) {
        Some(value) => manifest::decode(value).map_err(|e| e.to_string()),
        None => Err("manifest item without pod_spec".to_owned()),
    };
    text.map_err(|reason| Unreadable { pk, sk, reason })
}

/// A transaction cancelled because a condition of one of its items did not hold is
/// [`StoreError::ConditionFailed`]; anything else is the backend's.
fn transaction_error<R>(err: aws_sdk_dynamodb::error::SdkError<TransactWriteItemsError, R>) -> StoreError
where
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let condition_failed = match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(cancel)) => cancel
            .cancellation_reasons()
            .iter()
            .any(|r| r.code() == Some("ConditionalCheckFailed")),
        _ => false,
    };
    if condition_failed {
        StoreError::ConditionFailed
    } else {
        StoreError::backend("TransactWriteItems", err)
    }
}

/// DynamoDB's answer to a query of an index that does not exist, or is still being filled
/// after it was added to the table.
fn is_index_unready(err: &StoreError) -> bool {
    matches!(err, StoreError::Backend { message, .. }
        if message.starts_with("ValidationException")
            && (message.contains("backfilling") || message.contains("does not have the specified index")))
}

/// `(pk, sk)` of an item.
fn item_key(item: &Item) -> Result<(&str, &str), StoreError> {
    match (item.get(PK), item.get(SK)) {
        (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) => Ok((pk, sk)),
        _ => Err(StoreError::Malformed("item without pk/sk".into())),
    }
}

/// The position of an item of the `created_at` index.
fn cursor_of(item: &Item) -> Result<ListCursor, StoreError> {
    let (_, id) = item_key(item)?;
    let created_at = match item.get(CREATED_ATTR) {
        Some(AttributeValue::S(at)) => at.clone(),
        _ => return Err(StoreError::Malformed("indexed stack without created_at".into())),
    };
    let id = id
        .parse()
        .map_err(|_| StoreError::Malformed(format!("stack record with id {id:?}")))?;
    Ok(ListCursor::new(created_at, id))
}

/// The index key a query continues after (table keys and the index's sort key).
fn index_key(cursor: &ListCursor) -> Item {
    let mut item = key(STACK_PK, cursor.stack_id.as_str());
    item.insert(CREATED_ATTR.to_owned(), s(cursor.created_at.clone()));
    item
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
    use super::*;

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

    #[test]
    fn only_a_missing_or_filling_index_sends_usage_to_the_records() {
        let backend = |message: &str| StoreError::Backend {
            operation: "Query",
            message: message.to_owned(),
            source: "test".into(),
        };
        for unready in [
            "ValidationException: Cannot read from backfilling global secondary index: usage",
            "ValidationException: The table does not have the specified index: usage",
        ] {
            assert!(is_index_unready(&backend(unready)), "{unready}");
        }
        for other in [
            "ValidationException: Invalid KeyConditionExpression: Syntax error",
            "ResourceNotFoundException: Requested resource not found",
        ] {
            assert!(!is_index_unready(&backend(other)), "{other}");
        }
        assert!(!is_index_unready(&StoreError::Malformed(
            "does not have the specified index".into()
        )));
    }
}
