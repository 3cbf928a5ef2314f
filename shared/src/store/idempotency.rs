//! Idempotency keys: pk=`IDEM`, sk=key. A claim binds a key to a request body hash and the
//! stack id the first request is creating; it expires with the stack's lifetime.

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use aws_sdk_dynamodb::types::AttributeValue;

use super::item::{Item, PK, SK, from_item, key, read_item, s, to_item};
use super::{Store, StoreError};
use crate::late_writes::Writes;
use crate::model::StackId;

const IDEM_PK: &str = "IDEM";

pub(crate) fn key_of(idempotency_key: &str) -> Item {
    key(IDEM_PK, idempotency_key)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyClaim {
    pub body_sha256: String,
    pub stack_id: StackId,
    pub claimed_at: Timestamp,
}

impl Store {
    /// Claims `key` for `claim`. Returns `None` when this request now owns the key, or the
    /// claim already holding it (read in the same call).
    #[cfg(any(test, feature = "test-fixtures"))]
    pub async fn claim_idempotency_key(
        &self,
        idempotency_key: &str,
        claim: &IdempotencyClaim,
        expires_at: Timestamp,
    ) -> Result<Option<IdempotencyClaim>, StoreError> {
        self.claim_idempotency_key_with(idempotency_key, claim, expires_at, &Writes::default())
            .await
    }

    /// [`claim_idempotency_key`](Self::claim_idempotency_key) as one of `puts`: it goes on to
    /// its answer however long after the caller gave up, and frees the key if it took it after
    /// that (see [`crate::late_writes`]).
    pub(crate) async fn claim_idempotency_key_with(
        &self,
        idempotency_key: &str,
        claim: &IdempotencyClaim,
        expires_at: Timestamp,
        puts: &Writes,
    ) -> Result<Option<IdempotencyClaim>, StoreError> {
        self.put_claim_to_completion(idempotency_key, claim, expires_at, None, puts)
            .await
    }

    /// Takes over a key whose previous claim was abandoned (its create died before writing
    /// the stack record): succeeds only if the key still holds `abandoned`. One of `puts`, as
    /// a claim.
    pub(crate) async fn take_over_idempotency_key(
        &self,
        idempotency_key: &str,
        abandoned: &IdempotencyClaim,
        claim: &IdempotencyClaim,
        expires_at: Timestamp,
        puts: &Writes,
    ) -> Result<Option<IdempotencyClaim>, StoreError> {
        let replacing = Some(abandoned.stack_id.clone());
        self.put_claim_to_completion(idempotency_key, claim, expires_at, replacing, puts)
            .await
    }

    async fn put_claim_to_completion(
        &self,
        idempotency_key: &str,
        claim: &IdempotencyClaim,
        expires_at: Timestamp,
        replacing: Option<StackId>,
        puts: &Writes,
    ) -> Result<Option<IdempotencyClaim>, StoreError> {
        let (store, key, stack_id) = (self.clone(), idempotency_key.to_owned(), claim.stack_id.clone());
        let put = {
            let (store, key, claim) = (store.clone(), key.clone(), claim.clone());
            async move { store.put_claim(&key, &claim, expires_at, replacing.as_ref()).await }
        };
        // `None`: the key was taken for `claim`.
        puts.run(put, move |held| {
            matches!(held, Ok(None)).then_some(async move {
                if let Err(err) = store.release_idempotency_key(&key, &stack_id).await {
                    tracing::warn!(%stack_id, error = %err, "could not free a key claimed late; the reconciler will");
                }
            })
        })
        .await
        .map_err(|source| StoreError::Interrupted {
            operation: "claim idempotency key",
            source,
        })?
    }

    async fn put_claim(
        &self,
        idempotency_key: &str,
        claim: &IdempotencyClaim,
        expires_at: Timestamp,
        replacing: Option<&StackId>,
    ) -> Result<Option<IdempotencyClaim>, StoreError> {
        let item = to_item(IDEM_PK, idempotency_key, claim, Some(expires_at.as_second()))?;
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .expression_attribute_names("#pk", PK);
        let request = match replacing {
            None => request.condition_expression("attribute_not_exists(#pk)"),
            Some(old) => request
                .condition_expression("#stack_id = :old")
                .expression_attribute_names("#stack_id", "stack_id")
                .expression_attribute_values(":old", s(old.as_str())),
        };
        match request.send().await {
            Ok(_) => Ok(None),
            Err(err) => match err.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(failed)) => match failed.item.clone() {
                    Some(old) => Ok(Some(from_item(old)?)),
                    // Taking over a key that vanished meanwhile: claim it afresh.
                    None => Box::pin(self.put_claim(idempotency_key, claim, expires_at, None)).await,
                },
                _ => Err(StoreError::backend("PutItem", err)),
            },
        }
    }

    /// Frees a key whose create failed, so the client's retry can create afresh; only if
    /// it still belongs to `stack_id`.
    pub(crate) async fn release_idempotency_key(
        &self,
        idempotency_key: &str,
        stack_id: &StackId,
    ) -> Result<(), StoreError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key_of(idempotency_key)))
            .condition_expression("#stack_id = :id")
            .expression_attribute_names("#stack_id", "stack_id")
            .expression_attribute_values(":id", s(stack_id.as_str()))
            .send()
            .await;
        // Another create's key, or none: nothing of ours to free.
        StoreError::condition_held("DeleteItem", result).map(|_| ())
    }

    /// Every claim with its key (one paginated query): the reconciler releases those whose
    /// create died without writing a record.
    pub async fn list_idempotency_claims(&self) -> Result<Vec<(String, IdempotencyClaim)>, StoreError> {
        let (claims, _) = self
            .query_partition(IDEM_PK, |item| {
                let key = match item.get(SK) {
                    Some(AttributeValue::S(key)) => key.clone(),
                    _ => String::new(),
                };
                read_item(item).map(|claim| (key, claim))
            })
            .await?;
        Ok(claims)
    }

    /// Whether any idempotency key still exists (used by tests and diagnostics).
    #[cfg(any(test, feature = "test-fixtures"))]
    pub async fn count_idempotency_keys(&self) -> Result<usize, StoreError> {
        let out = self
            .partition_query(IDEM_PK, true)
            .select(aws_sdk_dynamodb::types::Select::Count)
            .send()
            .await
            .map_err(|e| StoreError::backend("Query", e))?;
        Ok(usize::try_from(out.count).unwrap_or_default())
    }
}
