//! `POST /preflight` against the local cloud: every limit set too low is named no-go with what
//! is missing; a burst twice the room is refused by exactly the predicted overflow; the real
//! nodes, which hold the challenge image, say go.

use http::Method;
use serde_json::{Value, json};
use stack_tests::api::{ApiHarness, Reply, WEB_POD};
use stack_tests::challenges::Challenge;
use stack_tests::tenants::{ALL_OPERATOR, CTF_OPERATOR, CTF_PLATFORM, TestKey};

/// A stack that needs 100 GiB: two fit on a simulated node (256 GiB each), whatever small
/// stacks other tests put there.
const BIG_POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: big
spec:
  containers:
    - name: app
      image: registry.example/ctf/big:1
      ports:
        - containerPort: 80
      resources:
        limits:
          cpu: 100m
          memory: 100Gi
"#;

async fn preflight(api: &ApiHarness, key: &TestKey, body: Value) -> Reply {
    let reply = api.call_as(key.key, Method::POST, "/preflight", Some(body)).await;
    assert_eq!(reply.status, 200, "{}", reply.json);
    reply
}

/// The `images` check says no-go, its detail naming `missing` (an image on how many nodes).
fn assert_images_missing(reply: &Reply, missing: &str) {
    let images = check(reply, "images");
    assert_eq!(images["go"], false, "{images}");
    assert!(
        images["detail"].as_str().unwrap_or_default().contains(missing),
        "{images}"
    );
}

/// [`preflight`] of `count` stacks of one manifest.
async fn preflight_of(api: &ApiHarness, key: &TestKey, count: u32, pod_spec: &str, target_port: u16) -> Reply {
    let stacks = json!([{"count": count, "pod_spec": pod_spec, "target_port": target_port}]);
    preflight(api, key, json!({ "stacks": stacks })).await
}

fn check<'a>(reply: &'a Reply, limit: &str) -> &'a Value {
    reply.json["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["limit"] == limit))
        .unwrap_or_else(|| panic!("no {limit} check: {}", reply.json))
}

#[tokio::test]
async fn each_limit_set_too_low_is_no_go_with_what_is_missing() {
    let api = ApiHarness::with_tenants(
        &[("ctf", 3)],
        &[
            // Ports no Service holds (those of the real nodes' tests, `connect.rs`, would count).
            ("STACK_NODEPORT_MIN", "32734"),
            ("STACK_NODEPORT_MAX", "32737"),
            ("STACK_CREATE_RATE", "2"),
        ],
    )
    .await;
    let body = json!({
        "stacks": [{"count": 5, "pod_spec": BIG_POD, "target_port": [{"container_port": 80}]}],
        "opening_seconds": 1,
    });
    let reply = preflight(&api, &CTF_OPERATOR, body).await;
    assert_eq!(reply.json["go"], false, "{}", reply.json);
    let summary = reply.json["summary"].as_str().unwrap_or_default().to_owned();
    for (limit, headroom) in [
        ("node_ports", -1.0),
        ("placement", -1.0),
        ("tenant", -2.0),
        ("create_rate", -3.0),
    ] {
        let c = check(&reply, limit);
        assert_eq!(c["go"], false, "{limit}: {c}");
        assert_eq!(c["headroom"].as_f64(), Some(headroom), "{limit}: {c}");
        assert!(summary.contains(limit), "{summary}");
    }
    // The simulated nodes hold no image at all: the first stacks would wait for the pull.
    assert_images_missing(&reply, "registry.example/ctf/big:1 on 0 of");
    assert_eq!(check(&reply, "pods")["go"], true);
    // Platform keys cannot ask; a manifest a create would refuse is a 400 naming it.
    let refused = api
        .call_as(
            CTF_PLATFORM.key,
            Method::POST,
            "/preflight",
            Some(json!({"stacks": []})),
        )
        .await;
    assert_eq!(refused.status, 403, "{}", refused.json);
    let bad = api
        .call_as(
            ALL_OPERATOR.key,
            Method::POST,
            "/preflight",
            Some(json!({"stacks": [{"count": 1, "pod_spec": "kind: Deployment", "target_port": 80}]})),
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.json);
    assert!(bad.error().starts_with("stacks[0]"), "{}", bad.json);
    api.finish().await;
}

#[tokio::test]
async fn a_burst_twice_the_room_is_refused_by_as_many_creates_as_predicted() {
    let api = ApiHarness::with_tenants(&[("ctf", 3)], &[("STACK_CREATE_CONCURRENCY", "32")]).await;
    // The nodes' memory: room for 4 of the big stacks (2 per simulated node).
    let predicted = preflight_of(&api, &ALL_OPERATOR, 8, BIG_POD, 80).await;
    let placement = check(&predicted, "placement");
    let room = placement["available"].as_f64().expect("available") as usize;
    assert_eq!(placement["go"], false, "{placement}");
    let burst = futures::future::join_all((0..8).map(|_| api.create(BIG_POD, json!(80)))).await;
    let refused = burst.iter().filter(|r| r.status == 503).count();
    assert!(burst.iter().all(|r| matches!(r.status, 201 | 503)), "{burst:?}");
    let said: Vec<&Value> = burst.iter().map(|r| &r.json["error"]).collect();
    assert_eq!(
        refused,
        8 - room,
        "predicted {room} of 8 placed: {placement}; answers {said:?}"
    );

    // The tenant's limit: 3 of 6 for ctf, as predicted.
    let predicted = preflight_of(&api, &CTF_OPERATOR, 6, WEB_POD, 80).await;
    let tenant = check(&predicted, "tenant");
    assert_eq!(tenant["headroom"].as_f64(), Some(-3.0), "{tenant}");
    let creates = (0..6).map(|_| {
        let api = &api;
        async move {
            let body = json!({"pod_spec": WEB_POD, "target_port": 80});
            api.call_as(CTF_PLATFORM.key, Method::POST, "/stacks", Some(body)).await
        }
    });
    let burst = futures::future::join_all(creates).await;
    assert_eq!(burst.iter().filter(|r| r.status == 503).count(), 3, "{burst:?}");
    api.finish().await;
}

#[tokio::test]
async fn the_real_nodes_holding_the_challenge_image_say_go() {
    let api = ApiHarness::on_real_nodes_with_tenants(&[]).await;
    // `up` ran the TCP challenge on every real node: its image (also the isolation check's) is there.
    let challenge = Challenge::local(api.registry(), "tcp");
    let body = json!({
        "stacks": [{"count": 2, "pod_spec": challenge.manifest(), "target_port": 8080}],
        "opening_seconds": 10,
    });
    let reply = preflight(&api, &ALL_OPERATOR, body).await;
    assert_eq!(reply.json["go"], true, "{}", reply.json);
    assert!(
        reply.json["summary"]
            .as_str()
            .unwrap_or_default()
            .starts_with("go: 2 stacks")
    );
    let missing = Challenge::local(api.registry(), "tcp")
        .manifest()
        .replace("tcp:1", "tcp:never-pulled");
    let reply = preflight_of(&api, &ALL_OPERATOR, 1, &missing, 8080).await;
    assert_images_missing(&reply, "tcp:never-pulled on 0 of 2");
    api.finish().await;
}
