//! The ground is real: DynamoDB Local and the local Kubernetes control plane enforce what the
//! provisioner relies on. Needs a running environment (`tests/env/up`); no mocks.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, KeyType, TimeToLiveStatus};
use k8s_openapi::api::core::v1::{LimitRange, Node, Pod, ResourceQuota, Service};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::wait::conditions;
use serde_json::json;
use stack_tests::env::nodes::{self, ROLE_LABEL, SIMULATED_ROLE, SimulatedNode};
use stack_tests::env::{TestEnv, TestNamespace, wait_for};

const WAIT: Duration = Duration::from_secs(60);
/// Node ports of these tests; the provisioner's default range starts at 31001.
const TEST_NODE_PORTS: std::ops::Range<i32> = 30000..31000;

async fn connect() -> TestEnv {
    TestEnv::connect().await.expect("local environment (run tests/env/up)")
}

/// A fresh namespace of the local environment, its name starting with `prefix`.
async fn fresh_namespace(prefix: &str) -> TestNamespace {
    connect().await.fresh_namespace(prefix).await.expect("namespace")
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

#[tokio::test]
async fn dynamodb_conditional_write_consistent_read_and_conflict() {
    let env = connect().await;
    let table = env.fresh_table("ground").await.expect("fresh table");
    let put_once = || {
        env.dynamodb
            .put_item()
            .table_name(table.name())
            .item("pk", s("STACK"))
            .item("sk", s("stack-1"))
            .item("owner", s("alice"))
            .condition_expression("attribute_not_exists(pk)")
    };

    put_once().send().await.expect("first conditional write succeeds");
    let read = env
        .dynamodb
        .get_item()
        .table_name(table.name())
        .key("pk", s("STACK"))
        .key("sk", s("stack-1"))
        .consistent_read(true)
        .send()
        .await
        .expect("consistent read");
    assert_eq!(read.item().and_then(|item| item.get("owner")), Some(&s("alice")));

    let conflict = put_once()
        .send()
        .await
        .expect_err("second conditional write must be refused");
    assert!(
        conflict
            .as_service_error()
            .is_some_and(|e| e.is_conditional_check_failed_exception()),
        "expected ConditionalCheckFailed, got {conflict:?}"
    );
    table.delete().await.expect("delete table");
}

#[tokio::test]
async fn test_tables_follow_the_template() {
    let env = connect().await;
    let table = env.fresh_table("schema").await.expect("fresh table");
    let definition = stack_tests::env::TableDefinition::stack_table().expect("template.yaml");

    let described = env
        .dynamodb
        .describe_table()
        .table_name(table.name())
        .send()
        .await
        .expect("describe");
    let keys: Vec<(String, KeyType)> = described
        .table()
        .map(|t| {
            t.key_schema()
                .iter()
                .map(|k| (k.attribute_name().to_owned(), k.key_type().clone()))
                .collect()
        })
        .unwrap_or_default();
    let expected: Vec<(String, KeyType)> = definition
        .key_schema
        .iter()
        .map(|k| (k.attribute_name.clone(), KeyType::from(k.key_type.as_str())))
        .collect();
    assert_eq!(keys, expected);

    let ttl = env
        .dynamodb
        .describe_time_to_live()
        .table_name(table.name())
        .send()
        .await
        .expect("describe TTL");
    let ttl = ttl.time_to_live_description();
    assert_eq!(ttl.and_then(|t| t.attribute_name()), definition.ttl_attribute());
    assert_eq!(
        ttl.and_then(|t| t.time_to_live_status()),
        Some(&TimeToLiveStatus::Enabled)
    );
    table.delete().await.expect("delete table");
}

fn pod(name: &str, node_selector: (&str, &str), cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": {
            "nodeSelector": { node_selector.0: node_selector.1 },
            "containers": [{
                "name": "main",
                // Never pulled: kwok runs pods without containers.
                "image": "registry.invalid/challenge:1",
                "resources": { "requests": { "cpu": cpu, "memory": "64Mi" }, "limits": { "cpu": cpu, "memory": "64Mi" } }
            }]
        }
    }))
    .expect("valid pod")
}

/// A NodePort service on `node_port`, always given: one the apiserver picks could be a port the
/// real nodes' tests connect to (`connect.rs`), which kube-proxy would then send here.
fn node_port_service(name: &str, node_port: i32) -> Service {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "type": "NodePort",
            "selector": { "app": name },
            "ports": [{ "port": 80, "targetPort": 8080, "nodePort": node_port, "protocol": "TCP" }]
        }
    }))
    .expect("valid service")
}

fn is_unschedulable(pod: Option<&Pod>) -> bool {
    pod.and_then(|p| p.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

/// The apiserver refused the call (`what` says what must be refused) with `code` and a
/// message that says `says`.
fn assert_refused<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str, code: u16, says: &str) {
    match result.expect_err(what) {
        kube::Error::Api(status) => {
            let message = status.message;
            assert_eq!(status.code, code, "{message}");
            assert!(message.contains(says), "{message}");
        }
        other => panic!("expected an apiserver rejection, got {other:?}"),
    }
}

async fn run_pod(namespace: &TestNamespace, pod: &Pod) -> Pod {
    let pods: Api<Pod> = namespace.api();
    let name = pod.metadata.name.clone().unwrap_or_default();
    pods.create(&PostParams::default(), pod).await.expect("create pod");
    wait_for(&pods, &name, "pod Running", WAIT, conditions::is_pod_running())
        .await
        .expect("pod reaches Running")
        .expect("pod exists")
}

#[tokio::test]
async fn stack_pod_runs_on_a_stack_node_with_an_external_ip() {
    let env = connect().await;
    let namespace = env.fresh_namespace("ground-run").await.expect("namespace");

    let running = run_pod(&namespace, &pod("web", (ROLE_LABEL, SIMULATED_ROLE), "100m")).await;

    let node_name = running.spec.and_then(|s| s.node_name).expect("pod is bound to a node");
    let node = Api::<Node>::all(env.kube.clone())
        .get(&node_name)
        .await
        .expect("get node");
    let labels = node.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get(ROLE_LABEL).map(String::as_str),
        Some(SIMULATED_ROLE),
        "bound to {node_name}"
    );
    let external: Vec<String> = node
        .status
        .and_then(|s| s.addresses)
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a.type_ == "ExternalIP")
        .map(|a| a.address)
        .collect();
    assert!(
        external.len() == 1 && external[0].starts_with("203.0.113."),
        "node {node_name} keeps its ExternalIP under kwok, got {external:?}"
    );
    namespace.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn a_node_port_is_allocated_only_once() {
    let namespace = fresh_namespace("ground-port").await;
    let services: Api<Service> = namespace.api();

    // Other tests allocate ports from the same cluster-wide range: retry on a taken one.
    let mut port = None;
    for _ in 0..10 {
        let candidate = rand::random_range(TEST_NODE_PORTS);
        match services
            .create(&PostParams::default(), &node_port_service("first", candidate))
            .await
        {
            Ok(created) => {
                let allocated = created
                    .spec
                    .and_then(|s| s.ports)
                    .and_then(|p| p.first().and_then(|p| p.node_port));
                assert_eq!(allocated, Some(candidate), "the requested nodePort is kept");
                port = Some(candidate);
                break;
            }
            Err(kube::Error::Api(status)) if status.message.contains("already allocated") => continue,
            Err(other) => panic!("create first service: {other:?}"),
        }
    }
    let port = port.expect("a free node port within 10 attempts");

    let refused = services
        .create(&PostParams::default(), &node_port_service("second", port))
        .await;
    assert_refused(
        refused,
        "the same nodePort twice must be refused",
        422,
        "already allocated",
    );
    namespace.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn a_pod_no_node_can_hold_is_unschedulable() {
    let namespace = fresh_namespace("ground-big").await;
    let pods: Api<Pod> = namespace.api();

    pods.create(
        &PostParams::default(),
        &pod("huge", (ROLE_LABEL, SIMULATED_ROLE), "1000"),
    )
    .await
    .expect("create pod");
    let pending = wait_for(
        &pods,
        "huge",
        "PodScheduled=False/Unschedulable",
        WAIT,
        is_unschedulable,
    )
    .await
    .expect("scheduler reports Unschedulable")
    .expect("pod exists");
    assert_eq!(pending.spec.and_then(|s| s.node_name), None);
    namespace.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn resource_quota_rejects_an_over_quota_pod() {
    let namespace = fresh_namespace("ground-quota").await;
    let quotas: Api<ResourceQuota> = namespace.api();
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": { "name": "cap" },
        "spec": { "hard": { "requests.cpu": "1", "limits.cpu": "1", "pods": "5" } }
    }))
    .expect("valid quota");
    quotas
        .create(&PostParams::default(), &quota)
        .await
        .expect("create quota");
    // Admission refuses every pod until the quota controller has computed the usage.
    let computed = |q: Option<&ResourceQuota>| q.and_then(|q| q.status.as_ref()).is_some_and(|s| s.used.is_some());
    wait_for(&quotas, "cap", "quota status computed", WAIT, computed)
        .await
        .expect("quota controller runs");

    let refused = namespace
        .api::<Pod>()
        .create(
            &PostParams::default(),
            &pod("greedy", (ROLE_LABEL, SIMULATED_ROLE), "2"),
        )
        .await;
    assert_refused(refused, "a pod over the quota must be refused", 403, "exceeded quota");

    run_pod(&namespace, &pod("modest", (ROLE_LABEL, SIMULATED_ROLE), "500m")).await;
    namespace.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn limit_range_defaults_apply_to_pods_without_resources() {
    let namespace = fresh_namespace("ground-limits").await;
    let limits: LimitRange = serde_json::from_value(json!({
        "metadata": { "name": "defaults" },
        "spec": { "limits": [{ "type": "Container", "default": { "cpu": "300m" }, "defaultRequest": { "cpu": "200m" } }] }
    }))
    .expect("valid limit range");
    namespace
        .api::<LimitRange>()
        .create(&PostParams::default(), &limits)
        .await
        .expect("create limit range");

    let mut bare = pod("bare", (ROLE_LABEL, SIMULATED_ROLE), "1");
    if let Some(container) = bare.spec.as_mut().and_then(|s| s.containers.first_mut()) {
        container.resources = None;
    }
    let created = namespace
        .api::<Pod>()
        .create(&PostParams::default(), &bare)
        .await
        .expect("create pod");
    let resources = created
        .spec
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.resources);
    let request = resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("cpu"))
        .cloned();
    let limit = resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|r| r.get("cpu"))
        .cloned();
    assert_eq!(request.map(|q| q.0), Some("200m".to_owned()));
    assert_eq!(limit.map(|q| q.0), Some("300m".to_owned()));
    namespace.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn pod_security_restricted_namespace_rejects_a_privileged_pod() {
    let env = connect().await;
    let labels = BTreeMap::from([("pod-security.kubernetes.io/enforce".to_owned(), "restricted".to_owned())]);
    let namespace = TestNamespace::create_with_labels(&env.kube, "ground-psa", labels)
        .await
        .expect("namespace");

    let mut privileged = pod("root", (ROLE_LABEL, SIMULATED_ROLE), "100m");
    if let Some(container) = privileged.spec.as_mut().and_then(|s| s.containers.first_mut()) {
        container.security_context =
            Some(serde_json::from_value(json!({ "privileged": true })).expect("valid security context"));
    }
    let refused = namespace.api::<Pod>().create(&PostParams::default(), &privileged).await;
    assert_refused(
        refused,
        "restricted namespaces refuse privileged pods",
        403,
        "violates PodSecurity \"restricted",
    );
    namespace.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn deleting_a_pod_garbage_collects_the_service_it_owns() {
    let namespace = fresh_namespace("ground-gc").await;
    let owner = run_pod(&namespace, &pod("owner", (ROLE_LABEL, SIMULATED_ROLE), "100m")).await;
    let owner_uid = owner.metadata.uid.clone().expect("pod uid");

    // A ClusterIP service: ownership is what is tested, and no node port is taken.
    let mut service: Service = serde_json::from_value(json!({
        "metadata": { "name": "owner" },
        "spec": { "selector": { "app": "owner" }, "ports": [{ "port": 80, "targetPort": 8080 }] }
    }))
    .expect("valid service");
    service.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({ "apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": owner_uid }))
            .expect("valid owner reference"),
    ]);
    let services: Api<Service> = namespace.api();
    let created = services
        .create(&PostParams::default(), &service)
        .await
        .expect("create owned service");
    let service_uid = created.metadata.uid.expect("service uid");

    namespace
        .api::<Pod>()
        .delete("owner", &DeleteParams::default())
        .await
        .expect("delete pod");
    wait_for(
        &services,
        "owner",
        "garbage collection of the owned service",
        WAIT,
        conditions::is_deleted(&service_uid),
    )
    .await
    .expect("the garbage collector deletes the service");
    namespace.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn an_added_node_takes_pods_until_cordoned() {
    let env = connect().await;
    let namespace = env.fresh_namespace("ground-node").await.expect("namespace");
    // A pool label of this test only, so no other test's pods land on the node.
    let pool = ("stack-tests/pool", namespace.name());
    let node = SimulatedNode::new(namespace.name())
        .label(pool.0, pool.1)
        .external_ip("203.0.113.200");

    nodes::add_node(&env.kube, &node).await.expect("node becomes Ready");
    let first = run_pod(&namespace, &pod("first", pool, "100m")).await;
    assert_eq!(
        first.spec.and_then(|s| s.node_name).as_deref(),
        Some(node.name.as_str())
    );

    nodes::cordon(&env.kube, &node.name).await.expect("cordon");
    let pods: Api<Pod> = namespace.api();
    pods.create(&PostParams::default(), &pod("second", pool, "100m"))
        .await
        .expect("create pod");
    wait_for(
        &pods,
        "second",
        "Unschedulable on a cordoned node",
        WAIT,
        is_unschedulable,
    )
    .await
    .expect("a cordoned node takes no new pods");

    nodes::delete_node(&env.kube, &node.name).await.expect("delete node");
    namespace.delete().await.expect("delete namespace");
}
