use aws_smithy_types::error::display::DisplayErrorContext;

/// Why the EKS client could not be built or a token could not be made.
#[derive(Debug, thiserror::Error)]
pub enum EksError {
    #[error("no AWS region configured (set AWS_REGION)")]
    NoRegion,
    #[error("no AWS credentials provider configured")]
    NoCredentialsProvider,
    #[error("loading AWS credentials: {0}")]
    Credentials(String),
    #[error("DescribeCluster {cluster}: {message}")]
    DescribeCluster { cluster: String, message: String },
    #[error("EKS cluster {cluster} has no {missing} (is it ACTIVE?)")]
    ClusterIncomplete { cluster: String, missing: &'static str },
    #[error("signing the EKS token: {0}")]
    Signing(String),
    #[error("building the Kubernetes client: {0}")]
    KubeClient(String),
}

impl EksError {
    pub(crate) fn describe_cluster(cluster: &str, err: impl std::error::Error) -> Self {
        // DisplayErrorContext prints the whole source chain (service code and message),
        // not just "service error".
        Self::DescribeCluster {
            cluster: cluster.to_owned(),
            message: DisplayErrorContext(err).to_string(),
        }
    }
}
