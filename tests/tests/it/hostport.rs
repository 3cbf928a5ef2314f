//! `STACK_EXPOSURE=hostport` against the real apiserver and scheduler: the pod holds its port
//! (no Service), a port serves one stack per node, the scheduler's NodePorts filter decides,
//! and a switch of mode leaves the other mode's stacks alive.

use std::collections::{BTreeMap, HashSet};
use std::pin::pin;

use futures::TryStreamExt;
use http::Method;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use stack_tests::api::{ApiHarness, WEB_POD};
use stack_tests::env::{SimulatedNode, TestEnv, nodes, unique_name};
use stack_tests::reconciler::{TestReconciler, add_schedulable_node, wait_gone};

/// Two stack nodes of a role of their own (so that no other test's pods land there), with
/// distinct public addresses.
struct StackNodes {
    env: TestEnv,
    role: String,
    nodes: Vec<SimulatedNode>,
}

impl StackNodes {
    async fn add() -> Self {
        let env = TestEnv::connect().await.expect("local environment (run tests/env/up)");
        let role = unique_name("hp");
        let mut nodes = Vec::new();
        for i in 0..2 {
            let node = SimulatedNode::new(&format!("{role}-{i}"))
                .role(&role)
                .external_ip(&format!("203.0.113.{}", 100 + i));
            add_schedulable_node(&env, &node).await.expect("node");
            nodes.push(node);
        }
        Self { env, role, nodes }
    }

    async fn remove(self) {
        for node in &self.nodes {
            nodes::delete_node(&self.env.kube, &node.name)
                .await
                .expect("delete node");
        }
    }
}

/// The namespace's pods version now, to see later what was created after it.
async fn pods_version(pods: &Api<Pod>) -> String {
    let list = pods
        .list_metadata(&ListParams::default().limit(1))
        .await
        .expect("list pods");
    list.metadata.resource_version.expect("list version")
}

/// Names of the pods created in the namespace since `version` (a watch that the apiserver
/// ends after a second).
async fn pods_created_since(pods: &Api<Pod>, version: &str) -> Vec<String> {
    let events = pods
        .watch(&WatchParams::default().timeout(1), version)
        .await
        .expect("watch pods");
    let mut events = pin!(events);
    let mut created = Vec::new();
    while let Some(event) = events.try_next().await.expect("watch event") {
        if let WatchEvent::Added(pod) = event {
            created.extend(pod.metadata.name);
        }
    }
    created
}

/// (node, host port) of each of our pods.
fn placements(pods: &[Pod]) -> Vec<(String, i32)> {
    pods.iter()
        .map(|pod| {
            let spec = pod.spec.as_ref().expect("spec");
            let host_port = spec
                .containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find_map(|p| p.host_port)
                .expect("a host port");
            (spec.node_name.clone().unwrap_or_default(), host_port)
        })
        .collect()
}

/// Host-port stacks on the nodes of `role` with one port (31001): a node holds one stack.
fn one_port_on(role: &str) -> [(&'static str, &str); 4] {
    [
        ("STACK_EXPOSURE", "hostport"),
        ("STACK_NODE_ROLE", role),
        ("STACK_NODEPORT_MIN", "31001"),
        ("STACK_NODEPORT_MAX", "31001"),
    ]
}

#[tokio::test]
async fn a_hostport_stack_holds_its_port_on_its_node_and_a_port_serves_one_stack_per_node() {
    let nodes = StackNodes::add().await;
    let made = &nodes.nodes;
    // One port: two nodes hold two stacks.
    let settings = one_port_on(&nodes.role);
    let api = ApiHarness::with_env(&settings).await;

    let first = api.create(WEB_POD, json!(80)).await;
    let second = api.create(WEB_POD, json!(80)).await;
    for created in [&first, &second] {
        assert_eq!(created.status, 201, "{}", created.json);
        assert_eq!(created.json["node_port"], 31001, "{}", created.json);
        assert_eq!(created.json["ports"][0]["node_port"], 31001, "{}", created.json);
        assert_eq!(created.json["service_name"], "", "{}", created.json);
    }
    let pods = api.managed_pods().await;
    let mut on = placements(&pods);
    on.sort();
    assert_eq!(
        on,
        [(made[0].name.clone(), 31001), (made[1].name.clone(), 31001)],
        "one stack per node on the one port"
    );
    assert!(
        api.managed_services().await.is_empty(),
        "hostport stacks have no service"
    );
    let namespace = Api::<Namespace>::all(api.env.kube.clone())
        .get(&api.namespace)
        .await
        .expect("namespace");
    let labels = namespace.metadata.labels.unwrap_or_default();
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "privileged");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "stack-provisioner");

    // Reads find them alive (no Service is not "service missing"), at their node's address.
    let id = first.stack_id();
    let read = api.call(Method::GET, &format!("/stacks/{id}"), None).await;
    assert_eq!(read.status, 200, "{}", read.json);
    // `pod_spec` is the pod as applied: with the host port it holds, in the answer and stored.
    let shown: Pod = serde_yaml::from_str(first.json["pod_spec"].as_str().expect("pod_spec")).expect("YAML");
    let declared = shown
        .spec
        .and_then(|spec| spec.containers.into_iter().next())
        .and_then(|container| container.ports)
        .and_then(|ports| ports.into_iter().next())
        .expect("a declared port");
    assert_eq!((declared.container_port, declared.host_port), (80, Some(31001)));
    assert_eq!(read.json["pod_spec"], first.json["pod_spec"]);
    let node = read.json["node_id"].as_str().expect("placed").to_owned();
    let address = made.iter().find(|n| n.name == node).and_then(|n| n.external_ip.clone());
    assert_eq!(read.json["node_public_ip"].as_str(), address.as_deref());

    let stats = api.call(Method::GET, "/stats", None).await;
    assert_eq!(
        stats.json["capacity"]["node_ports"],
        json!({"exposure": "hostport", "range_ports": 1, "schedulable_nodes": 2, "total": 2, "used": 2, "held_elsewhere": 0, "free": 0}),
        "{}",
        stats.json
    );

    // Full: a clean 503 that leaves nothing behind.
    let refused = api.create(WEB_POD, json!(80)).await;
    assert_eq!(refused.status, 503, "{}", refused.json);
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(api.managed_pods_once_deleted_ones_are_gone().await.len(), 2);

    // The reconciler sees nothing to repair.
    let summary = TestReconciler::over(&api, &[]).await.pass().await;
    assert_eq!(
        (
            summary.scanned,
            summary.counts.drift,
            summary.counts.orphans,
            summary.counts.failures
        ),
        (2, 0, 0, 0)
    );

    // A delete frees the port on its node for the next stack, once the pod is gone: it is
    // deleted with a grace period and holds its port until its kubelet has stopped it.
    api.delete_stack(&id).await;
    // (A stack's pod is named by its id.)
    wait_gone(&api.pods_api(), &id)
        .await
        .expect("the deleted stack's pod goes");
    let again = api.create_web().await;
    let again_id = again.stack_id();
    let placed = api.call(Method::GET, &format!("/stacks/{again_id}"), None).await;
    assert_eq!(placed.json["node_id"], node.as_str(), "{}", placed.json);

    api.finish().await;
    nodes.remove().await;
}

#[tokio::test]
async fn a_creator_whose_view_is_old_finds_the_port_taken_everywhere_and_a_new_one_reads_it_first() {
    let nodes = StackNodes::add().await;
    let settings = one_port_on(&nodes.role);
    let a = ApiHarness::with_env(&settings).await;
    let b = a.sandbox(&settings).await;
    // B's view (refreshed now) sees one of two slots taken; A then takes the other.
    assert_eq!(b.create(WEB_POD, json!(80)).await.status, 201);
    assert_eq!(a.create(WEB_POD, json!(80)).await.status, 201);
    // B still believes a node has the port free: the scheduler says no node does.
    let refused = b.create(WEB_POD, json!(80)).await;
    assert_eq!(refused.status, 503, "{}", refused.json);
    assert!(refused.headers.contains_key("retry-after"));
    let pods = a.managed_pods().await;
    assert_eq!(pods.len(), 2, "the refused create left its pod");
    let distinct: HashSet<(String, i32)> = placements(&pods).into_iter().collect();
    assert_eq!(distinct.len(), 2, "two stacks on one (node, port)");

    // A new sandbox reads the ports the pods hold (their annotations) before it picks: it
    // answers "full" without making a pod for the scheduler to refuse.
    let c = a.sandbox(&settings).await;
    let pods: Api<Pod> = Api::namespaced(a.env.kube.clone(), &a.namespace);
    let version = pods_version(&pods).await;
    let full = c.create(WEB_POD, json!(80)).await;
    assert_eq!(full.status, 503, "{}", full.json);
    assert_eq!(full.json["error"], "no available nodeport", "{}", full.json);
    assert_eq!(pods_created_since(&pods, &version).await, Vec::<String>::new());

    a.finish().await;
    nodes.remove().await;
}

#[tokio::test]
async fn switching_to_hostport_keeps_nodeport_stacks_alive_and_their_ports_taken() {
    let nodes = StackNodes::add().await;
    // Two ports above the simulated stacks' range, so that no other test's NodePort Service
    // holds one, and which no real-node test takes (`connect.rs`).
    let range = [("STACK_NODEPORT_MIN", "32738"), ("STACK_NODEPORT_MAX", "32739")];
    let mut nodeport_settings = vec![("STACK_NODE_ROLE", nodes.role.as_str())];
    nodeport_settings.extend_from_slice(&range);
    let before = ApiHarness::with_env(&nodeport_settings).await;
    let old = before.create_web().await;
    let old_port = old.json["node_port"].as_u64().expect("node port");
    let old_id = old.stack_id();

    let mut hostport_settings = nodeport_settings.clone();
    hostport_settings.push(("STACK_EXPOSURE", "hostport"));
    let after = before.sandbox(&hostport_settings).await;
    // The namespace still enforces Pod Security baseline, which would refuse every host port.
    let refused = after.create(WEB_POD, json!(80)).await;
    assert_eq!(refused.status, 503, "{}", refused.json);
    let why = refused.error();
    assert!(why.contains("enforces Pod Security baseline"), "{why}");

    // The operator relabels it (functions/kubernetes-rbac.yaml's `# STACK_EXPOSURE` line).
    let relabel = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "privileged",
        "pod-security.kubernetes.io/enforce-version": Value::Null,
        "pod-security.kubernetes.io/warn": Value::Null,
    }}});
    Api::<Namespace>::all(before.env.kube.clone())
        .patch(&before.namespace, &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .expect("relabel");
    let mut ports = BTreeMap::new();
    for _ in 0..2 {
        let created = after.create_web().await;
        *ports
            .entry(created.json["node_port"].as_u64().expect("port"))
            .or_insert(0) += 1;
    }
    // The service's port is taken on every node: both hostport stacks share the other port.
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert!(
        !ports.contains_key(&old_port),
        "a host port on the service's port {old_port}"
    );
    assert_eq!(
        after.create(WEB_POD, json!(80)).await.status,
        503,
        "the range is full on both nodes"
    );

    // The nodeport stack lives on, read through either mode, and the reconciler keeps it.
    for api in [&before, &after] {
        let read = api.call(Method::GET, &format!("/stacks/{old_id}"), None).await;
        assert_eq!(read.status, 200, "{}", read.json);
        assert_eq!(read.json["service_name"], format!("svc-{old_id}"));
    }
    let summary = TestReconciler::over(&before, &[]).await.pass().await;
    assert_eq!(
        (
            summary.scanned,
            summary.counts.drift,
            summary.counts.orphans,
            summary.counts.failures
        ),
        (3, 0, 0, 0)
    );
    let stats = after.call(Method::GET, "/stats", None).await;
    let capacity = &stats.json["capacity"]["node_ports"];
    assert_eq!(
        (&capacity["total"], &capacity["used"], &capacity["free"]),
        (&json!(4), &json!(4), &json!(0)),
        "{capacity}"
    );

    before.finish().await;
    nodes.remove().await;
}

/// kube-proxy forwards a Service's node port on every node, ahead of a pod's host port: a
/// stack given a port that any Service of the cluster holds would hand its participants to
/// that Service, and so does a stack whose port a Service takes later. Ports 32730-32731: no
/// other test takes them (`connect.rs`).
#[tokio::test]
async fn a_services_node_port_is_never_a_stacks_host_port_and_a_service_taking_one_fails_the_stack() {
    let nodes = StackNodes::add().await;
    let elsewhere = nodes.env.fresh_namespace("hp-other").await.expect("namespace");
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "someone-elses" },
        "spec": {
            "type": "NodePort",
            "selector": { "app": "someone-elses" },
            "ports": [{ "port": 80, "nodePort": 32730, "protocol": "TCP" }]
        }
    }))
    .expect("valid service");
    let services: Api<Service> = elsewhere.api();
    services
        .create(&PostParams::default(), &service)
        .await
        .expect("another namespace's NodePort service");
    let settings = [
        ("STACK_EXPOSURE", "hostport"),
        ("STACK_NODE_ROLE", nodes.role.as_str()),
        ("STACK_NODEPORT_MIN", "32730"),
        ("STACK_NODEPORT_MAX", "32731"),
    ];
    let api = ApiHarness::with_env(&settings).await;

    // Two nodes, one open port: two stacks, both on it, then no room.
    for _ in 0..2 {
        let created = api.create(WEB_POD, json!(80)).await;
        assert_eq!(created.status, 201, "{}", created.json);
        assert_eq!(created.json["node_port"], 32731, "{}", created.json);
    }
    let refused = api.create(WEB_POD, json!(80)).await;
    assert_eq!(refused.status, 503, "{}", refused.json);
    // `/stats` says so too: the Service's port is held on both nodes.
    let stats = api.call(Method::GET, "/stats", None).await;
    let ports = &stats.json["capacity"]["node_ports"];
    assert_eq!(
        (
            &ports["total"],
            &ports["used"],
            &ports["held_elsewhere"],
            &ports["free"]
        ),
        (&json!(4), &json!(2), &json!(2), &json!(0)),
        "{ports}"
    );

    // The Service gone, its port is a stack's again (a fresh sandbox reads the ports anew).
    services
        .delete("someone-elses", &DeleteParams::default())
        .await
        .expect("delete the service");
    let next = api.sandbox(&settings).await;
    let created = next.create(WEB_POD, json!(80)).await;
    assert_eq!(created.status, 201, "{}", created.json);
    assert_eq!(created.json["node_port"], 32730, "{}", created.json);

    // A Service made on that port now takes the stack's participants: a reader that sees it
    // (a fresh sandbox; a process's view serves 30 s) fails the stack, naming the Service.
    services
        .create(&PostParams::default(), &service)
        .await
        .expect("the service again");
    let id = created.stack_id();
    let reader = api.sandbox(&settings).await;
    let status = reader.call(Method::GET, &format!("/stacks/{id}/status"), None).await;
    let (reason, message) = status.failure();
    assert_eq!(reason, "port_taken");
    let taker = format!("{}/someone-elses", elsewhere.name());
    assert!(message.contains(&taker), "names {taker}: {message}");
    wait_gone(&api.pods_api(), &id)
        .await
        .expect("the failed stack's pod goes");

    elsewhere.delete().await.expect("delete namespace");
    api.finish().await;
    nodes.remove().await;
}
