//! Every sample API Gateway event in `events/` goes through the real Lambda request
//! conversion and the real router against the local environment.

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

#[tokio::test]
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
        let request = stack_api::lambda::strip_stage(request);
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
