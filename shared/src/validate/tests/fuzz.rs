//! Property tests: arbitrary and hostile input never panics, and whatever is accepted comes
//! out hardened and round-trips.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::{base, policy, set, stack_id, tcp, without_forced_fields};
use crate::validate::{HardenedPod, validate};

/// Keys a Pod manifest uses, so random structures reach deep into the schema.
const KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "spec",
    "status",
    "name",
    "labels",
    "annotations",
    "containers",
    "initContainers",
    "image",
    "ports",
    "containerPort",
    "hostPort",
    "protocol",
    "resources",
    "limits",
    "requests",
    "cpu",
    "memory",
    "ephemeral-storage",
    "securityContext",
    "privileged",
    "volumes",
    "emptyDir",
    "sizeLimit",
    "hostPath",
    "path",
    "volumeMounts",
    "mountPath",
    "subPath",
    "nodeSelector",
    "role",
    "tolerations",
    "key",
    "effect",
    "affinity",
    "restartPolicy",
    "hostNetwork",
    "projected",
    "sources",
    "configMap",
    "env",
    "value",
    "<<",
    "secret",
    "secretName",
    "envFrom",
    "secretRef",
    "valueFrom",
    "secretKeyRef",
    "imagePullSecrets",
    "defaultMode",
    "livenessProbe",
    "periodSeconds",
    "terminationGracePeriodSeconds",
    "lifecycle",
    "preStop",
    "sleep",
    "seconds",
    "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
    "matchExpressions",
    "operator",
    "values",
];

const POINTERS: &[&str] = &[
    "/metadata/labels/x",
    "/metadata/name",
    "/spec/containers/0/resources/limits/cpu",
    "/spec/containers/0/resources/limits/memory",
    "/spec/containers/0/ports/0/containerPort",
    "/spec/containers/0/image",
    "/spec/volumes",
    "/spec/volumes/0/emptyDir/sizeLimit",
    "/spec/tolerations",
    "/spec/nodeSelector",
    "/spec/containers/1",
    "/spec/initContainers",
    "/spec/activeDeadlineSeconds",
    "/spec/containers/0/volumeMounts",
    "/spec/containers/0/env",
    "/spec/containers/0/name",
    "/spec/containers/0/envFrom",
    "/spec/imagePullSecrets",
    "/spec/containers/0/livenessProbe",
    "/spec/affinity",
    "/metadata/annotations",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[a-zA-Z0-9./:_-]{0,12}".prop_map(Value::String),
        prop::sample::select(vec![
            "500m", "0.5", "1Gi", "1e3", "-1", "0", "9Ei", "1.5", "role", "stack", "TCP", "UDP"
        ])
        .prop_map(|s| json!(s)),
    ]
}

fn nested() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![prop::sample::select(KEYS).prop_map(str::to_owned), "[a-z]{1,6}"],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Edits that are mostly valid, so that accepted manifests are common.
fn plausible_edit() -> impl Strategy<Value = (&'static str, Value)> {
    prop_oneof![
        "[a-z0-9]{1,10}".prop_map(|v| ("/metadata/labels/team", json!(v))),
        "[a-z][a-z0-9-]{0,20}".prop_map(|v| ("/metadata/name", json!(v))),
        (1i64..4000).prop_map(|m| ("/spec/containers/0/resources/limits/cpu", json!(format!("{m}m")))),
        (1i64..8192).prop_map(|mi| ("/spec/containers/0/resources/requests/memory", json!(format!("{mi}Mi")))),
        (1i64..100_000).prop_map(|s| ("/spec/activeDeadlineSeconds", json!(s))),
        (0i64..=30).prop_map(|s| ("/spec/terminationGracePeriodSeconds", json!(s))),
        (1u16..=65535).prop_map(|p| (
            "/spec/containers/0/ports/1",
            json!({"containerPort": p, "protocol": "UDP"})
        )),
        Just(("/spec/nodeSelector", json!({"role": "stack"}))),
        (1i64..4096).prop_map(|mi| (
            "/spec/volumes",
            json!([{"name": "scratch", "emptyDir": {"sizeLimit": format!("{mi}Mi")}}])
        )),
        "[A-Z_]{1,8}".prop_map(|n| ("/spec/containers/0/env", json!([{"name": n, "value": "x"}]))),
        any::<bool>().prop_map(|b| ("/spec/shareProcessNamespace", json!(b))),
        prop::sample::select(vec!["flag", "s", "registry-creds", "db"]).prop_map(|name| (
            "/spec/volumes",
            json!([{"name": "sec", "secret": {"secretName": name}}])
        )),
        prop::sample::select(vec!["cfg", "web-cfg", "aws-auth", "kube-root-ca.crt"])
            .prop_map(|name| ("/spec/containers/0/envFrom", json!([{"configMapRef": {"name": name}}]))),
        prop::sample::select(vec!["pull", "flag", "regcred"])
            .prop_map(|name| ("/spec/imagePullSecrets", json!([{"name": name}]))),
        prop::sample::select(vec![
            "description",
            "author",
            "app.kubernetes.io/name",
            "iam.amazonaws.com/role",
            "k8s.v1.cni.cncf.io/networks",
            "karpenter.sh/do-not-disrupt",
            "example.com/x"
        ])
        .prop_map(|key| ("/metadata/annotations", json!({key: "v"}))),
        (
            prop::sample::select(vec![
                "initialDelaySeconds",
                "periodSeconds",
                "timeoutSeconds",
                "failureThreshold",
                "terminationGracePeriodSeconds"
            ]),
            -10i64..100_000
        )
            .prop_map(|(field, value)| (
                "/spec/containers/0/livenessProbe",
                json!({"tcpSocket": {"port": 80}, field: value})
            )),
        (-10i64..100).prop_map(|secs| (
            "/spec/containers/0/lifecycle",
            json!({"preStop": {"sleep": {"seconds": secs}}})
        )),
        prop::sample::select(vec![
            "localhost:5000/x",
            "127.1/x",
            "169.254.169.254/x",
            "[::1]/x",
            "registry.example.com/ctf/x",
            "nginx"
        ])
        .prop_map(|image| ("/spec/containers/0/image", json!(image))),
        (
            prop::sample::select(vec!["In", "NotIn", "Exists", "DoesNotExist"]),
            prop::sample::select(vec!["stack", "gpu"])
        )
            .prop_map(|(operator, value)| {
                let mut expression = json!({"key": "role", "operator": operator});
                if matches!(operator, "In" | "NotIn") {
                    expression["values"] = json!([value]);
                }
                (
                    "/spec/affinity",
                    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}}}),
                )
            }),
        // Security contexts, tightening or not, at both levels.
        (
            prop::sample::select(vec![
                "runAsNonRoot",
                "runAsUser",
                "readOnlyRootFilesystem",
                "allowPrivilegeEscalation",
                "privileged",
                "capabilities",
                "seccompProfile",
            ]),
            prop::sample::select(vec![
                json!(true),
                json!(false),
                json!(0),
                json!(1000),
                json!({"drop": ["ALL"], "add": ["CHOWN"]}),
                json!({"add": ["NET_RAW", "SYS_ADMIN"]}),
                json!({"drop": ["SYS_PTRACE"]}),
                json!({"type": "RuntimeDefault"}),
                json!({"type": "Unconfined"}),
            ]),
            any::<bool>(),
        )
            .prop_map(|(field, value, pod_level)| {
                let pointer = if pod_level {
                    "/spec/securityContext"
                } else {
                    "/spec/containers/0/securityContext"
                };
                (pointer, json!({field: value}))
            }),
        (0usize..12).prop_map(|n| (
            "/spec/initContainers",
            Value::Array(
                (0..n)
                    .map(|i| json!({"name": format!("i{i}"), "image": "busybox",
                "resources": {"limits": {"cpu": "10m", "memory": "8Mi"}}}))
                    .collect()
            )
        )),
    ]
}

fn any_edit() -> impl Strategy<Value = (&'static str, Value)> {
    prop_oneof![3 => plausible_edit(), 1 => (prop::sample::select(POINTERS), nested())]
}

/// What must hold for every accepted manifest.
fn assert_hardened(hardened: &HardenedPod) {
    let spec = hardened.pod.spec.as_ref().expect("spec");
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec.automount_service_account_token, Some(false));
    let runtime_default = |p: Option<&k8s_openapi::api::core::v1::SeccompProfile>| {
        p.is_some_and(|p| p.type_ == "RuntimeDefault" && p.localhost_profile.is_none())
    };
    let pod_context = spec.security_context.as_ref().expect("pod securityContext");
    assert!(runtime_default(pod_context.seccomp_profile.as_ref()));
    assert!(pod_context.run_as_user != Some(0) && pod_context.run_as_non_root != Some(false));
    for c in spec.containers.iter().chain(spec.init_containers.iter().flatten()) {
        let context = c.security_context.as_ref().expect("container securityContext");
        assert_eq!(context.privileged, Some(false));
        assert_eq!(context.allow_privilege_escalation, Some(false));
        assert!(runtime_default(context.seccomp_profile.as_ref()));
        assert!(context.run_as_user != Some(0) && context.run_as_non_root != Some(false));
        let caps = context.capabilities.as_ref().expect("capabilities");
        assert!(caps.drop.iter().flatten().any(|d| d == "NET_RAW"));
        let add_back = &policy().add_back_capabilities;
        assert!(caps.add.iter().flatten().all(|a| add_back.contains(a)));
    }
    assert!(hardened.requested_cpu_milli > 0 && hardened.requested_memory_bytes > 0);
    assert_within_issue_10_rules(hardened);
    let reparsed: k8s_openapi::api::core::v1::Pod = serde_yaml::from_str(&hardened.yaml).expect("output parses");
    assert_eq!(&reparsed, &hardened.pod);
}

/// Issue 10's rules, checked on the output rather than re-derived from the input.
fn assert_within_issue_10_rules(hardened: &HardenedPod) {
    let policy = policy();
    let spec = hardened.pod.spec.as_ref().expect("spec");
    let all: Vec<&k8s_openapi::api::core::v1::Container> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .collect();
    let limits = policy.pod_limits;
    assert!(spec.containers.len() <= limits.containers);
    assert!(spec.init_containers.as_ref().map_or(0, Vec::len) <= limits.init_containers);
    assert!(spec.volumes.as_ref().map_or(0, Vec::len) <= limits.volumes);
    let storage: i64 = all
        .iter()
        .map(|c| {
            let quantity = &c.resources.as_ref().unwrap().limits.as_ref().unwrap()["ephemeral-storage"];
            crate::quantity::parse_bytes(&quantity.0).expect("bytes")
        })
        .sum();
    assert!(storage <= policy.ephemeral_storage_limit, "{storage}");
    let shared_secret = |name: &str| policy.shared_secrets.iter().any(|s| s == name);
    let shared_map = |name: &str| policy.shared_config_maps.iter().any(|s| s == name);
    for volume in spec.volumes.iter().flatten() {
        if let Some(secret) = &volume.secret {
            assert!(shared_secret(secret.secret_name.as_deref().unwrap_or_default()));
        }
        if let Some(map) = &volume.config_map {
            assert!(shared_map(&map.name));
        }
    }
    for c in &all {
        for from in c.env_from.iter().flatten() {
            assert!(from.config_map_ref.as_ref().is_none_or(|r| shared_map(&r.name)));
            assert!(from.secret_ref.as_ref().is_none_or(|r| shared_secret(&r.name)));
        }
        let image = c.image.as_deref().unwrap_or_default();
        if let Some((registry, _)) = image.split_once('/') {
            let local = ["localhost", "127.", "169.254.", "[::1]"]
                .iter()
                .any(|p| registry.to_ascii_lowercase().starts_with(p));
            assert!(
                !local || !(registry.contains(['.', ':']) || registry.eq_ignore_ascii_case("localhost")),
                "{image}"
            );
        }
        for probe in [&c.liveness_probe, &c.readiness_probe, &c.startup_probe]
            .into_iter()
            .flatten()
        {
            for seconds in [probe.initial_delay_seconds, probe.period_seconds, probe.timeout_seconds]
                .into_iter()
                .flatten()
            {
                assert!((0..=3600).contains(&seconds));
            }
            assert!(
                probe
                    .termination_grace_period_seconds
                    .is_none_or(|s| (1..=30).contains(&s))
            );
        }
        let sleep = c
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|h| h.sleep.as_ref());
        assert!(sleep.is_none_or(|s| (0..=30).contains(&s.seconds)));
    }
    for pull in spec.image_pull_secrets.iter().flatten() {
        assert!(policy.image_pull_secrets.contains(&pull.name));
    }
    for key in hardened.pod.metadata.annotations.iter().flat_map(|a| a.keys()) {
        assert!(
            !key.contains('/') || key.starts_with("app.kubernetes.io/") || key.starts_with("kubectl.kubernetes.io/"),
            "{key}"
        );
    }
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref());
    for term in terms.iter().flat_map(|t| t.node_selector_terms.iter()) {
        // Generated terms have one role expression: accepted only if a stack node matches it.
        for e in term.match_expressions.iter().flatten().filter(|e| e.key == "role") {
            let listed = e.values.iter().flatten().any(|v| v == "stack");
            let matches = match e.operator.as_str() {
                "In" => listed,
                "NotIn" => !listed,
                "Exists" => true,
                _ => false,
            };
            assert!(matches, "{e:?}");
        }
    }
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = validate(&text, &[tcp(80)], &stack_id(), &policy());
    }

    #[test]
    fn yaml_punctuation_soup_never_panics(text in "[-:?,\\[\\]{}&*!|>'\"#%@` \\\\a-z0-9\n\t]{0,300}") {
        let _ = validate(&text, &[tcp(80)], &stack_id(), &policy());
    }

    #[test]
    fn random_structures_never_panic(value in nested()) {
        let yaml = serde_yaml::to_string(&value).expect("yaml");
        if let Ok(hardened) = validate(&yaml, &[tcp(80)], &stack_id(), &policy()) {
            assert_hardened(&hardened);
        }
    }

    #[test]
    fn random_edits_of_a_valid_pod_are_hardened_or_rejected(
        edits in prop::collection::vec(any_edit(), 1..4)
    ) {
        let mut manifest = base();
        for (pointer, value) in edits {
            // Edits into a scalar are skipped; a panic here would be the test's own.
            let mut candidate = manifest.clone();
            if std::panic::catch_unwind(move || { set(&mut candidate, pointer, value); candidate }).map(|c| manifest = c).is_err() {
                continue;
            }
        }
        let yaml = serde_yaml::to_string(&manifest).expect("yaml");
        if let Ok(hardened) = validate(&yaml, &[tcp(80)], &stack_id(), &policy()) {
            assert_hardened(&hardened);
            let again = validate(&without_forced_fields(&hardened.pod), &[tcp(80)], &stack_id(), &policy());
            prop_assert_eq!(again, Ok(hardened));
        }
    }

    #[test]
    fn octal_modes_in_plain_yaml_are_read_as_kubectl_reads_them(mode in 0u32..=0o777, quoted in any::<bool>()) {
        let text = if quoted { format!("'0{mode:o}'") } else { format!("0{mode:o}") };
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: busybox\n    ports: [{{containerPort: 80}}]\n    resources: {{limits: {{cpu: 1, memory: 1Gi}}}}\n  volumes:\n  - name: s\n    configMap: {{name: cfg, defaultMode: {text}}}\n"
        );
        let got = validate(&yaml, &[tcp(80)], &stack_id(), &policy());
        if quoted {
            // A string, as kubectl reads it too: refused at the field.
            prop_assert_eq!(got.unwrap_err().path, "spec.volumes[0].configMap.defaultMode");
        } else {
            let volumes = got.unwrap().pod.spec.unwrap().volumes.unwrap();
            prop_assert_eq!(volumes[0].config_map.as_ref().unwrap().default_mode, Some(mode as i32));
        }
    }

    #[test]
    fn accepted_resources_are_summed(cpus in prop::collection::vec(1i64..4000, 1..4), mems in prop::collection::vec(1i64..(1 << 30), 4)) {
        let mut manifest = base();
        let containers: Vec<Value> = cpus.iter().zip(&mems).enumerate().map(|(i, (cpu, mem))| json!({
            "name": format!("c{i}"),
            "image": "busybox",
            "ports": [{"containerPort": 80 + i}],
            "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": mem.to_string()}}
        })).collect();
        set(&mut manifest, "/spec/containers", Value::Array(containers));
        let unlimited = crate::validate::ValidationPolicy { max_cpu_milli: None, max_memory_bytes: None, ..policy() };
        let hardened = validate(&serde_yaml::to_string(&manifest).unwrap(), &[tcp(80)], &stack_id(), &unlimited).unwrap();
        prop_assert_eq!(hardened.requested_cpu_milli, cpus.iter().sum::<i64>());
        prop_assert_eq!(hardened.requested_memory_bytes, mems.iter().take(cpus.len()).sum::<i64>());
    }
}
