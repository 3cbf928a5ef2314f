//! Benchmark of the stack API against the local environment (run `tests/env/up` first):
//! create latency sequential and at 32 concurrent clients, status latency, creates per
//! second, and DynamoDB / Kubernetes calls per create, status and delete.
//!
//! `cargo run --release -p stack-tests --bin bench-api [-- --creates N] [--exposure hostport]
//! [--tenant-limit N]` (the creates' tenant has a limit: they take the admission path of
//! `stacks::tenant_limit`, a hold and a counter write more each)

use std::time::{Duration, Instant};

use futures::StreamExt;
use http::Method;
use serde_json::json;
use stack_tests::api::ApiHarness;
use stack_tests::manifests::BENCH_POD;

/// Concurrent clients of the burst phase (`--concurrency`).
const CONCURRENCY: usize = 32;

#[tokio::main]
async fn main() {
    stack_core::init_tracing();
    let creates: usize = std::env::args()
        .skip_while(|a| a != "--creates")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    let exposure = std::env::args()
        .skip_while(|a| a != "--exposure")
        .nth(1)
        .unwrap_or_else(|| "nodeport".into());
    let concurrency: usize = std::env::args()
        .skip_while(|a| a != "--concurrency")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(CONCURRENCY);
    let tenants = std::env::args()
        .skip_while(|a| a != "--tenant-limit")
        .nth(1)
        .map_or_else(|| "default".to_owned(), |limit| format!("default={limit}"));
    let api = ApiHarness::with_env(&[("STACK_EXPOSURE", &exposure), ("STACK_TENANTS", &tenants)]).await;
    // Warm up: namespace, node-port view, connections.
    let warm = create(&api).await.0;
    delete(&api, &warm).await;

    let mut sequential = Vec::new();
    let mut ids = Vec::new();
    let (mut ddb_create, mut kube_create) = (0, 0);
    for _ in 0..creates {
        let (ddb0, kube0) = counts(&api);
        let started = Instant::now();
        let (id, _) = create(&api).await;
        sequential.push(started.elapsed());
        let (ddb1, kube1) = counts(&api);
        ddb_create += ddb1 - ddb0;
        kube_create += kube1 - kube0;
        ids.push(id);
    }
    let mut status = Vec::new();
    let (mut ddb_status, mut kube_status) = (0, 0);
    for id in ids.iter().cycle().take(creates * 2) {
        let (ddb0, kube0) = counts(&api);
        let started = Instant::now();
        let reply = api.call(Method::GET, &format!("/stacks/{id}/status"), None).await;
        status.push(started.elapsed());
        assert_eq!(reply.status, 200, "{}", reply.json);
        let (ddb1, kube1) = counts(&api);
        ddb_status += ddb1 - ddb0;
        kube_status += kube1 - kube0;
    }
    let (mut ddb_delete, mut kube_delete) = (0, 0);
    for id in &ids {
        let (ddb0, kube0) = counts(&api);
        delete(&api, id).await;
        let (ddb1, kube1) = counts(&api);
        ddb_delete += ddb1 - ddb0;
        kube_delete += kube1 - kube0;
    }

    let concurrent_creates = creates.max(concurrency * 4);
    let started = Instant::now();
    // A burst may be refused in part (503, try later) on a busy machine: counted, not fatal.
    let results: Vec<(Option<String>, Duration)> = futures::stream::iter(0..concurrent_creates)
        .map(|_| async {
            let t = Instant::now();
            let reply = api
                .create(BENCH_POD, json!([{"container_port": 1337, "protocol": "TCP"}]))
                .await;
            let id = (reply.status == 201).then(|| reply.json["stack_id"].as_str().unwrap_or_default().to_owned());
            (id, t.elapsed())
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let wall = started.elapsed();
    let concurrent: Vec<Duration> = results.iter().filter(|(id, _)| id.is_some()).map(|(_, d)| *d).collect();
    let refused = results.len() - concurrent.len();
    futures::stream::iter(
        results
            .iter()
            .filter_map(|(id, _)| id.as_deref())
            .map(|id| delete(&api, id)),
    )
    .buffer_unordered(concurrency)
    .collect::<Vec<_>>()
    .await;

    let n = creates as f64;
    println!(
        "stack-api benchmark (in-process router, DynamoDB Local, real apiserver + kwok), STACK_EXPOSURE={exposure}"
    );
    report("create, sequential", &mut sequential);
    report(&format!("create, {concurrency} concurrent"), &mut concurrent.clone());
    println!("refused (503) in the burst: {refused} of {concurrent_creates}");
    report("status, sequential", &mut status);
    println!(
        "creates/s at {concurrency} concurrency: {:.1} ({} creates in {:.2}s)",
        concurrent.len() as f64 / wall.as_secs_f64(),
        concurrent.len(),
        wall.as_secs_f64()
    );
    println!(
        "calls per create: dynamodb {:.2}, kubernetes {:.2}",
        ddb_create as f64 / n,
        kube_create as f64 / n
    );
    println!(
        "calls per status: dynamodb {:.2}, kubernetes {:.2}",
        ddb_status as f64 / (2.0 * n),
        kube_status as f64 / (2.0 * n)
    );
    println!(
        "calls per delete: dynamodb {:.2}, kubernetes {:.2}",
        ddb_delete as f64 / n,
        kube_delete as f64 / n
    );
}

fn counts(api: &ApiHarness) -> (u64, u64) {
    let calls = api.calls.snapshot();
    (calls.dynamodb_total(), calls.kube_total())
}

async fn create(api: &ApiHarness) -> (String, u64) {
    let reply = api
        .create(BENCH_POD, json!([{"container_port": 1337, "protocol": "TCP"}]))
        .await;
    assert_eq!(reply.status, 201, "{}", reply.json);
    (
        reply.json["stack_id"].as_str().unwrap_or_default().to_owned(),
        reply.json["node_port"].as_u64().unwrap_or_default(),
    )
}

async fn delete(api: &ApiHarness, id: &str) {
    let reply = api.call(Method::DELETE, &format!("/stacks/{id}"), None).await;
    assert_eq!(reply.status, 200, "{}", reply.json);
}

fn report(label: &str, samples: &mut [Duration]) {
    samples.sort();
    let pct = |p: f64| {
        let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
        samples.get(index).map(|d| d.as_secs_f64() * 1000.0).unwrap_or(f64::NAN)
    };
    println!(
        "{label:<28} n={:<5} p50 {:>7.1} ms  p95 {:>7.1} ms  p99 {:>7.1} ms",
        samples.len(),
        pct(0.5),
        pct(0.95),
        pct(0.99)
    );
}
