//! The pre-pull on the real nodes: an operator declares the event's images, every stack node
//! gets them through the hardened DaemonSet (images without a shell included), a missing tag
//! is shown failed rather than retried, `/stats` says go or no-go, a node that joins with the
//! startup taint loses it once it holds every image, and clearing the list removes it all.

use std::time::{Duration, Instant};

use http::Method;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Taint};
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};
use stack_core::STARTUP_TAINT;
use stack_tests::api::{ApiHarness, prepull_namespace};
use stack_tests::env::nodes::patch_node_spec;
use stack_tests::env::real_nodes::{STACK_ROLE, image};
use stack_tests::env::unique_name;
use stack_tests::reconciler::TestReconciler;
use stack_tests::registry_tags::retag;
use stack_tests::tenants::{self, TestKey};

/// Images already in the nodes' store are "pulled" in a moment; a few passes suffice.
const SETTLE_BOUND: Duration = Duration::from_secs(90);

async fn readiness(api: &ApiHarness) -> Value {
    let reply = api.call(Method::GET, "/prepull", None).await;
    assert_eq!(reply.status, 200, "{}", reply.json);
    reply.json
}

fn entry<'a>(report: &'a Value, image: &str) -> &'a Value {
    report["images"]
        .as_array()
        .and_then(|all| all.iter().find(|i| i["image"] == image))
        .unwrap_or_else(|| panic!("{image} not in {report}"))
}

/// Passes until `done(readiness)` holds.
async fn settle(api: &ApiHarness, reconciler: &TestReconciler, done: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        reconciler.pass().await;
        let report = readiness(api).await;
        if done(&report) {
            return report;
        }
        assert!(
            started.elapsed() < SETTLE_BOUND,
            "not settled after {SETTLE_BOUND:?}: {report}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn real_nodes(api: &ApiHarness) -> Vec<Node> {
    Api::<Node>::all(api.env.kube.clone())
        .list(&ListParams::default().labels(&format!("role={STACK_ROLE}")))
        .await
        .expect("list nodes")
        .items
}

async fn set_taints(api: &ApiHarness, node: &str, taints: &[Taint]) {
    let change = format!("set the taints of node {node}");
    patch_node_spec(&api.env.kube, node, json!({ "taints": taints }), change)
        .await
        .expect("taint the node");
}

#[tokio::test]
async fn declared_images_reach_every_stack_node_and_a_joining_node_is_released_once_it_has_them() {
    // It taints a real node: no other real-node test runs meanwhile.
    let api = ApiHarness::on_real_nodes_alone(&[]).await;
    let registry = api.registry().to_owned();
    let vars = [
        ("STACK_PREPULL_NAMESPACE", prepull_namespace(&api.namespace)),
        ("STACK_NODE_ROLE", STACK_ROLE.to_owned()),
        ("STACK_PREPULL_HELPER_IMAGE", image(&registry, "busybox")),
        ("STACK_PREPULL_IN_USE", "false".to_owned()),
    ];
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let reconciler = TestReconciler::over(&api, &vars).await;
    let nodes = real_nodes(&api).await;
    let node_count = nodes.len();
    assert!(node_count >= 2, "two real nodes at least");

    // A reference the validator refuses is a bad request, as in a manifest.
    let refused = api
        .call(Method::PUT, "/prepull", Some(json!({"images": ["127.0.0.1:5000/x:1"]})))
        .await;
    assert_eq!(refused.status, 400, "{}", refused.json);

    // A tag no node has pulled yet: it reaches the nodes through the pre-pull or not at all.
    let fresh_tag = unique_name("pp");
    retag(&registry, "stack-env/busybox", "1", &fresh_tag)
        .await
        .expect("tag a fresh image");
    let fresh = format!("{registry}/stack-env/busybox:{fresh_tag}");
    let tcp = image(&registry, "tcp");
    let http = image(&registry, "http");
    // The sandbox image: a lone static binary, no shell, no sleep.
    let pause = format!("{registry}/stack-env/pause:3.10");
    let missing = image(&registry, "no-such-challenge");
    let declared = api
        .call(
            Method::PUT,
            "/prepull",
            Some(json!({"images": [tcp, http, pause, fresh, missing]})),
        )
        .await;
    assert_eq!(declared.status, 200, "{}", declared.json);
    assert_eq!(declared.json["go"], false, "{}", declared.json);
    assert_eq!(declared.json["nodes"], node_count, "{}", declared.json);
    assert_eq!(entry(&declared.json, &fresh)["ready"], 0, "no node had it before");

    let report = settle(&api, &reconciler, |r| {
        r["images"]
            .as_array()
            .is_some_and(|all| all.iter().all(|i| i["ready"] == node_count || !i["failed"].is_null()))
    })
    .await;
    for present in [&tcp, &http, &pause, &fresh] {
        assert_eq!(entry(&report, present)["ready"], node_count, "{report}");
    }
    let failed = &entry(&report, &missing)["failed"];
    assert_eq!(failed["reason"], "image_not_found", "{report}");
    assert_eq!(report["go"], false);
    let summary = report["summary"].as_str().unwrap_or_default();
    assert!(summary.ends_with(&format!("cannot be pulled: {missing}")), "{summary}");

    // Not retried: the DaemonSet no longer holds the missing image.
    let prepull_ns = prepull_namespace(&api.namespace);
    let daemon_set = Api::<DaemonSet>::namespaced(api.env.kube.clone(), &prepull_ns)
        .get("stack-prepull")
        .await
        .expect("the pre-pull DaemonSet");
    let spec = daemon_set.spec.expect("spec").template.spec.expect("pod spec");
    let held: Vec<&str> = spec.containers.iter().filter_map(|c| c.image.as_deref()).collect();
    assert!(!held.contains(&missing.as_str()), "{held:?}");
    assert!(held.contains(&pause.as_str()), "{held:?}");

    // Its pods run as nobody, without token or capabilities, in a namespace that enforces
    // Pod Security `restricted`.
    let namespace = Api::<Namespace>::all(api.env.kube.clone())
        .get(&prepull_ns)
        .await
        .expect("the pre-pull namespace");
    let labels = namespace.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("pod-security.kubernetes.io/enforce").map(String::as_str),
        Some("restricted")
    );
    let pods = Api::<Pod>::namespaced(api.env.kube.clone(), &prepull_ns)
        .list(&ListParams::default())
        .await
        .expect("pre-pull pods")
        .items;
    assert!(pods.len() >= node_count, "a pod per node: {}", pods.len());
    for pod in &pods {
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.security_context.as_ref().and_then(|s| s.run_as_user), Some(65534));
    }

    // /stats says the same (once the pod without the failed image runs: while it starts, the
    // images it holds read as pulling, never as there on the kubelet's word alone).
    let started = Instant::now();
    loop {
        let stats = api.call(Method::GET, "/stats", None).await;
        assert_eq!(stats.status, 200, "{}", stats.json);
        if stats.json["images"]["summary"] == report["summary"] {
            break;
        }
        assert!(started.elapsed() < SETTLE_BOUND, "{} vs {report}", stats.json["images"]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Declared again without the missing tag: go, all images on all nodes.
    let declared = api
        .call(
            Method::PUT,
            "/prepull",
            Some(json!({"images": [tcp, http, pause, fresh]})),
        )
        .await;
    assert_eq!(declared.status, 200, "{}", declared.json);
    let report = settle(&api, &reconciler, |r| r["go"] == true).await;
    assert_eq!(
        report["summary"],
        format!("go: all 4 images on {node_count}/{node_count} nodes"),
        "{report}"
    );

    // A node that joins with the startup taint loses it at the next pass once it holds
    // every image (it already does), and no other taint of it goes with it.
    let joining = nodes[0].metadata.name.clone().expect("node name");
    let other = Taint {
        key: "example.com/kept".into(),
        value: Some("yes".into()),
        effect: "PreferNoSchedule".into(),
        time_added: None,
    };
    let startup = Taint {
        key: STARTUP_TAINT.into(),
        value: Some("true".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    };
    set_taints(&api, &joining, &[other.clone(), startup]).await;
    reconciler.pass().await;
    let node = Api::<Node>::all(api.env.kube.clone())
        .get(&joining)
        .await
        .expect("the node");
    let taints: Vec<String> = node
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.key)
        .collect();
    set_taints(&api, &joining, &[]).await;
    assert_eq!(taints, [other.key], "the startup taint alone came off");

    // Cleared: the next pass removes the DaemonSet.
    let cleared = api.call(Method::PUT, "/prepull", Some(json!({"images": []}))).await;
    assert_eq!(cleared.status, 200, "{}", cleared.json);
    reconciler.pass().await;
    let left = Api::<DaemonSet>::namespaced(api.env.kube.clone(), &prepull_ns)
        .get_opt("stack-prepull")
        .await
        .expect("read the DaemonSet");
    assert!(left.is_none(), "the DaemonSet outlived its last image");
    api.finish().await;
}

/// A manifest cannot tolerate the startup taint: its stack would land on a node still pulling.
#[tokio::test]
async fn a_manifest_tolerating_the_startup_taint_is_a_bad_spec() {
    let api = ApiHarness::start().await;
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  tolerations:\n  - key: {STARTUP_TAINT}\n    operator: Exists\n    effect: NoSchedule\n  containers:\n  - name: web\n    image: nginx:1.27\n    ports:\n    - containerPort: 80\n"
    );
    let reply = api.create(&manifest, json!(80)).await;
    assert_eq!(reply.status, 400, "{}", reply.json);
    let message = reply.json.to_string();
    assert!(message.contains("spec.tolerations[0].key"), "{message}");
    api.finish().await;
}

/// Each tenant declares its own list and sees only its own images; a key of every tenant sees
/// them all; the nodes get every list; a platform key may not declare, a viewer may not either.
#[tokio::test]
async fn a_tenants_images_are_its_own_to_declare_and_to_see() {
    let api = ApiHarness::with_tenants(&[], &[]).await;
    let declare = |key: TestKey, images: Value| {
        let api = &api;
        async move {
            api.call_as(key.key, Method::PUT, "/prepull", Some(json!({"images": images})))
                .await
        }
    };
    let shown = |reply: &stack_tests::api::Reply| -> Vec<String> {
        reply.json["images"]
            .as_array()
            .unwrap_or_else(|| panic!("{}", reply.json))
            .iter()
            .map(|i| i["image"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let ctf = declare(tenants::CTF_OPERATOR, json!(["registry.example.com/ctf/web:1"])).await;
    assert_eq!(ctf.status, 200, "{}", ctf.json);
    let all = declare(tenants::ALL_OPERATOR, json!(["registry.example.com/base:1"])).await;
    assert_eq!(all.status, 200, "{}", all.json);
    for refused in [tenants::CTF_PLATFORM, tenants::WARGAME_VIEWER] {
        let reply = declare(refused, json!(["registry.example.com/x:1"])).await;
        assert_eq!(reply.status, 403, "{}: {}", refused.key, reply.json);
    }

    let read = |key: TestKey| api.call_as(key.key, Method::GET, "/prepull", None);
    assert_eq!(
        shown(&read(tenants::CTF_OPERATOR).await),
        ["registry.example.com/ctf/web:1"]
    );
    assert!(
        shown(&read(tenants::WARGAME_VIEWER).await).is_empty(),
        "nothing of ctf's"
    );
    assert_eq!(
        shown(&read(tenants::ALL_VIEWER).await),
        ["registry.example.com/base:1", "registry.example.com/ctf/web:1"]
    );
    let stats = api
        .call_as(tenants::WARGAME_VIEWER.key, Method::GET, "/stats", None)
        .await;
    assert_eq!(stats.json["images"]["images"], json!([]), "{}", stats.json);

    // Clearing ctf's list leaves the deployment's.
    let cleared = declare(tenants::CTF_OPERATOR, json!([])).await;
    assert_eq!(cleared.status, 200, "{}", cleared.json);
    assert_eq!(shown(&read(tenants::ALL_VIEWER).await), ["registry.example.com/base:1"]);
    api.finish().await;
}
