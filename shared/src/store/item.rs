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

pub(crate) fn from_item<T: DeserializeOwned>(item: Item) -> Result<T, StoreError> {
    Ok(read_item(item)?)
}

/// A stored item that does not read as what its partition holds: edited by hand, or written by
/// a version whose format this one does not know. Lists leave it out and log it
/// ([`readable`]), so that one such item does not stop every list and reconcile pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stored item pk={pk} sk={sk} is unreadable: {reason}")]
pub struct Unreadable {
    pub pk: String,
    pub sk: String,
    pub reason: String,
}

/// The value of `item`, or what names the item if it does not read as a `T`.
pub(crate) fn read_item<T: DeserializeOwned>(mut item: Item) -> Result<T, Unreadable> {
    let (pk, sk) = take_key(&mut item);
    serde_dynamo::from_item(item).map_err(|e| Unreadable {
        pk,
        sk,
        reason: e.to_string(),
    })
}

/// Removes what every item has besides its value (key and expiry) and returns the key,
/// empty parts where the item has none.
pub(crate) fn take_key(item: &mut Item) -> (String, String) {
    let mut part = |k| match item.remove(k) {
        Some(AttributeValue::S(v)) => v,
        _ => String::new(),
    };
    let key = (part(PK), part(SK));
    item.remove(EXPIRES_AT);
    key
}

/// The items of a list that read, each unreadable one logged and left out.
pub(crate) fn readable<T>(items: Vec<Result<T, Unreadable>>) -> (Vec<T>, Vec<Unreadable>) {
    let (mut read, mut unreadable) = (Vec::with_capacity(items.len()), Vec::new());
    for item in items {
        match item {
            Ok(value) => read.push(value),
            Err(err) => {
                tracing::error!(pk = %err.pk, sk = %err.sk, reason = %err.reason, "stored item unreadable, left out");
                unreadable.push(err);
            }
        }
    }
    (read, unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Value {
        status: String,
    }

    #[test]
    fn an_item_that_does_not_read_is_named_by_its_key() {
        let mut item = key("STACK", "stack-0000000000000007");
        item.insert("status".into(), n(1));
        let err = read_item::<Value>(item).unwrap_err();
        assert_eq!((err.pk.as_str(), err.sk.as_str()), ("STACK", "stack-0000000000000007"));
        let message = StoreError::from(err).to_string();
        assert!(message.contains("pk=STACK sk=stack-0000000000000007"), "{message}");
    }

    #[test]
    fn a_list_keeps_what_reads_and_names_the_rest() {
        let mut good = key("STACK", "a");
        good.insert("status".into(), s("running"));
        good.insert(EXPIRES_AT.into(), n(1));
        let bad = key("STACK", "b");
        let (read, unreadable) = readable(vec![read_item::<Value>(good), read_item::<Value>(bad)]);
        assert_eq!(
            read,
            vec![Value {
                status: "running".into()
            }]
        );
        assert_eq!(unreadable.len(), 1);
        assert_eq!(unreadable[0].sk, "b");
    }
}
