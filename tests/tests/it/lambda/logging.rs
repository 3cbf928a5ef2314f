//! The deployment's log level (the template's `LogLevel`) is the function's own: Lambda hands it
//! over as `AWS_LAMBDA_LOG_LEVEL`, and the function logs what that level keeps and no more.

use http::StatusCode;
use stack_tests::lambda::RestRequest;

use super::{LambdaApi, json_answer};

#[tokio::test]
async fn the_deployments_log_level_is_the_functions() {
    for (level, logs_requests) in [("INFO", true), ("WARN", false)] {
        let api = LambdaApi::start_with(|function| function.parameter("LogLevel", level)).await;
        json_answer(&api.call(RestRequest::get("/healthz")).await, StatusCode::OK);
        let log = api.sandbox.log();
        assert_eq!(
            log.contains("\"message\":\"request\""),
            logs_requests,
            "LogLevel {level}, the request line:\n{log}"
        );
        api.finish().await;
    }
}
