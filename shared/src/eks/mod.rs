//! Kubernetes access to an EKS cluster from a Lambda function: endpoint and CA from
//! DescribeCluster, and a bearer token presigned from the function's own AWS credentials
//! (what `aws eks get-token` does, without the CLI or an exec plugin). The cluster maps the
//! function's role to Kubernetes groups through an EKS access entry.

mod bearer;
mod cluster;
mod error;
#[cfg(test)]
mod test_support;
mod token;
mod token_source;

use std::sync::Arc;
use std::time::SystemTime;

/// Re-exported so that callers of [`token`] need no direct aws-credential-types dependency.
pub use aws_credential_types::Credentials;
pub use bearer::{BearerAuth, BearerAuthLayer};
pub use cluster::{ClusterEndpoint, KubeTimeouts, describe_cluster, kube_config};
pub use error::EksError;
pub use token::{CLUSTER_ID_HEADER, PRESIGN_EXPIRES, TOKEN_LIFETIME, TOKEN_PREFIX, presigned_url, sts_host, token};
pub use token_source::{TOKEN_REFRESH_AFTER, TokenSource, renewal_time};

/// Builds the one Kubernetes client of the process for EKS cluster `cluster_name`.
///
/// Credentials come from the SDK's provider at each renewal, so rotated role credentials are
/// picked up. A first token is minted here so that missing credentials stop start-up.
pub async fn eks_kube_client(
    sdk: &aws_config::SdkConfig,
    cluster_name: &str,
    timeouts: KubeTimeouts,
) -> Result<kube::Client, EksError> {
    let region = sdk.region().ok_or(EksError::NoRegion)?.to_string();
    let credentials = sdk.credentials_provider().ok_or(EksError::NoCredentialsProvider)?;
    let endpoint = describe_cluster(&aws_sdk_eks::Client::new(sdk), cluster_name).await?;
    let config = kube_config(&endpoint, timeouts).await?;
    let source = Arc::new(TokenSource::new(credentials, &region, cluster_name));
    source.header_at(SystemTime::now()).await?;
    let builder = crate::cluster::client_builder(&config).map_err(|e| EksError::KubeClient(e.to_string()))?;
    tracing::info!(cluster = cluster_name, endpoint = %endpoint.url, "EKS client ready");
    Ok(builder.with_layer(&BearerAuthLayer::new(source)).build())
}
