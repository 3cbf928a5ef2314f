//! A start that fails in Lambda is reported to the Runtime API (`/runtime/init/error`) before
//! the process exits, as Lambda's own runtimes do: whoever invokes the function then reads the
//! reason (`errorType`, `errorMessage`) instead of "Runtime exited with error: exit status 1".
//! Outside Lambda there is nothing to report to.

use std::io::Cursor;
use std::time::Duration;

use http::{Method, Request, header};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Where Lambda's Runtime API listens (`host:port`); set only inside Lambda.
const RUNTIME_API: &str = "AWS_LAMBDA_RUNTIME_API";
/// Every start-up failure of these functions is a configuration the operator must fix.
pub const INIT_ERROR_TYPE: &str = "InvalidConfiguration";
/// The Runtime API is on the sandbox's loopback: an answer takes milliseconds.
const PATIENCE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
enum ReportError {
    #[error("building the request: {0}")]
    Request(#[from] http::Error),
    #[error("sending it: {0}")]
    Send(#[from] hyper_util::client::legacy::Error),
    #[error("the Runtime API answered {0}")]
    Status(http::StatusCode),
    #[error("no answer within {} s", PATIENCE.as_secs())]
    Timeout,
}

/// Logs `message` as the reason the function refuses to start and, in Lambda, reports it.
pub async fn refuse_to_start(message: &str) {
    tracing::error!(error = message, "refusing to start");
    let Some(runtime_api) = std::env::var_os(RUNTIME_API) else {
        return;
    };
    let endpoint = format!("http://{}/2018-06-01/runtime/init/error", runtime_api.to_string_lossy());
    let sent = tokio::time::timeout(PATIENCE, report(&endpoint, message))
        .await
        .unwrap_or(Err(ReportError::Timeout));
    if let Err(err) = sent {
        tracing::warn!(error = %err, "could not report the init error to the Lambda Runtime API");
    }
}

async fn report(endpoint: &str, message: &str) -> Result<(), ReportError> {
    let body = serde_json::json!({ "errorType": INIT_ERROR_TYPE, "errorMessage": message }).to_string();
    let request = Request::builder()
        .method(Method::POST)
        .uri(endpoint)
        .header("Lambda-Runtime-Function-Error-Type", INIT_ERROR_TYPE)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Cursor::new(body.into_bytes())))?;
    let client = Client::builder(TokioExecutor::new()).build_http();
    let response = client.request(request).await?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(ReportError::Status(response.status()))
    }
}
