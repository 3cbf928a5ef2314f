//! The stack API end to end against the real local environment (DynamoDB Local and a real
//! apiserver with scheduler, controllers and kwok nodes).

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime};

use axum::body::Body;
use http::{Method, Request};
use k8s_openapi::api::core::v1::{LimitRange, Pod, ResourceQuota};
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use stack_core::{CREATE_DEADLINE, StackId};
use stack_tests::api::{API_KEY, ApiHarness, Reply, WEB_POD, listed_ids};
use stack_tests::env::SimulatedNode;
use stack_tests::reconciler::running_record;

/// A 503 whose message starts with `reason`, telling the client when to retry.
fn assert_unavailable(reply: &stack_tests::api::Reply, reason: &str) {
    assert_eq!(reply.status, 503, "{}", reply.json);
    assert!(reply.error().starts_with(reason), "{}", reply.json);
    assert!(reply.headers.contains_key("retry-after"), "no Retry-After");
}

/// A 400 whose message names the field and the problem, as the platform shows it to the author.
fn assert_invalid(reply: &stack_tests::api::Reply, field_and_problem: &str) {
    assert_eq!(reply.status, 400, "{}", reply.json);
    assert!(
        reply
            .error()
            .starts_with(&format!("invalid pod spec: {field_and_problem}")),
        "{}",
        reply.json
    );
}

/// True when every field of `expected` is present with the same value in `actual`.
fn is_subset(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => e.iter().all(|(k, v)| a.get(k).is_some_and(|av| is_subset(v, av))),
        (Value::Array(e), Value::Array(a)) => e.len() == a.len() && e.iter().zip(a).all(|(ev, av)| is_subset(ev, av)),
        _ => expected == actual,
    }
}

#[tokio::test]
async fn healthz_checks_dependencies_and_the_api_key() {
    let api = ApiHarness::start().await;
    let ok = api.call(Method::GET, "/healthz", None).await;
    assert_eq!((ok.status, ok.json.clone()), (200, json!({"status": "ok"})));

    let no_key = api.send(Request::get("/healthz").body(Body::empty()).unwrap()).await;
    assert_eq!((no_key.status, no_key.json), (401, json!({"error": "invalid api key"})));
    // A wrong key in the header; the key in the query; the header wins over the query when
    // present and not blank.
    let cases = [
        (None, Some("nope"), 401),
        (Some(API_KEY), None, 200),
        (Some(API_KEY), Some("nope"), 401),
        (Some(API_KEY), Some(" "), 200),
    ];
    for (query, header, status) in cases {
        let mut request = Request::get(query.map_or("/healthz".to_owned(), |key| format!("/healthz?api_key={key}")));
        if let Some(header) = header {
            request = request.header("x-api-key", header);
        }
        let answer = api.send(request.body(Body::empty()).unwrap()).await;
        assert_eq!(
            answer.status, status,
            "key {query:?} in the query, {header:?} in the header"
        );
    }
    api.finish().await;
}

#[tokio::test]
async fn v1_create_applies_the_hardened_pod_and_reads_back() {
    let api = ApiHarness::start().await;
    let created = api
        .create(WEB_POD, json!([{"container_port": 80, "protocol": "tcp"}]))
        .await;
    assert_eq!(created.status, 201, "{}", created.json);
    let id = created.stack_id();
    let body = &created.json;
    assert!(id.starts_with("stack-") && id.len() == 22);
    assert_eq!(body["pod_id"], id.as_str());
    assert_eq!(body["service_name"], format!("svc-{id}"));
    assert_eq!(body["namespace"], api.namespace.as_str());
    let port = &body["ports"][0];
    assert_eq!(
        (port["container_port"].as_u64(), port["protocol"].as_str()),
        (Some(80), Some("TCP"))
    );
    let node_port = port["node_port"].as_u64().unwrap();
    assert!((31001..=32767).contains(&node_port));
    assert_eq!(body["target_port"], 80);
    assert_eq!(body["node_port"], node_port);
    for field in ["ttl_expires_at", "created_at", "updated_at"] {
        let text = body[field].as_str().unwrap();
        assert!(text.ends_with('Z'), "{field}: {text}");
        text.parse::<jiff::Timestamp>().unwrap();
    }
    assert_eq!(body["requested_cpu_milli"], 100);
    assert_eq!(body["requested_memory_bytes"], 64 * 1024 * 1024);
    // Scheduling is quick here, so the answer already names the node and its address.
    let node_id = body["node_id"].as_str().unwrap();
    assert!(!node_id.is_empty(), "{body}");
    assert!(
        body["node_public_ip"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("203.0.113.")),
        "{body}"
    );

    // The pod in the apiserver is the hardened one the answer shows.
    let applied: Value =
        serde_json::to_value(serde_yaml::from_str::<Pod>(body["pod_spec"].as_str().unwrap()).unwrap()).unwrap();
    let live = serde_json::to_value(api.pods_api().get(&id).await.unwrap()).unwrap();
    assert!(
        is_subset(&applied["spec"], &live["spec"]),
        "applied {} live {}",
        applied["spec"],
        live["spec"]
    );
    assert!(is_subset(&applied["metadata"]["labels"], &live["metadata"]["labels"]));
    assert_eq!(
        live["spec"]["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(
        live["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(live["spec"]["automountServiceAccountToken"], false);
    assert_eq!(live["spec"]["nodeSelector"]["role"], stack_tests::env::SIMULATED_ROLE);
    // Operators see who made it (`kubectl get pod --show-managed-fields`, audit logs).
    let spec_managers: Vec<&Value> = live["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["subresource"].is_null())
        .map(|entry| &entry["manager"])
        .collect();
    assert_eq!(spec_managers, [&json!("stack-provisioner")]);
    let service = api.services_api().get(&format!("svc-{id}")).await.unwrap();
    let spec = service.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("NodePort"));
    assert_eq!(spec.ports.unwrap()[0].node_port, Some(node_port as i32));
    assert_eq!(service.metadata.owner_references.unwrap()[0].name, id);

    let got = api.call(Method::GET, &format!("/stacks/{id}"), None).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json["stack_id"], id.as_str());
    // The manifest is stored apart from the record and comes back with it.
    assert_eq!(got.json["pod_spec"], body["pod_spec"]);
    let status = api.call(Method::GET, &format!("/stacks/{id}/status"), None).await;
    assert_eq!(status.status, 200);
    assert_eq!(status.json["ttl"], got.json["ttl_expires_at"]);
    assert_eq!(status.json["ports"], got.json["ports"]);
    assert_eq!(status.json["node_port"], node_port);
    assert!(["creating", "running"].contains(&status.json["status"].as_str().unwrap()));

    let list = api.call(Method::GET, "/stacks", None).await;
    assert_eq!(list.status, 200);
    assert_eq!(list.json["stacks"].as_array().unwrap().len(), 1);
    assert_eq!(list.json["stacks"][0]["pod_spec"], body["pod_spec"]);
    let stats = api.call(Method::GET, "/stats", None).await;
    assert_eq!(stats.status, 200);
    assert_eq!(stats.json["total_stacks"], 1);
    assert_eq!(stats.json["used_node_ports"], 1);
    assert_eq!(stats.json["node_distribution"][node_id], 1);

    let deleted = api.call(Method::DELETE, &format!("/stacks/{id}"), None).await;
    assert_eq!(
        (deleted.status, deleted.json),
        (200, json!({"deleted": true, "stack_id": id}))
    );
    assert_eq!(api.call(Method::GET, &format!("/stacks/{id}"), None).await.status, 404);
    let again = api.call(Method::DELETE, &format!("/stacks/{id}"), None).await;
    assert_eq!((again.status, again.json), (404, json!({"error": "stack not found"})));
    api.assert_nothing_left().await;
    let empty = api.call(Method::GET, "/stacks", None).await;
    assert_eq!(empty.json, json!({"stacks": []}));
    let stats = api.call(Method::GET, "/stats", None).await;
    assert_eq!(stats.json["node_distribution"], json!({}));
    api.finish().await;
}

#[tokio::test]
async fn a_create_whose_pod_starts_in_time_answers_running() {
    // kwok starts a bound pod at once: a create sees it start within STACK_CREATE_WAIT and
    // answers `running` with the node, as the Go provisioner does (an overloaded machine may
    // still answer `creating` now and then, so one of three suffices).
    let api = ApiHarness::start().await;
    let mut running = 0;
    for _ in 0..3 {
        let created = api.create_web().await;
        if created.json["status"] == "running" {
            running += 1;
            assert!(
                created.json["node_id"].as_str().is_some_and(|n| !n.is_empty()),
                "{}",
                created.json
            );
            assert!(created.json["node_public_ip"].is_string(), "{}", created.json);
        }
    }
    assert!(running >= 1, "no create answered running");
    api.finish().await;
}

#[tokio::test]
async fn a_create_follows_its_pod_with_one_watch_and_reads_each_node_once() {
    // The apiserver's load in a competition's opening burst: a create makes its pod and its
    // service, follows the pod with one watch until it runs, and reads a node's address only
    // the first time a stack lands there (before: two watches and a node read per create).
    let api = ApiHarness::start().await;
    // A warm-up create, not counted.
    api.create_web().await;
    let before = api.calls.snapshot();
    let creates = 4;
    let mut nodes = std::collections::BTreeSet::new();
    for _ in 0..creates {
        let created = api.create_web().await;
        assert!(created.json["node_public_ip"].is_string(), "{}", created.json);
        nodes.insert(created.json["node_id"].as_str().unwrap().to_owned());
    }
    let calls = api.calls.snapshot().since(&before);
    assert_eq!(calls.kube_other, 2 * creates, "a pod and a service each: {calls:?}");
    assert_eq!(calls.kube_delete, 0, "{calls:?}");
    // One watch per create, plus at most one read of each node.
    assert!(calls.kube_get <= creates + nodes.len() as u64, "{nodes:?} {calls:?}");
    api.finish().await;
}

#[tokio::test]
async fn the_functions_kubernetes_client_speaks_http2_to_the_apiserver() {
    // One connection for every call, and a watch ended early resets its stream rather than
    // its connection (over HTTP/1.1 each create's watch cost a TCP and TLS handshake).
    let env = stack_tests::env::TestEnv::connect().await.expect("local environment");
    let config = stack_tests::api::kube_config(&env).await;
    let client = stack_core::client_builder(&config).expect("client").build();
    let request = Request::get("/version").body(kube::client::Body::empty()).unwrap();
    let response = client.send(request).await.expect("GET /version");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), http::Version::HTTP_2);
}

#[tokio::test]
async fn v0_create_with_a_scalar_port() {
    let api = ApiHarness::start().await;
    let created = api.create_web().await;
    assert_eq!(created.json["target_port"], 80);
    assert_eq!(created.json["ports"][0]["protocol"], "TCP");
    assert_eq!(created.json["node_port"], created.json["ports"][0]["node_port"]);
    let status = api
        .call(Method::GET, &format!("/stacks/{}/status", created.stack_id()), None)
        .await;
    assert_eq!(status.json["target_port"], 80);
    assert_eq!(status.json["node_port"], created.json["node_port"]);
    api.finish().await;
}

#[tokio::test]
async fn invalid_requests_answer_400_and_leave_nothing() {
    let api = ApiHarness::start().await;
    let not_json = api
        .send(
            Request::post("/stacks")
                .header("x-api-key", API_KEY)
                .body(Body::from("{nope"))
                .unwrap(),
        )
        .await;
    assert_eq!(
        (not_json.status, not_json.json),
        (400, json!({"error": "invalid json body"}))
    );
    let hostile = WEB_POD.replace("  containers:\n", "  hostNetwork: true\n  containers:\n");
    let rejected = api.create(&hostile, json!(80)).await;
    assert_eq!(rejected.status, 400);
    let message = rejected.error();
    assert!(
        message.starts_with("invalid pod spec: ") && message.contains("spec.hostNetwork"),
        "{message}"
    );
    let privileged = WEB_POD.replace(
        "      ports:\n",
        "      securityContext:\n        privileged: true\n      ports:\n",
    );
    let rejected = api.create(&privileged, json!(80)).await;
    assert_eq!(rejected.status, 400);
    assert!(
        rejected.error().contains("spec.containers[0].securityContext"),
        "{}",
        rejected.json
    );
    let undeclared = api.create(WEB_POD, json!(8080)).await;
    assert_eq!(undeclared.status, 400, "{}", undeclared.json);
    assert!(undeclared.error().contains("8080"));
    let too_many: Vec<Value> = (1..=25).map(|p| json!({"container_port": p})).collect();
    assert_eq!(api.create(WEB_POD, Value::Array(too_many)).await.status, 400);
    let duplicate = api
        .create(
            WEB_POD,
            json!([{"container_port": 80}, {"container_port": 80, "protocol": "TCP"}]),
        )
        .await;
    assert_eq!(duplicate.status, 400);
    api.finish_asserting_nothing_left().await;
}

#[tokio::test]
async fn routes_methods_and_body_limits_answer_json() {
    let api = ApiHarness::start().await;
    let unknown = api.call(Method::GET, "/nope", None).await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.json["error"].is_string());
    let wrong_method = api.call(Method::PUT, "/stacks", None).await;
    assert_eq!(wrong_method.status, 405);
    assert!(wrong_method.json["error"].is_string());
    let huge = "x".repeat(1024 * 1024 + 10);
    for (method, path) in [
        (Method::POST, "/stacks"),
        (Method::POST, "/stacks/batch-delete"),
        (Method::POST, "/preflight"),
        (Method::PUT, "/prepull"),
    ] {
        let request = Request::builder()
            .method(&method)
            .uri(path)
            .header("x-api-key", API_KEY);
        let too_big = api.send(request.body(Body::from(huge.clone())).unwrap()).await;
        assert_eq!(too_big.status, 413, "{method} {path}");
        assert!(too_big.json["error"].is_string(), "{method} {path}");
    }
    let missing = api.call(Method::GET, "/stacks/stack-0123456789abcdef", None).await;
    assert_eq!(
        (missing.status, missing.json),
        (404, json!({"error": "stack not found"}))
    );
    let malformed_id = api.call(Method::GET, "/stacks/not-a-stack/status", None).await;
    assert_eq!(malformed_id.status, 404);
    let no_job = api
        .call(Method::GET, "/stacks/batch-delete/job-0123456789abcdef", None)
        .await;
    assert_eq!(no_job.status, 404);
    let renew_missing = api
        .call(Method::POST, "/stacks/stack-0123456789abcdef/renew", None)
        .await;
    assert_eq!(renew_missing.status, 404);
    // Ids not of the documented form name nothing, however long (DynamoDB keys are not).
    let long = "a".repeat(1100);
    for (method, path) in [
        (Method::GET, format!("/stacks/batch-delete/job-{long}")),
        (Method::GET, format!("/stacks/batch-delete/{long}")),
        (Method::GET, format!("/stacks/stack-{long}")),
        (Method::GET, format!("/stacks/stack-{long}/status")),
        (Method::DELETE, format!("/stacks/stack-{long}")),
        (Method::POST, format!("/stacks/stack-{long}/renew")),
    ] {
        let reply = api.call(method.clone(), &path, None).await;
        assert_eq!(reply.status, 404, "{method} {}: {}", &path[..40], reply.json);
    }
    api.finish().await;
}

#[tokio::test]
async fn a_pod_no_stack_node_could_ever_run_is_400_and_nothing_left() {
    let api = ApiHarness::start().await;
    // Every stack node of the environment allocates 64 CPUs: retrying could never place 500.
    let huge = WEB_POD.replace("cpu: 100m", "cpu: \"500\"");
    let refused = api.create(&huge, json!(80)).await;
    assert_invalid(&refused, "spec.containers[*].resources request 500 of cpu in total");
    let pinned = format!(
        "{WEB_POD}  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n          - matchExpressions:\n              - {{key: kubernetes.io/hostname, operator: In, values: [no-such-node]}}\n"
    );
    let refused = api.create(&pinned, json!(80)).await;
    assert_invalid(
        &refused,
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms match no stack node",
    );
    api.finish_asserting_nothing_left().await;
}

#[tokio::test]
async fn unschedulable_pod_is_503_with_retry_after_and_nothing_left() {
    // A role of this test only, on one node with room for one 800m pod at a time: the second
    // pod fits the node once the first ends, so the scheduler's refusal means "try later".
    let role = stack_tests::env::unique_name("busy");
    let api = ApiHarness::with_env(&[("STACK_NODE_ROLE", role.as_str())]).await;
    let node = SimulatedNode::new(&format!("{role}-node"))
        .role(&role)
        .allocatable("1", "4Gi", "110")
        .external_ip("203.0.113.212");
    stack_tests::reconciler::add_schedulable_node(&api.env, &node)
        .await
        .unwrap();
    let pod = WEB_POD.replace("cpu: 100m", "cpu: 800m");
    let first = api.create(&pod, json!(80)).await;
    assert_eq!(first.status, 201, "{}", first.json);
    let refused = api.create(&pod, json!(80)).await;
    assert_unavailable(&refused, "cluster saturated");
    // Nothing of the refused create is left, only the first stack.
    assert_eq!(api.records().await.len(), 1);
    assert_eq!(api.managed_pods_once_deleted_ones_are_gone().await.len(), 1);
    assert_eq!(api.managed_services().await.len(), 1);
    stack_tests::env::nodes::delete_node(&api.env.kube, &node.name)
        .await
        .unwrap();
    api.finish().await;
}

#[tokio::test]
async fn with_on_unschedulable_wait_a_stack_waits_for_a_new_node_and_runs_on_it() {
    // A node role no node has yet: the pod is unschedulable until the test adds a node, as a
    // cluster autoscaler would.
    let role = stack_tests::env::unique_name("grow");
    let api = ApiHarness::with_env(&[("STACK_NODE_ROLE", &role), ("STACK_ON_UNSCHEDULABLE", "wait")]).await;
    let created = api.create_web().await;
    assert_eq!(created.json["status"], "creating", "{}", created.json);
    let id = created.stack_id();

    let node = SimulatedNode::new(&format!("{role}-node"))
        .role(&role)
        .external_ip("203.0.113.210");
    stack_tests::reconciler::add_schedulable_node(&api.env, &node)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let running = loop {
        let stack = api.call(Method::GET, &format!("/stacks/{id}"), None).await;
        assert_eq!(stack.status, 200, "{}", stack.json);
        if stack.json["status"] == "running" {
            break stack;
        }
        assert!(Instant::now() < deadline, "never ran on the new node: {}", stack.json);
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(running.json["node_id"], node.name.as_str());
    assert_eq!(running.json["node_public_ip"], "203.0.113.210");
    stack_tests::env::nodes::delete_node(&api.env.kube, &node.name)
        .await
        .unwrap();
    api.finish().await;
}

/// Creates `manifest` until the create is refused (at most 40 tries, 100 ms apart): admission
/// reads a new quota or limit range through its own cache, so a create may slip in before it
/// sees it; each that does is deleted. The last answer.
async fn create_until_refused(api: &ApiHarness, manifest: &str) -> Reply {
    let mut reply = api.create(manifest, json!(80)).await;
    for _ in 0..40 {
        if reply.status != 201 {
            break;
        }
        let slipped = reply.stack_id();
        assert_eq!(
            api.call(Method::DELETE, &format!("/stacks/{slipped}"), None)
                .await
                .status,
            200
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        reply = api.create(manifest, json!(80)).await;
    }
    reply
}

#[tokio::test]
async fn resource_quota_exhausted_is_503_and_limit_range_violation_is_400() {
    let api = ApiHarness::start().await;
    // The first create makes the namespace; then the quota and limit range go in.
    api.create_web().await;
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "one-pod"}, "spec": {"hard": {"pods": "1"}}
    }))
    .unwrap();
    kube::Api::<ResourceQuota>::namespaced(api.env.kube.clone(), &api.namespace)
        .create(&PostParams::default(), &quota)
        .await
        .unwrap();
    // The quota controller fills in usage asynchronously; until then admission refuses all pods too.
    // Admission only enforces the quota once it sees it; a create that slips in before is undone.
    let refused = create_until_refused(&api, WEB_POD).await;
    assert_unavailable(&refused, "cluster saturated");
    assert_eq!(api.records().await.len(), 1);
    assert_eq!(api.managed_pods_once_deleted_ones_are_gone().await.len(), 1);
    assert_eq!(api.managed_services().await.len(), 1);

    let quotas = kube::Api::<ResourceQuota>::namespaced(api.env.kube.clone(), &api.namespace);
    quotas.delete("one-pod", &DeleteParams::default()).await.unwrap();
    let limits: LimitRange = serde_json::from_value(json!({
        "metadata": {"name": "small"},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": "200m"}}]}
    }))
    .unwrap();
    kube::Api::<LimitRange>::namespaced(api.env.kube.clone(), &api.namespace)
        .create(&PostParams::default(), &limits)
        .await
        .unwrap();
    let big = WEB_POD.replace("cpu: 100m", "cpu: 500m");
    // Admission reads limit ranges through its own cache: a create that slips in before it has
    // the new one is undone, as for the quota (seen once, under a cold CI run's load).
    let violation = create_until_refused(&api, &big).await;
    assert_eq!(violation.status, 400, "{}", violation.json);
    assert_eq!(api.records().await.len(), 1);
    assert_eq!(api.managed_pods_once_deleted_ones_are_gone().await.len(), 1);
    api.finish().await;
}

#[tokio::test]
async fn a_policy_that_widens_the_isolation_refuses_creation_until_it_is_gone() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let first = ApiHarness::start().await;
    let namespace = first.namespace.clone();
    let policies = kube::Api::<NetworkPolicy>::namespaced(first.env.kube.clone(), &namespace);
    let policy = |name: &str, spec: Value| -> NetworkPolicy {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    let made = first.create(WEB_POD, json!(80)).await;
    assert_eq!(made.status, 201, "{}", made.json);
    let names =
        |list: Vec<NetworkPolicy>| -> Vec<String> { list.into_iter().filter_map(|p| p.metadata.name).collect() };
    assert_eq!(
        names(policies.list(&Default::default()).await.unwrap().items),
        ["stack-provisioner-isolation"]
    );
    let isolation = policies.get("stack-provisioner-isolation").await.unwrap().spec.unwrap();
    assert_eq!(isolation.policy_types.as_deref().unwrap(), ["Ingress", "Egress"]);
    // The egress guard of an earlier version allowed private ranges: it goes.
    let legacy = json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]});
    policies
        .create(
            &PostParams::default(),
            &policy("stack-provisioner-egress-guard", legacy),
        )
        .await
        .unwrap();

    // Policies add up: one that lets everything in reopens what the isolation closes.
    let allow_all = json!({"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]});
    policies
        .create(&PostParams::default(), &policy("allow-all", allow_all))
        .await
        .unwrap();
    // Someone also loosens the isolation policy itself: it is put back.
    let mut edited = policies.get("stack-provisioner-isolation").await.unwrap();
    edited.spec.as_mut().unwrap().ingress = Some(vec![Default::default()]);
    policies
        .replace("stack-provisioner-isolation", &PostParams::default(), &edited)
        .await
        .unwrap();
    // A new process (a new Lambda sandbox) checks at once; a running one within a minute.
    let second = first.sandbox(&[]).await;
    let refused = second.create(WEB_POD, json!(80)).await;
    assert_eq!(refused.status, 503, "{}", refused.json);
    assert!(refused.headers.contains_key("retry-after"));
    let why = refused.error();
    assert!(
        why.contains("isolation not in place") && why.contains("allow-all"),
        "{why}"
    );
    assert_eq!(
        second.record_ids::<Vec<_>>().await,
        [made.stack_id()],
        "nothing of the refused create is left"
    );
    let restored = policies.get("stack-provisioner-isolation").await.unwrap().spec.unwrap();
    assert_eq!(restored.ingress, isolation.ingress, "the edited isolation is put back");
    let left = names(policies.list(&Default::default()).await.unwrap().items);
    assert_eq!(
        left,
        ["allow-all", "stack-provisioner-isolation"],
        "the legacy guard is gone"
    );
    // An operator who accepts it says so; /stats (and the dashboard) still tell.
    let relaxed = first.sandbox(&[("STACK_REQUIRE_ISOLATION", "false")]).await;
    assert_eq!(relaxed.create(WEB_POD, json!(80)).await.status, 201);
    // So does a deployment of the Go provisioner, under its own name for the switch.
    let legacy = first
        .sandbox(&[("STACK_REQUIRE_INGRESS_NETWORK_POLICY", "false")])
        .await;
    assert_eq!(legacy.create(WEB_POD, json!(80)).await.status, 201);
    let isolation = relaxed.call(Method::GET, "/stats", None).await.json["isolation"].clone();
    assert_eq!(isolation["in_place"], false, "{isolation}");
    assert!(
        isolation["problems"][0].as_str().unwrap().contains("allow-all"),
        "{isolation}"
    );

    policies.delete("allow-all", &Default::default()).await.unwrap();
    let third = first.sandbox(&[]).await;
    assert_eq!(third.create(WEB_POD, json!(80)).await.status, 201);
    let isolation = third.call(Method::GET, "/stats", None).await.json["isolation"].clone();
    assert_eq!(isolation["in_place"], true, "{isolation}");
    assert_eq!(
        isolation["checked_per_stack"], false,
        "no check image here: {isolation}"
    );
    // The running process that saw it widened sees the repair at its next read.
    let isolation = relaxed.call(Method::GET, "/stats", None).await.json["isolation"].clone();
    assert_eq!(isolation["in_place"], true, "{isolation}");
    first.finish().await;
}

#[tokio::test]
async fn node_port_exhaustion_is_503() {
    // A one-port range below the default one, so parallel tests don't compete for it.
    let port = (30100 + rand::random::<u16>() % 800).to_string();
    let api = ApiHarness::with_env(&[("STACK_NODEPORT_MIN", &port), ("STACK_NODEPORT_MAX", &port)]).await;
    let first = api.create_web().await;
    assert_eq!(first.json["node_port"].to_string(), port);
    let second = api.create(WEB_POD, json!(80)).await;
    assert_eq!(
        (second.status, second.json.clone()),
        (503, json!({"error": "no available nodeport"}))
    );
    assert!(second.headers.contains_key("retry-after"));
    assert_eq!(api.managed_pods_once_deleted_ones_are_gone().await.len(), 1);
    // Deleting frees the port for the next create.
    api.delete_stack(&first.stack_id()).await;
    assert_eq!(api.create(WEB_POD, json!(80)).await.status, 201);
    api.finish().await;
}

#[tokio::test]
async fn stack_whose_pod_was_deleted_behind_our_back_is_gone() {
    let api = ApiHarness::start().await;
    let id = api.create(WEB_POD, json!(80)).await.stack_id();
    let immediately = DeleteParams::default().grace_period(0);
    api.pods_api().delete(&id, &immediately).await.unwrap();
    let status = api.call(Method::GET, &format!("/stacks/{id}/status"), None).await;
    assert_eq!(status.status, 404);
    api.finish_asserting_nothing_left().await;
}

/// A list page reads only its own stacks' objects: it removes its gone stacks and leaves
/// every other stack alone, gone or not, until a read of its own sees it.
#[tokio::test]
async fn a_list_page_removes_its_own_gone_stacks_and_no_other() {
    let api = ApiHarness::start().await;
    api.create_stacks(4).await;
    let ids: Vec<String> = api.record_ids().await;
    let now_gone = |id: &str| {
        let pods = api.pods_api();
        let id = id.to_owned();
        async move {
            let immediately = DeleteParams::default().grace_period(0);
            pods.delete(&id, &immediately).await.unwrap();
        }
    };
    // Oldest first: page 1 = ids[0..2], page 2 = ids[2..4]; one gone stack on each.
    now_gone(&ids[1]).await;
    now_gone(&ids[3]).await;

    let page1 = api.call(Method::GET, "/stacks?limit=2", None).await;
    assert_eq!(page1.status, 200, "{}", page1.json);
    assert_eq!(listed_ids(std::slice::from_ref(&page1)), vec![ids[0].clone()]);
    let left: Vec<String> = api.record_ids().await;
    assert_eq!(
        left,
        vec![ids[0].clone(), ids[2].clone(), ids[3].clone()],
        "page 1 removed its gone stack and nothing of page 2"
    );
    assert!(
        api.services_api()
            .get_opt(&format!("svc-{}", ids[1]))
            .await
            .unwrap()
            .is_none(),
        "the gone stack's service is removed with it"
    );
    assert_eq!(
        api.call(Method::GET, &format!("/stacks/{}", ids[1]), None).await.status,
        404
    );

    let cursor = page1.json["next_cursor"].as_str().expect("a second page").to_owned();
    let page2 = api
        .call(Method::GET, &format!("/stacks?limit=2&cursor={cursor}"), None)
        .await;
    assert_eq!(page2.status, 200, "{}", page2.json);
    assert_eq!(listed_ids(std::slice::from_ref(&page2)), vec![ids[2].clone()]);
    let left: Vec<String> = api.record_ids().await;
    assert_eq!(left, vec![ids[0].clone(), ids[2].clone()]);
    assert_eq!(
        api.call(Method::GET, &format!("/stacks/{}", ids[3]), None).await.status,
        404
    );
    for id in [&ids[0], &ids[2]] {
        assert_eq!(api.call(Method::GET, &format!("/stacks/{id}"), None).await.status, 200);
    }
    api.finish().await;
}

#[tokio::test]
async fn stack_whose_node_was_deleted_is_gone() {
    // Its own node role, so deleting the node touches no other test.
    let role = stack_tests::env::unique_name("solo");
    let api = ApiHarness::with_env(&[("STACK_NODE_ROLE", &role)]).await;
    let node = format!("{role}-node");
    let simulated = SimulatedNode::new(&node).role(&role).external_ip("203.0.113.200");
    stack_tests::reconciler::add_schedulable_node(&api.env, &simulated)
        .await
        .unwrap();
    let created = api.create_web().await;
    let id = created.stack_id();
    assert_eq!(created.json["node_id"], node.as_str());
    assert_eq!(created.json["node_public_ip"], "203.0.113.200");
    stack_tests::env::nodes::delete_node(&api.env.kube, &node)
        .await
        .unwrap();
    let got = api.call(Method::GET, &format!("/stacks/{id}"), None).await;
    assert_eq!(got.status, 404);
    api.finish_asserting_nothing_left().await;
}

#[tokio::test]
async fn repeated_idempotency_key_makes_one_stack() {
    let api = ApiHarness::start().await;
    let request = |key: &str, manifest: &str| {
        Request::post("/stacks")
            .header("x-api-key", API_KEY)
            .header("idempotency-key", key)
            .body(Body::from(json!({"pod_spec": manifest, "target_port": 80}).to_string()))
            .unwrap()
    };
    let first = api.send(request("key-1", WEB_POD)).await;
    assert_eq!(first.status, 201, "{}", first.json);
    let replay = api.send(request("key-1", WEB_POD)).await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.stack_id(), first.stack_id());
    assert_eq!(replay.json["ports"], first.json["ports"]);
    assert_eq!(replay.json["pod_spec"], first.json["pod_spec"]);
    let other_body = api
        .send(request("key-1", &WEB_POD.replace("challenge: web", "challenge: other")))
        .await;
    assert_eq!(other_body.status, 409, "{}", other_body.json);
    assert_eq!(api.records().await.len(), 1);
    assert_eq!(api.managed_pods_once_deleted_ones_are_gone().await.len(), 1);
    // Deleting the stack frees the key with it.
    api.delete_stack(&first.stack_id()).await;
    api.finish_asserting_nothing_left().await;
}

#[tokio::test]
async fn renew_extends_ttl_up_to_the_maximum_lifetime() {
    let api = ApiHarness::with_env(&[("STACK_TTL", "1h"), ("STACK_MAX_LIFETIME", "90m")]).await;
    let created = api.create(WEB_POD, json!(80)).await;
    let id = created.stack_id();
    let before: jiff::Timestamp = created.json["ttl_expires_at"].as_str().unwrap().parse().unwrap();
    let created_at: jiff::Timestamp = created.json["created_at"].as_str().unwrap().parse().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let renewed = api.call(Method::POST, &format!("/stacks/{id}/renew"), None).await;
    assert_eq!(renewed.status, 200, "{}", renewed.json);
    let after: jiff::Timestamp = renewed.json["ttl_expires_at"].as_str().unwrap().parse().unwrap();
    assert!(after > before);
    // Renewals stop at created_at + max lifetime.
    let api_capped = ApiHarness::with_env(&[("STACK_TTL", "1h"), ("STACK_MAX_LIFETIME", "1h")]).await;
    let capped = api_capped.create(WEB_POD, json!(80)).await;
    let refused = api_capped
        .call(Method::POST, &format!("/stacks/{}/renew", capped.stack_id()), None)
        .await;
    assert_eq!(refused.status, 409, "{}", refused.json);
    assert!(after <= created_at + jiff::SignedDuration::from_mins(90));
    api_capped.finish().await;
    api.finish().await;
}

#[tokio::test]
async fn batch_delete_is_a_durable_job() {
    let api = ApiHarness::start().await;
    let ids: Vec<String> = futures::future::join_all((0..3).map(|_| api.create(WEB_POD, json!(80))))
        .await
        .iter()
        .map(Reply::stack_id)
        .collect();
    let blank = api
        .call(
            Method::POST,
            "/stacks/batch-delete",
            Some(json!({"stack_ids": [ids[0], "  "]})),
        )
        .await;
    assert_eq!((blank.status, blank.json), (400, json!({"error": "invalid stack_ids"})));
    let none = api
        .call(Method::POST, "/stacks/batch-delete", Some(json!({"stack_ids": []})))
        .await;
    assert_eq!((none.status, none.json), (400, json!({"error": "invalid input"})));
    // Too long for one job: a clear 400, no longer a 500 from DynamoDB's item limit.
    let many: Vec<String> = (0..=stack_core::MAX_BATCH_IDS)
        .map(|i| format!("stack-{i:016x}"))
        .collect();
    let too_many = api
        .call(Method::POST, "/stacks/batch-delete", Some(json!({"stack_ids": many})))
        .await;
    assert_eq!(too_many.status, 400, "{}", too_many.json);
    assert!(
        too_many.error().starts_with("too many stack_ids: 10001"),
        "{}",
        too_many.json
    );
    // An id that is not a stack id names no stack: counted as not found.
    let body =
        json!({"stack_ids": [format!(" {} ", ids[0]), ids[1], ids[1], "stack-0123456789abcdef", "not-a-stack-id"]});
    let accepted = api.call(Method::POST, "/stacks/batch-delete", Some(body)).await;
    assert_eq!(accepted.status, 202, "{}", accepted.json);
    let job_id = accepted.json["job_id"].as_str().unwrap().to_owned();
    assert!(job_id.starts_with("job-") && job_id.len() == 20);
    let mut job = Value::Null;
    for _ in 0..100 {
        job = api
            .call(Method::GET, &format!("/stacks/batch-delete/{job_id}"), None)
            .await
            .json;
        if job["status"] == "completed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(job["status"], "completed", "{job}");
    assert_eq!(
        (
            job["total"].as_u64(),
            job["deleted"].as_u64(),
            job["not_found"].as_u64(),
            job["failed"].as_u64()
        ),
        (Some(4), Some(2), Some(2), Some(0))
    );
    assert!(job.get("errors").is_none(), "{job}");
    let left: HashSet<String> = api.record_ids().await;
    assert_eq!(left, HashSet::from([ids[2].clone()]));
    api.finish().await;
}

#[tokio::test]
async fn fifty_concurrent_creates_then_fifty_concurrent_deletes() {
    // Beyond the 32 creates in flight the rest queue (up to 2 s) and then succeed, unless the
    // machine is so slow that a create misses its deadline: then it is a clean 503 (try later)
    // that leaves nothing behind, never a 500.
    let api = ApiHarness::start().await;
    let creates = (0..50).map(|i| {
        let request = Request::post("/stacks")
            .header("x-api-key", API_KEY)
            .header("idempotency-key", format!("bulk-{i}"))
            .body(Body::from(
                json!({"pod_spec": WEB_POD, "target_port": [{"container_port": 80}]}).to_string(),
            ))
            .unwrap();
        api.send(request)
    });
    let (replies, shed): (Vec<Reply>, Vec<Reply>) = futures::future::join_all(creates)
        .await
        .into_iter()
        .partition(|r| r.status == 201);
    for reply in &shed {
        assert_eq!(reply.status, 503, "{}", reply.json);
        assert!(reply.headers.contains_key("retry-after"), "503 without Retry-After");
    }
    assert!(!replies.is_empty(), "no create succeeded");
    let ports: HashSet<u64> = replies.iter().map(|r| r.json["node_port"].as_u64().unwrap()).collect();
    assert_eq!(ports.len(), replies.len(), "node ports must be distinct");
    let stack_nodes: HashSet<String> = kube::Api::<k8s_openapi::api::core::v1::Node>::all(api.env.kube.clone())
        .list(&kube::api::ListParams::default().labels(&format!("role={}", stack_tests::env::SIMULATED_ROLE)))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for pod in api.managed_pods().await {
        let node = pod.spec.unwrap().node_name.unwrap_or_default();
        assert!(
            stack_nodes.contains(&node),
            "pod on {node:?}, not a node of the stacks' role"
        );
    }
    let stacks = replies.iter().map(|r| format!("/stacks/{}", r.stack_id()));
    for reply in api.call_each(Method::DELETE, stacks).await {
        assert_eq!(reply.status, 200, "{}", reply.json);
    }
    api.finish_asserting_nothing_left().await;
}

#[tokio::test]
async fn create_against_a_hanging_apiserver_answers_503_in_time_and_leaves_nothing() {
    let api = ApiHarness::with_unresponsive_cluster().await;
    let request = Request::post("/stacks")
        .header("x-api-key", API_KEY)
        .header("idempotency-key", "hanging-1")
        .body(Body::from(json!({"pod_spec": WEB_POD, "target_port": 80}).to_string()))
        .unwrap();
    let started = Instant::now();
    let reply = api.send(request).await;
    let took = started.elapsed();
    assert_unavailable(&reply, "cluster busy");
    // Clients give up after 5 s; the create's own deadline is what answered, not a socket timeout.
    assert!(
        took < CREATE_DEADLINE + Duration::from_millis(500),
        "answered after {took:?}"
    );
    // Record, manifest and the Idempotency-Key claim are gone (the cluster never got anything).
    api.finish_asserting_nothing_left().await;
}

#[tokio::test]
async fn a_read_answers_before_the_lambda_invocation_ends_even_if_the_apiserver_hangs() {
    let api = ApiHarness::with_unresponsive_cluster().await;
    let id = StackId::generate();
    let ttl = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
    let record = running_record(&id, &api.namespace, "node-1", Some("203.0.113.1"), ttl);
    api.state.stacks.store().put_new_stack(&record).await.unwrap();

    let invocation_ends = SystemTime::now() + Duration::from_millis(1500);
    let mut context = lambda_http::Context::default();
    context.deadline = u64::try_from(
        invocation_ends
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let request = Request::get(format!("/stacks/{id}/status"))
        .header("x-api-key", API_KEY)
        .extension(context)
        .body(Body::empty())
        .unwrap();
    let reply = api.send(request).await;
    assert_eq!(
        (reply.status, reply.json),
        (503, json!({"error": "request timed out, retry"}))
    );
    assert!(
        SystemTime::now() < invocation_ends,
        "answered after the invocation ended"
    );
    // A timed-out read changes nothing.
    assert_eq!(api.records().await, vec![record]);
    api.finish().await;
}

#[tokio::test]
async fn list_pages_walk_every_stack_once_oldest_first() {
    let api = ApiHarness::start().await;
    let created = api.create_stacks(5).await;
    let oldest_first: Vec<String> = api.record_ids().await;
    assert_eq!(
        oldest_first.iter().collect::<HashSet<_>>(),
        created.iter().collect::<HashSet<_>>()
    );

    let pages = api.walk_pages(Some(2)).await;
    let sizes: Vec<usize> = pages
        .iter()
        .map(|p| p.json["stacks"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, vec![2, 2, 1]);
    assert_eq!(listed_ids(&pages), oldest_first, "each stack once, oldest first");
    // Stacks in a page are whole: manifests included.
    for stack in pages.iter().flat_map(|p| p.json["stacks"].as_array().unwrap()) {
        assert!(stack["pod_spec"].as_str().unwrap().contains("kind: Pod"), "{stack}");
    }
    // Without parameters: the first page, here every stack, and no cursor.
    let first = api.call(Method::GET, "/stacks", None).await;
    assert_eq!(first.status, 200);
    assert_eq!(listed_ids(std::slice::from_ref(&first)), oldest_first);
    assert!(first.json.get("next_cursor").is_none(), "{}", first.json);
    // A limit equal to the count ends the list in one page.
    let exact = api.walk_pages(Some(5)).await;
    assert_eq!(exact.len(), 1);

    // A stack deleted between two pages is simply no longer listed.
    let page1 = api.call(Method::GET, "/stacks?limit=2", None).await;
    let cursor = page1.json["next_cursor"].as_str().unwrap().to_owned();
    let deleted = api
        .call(Method::DELETE, &format!("/stacks/{}", oldest_first[2]), None)
        .await;
    assert_eq!(deleted.status, 200);
    let page2 = api
        .call(Method::GET, &format!("/stacks?limit=2&cursor={cursor}"), None)
        .await;
    assert_eq!(listed_ids(std::slice::from_ref(&page2)), oldest_first[3..5].to_vec());
    assert!(page2.json.get("next_cursor").is_none(), "{}", page2.json);

    // Bad parameters are the client's mistake.
    let mut tampered = cursor.clone().into_bytes();
    tampered[4] = if tampered[4] == b'x' { b'y' } else { b'x' };
    let tampered = String::from_utf8(tampered).unwrap();
    for query in [
        "limit=0".to_owned(),
        "limit=1001".to_owned(),
        "limit=-3".to_owned(),
        "limit=abc".to_owned(),
        "limit=".to_owned(),
        "limit=2&limit=3".to_owned(),
        "cursor=".to_owned(),
        "cursor=not-a-cursor".to_owned(),
        format!("cursor={tampered}"),
        format!("cursor={}", &cursor[..cursor.len() - 3]),
    ] {
        let reply = api.call(Method::GET, &format!("/stacks?{query}"), None).await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.json);
        assert!(reply.error().starts_with("invalid "), "{query}");
    }
    api.finish().await;
}

/// A failing test never reaches `finish`: its harness, dropped as the panic unwinds, still
/// removes its namespace (with the stacks and the node ports they hold, which a rerun of the
/// test would need) and its table.
#[tokio::test]
async fn a_harness_dropped_by_a_failing_test_leaves_no_namespace_or_table() {
    let api = ApiHarness::start().await;
    let created = api.create_web().await;
    assert_eq!(created.status, 201, "{}", created.json);
    let (env, namespace, table) = (api.env.clone(), api.namespace.clone(), api.table.name().to_owned());
    let namespaces = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(env.kube.clone());
    let uid = namespaces.get(&namespace).await.unwrap().metadata.uid.unwrap();

    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _api = api;
        panic!("the test failed here");
    }));
    assert!(failed.is_err());

    stack_tests::env::wait_for(
        &namespaces,
        &namespace,
        "the failed test's namespace deleted",
        Duration::from_secs(60),
        kube::runtime::conditions::is_deleted(&uid),
    )
    .await
    .unwrap();
    let described = env.dynamodb.describe_table().table_name(&table).send().await;
    let error = described.expect_err("the failed test's table is deleted");
    assert!(
        error
            .as_service_error()
            .is_some_and(|e| e.is_resource_not_found_exception()),
        "{error:?}"
    );
}
