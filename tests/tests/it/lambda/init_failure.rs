//! A function deployed with a configuration it cannot work with fails its init with one clear
//! message, in its log and in what the invoker gets back, instead of starting and failing
//! every request. Lambda then answers the invocation with an error (API Gateway: 502).

use serde_json::Value;
use stack_tests::env::{TestEnv, kubeconfig, unique_name};
use stack_tests::lambda::{LambdaFunction, LocalFunction};

use super::local;

const SCHEDULED_EVENT: &str = include_str!("../../../../events/scheduled.json");
const HEALTHZ_EVENT: &str = include_str!("../../../../events/healthz.json");

/// Starts `function` configured by `configure`, invokes it once and checks that its init
/// failed with a message containing every one of `expected`.
async fn assert_init_fails(
    function: LambdaFunction,
    configure: impl FnOnce(LocalFunction) -> LocalFunction,
    expected: &[&str],
) {
    let env = TestEnv::connect().await.expect("local environment");
    let table = env.fresh_table("initfail").await.expect("table");
    let sandbox = configure(local(function, &env, table.name(), &unique_name("initfail")))
        .start()
        .await
        .expect("the emulator starts");
    let event = match function {
        LambdaFunction::Api => HEALTHZ_EVENT,
        LambdaFunction::Reconciler => SCHEDULED_EVENT,
    };
    let invocation = sandbox.invoke(event.as_bytes()).await.expect("an answer");
    let log = sandbox.log();
    assert_eq!(invocation.status, 502, "{}\n{log}", invocation.text());
    let error: Value = invocation.json().expect("the runtime's error");
    assert_eq!(error["errorType"], stack_core::INIT_ERROR_TYPE, "{error}");
    let message = error["errorMessage"].as_str().unwrap_or_default();
    for words in expected {
        assert!(message.contains(words), "{words:?} not in {message:?}");
    }
    assert!(log.contains("INIT RTDONE(status: error)"), "the init failed:\n{log}");
    assert!(
        log.contains("\"message\":\"refusing to start\""),
        "the reason is logged:\n{log}"
    );
    assert!(
        !log.contains("\"message\":\"request\""),
        "no request was served:\n{log}"
    );
    sandbox.stop().await;
    let _ = table.delete().await;
}

#[tokio::test]
async fn a_missing_table_fails_the_init_of_both_functions() {
    for function in [LambdaFunction::Api, LambdaFunction::Reconciler] {
        assert_init_fails(
            function,
            |f| f.table("no-such-table"),
            &["no-such-table (DDB_STACK_TABLE)", "ResourceNotFoundException"],
        )
        .await;
    }
}

#[tokio::test]
async fn a_cluster_that_is_not_there_fails_the_init() {
    let settings = stack_tests::env::EnvSettings::load().expect("local environment");
    // An address where nothing listens: the port of a listener just closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port");
    let path = std::env::temp_dir().join(unique_name("no-cluster-kubeconfig"));
    kubeconfig::write_with_server(&settings, closed, &path).expect("kubeconfig");
    let kubeconfig_path = path.display().to_string();
    assert_init_fails(
        LambdaFunction::Api,
        |f| f.set_var("K8S_KUBECONFIG", &kubeconfig_path),
        &["no Kubernetes cluster", &kubeconfig_path, "connection refused"],
    )
    .await;
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn a_missing_required_variable_fails_the_init() {
    assert_init_fails(LambdaFunction::Api, |f| f.remove_var("API_KEYS"), &["API_KEYS"]).await;
    assert_init_fails(
        LambdaFunction::Api,
        |f| f.remove_var("AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH"),
        &["AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH is not set"],
    )
    .await;
}
