use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A conditional write found the item in another state than required.
    #[error("conditional write rejected")]
    ConditionFailed,
    /// DynamoDB is unreachable, slow, throttling or failing: worth trying again later.
    #[error("dynamodb {operation} unavailable")]
    Unavailable {
        operation: &'static str,
        #[source]
        source: BoxError,
    },
    /// Any other DynamoDB answer: our defect or configuration (missing table, access denied).
    #[error("dynamodb {operation} failed: {message}")]
    Backend {
        operation: &'static str,
        message: String,
        #[source]
        source: BoxError,
    },
    #[error("stored item is malformed: {0}")]
    Malformed(String),
    #[error(transparent)]
    Unreadable(#[from] super::Unreadable),
    /// The manifest cannot be kept (the request's fault).
    #[error(transparent)]
    Unstorable(#[from] super::UnstorableManifest),
    /// The task that carried a write ended without its answer (a panic, the runtime stopping).
    #[error("dynamodb {operation} interrupted")]
    Interrupted {
        operation: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
}

impl StoreError {
    /// Sorts an SDK error: transient (connect errors, timeouts, throttling, 5xx) or not.
    pub fn backend<E, R>(operation: &'static str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        let (message, transient) = match &err {
            SdkError::ServiceError(context) => {
                let service = context.err();
                let code = service.code().unwrap_or("unknown");
                let message = service.message().unwrap_or("no message");
                (format!("{code}: {message}"), transient_service_error(code, message))
            }
            SdkError::ConstructionFailure(_) => (display(&err), false),
            // Timeouts, connection failures and unreadable responses.
            _ => (display(&err), true),
        };
        let source = Box::new(err);
        if transient {
            StoreError::Unavailable { operation, source }
        } else {
            StoreError::Backend {
                operation,
                message,
                source,
            }
        }
    }

    /// Like [`StoreError::backend`] for a conditional write: a rejected condition is
    /// [`StoreError::ConditionFailed`], whichever operation carried it.
    pub fn conditional<E, R>(operation: &'static str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        let rejected = matches!(&err, SdkError::ServiceError(context)
            if context.err().code() == Some("ConditionalCheckFailedException"));
        if rejected {
            StoreError::ConditionFailed
        } else {
            StoreError::backend(operation, err)
        }
    }

    /// The outcome of a conditional write: `true` when it was made, `false` when its condition
    /// did not hold (a state the caller expects, not a failure).
    pub(crate) fn condition_held<T, E, R>(
        operation: &'static str,
        result: Result<T, SdkError<E, R>>,
    ) -> Result<bool, Self>
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        match result.map_err(|e| Self::conditional(operation, e)) {
            Ok(_) => Ok(true),
            Err(StoreError::ConditionFailed) => Ok(false),
            Err(other) => Err(other),
        }
    }

    /// A dependency problem that may pass: the client is told to retry (503).
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }
}

fn display<E: std::error::Error>(err: &E) -> String {
    aws_smithy_types::error::display::DisplayErrorContext(err).to_string()
}

/// DynamoDB's throttling, server and contention errors: retrying later can succeed.
fn transient_service_error(code: &str, message: &str) -> bool {
    const TRANSIENT_CODES: [&str; 8] = [
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "InternalFailure",
        "ServiceUnavailable",
        "TransactionConflictException",
        "TransactionInProgressException",
    ];
    // A cancelled transaction names the reason of each item, e.g. "[None, ThrottlingError]".
    let cancelled_transiently = code == "TransactionCanceledException"
        && [
            "ThrottlingError",
            "TransactionConflict",
            "ProvisionedThroughputExceeded",
        ]
        .iter()
        .any(|reason| message.contains(reason));
    TRANSIENT_CODES.contains(&code) || cancelled_transiently
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_and_server_errors_are_transient() {
        for code in [
            "ProvisionedThroughputExceededException",
            "ThrottlingException",
            "InternalServerError",
        ] {
            assert!(transient_service_error(code, ""), "{code}");
        }
        assert!(transient_service_error(
            "TransactionCanceledException",
            "Transaction cancelled, please refer cancellation reasons for specific reasons [None, ThrottlingError]"
        ));
    }

    #[test]
    fn our_mistakes_are_not_transient() {
        for code in [
            "ResourceNotFoundException",
            "ValidationException",
            "AccessDeniedException",
        ] {
            assert!(!transient_service_error(code, ""), "{code}");
        }
        assert!(!transient_service_error(
            "TransactionCanceledException",
            "Transaction cancelled [ConditionalCheckFailed, None]"
        ));
    }
}
