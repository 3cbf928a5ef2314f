//! Every sample API Gateway event in `events/` (what `tests/env/invoke` and a user debugging
//! a deployed function send) reaches its route through the emulator. The sample ids name no
//! existing stack or job, so those routes prove they were reached by the resource's own 404.

use std::path::Path;

use http::StatusCode;
use serde_json::Value;

use super::{LambdaApi, json_answer};

/// What each sample must answer, and the error of a 404.
const EXPECTED: &[(&str, StatusCode, Option<&str>)] = &[
    ("healthz.json", StatusCode::OK, None),
    ("create-v1.json", StatusCode::CREATED, None),
    ("create-v0.json", StatusCode::CREATED, None),
    ("list.json", StatusCode::OK, None),
    ("get.json", StatusCode::NOT_FOUND, Some("stack not found")),
    ("status.json", StatusCode::NOT_FOUND, Some("stack not found")),
    ("delete.json", StatusCode::NOT_FOUND, Some("stack not found")),
    ("renew.json", StatusCode::NOT_FOUND, Some("stack not found")),
    ("batch-delete.json", StatusCode::ACCEPTED, None),
    ("batch-delete-get.json", StatusCode::NOT_FOUND, Some("job not found")),
    ("stats.json", StatusCode::OK, None),
    ("history.json", StatusCode::OK, None),
    ("preflight.json", StatusCode::OK, None),
    ("prepull.json", StatusCode::OK, None),
    ("identity.json", StatusCode::OK, None),
];

/// The reconciler's event; the reconciler's tests send it.
const NOT_FOR_THE_API: &str = "scheduled.json";

#[tokio::test]
async fn every_sample_event_reaches_its_route() {
    let api = LambdaApi::start().await;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../events");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("events/")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".json") && name != NOT_FOR_THE_API)
        .collect();
    names.sort();
    for name in &names {
        let (_, status, error) = EXPECTED
            .iter()
            .find(|(sample, ..)| sample == name)
            .unwrap_or_else(|| panic!("no expectation for events/{name}"));
        let event = std::fs::read(dir.join(name)).expect("sample");
        let accept: Value = serde_json::from_slice::<Value>(&event).expect("JSON")["headers"]["Accept"].clone();
        let invocation = api.sandbox.invoke(&event).await.expect("invoked");
        assert_eq!(invocation.status, 200, "events/{name}: {}", invocation.text());
        let response = api
            .gateway
            .read(&invocation, accept.as_str())
            .expect("API Gateway reads it");
        let body = json_answer(&response, *status);
        if let Some(error) = error {
            assert_eq!(body["error"], *error, "events/{name}");
        }
    }
    assert_eq!(names.len(), EXPECTED.len(), "every expected sample exists: {names:?}");
    api.finish().await;
}
