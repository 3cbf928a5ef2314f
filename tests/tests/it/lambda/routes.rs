//! Every route of the API through the emulator, with events built as API Gateway builds them
//! for the deployed API: a stack's whole life in both client shapes, the list's pages, the
//! batch delete and its job, the counts, the dashboard and the OpenAPI document. Each answer is
//! read as API Gateway reads it (`stack_tests::lambda::gateway`).

use std::path::Path;
use std::time::{Duration, Instant};

use http::StatusCode;
use serde_json::{Value, json};
use stack_tests::api::WEB_POD;
use stack_tests::lambda::RestRequest;

use super::{LambdaApi, json_answer};

fn create(target_port: Value) -> RestRequest {
    RestRequest::post("/stacks").json(&json!({ "pod_spec": WEB_POD, "target_port": target_port }))
}

fn id_of(stack: &Value) -> String {
    stack["stack_id"].as_str().expect("stack_id").to_owned()
}

#[tokio::test]
async fn a_stacks_life_in_both_client_shapes() {
    let api = LambdaApi::start().await;

    let v1 = json_answer(
        &api.call(create(json!([{ "container_port": 80, "protocol": "TCP" }])))
            .await,
        StatusCode::CREATED,
    );
    let node_port = v1["ports"][0]["node_port"]
        .as_u64()
        .expect("a v1 stack lists its ports");
    assert_eq!(v1["ports"][0]["container_port"], 80, "{v1}");
    let v0 = json_answer(&api.call(create(json!(80))).await, StatusCode::CREATED);
    assert_eq!(v0["target_port"], 80, "v0 readers get the scalar port: {v0}");
    assert!(v0["node_port"].is_u64(), "{v0}");
    let (first, second) = (id_of(&v1), id_of(&v0));

    let got = json_answer(
        &api.call(RestRequest::get(&format!("/stacks/{first}"))).await,
        StatusCode::OK,
    );
    assert_eq!(got["stack_id"], first.as_str());
    assert_eq!(got["ports"][0]["node_port"], node_port);
    let status = json_answer(
        &api.call(RestRequest::get(&format!("/stacks/{first}/status"))).await,
        StatusCode::OK,
    );
    assert_eq!(status["stack_id"], first.as_str());
    assert!(
        ["creating", "running"].contains(&status["status"].as_str().unwrap_or_default()),
        "{status}"
    );

    // One stack per page: the cursor of the first page leads to the second, the last has none.
    let page_one = json_answer(
        &api.call(RestRequest::get("/stacks").query("limit", "1")).await,
        StatusCode::OK,
    );
    let cursor = page_one["next_cursor"].as_str().expect("a cursor after the first page");
    let page_two = json_answer(
        &api.call(RestRequest::get("/stacks").query("limit", "1").query("cursor", cursor))
            .await,
        StatusCode::OK,
    );
    let listed: Vec<String> = [&page_one, &page_two]
        .iter()
        .flat_map(|page| page["stacks"].as_array().expect("stacks").iter().map(id_of))
        .collect();
    assert_eq!(listed, [first.clone(), second.clone()], "oldest first, each once");
    assert!(page_two.get("next_cursor").is_none(), "{page_two}");

    let renewed = json_answer(
        &api.call(RestRequest::post(&format!("/stacks/{first}/renew"))).await,
        StatusCode::OK,
    );
    assert!(
        renewed["ttl_expires_at"].as_str() >= got["ttl_expires_at"].as_str(),
        "{renewed} after {got}"
    );

    let stats = json_answer(&api.call(RestRequest::get("/stats")).await, StatusCode::OK);
    assert_eq!(stats["total_stacks"], 2, "{stats}");
    let history = json_answer(&api.call(RestRequest::get("/history")).await, StatusCode::OK);
    assert_eq!(history["challenge_label"], "challenge", "{history}");
    let health = json_answer(&api.call(RestRequest::get("/healthz")).await, StatusCode::OK);
    assert_eq!(health, json!({ "status": "ok" }));

    let deleted = json_answer(
        &api.call(RestRequest::delete(&format!("/stacks/{first}"))).await,
        StatusCode::OK,
    );
    assert_eq!(deleted, json!({ "deleted": true, "stack_id": first }));
    let gone = json_answer(
        &api.call(RestRequest::get(&format!("/stacks/{first}"))).await,
        StatusCode::NOT_FOUND,
    );
    assert_eq!(gone, json!({ "error": "stack not found" }));

    let started = json_answer(
        &api.call(RestRequest::post("/stacks/batch-delete").json(&json!({ "stack_ids": [second] })))
            .await,
        StatusCode::ACCEPTED,
    );
    let job = started["job_id"].as_str().expect("job_id");
    let finished = wait_for_job(&api, job).await;
    assert_eq!(
        (finished["total"].clone(), finished["deleted"].clone()),
        (json!(1), json!(1)),
        "{finished}"
    );
    let empty = json_answer(&api.call(RestRequest::get("/stacks")).await, StatusCode::OK);
    assert_eq!(empty, json!({ "stacks": [] }));
    api.finish().await;
}

async fn wait_for_job(api: &LambdaApi, job: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let state = json_answer(
            &api.call(RestRequest::get(&format!("/stacks/batch-delete/{job}"))).await,
            StatusCode::OK,
        );
        if state["status"] == "completed" || Instant::now() > until {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_dashboard_and_the_openapi_document_load_without_a_key() {
    let api = LambdaApi::start().await;
    let dashboard = Path::new(env!("CARGO_MANIFEST_DIR")).join("../functions/api/dashboard");
    for (path, file, content_type) in [
        ("/dashboard", "index.html", "text/html; charset=utf-8"),
        ("/dashboard/app.js", "app.js", "text/javascript; charset=utf-8"),
        ("/dashboard/app.css", "app.css", "text/css; charset=utf-8"),
    ] {
        // A browser asks for anything; API Gateway passes the body on as the function said.
        let response = api.call_as_is(RestRequest::get(path).header("Accept", "*/*")).await;
        assert_eq!(response.status, 200, "{path}: {}", response.text());
        assert_eq!(response.header("content-type"), Some(content_type), "{path}");
        assert!(
            response
                .header("content-security-policy")
                .is_some_and(|csp| csp.contains("default-src 'none'")),
            "{path}: {response:?}"
        );
        let expected = std::fs::read(dashboard.join(file)).expect("the dashboard's file");
        assert_eq!(
            response.body, expected,
            "{path} reaches the browser as it is in the repository"
        );
    }
    let missing = api.call(RestRequest::get("/dashboard/nope.png")).await;
    assert_eq!(
        json_answer(&missing, StatusCode::NOT_FOUND),
        json!({ "error": "route not found" })
    );

    let document = json_answer(&api.call_as_is(RestRequest::get("/openapi.json")).await, StatusCode::OK);
    assert!(
        document["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")),
        "{document}"
    );
    for path in [
        "/stacks",
        "/stacks/{stack_id}",
        "/stacks/batch-delete/{job_id}",
        "/stats",
        "/dashboard",
    ] {
        assert!(document["paths"].get(path).is_some(), "{path} documented");
    }

    let keyless = api.call_as_is(RestRequest::get("/stats")).await;
    assert_eq!(
        json_answer(&keyless, StatusCode::UNAUTHORIZED),
        json!({ "error": "invalid api key" })
    );
    let unknown = api.call(RestRequest::get("/nowhere")).await;
    assert_eq!(
        json_answer(&unknown, StatusCode::NOT_FOUND),
        json!({ "error": "route not found" })
    );
    let wrong_method = api.call(RestRequest::new("PUT", "/stats")).await;
    assert_eq!(
        json_answer(&wrong_method, StatusCode::METHOD_NOT_ALLOWED),
        json!({ "error": "method not allowed" })
    );
    api.finish().await;
}
