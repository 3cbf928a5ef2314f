//! Clients that count the requests they send, for benchmarks and call-budget checks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

/// A shared request counter.
#[derive(Clone, Debug, Default)]
pub struct CallCounter(Arc<AtomicU64>);

impl CallCounter {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct CountingInterceptor(CallCounter);

impl Intercept for CountingInterceptor {
    fn name(&self) -> &'static str {
        "CountingInterceptor"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.bump();
        Ok(())
    }
}

/// A copy of `client` that also counts every attempt it transmits.
pub fn counting_dynamodb(client: &aws_sdk_dynamodb::Client, counter: &CallCounter) -> aws_sdk_dynamodb::Client {
    let config = client
        .config()
        .to_builder()
        .interceptor(CountingInterceptor(counter.clone()))
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// A Kubernetes client counting every request it sends.
pub fn counting_kube(config: kube::Config, counter: &CallCounter) -> Result<kube::Client, kube::Error> {
    let counter = counter.clone();
    let layer = tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
        counter.bump();
        request
    });
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
}
