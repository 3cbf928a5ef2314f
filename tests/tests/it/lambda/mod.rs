//! Both functions as Lambda runs them: the bootstraps `sam build` made, under the AWS Lambda
//! Runtime Interface Emulator, with the environment `template.yaml` gives them, invoked
//! through the emulator's invoke endpoint (`stack_tests::lambda`). The API's answers are read
//! as API Gateway's REST API reads them.

mod deadline;
mod init_failure;
mod logging;
mod reconciler;
mod routes;
mod samples;

use http::StatusCode;
use serde_json::Value;
use stack_tests::env::{TestEnv, TestTable, unique_name};
use stack_tests::lambda::{Gateway, GatewayResponse, LambdaFunction, LocalFunction, RestRequest, Sandbox};

/// The API function in a sandbox over a table and a namespace of its own; stacks go to the
/// simulated nodes (nothing to pull, no kube-proxy to wait for).
pub(crate) struct LambdaApi {
    pub(crate) env: TestEnv,
    pub(crate) table: TestTable,
    pub(crate) namespace: String,
    pub(crate) sandbox: Sandbox,
    pub(crate) gateway: Gateway,
}

impl LambdaApi {
    pub(crate) async fn start() -> Self {
        Self::start_with(|function| function).await
    }

    /// Like [`start`](Self::start), with more said of the deployment by `configure`.
    pub(crate) async fn start_with(configure: impl FnOnce(LocalFunction) -> LocalFunction) -> Self {
        let env = TestEnv::connect().await.expect("local environment (run tests/env/up)");
        let table = env.fresh_table("lambda").await.expect("fresh table");
        let namespace = unique_name("lambda");
        let function = local(LambdaFunction::Api, &env, table.name(), &namespace);
        let sandbox = configure(function).start().await.expect("the API's sandbox starts");
        Self {
            env,
            table,
            namespace,
            sandbox,
            gateway: Gateway::of_template().expect("template.yaml's API"),
        }
    }

    /// `request` with the key, as the platform sends it.
    pub(crate) async fn call(&self, request: RestRequest) -> GatewayResponse {
        self.call_as_is(request.api_key(stack_tests::lambda::LOCAL_API_KEY))
            .await
    }

    pub(crate) async fn call_as_is(&self, request: RestRequest) -> GatewayResponse {
        self.gateway
            .call(&self.sandbox, &request)
            .await
            .unwrap_or_else(|e| panic!("{e}; the sandbox's log:\n{}", self.sandbox.log()))
    }

    pub(crate) async fn finish(self) {
        self.sandbox.stop().await;
        let namespaces = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(self.env.kube.clone());
        let _ = namespaces
            .delete(&self.namespace, &kube::api::DeleteParams::background())
            .await;
        let _ = self.table.delete().await;
    }
}

/// `function` deployed over the local environment, on `table` and `namespace`.
pub(crate) fn local(function: LambdaFunction, env: &TestEnv, table: &str, namespace: &str) -> LocalFunction {
    LocalFunction::new(function, &env.settings).on_simulated_nodes(table, namespace)
}

/// The body of a JSON answer with `status`, after what API Gateway needs of it: a JSON
/// content type and a text body.
#[track_caller]
pub(crate) fn json_answer(response: &GatewayResponse, status: StatusCode) -> Value {
    assert_eq!(response.status, status.as_u16(), "{}", response.text());
    assert_eq!(
        response.header("content-type"),
        Some("application/json"),
        "{response:?}"
    );
    assert!(!response.is_base64_encoded, "a JSON answer is text: {response:?}");
    response.json().expect("a JSON body")
}
