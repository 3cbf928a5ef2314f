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
    assert!(
        spec.containers
            .iter()
            .all(|c| c.security_context.as_ref().and_then(|s| s.privileged) == Some(false))
    );
    assert!(hardened.requested_cpu_milli > 0 && hardened.requested_memory_bytes > 0);
    let reparsed: k8s_openapi::api::core::v1::Pod = serde_yaml::from_str(&hardened.yaml).expect("output parses");
    assert_eq!(&reparsed, &hardened.pod);
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
