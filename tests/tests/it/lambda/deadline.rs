//! A request that would outlive the function's timeout answers the contract's 503 first: the
//! API gives each request the invocation's time minus a margin, so the client gets JSON and
//! `Retry-After`, not API Gateway's 504 after Lambda killed the sandbox (and the next request
//! paying a cold start).

use std::time::Duration;

use http::StatusCode;
use serde_json::json;
use stack_tests::env::kubeconfig;
use stack_tests::lambda::RestRequest;
use stack_tests::lambda::emulator::report;
use stack_tests::stalling_proxy::StallingProxy;

use super::{LambdaApi, json_answer};

/// The shortest timeout `template.yaml` allows the API (`ApiTimeout`'s MinValue): an apiserver
/// call's own read timeout (5 s) then outlasts the invocation.
const API_TIMEOUT: &str = "5";

#[tokio::test]
async fn a_request_past_the_functions_timeout_answers_503_before_lambda_ends_it() {
    let settings = stack_tests::env::EnvSettings::load().expect("local environment");
    let apiserver = kubeconfig::apiserver_addr(&settings).expect("the apiserver's address");
    let proxy = StallingProxy::start(apiserver).await.expect("proxy");
    let path = std::env::temp_dir().join(stack_tests::env::unique_name("stalling-kubeconfig"));
    kubeconfig::write_with_server(&settings, proxy.addr(), &path).expect("kubeconfig");
    let kubeconfig_path = path.display().to_string();
    let api = LambdaApi::start_with(|function| {
        function
            .parameter("ApiTimeout", API_TIMEOUT)
            .set_var("K8S_KUBECONFIG", &kubeconfig_path)
    })
    .await;
    let timeout = Duration::from_secs(api.sandbox.definition().timeout_seconds);
    assert_eq!(
        timeout,
        Duration::from_secs(5),
        "the template's ApiTimeout reached the sandbox"
    );
    json_answer(&api.call(RestRequest::get("/healthz")).await, StatusCode::OK);

    // The apiserver stops answering: /healthz waits on it longer than the invocation lasts.
    proxy.stall();
    let started = std::time::Instant::now();
    let late = api.call(RestRequest::get("/healthz")).await;
    let took = started.elapsed();
    assert_eq!(
        json_answer(&late, StatusCode::SERVICE_UNAVAILABLE),
        json!({ "error": "request timed out, retry" })
    );
    assert!(late.header("retry-after").is_some(), "{late:?}");
    assert!(took < timeout, "answered after {took:?}, past the {timeout:?} timeout");

    // The same sandbox serves on: it was not ended and started again.
    proxy.resume();
    json_answer(&api.call(RestRequest::get("/healthz")).await, StatusCode::OK);
    let log = api.sandbox.log();
    assert!(!log.contains("Task timed out"), "{log}");
    assert_eq!(report::init_starts(&log), 1, "one init only: {log}");
    api.finish().await;
    let _ = std::fs::remove_file(path);
}
