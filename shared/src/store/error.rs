use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A conditional write found the item in another state than required.
    #[error("conditional write rejected")]
    ConditionFailed,
    #[error("dynamodb {operation} failed: {message}")]
    Backend { operation: &'static str, message: String },
    #[error("stored item is malformed: {0}")]
    Malformed(String),
    /// The manifest cannot be kept (the request's fault).
    #[error(transparent)]
    Unstorable(#[from] super::UnstorableManifest),
}

impl StoreError {
    pub(crate) fn backend<E, R>(operation: &'static str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        let message = match err.as_service_error() {
            Some(service) => format!(
                "{}: {}",
                service.code().unwrap_or("unknown"),
                service.message().unwrap_or("no message")
            ),
            None => aws_smithy_types::error::display::DisplayErrorContext(&err).to_string(),
        };
        StoreError::Backend { operation, message }
    }
}
