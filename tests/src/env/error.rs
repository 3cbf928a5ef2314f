use std::path::PathBuf;

/// Everything that can go wrong while reaching or preparing the local environment.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error(
        "local environment not configured: {0}. Start it with tests/env/up (then `source tests/env/.state/env.sh`)"
    )]
    NotConfigured(String),

    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },

    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },

    #[error("template {path}: {reason}")]
    Template { path: PathBuf, reason: String },

    #[error("DynamoDB {operation}: {message}")]
    DynamoDb { operation: &'static str, message: String },

    #[error("kubeconfig: {0}")]
    Kubeconfig(String),

    #[error("Kubernetes {operation}: {source}")]
    Kube { operation: String, source: kube::Error },

    #[error("watching {what}: {message}")]
    Watch { what: String, message: String },

    #[error("timed out after {seconds}s waiting for {what}")]
    Timeout { what: String, seconds: u64 },
}

impl EnvError {
    pub(crate) fn kube(operation: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let operation = operation.into();
        move |source| Self::Kube { operation, source }
    }

    pub(crate) fn dynamodb<E>(operation: &'static str) -> impl FnOnce(E) -> Self
    where
        E: std::error::Error + 'static,
    {
        move |error| Self::DynamoDb {
            operation,
            message: aws_sdk_dynamodb::error::DisplayErrorContext(error).to_string(),
        }
    }
}
