//! Clients that count the requests they send, for benchmarks and call-budget checks, by kind
//! (Kubernetes by HTTP method, DynamoDB by operation) and in all.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

/// Requests by kind, shared by clones: Kubernetes by HTTP method, DynamoDB by operation.
#[derive(Clone, Debug, Default)]
pub struct CallsByKind {
    kube_get: Arc<AtomicU64>,
    kube_delete: Arc<AtomicU64>,
    kube_other: Arc<AtomicU64>,
    dynamodb: Arc<Mutex<BTreeMap<String, u64>>>,
}

/// The counts of a [`CallsByKind`] at one moment, or between two.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallTally {
    /// `GET` requests: lists, in a reconcile pass.
    pub kube_get: u64,
    pub kube_delete: u64,
    pub kube_other: u64,
    /// By operation (`Query`, `PutItem`, ...).
    pub dynamodb: BTreeMap<String, u64>,
}

impl CallsByKind {
    pub fn snapshot(&self) -> CallTally {
        CallTally {
            kube_get: self.kube_get.load(Ordering::Relaxed),
            kube_delete: self.kube_delete.load(Ordering::Relaxed),
            kube_other: self.kube_other.load(Ordering::Relaxed),
            dynamodb: self.dynamodb.lock().map(|m| m.clone()).unwrap_or_default(),
        }
    }
}

impl CallTally {
    /// What was sent after `before` was taken.
    pub fn since(&self, before: &CallTally) -> CallTally {
        let mut dynamodb = self.dynamodb.clone();
        for (operation, n) in &before.dynamodb {
            if let Some(after) = dynamodb.get_mut(operation) {
                *after = after.saturating_sub(*n);
            }
        }
        dynamodb.retain(|_, n| *n > 0);
        CallTally {
            kube_get: self.kube_get.saturating_sub(before.kube_get),
            kube_delete: self.kube_delete.saturating_sub(before.kube_delete),
            kube_other: self.kube_other.saturating_sub(before.kube_other),
            dynamodb,
        }
    }

    pub fn kube_total(&self) -> u64 {
        self.kube_get + self.kube_delete + self.kube_other
    }

    pub fn dynamodb_total(&self) -> u64 {
        self.dynamodb.values().sum()
    }

    pub fn dynamodb_queries(&self) -> u64 {
        self.dynamodb.get("Query").copied().unwrap_or(0)
    }

    /// Kubernetes `GET`s and DynamoDB `Query`s: the calls that grow with the number of stacks.
    pub fn lists_and_queries(&self) -> u64 {
        self.kube_get + self.dynamodb_queries()
    }
}

/// A Kubernetes client counting every request it sends by HTTP method.
pub fn kube_counting_by_kind(config: kube::Config, calls: &CallsByKind) -> Result<kube::Client, kube::Error> {
    let calls = calls.clone();
    let layer = tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
        let counter = match *request.method() {
            http::Method::GET => &calls.kube_get,
            http::Method::DELETE => &calls.kube_delete,
            _ => &calls.kube_other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        request
    });
    Ok(stack_core::client_builder(&config)?.with_layer(&layer).build())
}

#[derive(Debug)]
struct OperationInterceptor(Arc<Mutex<BTreeMap<String, u64>>>);

impl Intercept for OperationInterceptor {
    fn name(&self) -> &'static str {
        "OperationInterceptor"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // `X-Amz-Target: DynamoDB_20120810.Query` names the operation.
        let operation = context
            .request()
            .headers()
            .get("x-amz-target")
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or("unknown")
            .to_owned();
        if let Ok(mut counts) = self.0.lock() {
            *counts.entry(operation).or_default() += 1;
        }
        Ok(())
    }
}

/// A copy of `client` that also counts every attempt it transmits, by operation.
pub fn dynamodb_counting_by_operation(
    client: &aws_sdk_dynamodb::Client,
    calls: &CallsByKind,
) -> aws_sdk_dynamodb::Client {
    let config = client
        .config()
        .to_builder()
        .interceptor(OperationInterceptor(calls.dynamodb.clone()))
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_since_an_earlier_one_keeps_only_what_was_sent_in_between() {
        let before = CallTally {
            kube_get: 2,
            kube_delete: 1,
            kube_other: 0,
            dynamodb: BTreeMap::from([("Query".into(), 3), ("PutItem".into(), 1)]),
        };
        let after = CallTally {
            kube_get: 5,
            kube_delete: 1,
            kube_other: 4,
            dynamodb: BTreeMap::from([("Query".into(), 7), ("PutItem".into(), 1), ("GetItem".into(), 2)]),
        };
        let between = after.since(&before);
        assert_eq!((between.kube_get, between.kube_delete, between.kube_other), (3, 0, 4));
        assert_eq!(
            between.dynamodb,
            BTreeMap::from([("Query".into(), 4), ("GetItem".into(), 2)])
        );
        assert_eq!((between.kube_total(), between.dynamodb_total()), (7, 6));
        assert_eq!(between.lists_and_queries(), 7);
    }
}
