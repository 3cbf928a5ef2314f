//! The API under the traffic real platforms send: idle gaps, bursts past the in-flight bound,
//! and outages of the apiserver or DynamoDB (their processes stopped with SIGSTOP). Clients
//! tell apart only 400, 404 and 503, so every answer here must be 2xx, 4xx or a 503 with
//! `Retry-After`, never a 500.
//!
//! Tests that stop a process of the shared environment take [`OUTAGE`] so that no other test
//! of this binary runs meanwhile; a binary of its own (not a module of `it/`) so that no other
//! area's tests run meanwhile either (cargo runs test binaries one after another).

use std::collections::HashSet;
use std::time::Duration;

use axum::body::Body;
use http::{Method, Request};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;
use stack_core::StackId;
use stack_tests::api::{API_KEY, ApiHarness, Reply, WEB_POD, refusals_of};
use stack_tests::env::processes::Component;
use tokio::sync::Mutex;

static OUTAGE: Mutex<()> = Mutex::const_new(());

fn create_request(key: Option<&str>) -> Request<Body> {
    let mut builder = Request::post("/stacks").header("x-api-key", API_KEY);
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder
        .body(Body::from(
            json!({"pod_spec": WEB_POD, "target_port": [{"container_port": 80}]}).to_string(),
        ))
        .expect("request")
}

/// Only what clients can act on: success, or a 503 that tells them when to retry.
fn assert_created_or_retry_later(reply: &Reply) {
    match reply.status {
        201 => {}
        503 => assert!(reply.headers.contains_key("retry-after"), "503 without Retry-After"),
        other => panic!("create answered {other}: {}", reply.json),
    }
}

/// What exists of our stacks: pods not being deleted, services, records, Idempotency-Key
/// claims.
#[derive(Debug, PartialEq)]
struct Existing {
    pods: HashSet<String>,
    services: usize,
    records: HashSet<String>,
    keys: usize,
}

impl Existing {
    async fn read(api: &ApiHarness) -> Self {
        let pods = api
            .managed_pods()
            .await
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name)
            .collect();
        Self {
            pods,
            services: api.managed_services().await.len(),
            records: api.record_ids().await,
            keys: api
                .state
                .stacks
                .store()
                .count_idempotency_keys()
                .await
                .expect("count keys"),
        }
    }

    /// What exists when exactly the stacks `acknowledged` do (each created with a key).
    fn of(acknowledged: &HashSet<String>) -> Self {
        Self {
            pods: acknowledged
                .iter()
                .map(|id| id.parse::<StackId>().expect("stack id").pod_name())
                .collect(),
            services: acknowledged.len(),
            records: acknowledged.clone(),
            keys: acknowledged.len(),
        }
    }
}

/// After a burst, what the API acknowledged is exactly what exists: one pod, one service, one
/// record and one key claim per 201, nothing else (before any reconcile pass): a 503's key is
/// free for its retry.
async fn assert_only_acknowledged_stacks_exist(api: &ApiHarness, acknowledged: &HashSet<String>) {
    let (existing, expected) = (Existing::read(api).await, Existing::of(acknowledged));
    assert_eq!(existing.pods, expected.pods, "pods other than the acknowledged stacks");
    assert_eq!(
        existing.services, expected.services,
        "services other than the acknowledged stacks"
    );
    assert_eq!(
        existing.records, expected.records,
        "records other than the acknowledged stacks"
    );
    assert_eq!(
        existing.keys, expected.keys,
        "key claims other than the acknowledged stacks'"
    );
}

#[tokio::test]
async fn idle_gaps_near_the_read_timeout_answer_no_error() {
    let _serial = OUTAGE.lock().await;
    let api = ApiHarness::start().await;
    let created = futures::future::join_all((0..8).map(|_| api.send(create_request(None)))).await;
    for reply in &created {
        assert_eq!(reply.status, 201, "{}", reply.json);
    }
    // Gaps just under the Kubernetes client's 5 s read timeout: a pooled connection idle that
    // long must still carry the next call (the timeout counts from the request, not the gap).
    let ids: Vec<String> = created.iter().map(Reply::stack_id).collect();
    for gap_ms in [4900, 4950, 4975, 4990] {
        tokio::time::sleep(Duration::from_millis(gap_ms)).await;
        let statuses = ids.iter().map(|id| format!("/stacks/{id}/status"));
        for reply in api.call_each(Method::GET, statuses).await {
            assert_eq!(reply.status, 200, "after {gap_ms} ms idle: {}", reply.json);
        }
    }
    tokio::time::sleep(Duration::from_millis(4600)).await;
    let stacks = ids.iter().map(|id| format!("/stacks/{id}"));
    for reply in api.call_each(Method::DELETE, stacks).await {
        assert_eq!(reply.status, 200, "after an idle gap: {}", reply.json);
    }
    api.finish_asserting_nothing_left().await;
}

#[tokio::test]
async fn a_burst_past_the_in_flight_bound_is_shed_before_anything_is_made() {
    let _serial = OUTAGE.lock().await;
    let api = ApiHarness::with_env(&[("STACK_CREATE_CONCURRENCY", "4"), ("STACK_CREATE_QUEUE_WAIT", "50ms")]).await;
    let burst = (0..40).map(|i| api.send(create_request(Some(&format!("burst-{i}")))));
    let replies = futures::future::join_all(burst).await;
    let mut acknowledged = HashSet::new();
    let mut shed = 0;
    for reply in &replies {
        assert_created_or_retry_later(reply);
        if reply.status == 201 {
            acknowledged.insert(reply.stack_id());
        } else if reply.json["error"]
            .as_str()
            .is_some_and(|m| m.contains("too many creates in flight"))
        {
            shed += 1;
        }
    }
    assert!(shed > 0, "40 creates at once through 4 slots: some must be shed");
    assert!(!acknowledged.is_empty(), "the admitted creates succeed");
    // A shed create released nothing it had not claimed.
    assert_only_acknowledged_stacks_exist(&api, &acknowledged).await;
    api.finish().await;
}

/// Creates paced over a 6 s stop of `component`: only 201 or 503 (with Retry-After), and
/// with fresh keys never 409.
async fn creates_across_an_outage_of(component: &str) {
    let _serial = OUTAGE.lock().await;
    let api = ApiHarness::start().await;
    let process = Component::find(&api.env.settings, component).expect("component pid");
    let paused = process.pause().expect("SIGSTOP");
    let api_ref = &api;
    let paced = (0..9).map(|i| async move {
        tokio::time::sleep(Duration::from_millis(700 * i)).await;
        api_ref
            .send(create_request(Some(&format!("{component}-outage-{i}"))))
            .await
    });
    let resume = async {
        tokio::time::sleep(Duration::from_secs(6)).await;
        paused.resume().expect("SIGCONT");
    };
    let (replies, ()) = tokio::join!(futures::future::join_all(paced), resume);
    let mut acknowledged = HashSet::new();
    for reply in &replies {
        assert_created_or_retry_later(reply);
        if reply.status == 201 {
            acknowledged.insert(reply.stack_id());
        }
    }
    // Each refusal's count is a DynamoDB write of its own: during DynamoDB's outage some are
    // lost, so only the apiserver's are all awaited.
    let retry_later = replies.iter().filter(|r| r.status == 503).count() as u64;
    let all_counted = if component == "dynamodb" { 0 } else { retry_later };
    assert_refusals_counted_as_unavailable(&api, component, all_counted).await;
    // A status read of a stack made before or after the outage answers as usual.
    let after = api.send(create_request(Some(&format!("{component}-after")))).await;
    assert_eq!(after.status, 201, "{}", after.json);
    acknowledged.insert(after.stack_id());
    let status = api
        .call(Method::GET, &format!("/stacks/{}/status", after.stack_id()), None)
        .await;
    assert_eq!(status.status, 200, "{}", status.json);
    // The 503s' writes cut off by the outage land once it ends: none may outlive its request
    // (a late pod, record or key claim removes itself; give it the moment the resumed
    // component needs).
    let settled = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < settled && Existing::read(&api).await != Existing::of(&acknowledged) {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_only_acknowledged_stacks_exist(&api, &acknowledged).await;
    api.finish().await;
}

/// The dashboard counts `component`'s outage as `unavailable` (at least `expected` of them),
/// never as our defect (`internal`).
async fn assert_refusals_counted_as_unavailable(api: &ApiHarness, component: &str, expected: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let history = api.call(Method::GET, "/history", None).await.json;
        assert_eq!(refusals_of(&history, "internal"), 0, "{component}: {history}");
        if refusals_of(&history, "unavailable") >= expected {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{component}: {expected} answered 503, counted: {history}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn creates_across_an_apiserver_outage_answer_201_or_503() {
    creates_across_an_outage_of("kube-apiserver").await;
}

#[tokio::test]
async fn creates_across_a_dynamodb_outage_answer_201_or_503() {
    creates_across_an_outage_of("dynamodb").await;
}

#[tokio::test]
async fn reads_and_deletes_during_an_apiserver_outage_answer_503_and_keep_the_stack() {
    let _serial = OUTAGE.lock().await;
    let api = ApiHarness::start().await;
    let created = api.send(create_request(None)).await;
    assert_eq!(created.status, 201, "{}", created.json);
    let id = created.stack_id();
    let process = Component::find(&api.env.settings, "kube-apiserver").expect("apiserver pid");
    let paused = process.pause().expect("SIGSTOP");
    let status = api.call(Method::GET, &format!("/stacks/{id}/status"), None).await;
    let delete = api.call(Method::DELETE, &format!("/stacks/{id}"), None).await;
    paused.resume().expect("SIGCONT");
    for reply in [&status, &delete] {
        assert_eq!(reply.status, 503, "{}", reply.json);
        assert!(reply.headers.contains_key("retry-after"));
    }
    // The failed delete kept the record, so the stack can still be deleted (or reconciled).
    let again = api.call(Method::DELETE, &format!("/stacks/{id}"), None).await;
    assert_eq!(again.status, 200, "{}", again.json);
    api.finish_asserting_nothing_left().await;
}

/// A batch delete sent as the apiserver stops (the end of an event, the cluster under strain):
/// the deletes that fail meanwhile are tried again, so once it is back every stack is gone and
/// none counts as failed.
#[tokio::test]
async fn a_batch_delete_across_an_apiserver_outage_deletes_every_stack() {
    let _serial = OUTAGE.lock().await;
    let api = ApiHarness::start().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let created = api.send(create_request(None)).await;
        assert_eq!(created.status, 201, "{}", created.json);
        ids.push(created.stack_id());
    }
    let process = Component::find(&api.env.settings, "kube-apiserver").expect("apiserver pid");
    let paused = process.pause().expect("SIGSTOP");
    let accepted = api
        .call(Method::POST, "/stacks/batch-delete", Some(json!({ "stack_ids": ids })))
        .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    paused.resume().expect("SIGCONT");
    assert_eq!(accepted.status, 202, "{}", accepted.json);
    let job_id = accepted.json["job_id"].as_str().expect("job id").to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let job = loop {
        let job = api
            .call(Method::GET, &format!("/stacks/batch-delete/{job_id}"), None)
            .await
            .json;
        if job["status"] == "completed" || job["status"] == "failed" || tokio::time::Instant::now() > deadline {
            break job;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(
        (&job["status"], &job["deleted"], &job["failed"]),
        (&json!("completed"), &json!(3), &json!(0)),
        "{job}"
    );
    api.finish_asserting_nothing_left().await;
}

/// kwok stopped, so the scheduler binds the pod and nobody starts it: the create waits for
/// the start while someone (an operator, an eviction) deletes the pod. The platform asked for
/// a new stack, so the answer is "try again" (503), not "gone" (404), and nothing is left.
#[tokio::test]
async fn a_pod_deleted_while_its_create_waits_for_it_is_503_and_nothing_is_left() {
    let _serial = OUTAGE.lock().await;
    let api = ApiHarness::start().await;
    let pods = kube::Api::<Pod>::namespaced(api.env.kube.clone(), &api.namespace);
    let kwok = Component::find(&api.env.settings, "kwok").expect("kwok pid");
    let paused = kwok.pause().expect("SIGSTOP");
    let delete_once_bound = async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        while tokio::time::Instant::now() < deadline {
            let listed = pods.list(&ListParams::default()).await.expect("list pods");
            let bound = listed
                .items
                .iter()
                .find(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()));
            if let Some(pod) = bound {
                let force = DeleteParams::default().grace_period(0);
                pods.delete(&pod.name_any(), &force).await.expect("delete pod");
                return pod.status.as_ref().and_then(|s| s.phase.clone());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    };
    let (created, phase) = tokio::join!(api.send(create_request(None)), delete_once_bound);
    paused.resume().expect("SIGCONT");
    assert_eq!(phase.as_deref(), Some("Pending"), "a bound pod that had not started");
    assert_eq!(created.status, 503, "{}", created.json);
    assert!(created.headers.contains_key("retry-after"), "503 without Retry-After");
    let message = created.json["error"].as_str().unwrap_or_default();
    assert!(message.contains("deleted while"), "{}", created.json);
    api.finish_asserting_nothing_left().await;
}
