//! Kubernetes access to an EKS cluster from a Lambda function: endpoint and CA from
//! DescribeCluster, and a bearer token presigned from the function's own AWS credentials
//! (what `aws eks get-token` does, without the CLI or an exec plugin). The cluster maps the
//! function's role to Kubernetes groups through an EKS access entry.

mod bearer;
mod cluster;
mod error;
#[cfg(test)]
pub(crate) mod test_support;
mod token;
mod token_source;

/// Re-exported so that callers of [`token`] need no direct aws-credential-types dependency.
pub use aws_credential_types::Credentials;
pub(crate) use bearer::BearerAuthLayer;
pub(crate) use cluster::{KubeTimeouts, describe_cluster, kube_config};
pub(crate) use error::EksError;
pub use token::{eks_presigned_url, eks_token};
pub(crate) use token_source::TokenSource;
