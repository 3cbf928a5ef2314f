//! AWS SDK configuration shared by both functions.

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::SharedHttpClient;

use crate::deadlines::{AWS_ATTEMPT_TIMEOUT, AWS_CONNECT_TIMEOUT, AWS_OPERATION_TIMEOUT};

/// Region, credentials and endpoints from the environment (`AWS_ENDPOINT_URL_DYNAMODB`
/// selects DynamoDB Local), with our timeouts.
pub(crate) async fn load_sdk_config() -> SdkConfig {
    let timeouts = TimeoutConfig::builder()
        .operation_timeout(AWS_OPERATION_TIMEOUT)
        .operation_attempt_timeout(AWS_ATTEMPT_TIMEOUT)
        .connect_timeout(AWS_CONNECT_TIMEOUT)
        .build();
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(https_client())
        .timeout_config(timeouts)
        .load()
        .await
}

/// The HTTPS client of every AWS SDK client: rustls with ring, the same TLS stack the
/// Kubernetes client uses.
pub fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}
