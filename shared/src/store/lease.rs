//! Leases: pk=`LEASE`, sk=name. One holder at a time, until it releases the lease or the
//! lease's `expires_at` (epoch seconds) passes; DynamoDB's TTL eventually removes stale ones.

use std::time::Duration;

use jiff::Timestamp;

use super::item::{EXPIRES_AT, PK, key, n, s};
use super::{Store, StoreError};

const LEASE_PK: &str = "LEASE";
const OWNER: &str = "owner";
const ACQUIRED_AT: &str = "acquired_at";

impl Store {
    /// Takes the lease `name` for `owner` until `now + ttl` (rounded up to whole seconds).
    /// `false` when someone else holds an unexpired lease; the same owner may renew it.
    pub async fn try_acquire_lease(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let ttl_secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX) + i64::from(ttl.subsec_nanos() > 0);
        let mut item = key(LEASE_PK, name);
        item.insert(OWNER.to_owned(), s(owner));
        item.insert(ACQUIRED_AT.to_owned(), s(now.to_string()));
        item.insert(
            EXPIRES_AT.to_owned(),
            n(now.as_second().saturating_add(ttl_secs.max(1))),
        );
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk) OR #expires <= :now OR #owner = :owner")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#expires", EXPIRES_AT)
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_values(":now", n(now.as_second()))
            .expression_attribute_values(":owner", s(owner))
            .send()
            .await;
        StoreError::condition_held("PutItem", put)
    }

    /// Gives the lease up if `owner` still holds it; `false` if it had expired and someone
    /// else took it (or it is gone), in which case nothing is changed.
    pub async fn release_lease(&self, name: &str, owner: &str) -> Result<bool, StoreError> {
        let delete = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key(LEASE_PK, name)))
            .condition_expression("#owner = :owner")
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_values(":owner", s(owner))
            .send()
            .await;
        StoreError::condition_held("DeleteItem", delete)
    }
}
