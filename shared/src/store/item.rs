//! Conversions between typed records and DynamoDB items.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::StoreError;

pub(crate) type Item = HashMap<String, AttributeValue>;

pub(crate) const PK: &str = "pk";
pub(crate) const SK: &str = "sk";
pub(crate) const EXPIRES_AT: &str = "expires_at";

pub(crate) fn key(pk: &str, sk: &str) -> Item {
    HashMap::from([(PK.to_owned(), s(pk)), (SK.to_owned(), s(sk))])
}

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// The item for `value` under the given key; `expires_at` in epoch seconds when set.
pub(crate) fn to_item<T: Serialize>(
    pk: &str,
    sk: &str,
    value: &T,
    expires_at: Option<i64>,
) -> Result<Item, StoreError> {
    let mut item: Item = serde_dynamo::to_item(value).map_err(|e| StoreError::Malformed(e.to_string()))?;
    item.extend(key(pk, sk));
    if let Some(at) = expires_at {
        item.insert(EXPIRES_AT.to_owned(), n(at));
    }
    Ok(item)
}

pub(crate) fn from_item<T: DeserializeOwned>(mut item: Item) -> Result<T, StoreError> {
    for k in [PK, SK, EXPIRES_AT] {
        item.remove(k);
    }
    serde_dynamo::from_item(item).map_err(|e| StoreError::Malformed(e.to_string()))
}
