use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use super::*;
use crate::config::Config;
use crate::model::{Protocol, StackId, TargetPort};
use crate::validate::validate;

const TERMS_NONE: &str = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms match no stack node (nodes with role=stack: 3)";

/// The pod the validator makes of a one-container manifest with these requests and `spec` fields.
fn hardened(cpu: &str, memory: &str, spec: Value) -> HardenedPod {
    let mut manifest = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": [{
            "name": "web",
            "image": "nginx:1.27",
            "ports": [{"containerPort": 80}],
            "resources": {"limits": {"cpu": cpu, "memory": memory}}
        }]}
    });
    for (key, value) in spec.as_object().into_iter().flatten() {
        manifest["spec"][key] = value.clone();
    }
    let vars = HashMap::from([("API_KEY", "k")]);
    let config = Config::from_lookup(|name| vars.get(name).map(|v| (*v).to_owned())).unwrap();
    let policy = config.validation;
    let target = TargetPort {
        container_port: 80,
        protocol: Protocol::Tcp,
    };
    let yaml = serde_yaml::to_string(&manifest).unwrap();
    validate(&yaml, &[target], &StackId::generate(), &policy).unwrap()
}

fn small() -> HardenedPod {
    hardened("500m", "128Mi", json!({}))
}

fn required(terms: Value) -> Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})
}

fn expr(key: &str, operator: &str, values: &[&str]) -> Value {
    json!([{"matchExpressions": [{"key": key, "operator": operator, "values": values}]}])
}

fn node(name: &str, zone: &str, cpu_milli: i64, memory_gib: i64) -> StackNode {
    StackNode {
        name: name.into(),
        labels: BTreeMap::from([
            ("role".to_owned(), "stack".to_owned()),
            ("kubernetes.io/hostname".to_owned(), name.to_owned()),
            ("topology.kubernetes.io/zone".to_owned(), zone.to_owned()),
        ]),
        allocatable_cpu_milli: Some(cpu_milli),
        allocatable_memory_bytes: Some(memory_gib << 30),
        user_namespaces: false,
    }
}

/// Three stack nodes: a 4-CPU/16Gi and a 2-CPU/64Gi node in eu-1a, a 4-CPU/16Gi one in eu-1b.
fn nodes() -> Vec<StackNode> {
    vec![
        node("node-a", "eu-1a", 4000, 16),
        node("node-b", "eu-1a", 2000, 64),
        node("node-c", "eu-1b", 4000, 16),
    ]
}

fn fail(pod: &HardenedPod, nodes: &[StackNode]) -> Result<(), String> {
    check(pod, nodes, OnUnschedulable::Fail, "stack").map_err(|r| r.to_string())
}

fn wait(pod: &HardenedPod, nodes: &[StackNode]) -> Result<(), String> {
    check(pod, nodes, OnUnschedulable::Wait, "stack").map_err(|r| r.to_string())
}

#[test]
fn without_stack_nodes_nothing_is_decided() {
    let hopeless = [
        hardened(
            "500m",
            "128Mi",
            required(expr("kubernetes.io/hostname", "In", &["no-such-node"])),
        ),
        hardened("500", "128Mi", json!({})),
        hardened("500m", "128Mi", json!({"hostUsers": false})),
    ];
    for pod in &hopeless {
        assert_eq!(fail(pod, &[]), Ok(()));
        assert_eq!(wait(pod, &[]), Ok(()));
        // The same pods are refused once there are stack nodes: the check is not a no-op.
        assert!(fail(pod, &nodes()).is_err());
    }
}

#[test]
fn required_affinity_must_match_a_current_stack_node_under_fail() {
    let refused = [
        required(expr("kubernetes.io/hostname", "In", &["no-such-node"])),
        required(expr("topology.kubernetes.io/zone", "In", &["mars-1a"])),
        required(json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["no-such-node"]}]}])),
        required(json!([
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["eu-1b"]}],
             "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
        ])),
    ];
    for spec in refused {
        assert_eq!(
            fail(&hardened("500m", "128Mi", spec.clone()), &nodes()),
            Err(TERMS_NONE.to_owned()),
            "{spec}"
        );
    }
    let accepted = [
        json!({}),
        required(expr("kubernetes.io/hostname", "In", &["no-such-node", "node-b"])),
        required(expr("topology.kubernetes.io/zone", "In", &["eu-1b"])),
        required(expr("topology.kubernetes.io/zone", "NotIn", &["mars-1a"])),
        required(json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-c"]}]}])),
        // Terms are ORed: one that matches is enough.
        required(json!([
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["mars-1a"]}]},
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["eu-1a"]}]}
        ])),
    ];
    assert_all_fit(fail, accepted);
}

/// Every affinity of `specs` on a small stack fits the nodes under `mode` (`fail` or `wait`).
fn assert_all_fit(mode: fn(&HardenedPod, &[StackNode]) -> Result<(), String>, specs: impl IntoIterator<Item = Value>) {
    for spec in specs {
        assert_eq!(
            mode(&hardened("500m", "128Mi", spec.clone()), &nodes()),
            Ok(()),
            "{spec}"
        );
    }
}

#[test]
fn under_wait_only_names_no_new_node_can_have_are_refused() {
    let refused = [
        required(expr("kubernetes.io/hostname", "In", &["no-such-node"])),
        required(json!([{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "DoesNotExist"}]}])),
        required(json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["no-such-node"]}]}])),
        // A new node could be in mars-1a, but not also be named no-such-node.
        required(json!([{"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["mars-1a"]},
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["no-such-node"]}
        ]}])),
    ];
    for spec in refused {
        let refusal = wait(&hardened("500m", "128Mi", spec.clone()), &nodes()).unwrap_err();
        assert!(refusal.starts_with(TERMS), "{spec}: {refusal}");
        assert!(refusal.contains("no node added later could"), "{refusal}");
    }
    let accepted = [
        // Karpenter may add a node in a new zone or of a new instance type.
        required(expr("topology.kubernetes.io/zone", "In", &["mars-1a"])),
        required(json!([{"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["mars-1a"]},
            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["node-a"]}
        ]}])),
        required(json!([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]}]}])),
        required(expr("kubernetes.io/hostname", "In", &["node-a"])),
    ];
    assert_all_fit(wait, accepted);
}

#[test]
fn requests_must_fit_the_allocatable_of_a_node_the_pod_may_run_on_under_fail() {
    let cases = [
        (
            hardened("8", "1Gi", json!({})),
            Err(
                "spec.containers[*].resources request 8 of cpu in total, more than any stack node it may run on can allocate (at most 4; nodes with role=stack: 3)",
            ),
        ),
        (
            hardened("1", "128Gi", json!({})),
            Err(
                "spec.containers[*].resources request 128Gi of memory in total, more than any stack node it may run on can allocate (at most 64Gi; nodes with role=stack: 3)",
            ),
        ),
        (
            hardened("3", "32Gi", json!({})),
            Err(
                "spec.containers[*].resources request 3 of cpu and 32Gi of memory in total, which no stack node it may run on can allocate together (nodes with role=stack: 3)",
            ),
        ),
        // node-b alone would take 3 CPUs but the affinity keeps the pod on node-b.
        (
            hardened("3", "1Gi", required(expr("kubernetes.io/hostname", "In", &["node-b"]))),
            Err(
                "spec.containers[*].resources request 3 of cpu in total, more than any stack node it may run on can allocate (at most 2; nodes with role=stack: 3)",
            ),
        ),
        (hardened("4", "16Gi", json!({})), Ok(())),
        (hardened("2", "64Gi", json!({})), Ok(())),
        (hardened("3", "1Gi", json!({})), Ok(())),
    ];
    for (pod, expected) in cases {
        let requests = (pod.requested_cpu_milli, pod.requested_memory_bytes);
        assert_eq!(fail(&pod, &nodes()), expected.map_err(str::to_owned), "{requests:?}");
    }
    // An autoscaler may add a larger node; a node that reports nothing is not judged.
    assert_eq!(wait(&hardened("8", "1Gi", json!({})), &nodes()), Ok(()));
    let mut unreported = nodes();
    unreported[1].allocatable_cpu_milli = None;
    assert_eq!(fail(&hardened("8", "1Gi", json!({})), &unreported), Ok(()));
}

#[test]
fn user_namespaces_need_a_runtime_that_supports_them_under_fail() {
    let pod = hardened("500m", "128Mi", json!({"hostUsers": false}));
    assert_eq!(
        fail(&pod, &nodes()),
        Err("spec.hostUsers false needs user namespaces, which the container runtime of no stack node it may run on supports (nodes with role=stack: 3)".to_owned())
    );
    assert_eq!(wait(&pod, &nodes()), Ok(()));
    assert_eq!(fail(&small(), &nodes()), Ok(()));
    let mut some = nodes();
    some[2].user_namespaces = true;
    assert_eq!(fail(&pod, &some), Ok(()));
    // Only a node the pod fits on counts.
    let big = hardened("3", "128Mi", json!({"hostUsers": false}));
    let mut small_node_only = nodes();
    small_node_only[1].user_namespaces = true;
    assert!(fail(&big, &small_node_only).unwrap_err().starts_with("spec.hostUsers"));
}
