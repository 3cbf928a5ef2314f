//! What the dashboard reads, over the real local environment: the public page and document,
//! headroom in /stats, and the history the reconciler and refused creates record.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use axum::body::Body;
use http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use stack_tests::api::{ApiHarness, SIMULATED_NODE_PORTS, WEB_POD, refusals_of};
use stack_tests::reconciler::TestReconciler;
use tower::ServiceExt;

/// A request without any key; the raw status, headers and body.
async fn without_key(api: &ApiHarness, path: &str) -> (u16, http::HeaderMap, Vec<u8>) {
    let request = Request::builder().uri(path).body(Body::empty()).expect("request");
    let response = api.router.clone().oneshot(request).await.expect("router");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.expect("body").to_bytes().to_vec();
    (status, headers, body)
}

/// The sum of the counts in the object `stats[field]`.
fn sum_of(stats: &Value, field: &str) -> u64 {
    stats[field]
        .as_object()
        .expect(field)
        .values()
        .filter_map(Value::as_u64)
        .sum()
}

#[tokio::test]
async fn page_and_document_need_no_key_and_data_still_does() {
    let api = ApiHarness::start().await;
    for (path, content_type) in [
        ("/dashboard", "text/html"),
        ("/dashboard/app.js", "text/javascript"),
        ("/dashboard/app.css", "text/css"),
    ] {
        let (status, headers, _) = without_key(&api, path).await;
        assert_eq!(status, 200, "{path}");
        let served = headers[http::header::CONTENT_TYPE].to_str().unwrap();
        assert!(served.starts_with(content_type), "{path}: {served}");
        let csp = headers[http::header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{csp}"
        );
        assert!(!csp.contains("unsafe-inline"), "{csp}");
    }
    let (status, _, body) = without_key(&api, "/openapi.json").await;
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_slice(&body).expect("json document");
    assert_eq!(doc["openapi"], json!("3.1.0"));
    assert!(doc["paths"]["/stacks/{stack_id}"]["delete"].is_object());

    // Only the page, its two assets and the document are public.
    for path in [
        "/stats",
        "/history",
        "/stacks",
        "/dashboard/secrets.txt",
        "/dashboard/../stats",
    ] {
        let (status, _, body) = without_key(&api, path).await;
        assert_eq!(status, 401, "{path}: {}", String::from_utf8_lossy(&body));
    }
    api.finish().await;
}

#[tokio::test]
async fn stats_show_headroom_of_ports_and_stack_nodes() {
    let api = ApiHarness::start().await;
    let created = api.create(WEB_POD, json!([{"container_port": 80}])).await;
    assert_eq!(created.status, 201, "{}", created.json);

    let stats = api.call(Method::GET, "/stats", None).await.json;
    let placed = stats["node_distribution"].as_object().expect("distribution");
    assert_eq!(placed.len(), 1, "{stats}");
    let node = placed.keys().next().expect("the stack's node").clone();
    let capacity = &stats["capacity"];
    let (min, max) = SIMULATED_NODE_PORTS;
    let total = u64::from(max - min + 1);
    assert_eq!(capacity["node_ports"]["total"], json!(total));
    assert_eq!(capacity["node_ports"]["used"], stats["used_node_ports"]);
    // Other tests' NodePort services share the range.
    let elsewhere = capacity["node_ports"]["held_elsewhere"]
        .as_u64()
        .expect("the cluster's services read");
    assert_eq!(
        capacity["node_ports"]["free"],
        json!(total - stats["used_node_ports"].as_u64().unwrap() - elsewhere)
    );
    let on_node = &capacity["nodes"][&node];
    assert_eq!(on_node["stacks"], json!(1), "{capacity}");
    assert_eq!(on_node["reserved_cpu_milli"], json!(100));
    assert_eq!(on_node["reserved_memory_bytes"], json!(64 * 1024 * 1024));
    assert!(on_node["allocatable_cpu_milli"].as_i64().unwrap() > 100, "{on_node}");
    assert!(
        capacity["nodes"]
            .as_object()
            .unwrap()
            .keys()
            .all(|n| !n.starts_with("system")),
        "only nodes with the stack role: {capacity}"
    );
    // Every field of before is still there.
    for field in [
        "total_stacks",
        "active_stacks",
        "node_distribution",
        "reserved_cpu_milli",
        "reserved_memory_bytes",
    ] {
        assert!(!stats[field].is_null(), "{field}");
    }
    api.finish().await;
}

#[tokio::test]
async fn history_shows_reconcile_passes_and_refused_creates() {
    let api = ApiHarness::start().await;
    api.create_web().await;
    let refused = api.create("kind: Service", json!(80)).await;
    assert_eq!(refused.status, 400);

    let reconciler = TestReconciler::over(&api, &[]).await;
    reconciler.pass().await;

    let history = api.call(Method::GET, "/history", None).await.json;
    assert_eq!(history["challenge_label"], json!("challenge"));
    let passes = history["passes"].as_array().expect("passes");
    assert_eq!(passes.len(), 1, "{history}");
    assert_eq!(passes[0]["total_stacks"], json!(1));
    assert_eq!(passes[0]["active_stacks"], json!(1));
    assert_eq!(passes[0]["created_last_minute"], json!(1));

    // The refusal is counted off the request's path: it shows up shortly after.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let history = api.call(Method::GET, "/history", None).await.json;
        if refusals_of(&history, "invalid_spec") == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "refusal not counted: {history}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A chart item that does not read (a version with another format) costs only its point.
    let store = api.state.stacks.store();
    let now_ms = format!("{:015}", jiff::Timestamp::now().as_millisecond());
    for pk in ["HISTORY", "REFUSALS"] {
        let put = store
            .client()
            .put_item()
            .table_name(store.table())
            .item("pk", AttributeValue::S(pk.into()))
            .item("sk", AttributeValue::S(now_ms.clone()))
            .item("minute", AttributeValue::N("1".into()))
            .item("at", AttributeValue::N("1".into()));
        put.send().await.unwrap();
    }
    let history = api.call(Method::GET, "/history", None).await;
    assert_eq!(history.status, 200, "{}", history.json);
    assert_eq!(
        history.json["passes"].as_array().map(Vec::len),
        Some(1),
        "{}",
        history.json
    );

    // The page groups by the manifest's challenge label.
    let list = api.call(Method::GET, "/stacks", None).await.json;
    assert_eq!(list["stacks"][0]["labels"]["challenge"], json!("web"));
    api.finish().await;
}

/// `/stats` once it shows `total` stacks (the `usage` index follows the table within a
/// moment); a count that never settles there fails.
async fn stats_once_total(api: &ApiHarness, total: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = api.call(Method::GET, "/stats", None).await.json;
        if stats["total_stacks"] == json!(total) {
            return stats;
        }
        assert!(Instant::now() < deadline, "/stats never showed {total} stacks: {stats}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn stats_count_exactly_what_creates_and_deletes_leave() {
    let api = ApiHarness::start().await;
    let two_ports = WEB_POD.replace(
        "        - containerPort: 80\n",
        "        - containerPort: 80\n        - containerPort: 81\n",
    );
    let mut ids = Vec::new();
    for (manifest, ports) in [
        (WEB_POD, json!([{"container_port": 80}])),
        (
            two_ports.as_str(),
            json!([{"container_port": 80}, {"container_port": 81}]),
        ),
        (WEB_POD, json!(80)),
    ] {
        let created = api.create(manifest, ports).await;
        assert_eq!(created.status, 201, "{}", created.json);
        ids.push(created.json["stack_id"].as_str().expect("stack_id").to_owned());
    }

    // Every count against what the records say (each stack takes 100m and 64Mi).
    let expect = |stats: &Value, stacks: u64, ports: u64| {
        assert_eq!(stats["total_stacks"], json!(stacks), "{stats}");
        let statuses = sum_of(stats, "status_counts");
        assert_eq!(statuses, stacks, "{stats}");
        let active = stats["active_stacks"].as_u64().expect("active_stacks");
        assert_eq!(active, stacks, "every stack here is creating or running: {stats}");
        assert_eq!(stats["used_node_ports"], json!(ports), "{stats}");
        assert_eq!(stats["capacity"]["node_ports"]["used"], json!(ports), "{stats}");
        assert_eq!(stats["reserved_cpu_milli"], json!(100 * stacks), "{stats}");
        assert_eq!(
            stats["reserved_memory_bytes"],
            json!(64 * 1024 * 1024 * stacks),
            "{stats}"
        );
        let placed = sum_of(stats, "node_distribution");
        let on_nodes: u64 = stats["capacity"]["nodes"]
            .as_object()
            .expect("capacity.nodes")
            .values()
            .filter_map(|n| n["stacks"].as_u64())
            .sum();
        assert_eq!(placed, on_nodes, "{stats}");
        assert!(placed <= stacks, "{stats}");
    };
    expect(&stats_once_total(&api, 3).await, 3, 4);

    api.delete_stack(&ids[1]).await;
    expect(&stats_once_total(&api, 2).await, 2, 2);

    for id in [&ids[0], &ids[2]] {
        api.delete_stack(id).await;
    }
    let empty = stats_once_total(&api, 0).await;
    expect(&empty, 0, 0);
    assert_eq!(empty["node_distribution"], json!({}));
    assert_eq!(empty["status_counts"], json!({}));
    api.finish().await;
}
