//! Every sample API Gateway event in `events/` goes through the real Lambda request
//! conversion and the real router against the local environment, with the stage switch
//! template.yaml gives the function.
//!
//! Its own binary without libtest's harness: lambda_http reads
//! `AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH` from the process environment on every conversion,
//! and the variable can only be set safely before any other thread exists.

use std::path::Path;

use http_body_util::BodyExt;
use serde_json::Value;
use stack_tests::api::ApiHarness;
use tower::ServiceExt;

/// What each sample must answer. The sample ids name no existing stack or job, so those
/// routes prove they were reached by answering the resource's own 404.
const EXPECTED: &[(&str, u16, Option<&str>)] = &[
    ("healthz.json", 200, None),
    ("create-v1.json", 201, None),
    ("create-v0.json", 201, None),
    ("list.json", 200, None),
    ("get.json", 404, Some("stack not found")),
    ("status.json", 404, Some("stack not found")),
    ("delete.json", 404, Some("stack not found")),
    ("renew.json", 404, Some("stack not found")),
    ("batch-delete.json", 202, None),
    ("batch-delete-get.json", 404, Some("job not found")),
    ("stats.json", 200, None),
];

const TEST_NAME: &str = "every_sample_event_reaches_its_route";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("{TEST_NAME}: test");
        return;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| TEST_NAME.contains(f.as_str())) {
        return;
    }
    // SAFETY: nothing else runs yet (no runtime, no other thread), so nothing reads the
    // environment concurrently.
    unsafe { std::env::set_var("AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH", "true") };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(every_sample_event_reaches_its_route());
    println!("test {TEST_NAME} ... ok");
}

async fn every_sample_event_reaches_its_route() {
    let api = ApiHarness::start().await;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../events");
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name == "scheduled.json" || path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let (_, status, error) = EXPECTED
            .iter()
            .find(|(n, ..)| *n == name)
            .unwrap_or_else(|| panic!("no expectation for events/{name}"));
        let text = std::fs::read_to_string(&path).unwrap();
        let request = lambda_http::request::from_str(&text)
            .unwrap_or_else(|e| panic!("events/{name} is not an API Gateway event: {e}"));
        let response = api
            .router
            .clone()
            .oneshot(request.map(axum::body::Body::new))
            .await
            .unwrap();
        let got = response.status().as_u16();
        let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(got, *status, "events/{name}: {body}");
        if let Some(error) = error {
            assert_eq!(body["error"], *error, "events/{name}");
        }
        seen.push(name);
    }
    assert_eq!(seen.len(), EXPECTED.len(), "every expected sample exists: {seen:?}");
}
