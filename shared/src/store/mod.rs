//! DynamoDB store: one table (schema in template.yaml), single-table keys `pk`/`sk`.
//!
//! | pk      | sk          | item                                   | TTL (`expires_at`) |
//! |---------|-------------|----------------------------------------|--------------------|
//! | `STACK` | stack id    | [`StackRecord`](crate::model::StackRecord) without `pod_spec` | none: the reconciler ends stacks |
//! | `MANIFEST` | stack id | the record's `pod_spec` (zstd, see [`StoredManifest`]), written and deleted with it | none |
//! | `IDEM`  | key (`<tenant>\x1f<key>` but for `default`) | idempotency claim | stack lifetime |
//! | `HOLD#<tenant>` | stack id | a stack's hold on its tenant's limit (see `holds`) | stack lifetime |
//! | `JOB`   | job id      | [`BatchDeleteJob`](crate::model::BatchDeleteJob) | one day  |
//! | `LEASE` | name        | reconciler lease                       | lease expiry       |
//! | `HISTORY` | pass time | [`PassSnapshot`](crate::history::PassSnapshot) of one reconcile pass | 25 hours |
//! | `REFUSALS` | minute   | create refusals of that minute, one count per reason | 25 hours |
//!
//! Stacks share one partition so that reading them all is a consistent, paginated query (never
//! a scan); the `created_at` index (keys only) pages through them oldest first, and the `usage`
//! index holds only what `/stats` counts of each ([`StackUsage`](crate::model::StackUsage)).

mod cursor;
mod error;
mod history;
mod holds;
mod idempotency;
mod item;
mod jobs;
mod lease;
mod manifest;
mod stacks;

use aws_sdk_dynamodb::Client;

pub use cursor::ListCursor;
pub use error::StoreError;
pub(crate) use holds::TenantHold;
pub use idempotency::IdempotencyClaim;
pub(crate) use item::Unreadable;
pub use manifest::{MAX_ITEM_BYTES, StoredManifest, UnstorableManifest};
pub use stacks::Manifest;

/// Handle on the stack table; cheap to clone, built once per process.
#[derive(Clone, Debug)]
pub struct Store {
    client: Client,
    table: String,
    consistent_read: bool,
}

impl Store {
    pub fn new(client: Client, table: impl Into<String>, consistent_read: bool) -> Self {
        Self {
            client,
            table: table.into(),
            consistent_read,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn table(&self) -> &str {
        &self.table
    }
}

impl Store {
    /// Every item `query` selects, through `parse`, one page at a time; the items that do not
    /// read apart (logged), so that one of them does not fail the whole list.
    pub(crate) async fn query_all<T>(
        &self,
        query: impl Fn() -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
        mut parse: impl FnMut(item::Item) -> Result<T, Unreadable>,
    ) -> Result<(Vec<T>, Vec<Unreadable>), StoreError> {
        let mut parsed = Vec::new();
        let mut start = None;
        loop {
            let out = query()
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| StoreError::backend("Query", e))?;
            for item in out.items.unwrap_or_default() {
                parsed.push(parse(item));
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                return Ok(item::readable(parsed));
            }
        }
    }

    /// The item `pk`/`sk`, if there is one.
    pub(crate) async fn get_item(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
    ) -> Result<Option<item::Item>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(item::key(pk, sk)))
            .consistent_read(consistent)
            .send()
            .await
            .map_err(|e| StoreError::backend("GetItem", e))?;
        Ok(out.item)
    }

    /// A query of the partition `pk`, to which a caller adds its filter or projection.
    pub(crate) fn partition_query(
        &self,
        pk: &str,
        consistent: bool,
    ) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        self.client
            .query()
            .table_name(&self.table)
            .key_condition_expression("#pk = :pk")
            .expression_attribute_names("#pk", item::PK)
            .expression_attribute_values(":pk", item::s(pk))
            .consistent_read(consistent)
    }

    /// Writes `item` whatever is there.
    pub(crate) async fn put(&self, item: item::Item) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| StoreError::backend("PutItem", e))?;
        Ok(())
    }

    /// One cheap consistent read proving the table answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.get_item("HEALTH", "HEALTH", false).await?;
        Ok(())
    }
}
