//! Issue 10's principles, one table each (accepted and refused, with the refused field path):
//! kubectl's YAML, references past the stack, per-pod bounds, metadata keys, durations,
//! node-local images, YAML tags, requests that can never be scheduled, and pods that could
//! never become Ready.

use serde_json::{Value, json};

use super::{accepted, edited, init_container, policy, refused, run, stack_id, tcp};
use crate::config::PodLimits;
use crate::validate::{Rejection, ValidationPolicy, validate};

const BASE_YAML: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - name: web\n    image: nginx\n    ports: [{containerPort: 80}]\n    resources: {limits: {cpu: 500m, memory: 128Mi}}\n";

fn with_volume(volume: &str) -> String {
    format!("{BASE_YAML}  volumes:\n  - {volume}\n")
}

#[test]
fn yaml_as_kubectl_reads_it() {
    let mode = |yaml: &str| -> Result<Value, Rejection> {
        let pod = run(yaml)?.pod;
        Ok(serde_json::to_value(pod.spec.unwrap().volumes.unwrap()).unwrap()[0]["configMap"]["defaultMode"].clone())
    };
    let rows = [
        ("{name: c, configMap: {name: cfg, defaultMode: 0755}}", json!(493)),
        ("{name: c, configMap: {name: cfg, defaultMode: 0o755}}", json!(493)),
        ("{name: c, configMap: {name: cfg, defaultMode: 493}}", json!(493)),
        ("{name: c, configMap: {name: cfg, defaultMode: 0x1ED}}", json!(493)),
        ("{name: c, configMap: {name: cfg, defaultMode: 0_644}}", json!(420)),
        ("{name: c, configMap: {name: cfg, defaultMode: 0800}}", json!(800)),
        ("{name: c, configMap: {name: cfg, defaultMode: 420.0}}", json!(420)),
        (
            "{name: c, configMap: {name: cfg, defaultMode: !!str 0755}}",
            Value::Null,
        ),
        ("{name: c, configMap: {name: cfg, defaultMode: '0755'}}", Value::Null),
    ];
    for (volume, want) in rows {
        let got = mode(&with_volume(volume));
        match want {
            Value::Null => {
                let r = got.expect_err(volume);
                assert_eq!(r.path, "spec.volumes[0].configMap.defaultMode", "{volume}");
            }
            want => assert_eq!(got, Ok(want), "{volume}"),
        }
    }
    // A byte-order mark before block YAML, and YAML 1.1 booleans in boolean fields.
    let hardened = run(&format!("\u{feff}{BASE_YAML}    tty: yes\n    stdin: on\n")).unwrap();
    let container = &hardened.pod.spec.unwrap().containers[0];
    assert_eq!((container.tty, container.stdin), (Some(true), Some(true)));
    // Elsewhere a plain 0755 stays the text the author wrote.
    let hardened = run(&format!(
        "{BASE_YAML}    env: [{{name: MODE, value: 0755}}, {{name: ON, value: yes}}]\n"
    ))
    .unwrap();
    let env = hardened.pod.spec.unwrap().containers[0].env.clone().unwrap();
    assert_eq!(
        (env[0].value.as_deref(), env[1].value.as_deref()),
        (Some("0755"), Some("yes"))
    );
}

#[test]
fn yaml_tags_are_honoured_or_refused_never_dropped() {
    let honoured = [
        format!("{BASE_YAML}    env: [{{name: A, value: !!str 0755}}]\n"),
        format!("{BASE_YAML}    workingDir: !!str /srv\n    stdin: !!bool true\n"),
        BASE_YAML.replace("metadata: {name: web}", "metadata: !!map {name: web}"),
    ];
    for yaml in honoured {
        assert!(run(&yaml).is_ok(), "{yaml}");
    }
    for tag in [
        "!!binary aGk=",
        "!!timestamp 2001-12-14",
        "!secret flag",
        "!!set {a}",
        "!<tag:x.io,1:y> z",
    ] {
        let r = run(&format!("{BASE_YAML}    workingDir: {tag}\n")).unwrap_err();
        assert_eq!(r.path, "manifest", "{tag}");
        assert!(r.problem.starts_with("uses the YAML tag"), "{tag}: {r}");
    }
}

#[test]
fn secrets_and_config_maps_must_be_shared() {
    refused(vec![
        (
            vec![(
                "/spec/volumes",
                json!([{"name": "r", "secret": {"secretName": "registry-creds"}}]),
            )],
            "spec.volumes[0].secret.secretName",
        ),
        (
            vec![("/spec/volumes", json!([{"name": "r", "secret": {}}]))],
            "spec.volumes[0].secret.secretName",
        ),
        (
            vec![(
                "/spec/volumes",
                json!([{"name": "e", "emptyDir": {}}, {"name": "c", "configMap": {"name": "aws-auth"}}]),
            )],
            "spec.volumes[1].configMap.name",
        ),
        (
            vec![(
                "/spec/volumes",
                json!([{"name": "p", "projected": {"sources": [{"configMap": {"name": "cfg"}}, {"secret": {"name": "registry-creds"}}]}}]),
            )],
            "spec.volumes[0].projected.sources[1].secret.name",
        ),
        (
            vec![(
                "/spec/volumes",
                json!([{"name": "p", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}}]}}]),
            )],
            "spec.volumes[0].projected.sources[0].configMap.name",
        ),
        (
            vec![(
                "/spec/containers/0/env",
                json!([{"name": "A", "value": "x"}, {"name": "T", "valueFrom": {"secretKeyRef": {"name": "registry-creds", "key": ".dockerconfigjson"}}}]),
            )],
            "spec.containers[0].env[1].valueFrom.secretKeyRef.name",
        ),
        (
            vec![(
                "/spec/containers/0/env",
                json!([{"name": "T", "valueFrom": {"configMapKeyRef": {"name": "other", "key": "k"}}}]),
            )],
            "spec.containers[0].env[0].valueFrom.configMapKeyRef.name",
        ),
        (
            vec![(
                "/spec/containers/0/envFrom",
                json!([{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "db"}}]),
            )],
            "spec.containers[0].envFrom[1].secretRef.name",
        ),
        (
            vec![("/spec/initContainers", json!([init_with_env_from()]))],
            "spec.initContainers[0].envFrom[0].configMapRef.name",
        ),
        (
            vec![("/spec/imagePullSecrets", json!([{"name": "pull"}, {"name": "flag"}]))],
            "spec.imagePullSecrets[1].name",
        ),
    ]);
    accepted(vec![
        vec![(
            "/spec/volumes",
            json!([{"name": "f", "secret": {"secretName": "flag"}}, {"name": "c", "configMap": {"name": "cfg"}}]),
        )],
        vec![(
            "/spec/containers/0/envFrom",
            json!([{"configMapRef": {"name": "web-cfg"}}, {"secretRef": {"name": "s"}}]),
        )],
        vec![("/spec/imagePullSecrets", json!([{"name": "pull"}]))],
        vec![(
            "/spec/containers/0/env",
            json!([{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
        )],
    ]);
    let r = run(&edited(&[(
        "/spec/volumes",
        json!([{"name": "r", "secret": {"secretName": "registry-creds"}}]),
    )]))
    .unwrap_err();
    assert_eq!(
        r.to_string(),
        "spec.volumes[0].secret.secretName is forbidden: Secret \"registry-creds\" is not shared with stacks (STACK_SHARED_SECRETS)"
    );
}

fn init_with_env_from() -> Value {
    let mut init = init_container();
    init["envFrom"] = json!([{"configMapRef": {"name": "x"}}]);
    init
}

#[test]
fn per_pod_bounds() {
    let small = ValidationPolicy {
        pod_limits: PodLimits {
            containers: 2,
            init_containers: 1,
            volumes: 2,
            env: 3,
            ports: 3,
        },
        ..policy()
    };
    let check = |edits: &[(&str, Value)]| validate(&edited(edits), &[tcp(80)], &stack_id(), &small);
    let container = |name: &str| json!({"name": name, "image": "busybox", "resources": {"limits": {"cpu": "10m", "memory": "8Mi"}}});
    let env = |n: usize| Value::Array((0..n).map(|i| json!({"name": format!("V{i}"), "value": "x"})).collect());
    let volumes = |n: usize| {
        Value::Array(
            (0..n)
                .map(|i| json!({"name": format!("v{i}"), "emptyDir": {}}))
                .collect(),
        )
    };
    let rows: Vec<(super::Edits, Result<(), &str>)> = vec![
        (vec![("/spec/containers/1", container("b"))], Ok(())),
        (
            vec![
                ("/spec/containers/1", container("b")),
                ("/spec/containers/2", container("c")),
            ],
            Err("spec.containers"),
        ),
        (vec![("/spec/initContainers", json!([init_container()]))], Ok(())),
        (
            vec![("/spec/initContainers", json!([init_container(), container("i2")]))],
            Err("spec.initContainers"),
        ),
        (vec![("/spec/volumes", volumes(2))], Ok(())),
        (vec![("/spec/volumes", volumes(3))], Err("spec.volumes")),
        (vec![("/spec/containers/0/env", env(3))], Ok(())),
        (
            vec![
                ("/spec/containers/0/env", env(2)),
                (
                    "/spec/containers/0/envFrom",
                    json!([{"configMapRef": {"name": "cfg"}}, {"configMapRef": {"name": "c"}}]),
                ),
            ],
            Err("spec.containers[*].env"),
        ),
        (
            vec![
                ("/spec/containers/0/env", env(2)),
                ("/spec/containers/1", {
                    let mut c = container("b");
                    c["env"] = env(2);
                    c
                }),
            ],
            Err("spec.containers[*].env"),
        ),
        (
            vec![(
                "/spec/containers/0/ports",
                json!([{"containerPort": 80}, {"containerPort": 81}, {"containerPort": 82}]),
            )],
            Ok(()),
        ),
        (
            vec![
                (
                    "/spec/containers/0/ports",
                    json!([{"containerPort": 80}, {"containerPort": 81}]),
                ),
                ("/spec/containers/1", {
                    let mut c = container("b");
                    c["ports"] = json!([{"containerPort": 90}, {"containerPort": 91}]);
                    c
                }),
            ],
            Err("spec.containers[*].ports"),
        ),
    ];
    for (edits, want) in rows {
        let got = check(&edits).map(|_| ()).map_err(|r| r.path);
        assert_eq!(got, want.map_err(str::to_owned), "{edits:?}");
    }
    let r = check(&[("/spec/volumes", volumes(3))]).unwrap_err();
    assert_eq!(
        r.problem,
        "lists 3 volumes, more than the 2 a stack may have (STACK_MAX_VOLUMES)"
    );
    let labels: serde_json::Map<String, Value> = (0..129).map(|i| (format!("l{i}"), json!("v"))).collect();
    assert_eq!(
        run(&edited(&[("/metadata/labels", Value::Object(labels))]))
            .unwrap_err()
            .path,
        "metadata.labels"
    );
    let notes: serde_json::Map<String, Value> = (0..128).map(|i| (format!("n{i}"), json!("v"))).collect();
    assert!(run(&edited(&[("/metadata/annotations", Value::Object(notes))])).is_ok());
    // Defaults: 200 containers in one pod are refused.
    let many: Vec<Value> = (0..200).map(|i| container(&format!("c{i}"))).collect();
    assert_eq!(
        run(&edited(&[("/spec/containers", json!(many))])).unwrap_err().path,
        "spec.containers"
    );
}

#[test]
fn annotations_and_labels_follow_their_allowlists() {
    refused(vec![
        (
            vec![("/metadata/annotations/k8s.v1.cni.cncf.io~1networks", json!("macvlan"))],
            "metadata.annotations.k8s.v1.cni.cncf.io/networks",
        ),
        (
            vec![("/metadata/annotations/iam.amazonaws.com~1role", json!("admin"))],
            "metadata.annotations.iam.amazonaws.com/role",
        ),
        (
            vec![("/metadata/annotations/karpenter.sh~1do-not-disrupt", json!("true"))],
            "metadata.annotations.karpenter.sh/do-not-disrupt",
        ),
        (
            vec![("/metadata/annotations/eks.amazonaws.com~1role-arn", json!("arn"))],
            "metadata.annotations.eks.amazonaws.com/role-arn",
        ),
        (
            vec![("/metadata/labels/node-role.kubernetes.io~1control-plane", json!(""))],
            "metadata.labels.node-role.kubernetes.io/control-plane",
        ),
        (
            vec![("/metadata/labels/stack-provisioner~1stack-id", json!("x"))],
            "metadata.labels.stack-provisioner/stack-id",
        ),
    ]);
    accepted(vec![vec![
        ("/metadata/labels/challenge", json!("web-101")),
        ("/metadata/labels/ctf.example.com~1team", json!("blue")),
        ("/metadata/annotations/author", json!("alice")),
        (
            "/metadata/annotations/kubectl.kubernetes.io~1default-container",
            json!("web"),
        ),
    ]]);
}

#[test]
fn every_duration_is_bounded() {
    let probe = |field: &str, value: i64| {
        (
            "/spec/containers/0/livenessProbe",
            json!({"tcpSocket": {"port": 80}, field: value}),
        )
    };
    refused(vec![
        (
            vec![probe("terminationGracePeriodSeconds", 31_536_000)],
            "spec.containers[0].livenessProbe.terminationGracePeriodSeconds",
        ),
        (
            vec![probe("terminationGracePeriodSeconds", 0)],
            "spec.containers[0].livenessProbe.terminationGracePeriodSeconds",
        ),
        (
            vec![probe("initialDelaySeconds", 86_400)],
            "spec.containers[0].livenessProbe.initialDelaySeconds",
        ),
        (
            vec![probe("periodSeconds", -1)],
            "spec.containers[0].livenessProbe.periodSeconds",
        ),
        (
            vec![probe("timeoutSeconds", 100_000)],
            "spec.containers[0].livenessProbe.timeoutSeconds",
        ),
        (
            vec![probe("failureThreshold", 1_000_000)],
            "spec.containers[0].livenessProbe.failureThreshold",
        ),
        (
            vec![(
                "/spec/containers/0/startupProbe",
                json!({"exec": {"command": ["true"]}, "successThreshold": 1000}),
            )],
            "spec.containers[0].startupProbe.successThreshold",
        ),
        (
            vec![(
                "/spec/containers/0/lifecycle",
                json!({"preStop": {"sleep": {"seconds": 3600}}}),
            )],
            "spec.containers[0].lifecycle.preStop.sleep.seconds",
        ),
        (
            vec![(
                "/spec/containers/0/lifecycle",
                json!({"postStart": {"sleep": {"seconds": -5}}}),
            )],
            "spec.containers[0].lifecycle.postStart.sleep.seconds",
        ),
        (
            vec![("/spec/terminationGracePeriodSeconds", json!(31_536_000))],
            "spec.terminationGracePeriodSeconds",
        ),
        (
            vec![(
                "/spec/tolerations",
                json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 31_536_000}]),
            )],
            "spec.tolerations[0].key",
        ),
    ]);
    accepted(vec![
        vec![
            probe("terminationGracePeriodSeconds", 30),
            (
                "/spec/containers/0/lifecycle",
                json!({"preStop": {"sleep": {"seconds": 30}}}),
            ),
        ],
        vec![probe("initialDelaySeconds", 3600), probe("periodSeconds", 0)],
        vec![(
            "/spec/tolerations",
            json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]),
        )],
    ]);
}

#[test]
fn node_local_registries_are_refused() {
    for image in [
        "localhost:5000/flag",
        "127.0.0.1:5000/x",
        "169.254.169.254/latest/meta-data",
        "[::1]:5000/x",
        "[fe80::1%eth0]/x",
    ] {
        refused(vec![(
            vec![("/spec/containers/0/image", json!(image))],
            "spec.containers[0].image",
        )]);
    }
    let allowing = ValidationPolicy {
        image_allowlist: vec!["localhost:5000/".into(), "registry.example.com/".into()],
        ..policy()
    };
    let r = validate(
        &edited(&[("/spec/containers/0/image", json!("localhost:5000/x"))]),
        &[tcp(80)],
        &stack_id(),
        &allowing,
    )
    .unwrap_err();
    assert!(r.problem.contains("loopback or link-local"), "{r}");
}

#[test]
fn requests_that_can_never_be_scheduled_are_400s() {
    let required = |terms: Value| {
        (
            "/spec/affinity/nodeAffinity",
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}),
        )
    };
    let expr = |key: &str, op: &str, values: &[&str]| json!({"key": key, "operator": op, "values": values});
    const TERMS: &str = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
    refused(vec![
        (
            vec![required(
                json!([{"matchExpressions": [expr("role", "In", &["system"])]}]),
            )],
            TERMS,
        ),
        (
            vec![required(
                json!([{"matchExpressions": [expr("role", "NotIn", &["stack"])]}]),
            )],
            TERMS,
        ),
        (
            vec![required(
                json!([{"matchExpressions": [{"key": "role", "operator": "DoesNotExist"}]}]),
            )],
            TERMS,
        ),
        (
            vec![required(json!([{"matchExpressions": [expr("role", "Gt", &["5"])]}]))],
            TERMS,
        ),
        (
            vec![required(
                json!([{"matchExpressions": [expr("zone", "In", &["a"]), expr("zone", "NotIn", &["a"])]}]),
            )],
            TERMS,
        ),
        (
            vec![required(json!([
                {"matchExpressions": [expr("role", "In", &["gpu"])]},
                {"matchExpressions": [expr("size", "Gt", &["10"]), expr("size", "Lt", &["5"])]}
            ]))],
            TERMS,
        ),
        (vec![required(json!([{}]))], TERMS),
        (vec![required(json!([]))], TERMS),
        (
            vec![required(
                json!([{"matchExpressions": [{"key": "zone", "operator": "In"}]}]),
            )],
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values",
        ),
        (
            vec![required(
                json!([{"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]),
            )],
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
        (
            vec![required(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}, {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]),
            )],
            TERMS,
        ),
        (
            vec![(
                "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution",
                json!([{"weight": 0, "preference": {"matchExpressions": [expr("a", "In", &["b"])]}}]),
            )],
            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        ),
        (
            vec![("/spec/containers/0/resources/limits/cpu", json!("2000"))],
            "spec.containers[*].resources",
        ),
        (
            vec![("/spec/containers/0/resources/limits/memory", json!("64Ti"))],
            "spec.containers[*].resources",
        ),
        (
            vec![("/spec/nodeSelector", json!({"role": "gpu"}))],
            "spec.nodeSelector.role",
        ),
    ]);
    accepted(vec![
        vec![required(
            json!([{"matchExpressions": [expr("role", "In", &["stack", "gpu"])]}]),
        )],
        vec![required(
            json!([{"matchExpressions": [{"key": "role", "operator": "Exists"}, expr("zone", "NotIn", &["a"])]}]),
        )],
        vec![required(json!([
            {"matchExpressions": [expr("role", "In", &["gpu"])]},
            {"matchExpressions": [expr("size", "Gt", &["5"]), expr("size", "Lt", &["10"])]}
        ]))],
        vec![required(
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]),
        )],
        vec![(
            "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution",
            json!([{"weight": 100, "preference": {"matchExpressions": [expr("role", "In", &["other"])]}}]),
        )],
    ]);
}

#[test]
fn pods_that_could_never_become_ready_are_400s() {
    let probe = |field: &'static str, action: Value| (field, action);
    let named = |name: &str| ("/spec/containers/0/ports/0/name", json!(name));
    let sidecar = |probe: Value| {
        let mut c = init_container();
        c["restartPolicy"] = json!("Always");
        c["readinessProbe"] = probe;
        ("/spec/initContainers", json!([c]))
    };
    let fields = |requirement: Value| {
        (
            "/spec/affinity/nodeAffinity",
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [requirement]}]}}),
        )
    };
    // stack-0123456789abcdef.<subdomain>.stacks.svc.cluster.local: 64 characters with 16.
    let fqdn = |subdomain: &str| {
        vec![
            ("/spec/setHostnameAsFQDN", json!(true)),
            ("/spec/subdomain", json!(subdomain)),
        ]
    };
    refused(vec![
        (
            vec![("/spec/readinessGates", json!([{"conditionType": "example.com/ready"}]))],
            "spec.readinessGates",
        ),
        (
            vec![probe(
                "/spec/containers/0/readinessProbe",
                json!({"tcpSocket": {"port": "http"}}),
            )],
            "spec.containers[0].readinessProbe.tcpSocket.port",
        ),
        (
            vec![
                named("web"),
                probe(
                    "/spec/containers/0/startupProbe",
                    json!({"httpGet": {"port": "http", "path": "/"}}),
                ),
            ],
            "spec.containers[0].startupProbe.httpGet.port",
        ),
        (
            vec![probe(
                "/spec/containers/0/livenessProbe",
                json!({"httpGet": {"port": "http", "path": "/"}}),
            )],
            "spec.containers[0].livenessProbe.httpGet.port",
        ),
        // The kubelet looks only in the probing container's own ports.
        (
            vec![named("http"), sidecar(json!({"tcpSocket": {"port": "http"}}))],
            "spec.initContainers[0].readinessProbe.tcpSocket.port",
        ),
        (
            vec![probe(
                "/spec/containers/0/lifecycle",
                json!({"postStart": {"httpGet": {"port": "admin", "path": "/"}}}),
            )],
            "spec.containers[0].lifecycle.postStart.httpGet.port",
        ),
        (
            vec![probe(
                "/spec/containers/0/lifecycle",
                json!({"postStart": {"tcpSocket": {"port": 80}}}),
            )],
            "spec.containers[0].lifecycle.postStart.tcpSocket",
        ),
        (
            vec![probe(
                "/spec/containers/0/lifecycle",
                json!({"preStop": {"tcpSocket": {"port": 80}}}),
            )],
            "spec.containers[0].lifecycle.preStop.tcpSocket",
        ),
        (
            vec![fields(
                json!({"key": "metadata.uid", "operator": "In", "values": ["n1"]}),
            )],
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].key",
        ),
        (
            vec![fields(json!({"key": "metadata.name", "operator": "Exists"}))],
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].operator",
        ),
        (
            vec![fields(
                json!({"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}),
            )],
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].values",
        ),
        (fqdn("subdomain-of-17ch"), "spec.setHostnameAsFQDN"),
        (
            [fqdn("s"), vec![("/spec/hostname", json!("h".repeat(42)))]].concat(),
            "spec.setHostnameAsFQDN",
        ),
    ]);
    accepted(vec![
        vec![("/spec/readinessGates", json!([]))],
        vec![
            named("http"),
            probe(
                "/spec/containers/0/readinessProbe",
                json!({"tcpSocket": {"port": "http"}}),
            ),
            probe(
                "/spec/containers/0/startupProbe",
                json!({"httpGet": {"port": "http", "path": "/"}}),
            ),
            probe(
                "/spec/containers/0/livenessProbe",
                json!({"httpGet": {"port": 80, "path": "/"}}),
            ),
            probe(
                "/spec/containers/0/lifecycle",
                json!({"postStart": {"httpGet": {"port": "http", "path": "/"}}, "preStop": {"exec": {"command": ["true"]}}}),
            ),
        ],
        vec![sidecar(json!({"tcpSocket": {"port": 80}}))],
        vec![fields(
            json!({"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}),
        )],
        fqdn("subdomain-of-16c"),
        vec![
            ("/spec/setHostnameAsFQDN", json!(true)),
            ("/spec/hostname", json!("h".repeat(42))),
        ],
    ]);
    let allowing = ValidationPolicy {
        label_allowlist: vec!["*".into(), "kubernetes.io/os".into()],
        ..policy()
    };
    let labelled = |os: &str| {
        validate(
            &edited(&[("/metadata/labels/kubernetes.io~1os", json!(os))]),
            &[tcp(80)],
            &stack_id(),
            &allowing,
        )
    };
    assert_eq!(
        labelled("windows").unwrap_err().path,
        "metadata.labels.kubernetes.io/os"
    );
    assert!(labelled("linux").is_ok());
}
