//! The hardened output: forced settings, replaced fields, resource normalization and totals.

use serde_json::{Value, json};

use super::{base, edited, init_container, policy, run, set, stack_id, tcp};
use crate::model::{ISOLATION_CHECK_CONTAINER, MANAGED_BY_LABEL, Protocol, STACK_ID_LABEL, TargetPort};
use crate::validate::{HardenedPod, ValidationPolicy, validate};

#[test]
fn forced_settings_are_applied() {
    let mut manifest = base();
    set(&mut manifest, "/metadata/namespace", json!("kube-system"));
    set(&mut manifest, "/spec/restartPolicy", json!("Always"));
    set(&mut manifest, "/spec/initContainers", json!([init_container()]));
    let hardened = run(&serde_yaml::to_string(&manifest).unwrap()).unwrap();
    let out = serde_json::to_value(&hardened.pod).unwrap();

    assert_eq!(out["metadata"]["name"], "stack-0123456789abcdef");
    assert_eq!(out["metadata"]["namespace"], "stacks");
    assert_eq!(
        out["metadata"]["labels"],
        json!({"app": "web", MANAGED_BY_LABEL: "stack-provisioner", STACK_ID_LABEL: "stack-0123456789abcdef"})
    );
    let spec = &out["spec"];
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["enableServiceLinks"], false);
    assert_eq!(spec["activeDeadlineSeconds"], 8 * 3600);
    assert_eq!(spec["nodeSelector"], json!({"role": "stack"}));
    assert_eq!(
        spec["securityContext"],
        json!({"seccompProfile": {"type": "RuntimeDefault"}})
    );
    let hardened_container = json!({
        "privileged": false,
        "allowPrivilegeEscalation": false,
        "seccompProfile": {"type": "RuntimeDefault"},
        "capabilities": {"drop": ["NET_RAW"]}
    });
    assert_eq!(spec["containers"][0]["securityContext"], hardened_container);
    assert_eq!(spec["initContainers"][0]["securityContext"], hardened_container);
    // The 1 GiB per-stack budget, shared by the two containers.
    assert_eq!(
        spec["containers"][0]["resources"]["limits"]["ephemeral-storage"],
        "512Mi"
    );
    assert_eq!(
        spec["initContainers"][0]["resources"]["limits"]["ephemeral-storage"],
        "512Mi"
    );
}

/// The base manifest hardened under `policy`.
fn base_under(policy: &ValidationPolicy) -> HardenedPod {
    validate(
        &serde_yaml::to_string(&base()).unwrap(),
        &[tcp(80)],
        &stack_id(),
        policy,
    )
    .unwrap()
}

#[test]
fn the_operators_runtime_class_is_forced_and_none_is_left_alone() {
    let hardened = run(&serde_yaml::to_string(&base()).unwrap()).unwrap();
    let out = serde_json::to_value(&hardened.pod).unwrap();
    assert!(out["spec"].get("runtimeClassName").is_none(), "{}", out["spec"]);
    let sandboxed = ValidationPolicy {
        runtime_class: Some("gvisor".into()),
        ..policy()
    };
    let hardened = base_under(&sandboxed);
    let out = serde_json::to_value(&hardened.pod).unwrap();
    assert_eq!(out["spec"]["runtimeClassName"], "gvisor");
    // The manifest still may not choose one, sandboxed or not.
    for policy in [policy(), sandboxed] {
        let chosen = edited(&[("/spec/runtimeClassName", json!("runc"))]);
        let r = validate(&chosen, &[tcp(80)], &stack_id(), &policy).unwrap_err();
        assert_eq!(r.path, "spec.runtimeClassName");
    }
}

#[test]
fn user_namespaces_are_forced_when_the_operator_says_so() {
    let hardened = run(&serde_yaml::to_string(&base()).unwrap()).unwrap();
    assert_eq!(hardened.pod.spec.unwrap().host_users, None);
    let mapped = ValidationPolicy {
        user_namespaces: true,
        ..policy()
    };
    let hardened = base_under(&mapped);
    assert_eq!(hardened.pod.spec.unwrap().host_users, Some(false));
    // The manifest cannot opt out.
    let opted_out = edited(&[("/spec/hostUsers", json!(true))]);
    let r = validate(&opted_out, &[tcp(80)], &stack_id(), &mapped).unwrap_err();
    assert_eq!(r.path, "spec.hostUsers");
}

#[test]
fn with_the_isolation_check_every_stack_starts_with_it_hardened_like_the_rest() {
    let checked = ValidationPolicy {
        isolation_check_image: Some("registry.example/busybox:1".into()),
        ..policy()
    };
    let manifest = edited(&[(
        "/spec/initContainers",
        json!([{"name": "setup", "image": "busybox", "command": ["true"],
            "resources": {"limits": {"cpu": "100m", "memory": "16Mi"}}}]),
    )]);
    let hardened = validate(&manifest, &[tcp(80)], &stack_id(), &checked).unwrap();
    let inits = hardened.pod.spec.as_ref().unwrap().init_containers.clone().unwrap();
    let names: Vec<&str> = inits.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["stack-isolation-check", "setup"], "first, before the author's");
    let check = serde_json::to_value(&inits[0]).unwrap();
    assert_eq!(check["image"], "registry.example/busybox:1");
    assert_eq!(check["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(check["securityContext"]["capabilities"]["drop"], json!(["NET_RAW"]));
    // Hardening twice adds it once.
    let again = validate(
        &serde_yaml::to_string(&hardened.pod).unwrap(),
        &[tcp(80)],
        &stack_id(),
        &checked,
    );
    if let Ok(again) = again {
        let count = again.pod.spec.unwrap().init_containers.unwrap().len();
        assert_eq!(count, 2);
    }
    // Without an image, no check.
    let plain = validate(&manifest, &[tcp(80)], &stack_id(), &policy()).unwrap();
    assert_eq!(plain.pod.spec.unwrap().init_containers.unwrap().len(), 1);
}

#[test]
fn ephemeral_storage_is_a_per_stack_budget() {
    let container = |name: &str, storage: Option<&str>| {
        let mut c =
            json!({"name": name, "image": "busybox", "resources": {"limits": {"cpu": "100m", "memory": "16Mi"}}});
        if let Some(storage) = storage {
            c["resources"]["limits"]["ephemeral-storage"] = json!(storage);
        }
        c
    };
    let limits = |hardened: &crate::validate::HardenedPod| -> Vec<String> {
        let spec = hardened.pod.spec.as_ref().unwrap();
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .map(|c| {
                c.resources.as_ref().unwrap().limits.as_ref().unwrap()["ephemeral-storage"]
                    .0
                    .clone()
            })
            .collect()
    };
    let rows: Vec<(super::Edits, Vec<&str>)> = vec![
        (vec![], vec!["1Gi"]),
        (
            vec![("/spec/containers/1", container("b", None))],
            vec!["512Mi", "512Mi"],
        ),
        (
            vec![
                ("/spec/containers/1", container("b", Some("768Mi"))),
                ("/spec/initContainers", json!([container("i", None)])),
            ],
            vec!["128Mi", "768Mi", "128Mi"],
        ),
        (
            vec![
                ("/spec/containers/1", container("b", None)),
                ("/spec/containers/2", container("c", None)),
            ],
            vec!["341Mi", "341Mi", "341Mi"],
        ),
    ];
    for (edits, want) in rows {
        let hardened = run(&edited(&edits)).unwrap();
        assert_eq!(limits(&hardened), want, "{edits:?}");
    }
    // 200 containers with 1 GiB each was 200 GiB of node disk; now the total is refused.
    let many: Vec<Value> = (0..3).map(|i| container(&format!("c{i}"), Some("1Gi"))).collect();
    let wide = ValidationPolicy {
        pod_limits: crate::config::PodLimits {
            containers: 300,
            ..crate::config::PodLimits::DEFAULT
        },
        ..policy()
    };
    let r = validate(
        &edited(&[("/spec/initContainers", json!(many))]),
        &[tcp(80)],
        &stack_id(),
        &wide,
    )
    .unwrap_err();
    assert_eq!(r.path, "spec.containers[*].resources");
    assert!(r.problem.contains("per-stack budget of 1Gi"), "{r}");
    let r = run(&edited(&[
        ("/spec/containers/1", container("b", Some("1000Mi"))),
        (
            "/spec/containers/0/resources/requests/ephemeral-storage",
            json!("100Mi"),
        ),
    ]))
    .unwrap_err();
    assert_eq!(r.path, "spec.containers[0].resources.requests.ephemeral-storage");
    let many: Vec<Value> = (0..200).map(|i| container(&format!("c{i}"), None)).collect();
    let hardened = validate(
        &edited(&[("/spec/initContainers", json!(many))]),
        &[tcp(80)],
        &stack_id(),
        &ValidationPolicy {
            pod_limits: crate::config::PodLimits {
                init_containers: 300,
                ..crate::config::PodLimits::DEFAULT
            },
            ..policy()
        },
    )
    .unwrap();
    assert!(limits(&hardened).iter().all(|l| l == "5Mi"), "{:?}", limits(&hardened));
}

#[test]
fn requests_no_node_could_hold_are_refused() {
    let unlimited = ValidationPolicy {
        max_cpu_milli: None,
        max_memory_bytes: None,
        ..policy()
    };
    let check = |edits: &[(&str, Value)]| validate(&edited(edits), &[tcp(80)], &stack_id(), &unlimited);
    assert!(check(&[("/spec/containers/0/resources/limits/cpu", json!("64"))]).is_ok());
    for (pointer, value) in [
        ("/spec/containers/0/resources/limits/cpu", json!("100000")),
        ("/spec/containers/0/resources/limits/memory", json!("100Ti")),
    ] {
        let r = check(&[(pointer, value)]).unwrap_err();
        assert_eq!(r.path, "spec.containers[*].resources");
        assert!(r.problem.contains("more than any node can hold"), "{r}");
    }
}

#[test]
fn cluster_defaults_from_kubectl_get_are_dropped_or_replaced() {
    let hardened = run(&edited(&[
        ("/metadata/uid", json!("0d1f3a52-7e0b-4d8e-9a51-5b1f0c9e2a11")),
        ("/metadata/creationTimestamp", json!("2026-11-20T10:00:00Z")),
        ("/spec/serviceAccountName", json!("default")),
        ("/spec/serviceAccount", json!("default")),
        ("/spec/schedulerName", json!("default-scheduler")),
        ("/spec/priority", json!(0)),
        ("/spec/preemptionPolicy", json!("PreemptLowerPriority")),
        ("/spec/enableServiceLinks", json!(true)),
        ("/spec/securityContext", json!({})),
        ("/spec/containers/0/securityContext", json!({})),
    ]))
    .unwrap();
    let meta = &hardened.pod.metadata;
    assert_eq!((&meta.uid, &meta.creation_timestamp), (&None, &None));
    let spec = hardened.pod.spec.unwrap();
    assert_eq!(
        (spec.service_account_name, spec.scheduler_name, spec.priority),
        (None, None, None)
    );
    assert_eq!(spec.enable_service_links, Some(false));
    assert!(spec.security_context.unwrap().seccomp_profile.is_some());
}

#[test]
fn shorter_deadline_is_kept_longer_is_capped() {
    for (asked, applied) in [(60, 60), (8 * 3600, 8 * 3600), (100 * 3600, 8 * 3600)] {
        let hardened = run(&edited(&[("/spec/activeDeadlineSeconds", json!(asked))])).unwrap();
        assert_eq!(
            hardened.pod.spec.unwrap().active_deadline_seconds,
            Some(applied),
            "{asked}"
        );
    }
}

#[test]
fn metadata_name_is_replaced_not_rejected() {
    let hardened = run(&edited(&[
        ("/metadata/name", json!("anything")),
        ("/metadata/generateName", json!("g-")),
    ]))
    .unwrap();
    assert_eq!(hardened.pod.metadata.name.as_deref(), Some("stack-0123456789abcdef"));
    assert_eq!(hardened.pod.metadata.generate_name, None);
}

#[test]
fn empty_dirs_get_a_capped_size_limit() {
    let volumes = json!([
        {"name": "big", "emptyDir": {"sizeLimit": "5Gi"}},
        {"name": "small", "emptyDir": {"sizeLimit": "100Mi"}},
        {"name": "unset", "emptyDir": {}},
        {"name": "bare"},
        {"name": "cfg", "configMap": {"name": "c"}}
    ]);
    let hardened = run(&edited(&[("/spec/volumes", volumes)])).unwrap();
    let out = serde_json::to_value(hardened.pod.spec.unwrap().volumes.unwrap()).unwrap();
    let sizes: Vec<&Value> = out
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["emptyDir"]["sizeLimit"])
        .collect();
    assert_eq!(
        sizes,
        [
            &json!("1Gi"),
            &json!("100Mi"),
            &json!("1Gi"),
            &json!("1Gi"),
            &Value::Null
        ]
    );
}

#[test]
fn empty_dirs_are_forced_into_memory_when_the_operator_says_so() {
    let volumes = json!([
        {"name": "disk", "emptyDir": {"sizeLimit": "100Mi"}},
        {"name": "memory", "emptyDir": {"medium": "Memory"}},
        {"name": "bare"},
        {"name": "cfg", "configMap": {"name": "c"}}
    ]);
    let manifest = edited(&[("/spec/volumes", volumes)]);
    let media = |policy: &ValidationPolicy| -> Vec<Value> {
        let hardened = validate(&manifest, &[tcp(80)], &stack_id(), policy).unwrap();
        let out = serde_json::to_value(hardened.pod.spec.unwrap().volumes.unwrap()).unwrap();
        out.as_array()
            .unwrap()
            .iter()
            .map(|v| v["emptyDir"]["medium"].clone())
            .collect()
    };
    // By default each keeps the medium it asked for.
    assert_eq!(
        media(&policy()),
        [Value::Null, json!("Memory"), Value::Null, Value::Null]
    );
    let in_memory = ValidationPolicy {
        empty_dirs_in_memory: true,
        ..policy()
    };
    let memory = json!("Memory");
    assert_eq!(media(&in_memory), [memory.clone(), memory.clone(), memory, Value::Null]);
}

#[test]
fn without_cpu_limits_a_container_keeps_its_cpu_as_a_request_and_its_memory_limit() {
    let policy = ValidationPolicy {
        cpu_limits: false,
        isolation_check_image: Some("registry.example/busybox:1".into()),
        ..policy()
    };
    let init = json!({"name": "init", "image": "busybox", "resources": {"limits": {"cpu": "100m", "memory": "16Mi"}}});
    let edits = [
        (
            "/spec/containers/0/resources",
            json!({"limits": {"cpu": "75m", "memory": "32Mi"}}),
        ),
        ("/spec/initContainers", json!([init])),
    ];
    let hardened = validate(&edited(&edits), &[tcp(80)], &stack_id(), &policy).unwrap();
    let spec = serde_json::to_value(hardened.pod.spec.as_ref().unwrap()).unwrap();
    let resources = |path: &str| spec.pointer(path).cloned().unwrap_or_default();
    let challenge = resources("/containers/0/resources");
    assert_eq!(challenge["requests"], json!({"cpu": "75m", "memory": "32Mi"}));
    assert_eq!(challenge["limits"].get("cpu"), None, "{challenge}");
    assert_eq!(challenge["limits"]["memory"], "32Mi");
    // Every container, the isolation check first: a single CPU limit would give the pod a quota.
    for (index, name) in [(0, ISOLATION_CHECK_CONTAINER), (1, "init")] {
        let init = resources(&format!("/initContainers/{index}"));
        assert_eq!(init["name"], name);
        assert!(init["resources"]["requests"]["cpu"].is_string(), "{init}");
        assert_eq!(init["resources"]["limits"].get("cpu"), None, "{init}");
        assert!(init["resources"]["limits"]["memory"].is_string(), "{init}");
    }
    assert_eq!(
        hardened.requested_cpu_milli, 100,
        "the init step's request still counts"
    );
}

#[test]
fn resources_are_normalized_to_the_limit() {
    let rows = [
        (
            json!({"limits": {"cpu": "500m", "memory": "128Mi"}}),
            ("500m", "128Mi"),
            (500, 128 << 20),
        ),
        (
            json!({"requests": {"cpu": "0.25", "memory": "1G"}}),
            ("250m", "1000000000"),
            (250, 1_000_000_000),
        ),
        (
            json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}),
            ("2", "1Gi"),
            (2000, 1 << 30),
        ),
        (
            json!({"requests": {"cpu": "1"}, "limits": {"memory": "1.5Gi"}}),
            ("1", "1536Mi"),
            (1000, 3 << 29),
        ),
    ];
    for (resources, (cpu, memory), (cpu_milli, memory_bytes)) in rows {
        let hardened = run(&edited(&[("/spec/containers/0/resources", resources.clone())])).unwrap();
        let out = serde_json::to_value(&hardened.pod.spec.unwrap().containers[0].resources).unwrap();
        for which in ["requests", "limits"] {
            assert_eq!(out[which]["cpu"], cpu, "{resources} {which}");
            assert_eq!(out[which]["memory"], memory, "{resources} {which}");
        }
        assert_eq!(
            (hardened.requested_cpu_milli, hardened.requested_memory_bytes),
            (cpu_milli, memory_bytes),
            "{resources}"
        );
    }
}

#[test]
fn pod_request_counts_init_containers_and_sidecars_like_kubernetes() {
    let container = |name: &str, cpu: &str, memory: &str, sidecar: bool| {
        let mut c = json!({"name": name, "image": "busybox", "resources": {"limits": {"cpu": cpu, "memory": memory}}});
        if sidecar {
            c["restartPolicy"] = json!("Always");
        }
        c
    };
    let app2 = {
        let mut c = container("app2", "250m", "64Mi", false);
        c["ports"] = json!([{"containerPort": 81}]);
        c
    };
    // Apps: 500m + 250m, 128Mi + 64Mi.
    let rows = [
        (json!([]), (750, 192 << 20)),
        (json!([container("setup", "2", "32Mi", false)]), (2000, 192 << 20)),
        (json!([container("log", "100m", "16Mi", true)]), (850, 208 << 20)),
        // The plain init runs next to the sidecar started before it: 1000m + 100m.
        (
            json!([
                container("log", "100m", "16Mi", true),
                container("setup", "1", "1Mi", false)
            ]),
            (1100, 208 << 20),
        ),
        (
            json!([
                container("setup", "1", "1Mi", false),
                container("log", "100m", "16Mi", true)
            ]),
            (1000, 208 << 20),
        ),
    ];
    for (init, (cpu, memory)) in rows {
        let hardened = run(&edited(&[
            ("/spec/containers/1", app2.clone()),
            ("/spec/initContainers", init.clone()),
        ]))
        .unwrap();
        assert_eq!(
            (hardened.requested_cpu_milli, hardened.requested_memory_bytes),
            (cpu, memory),
            "{init}"
        );
    }
}

#[test]
fn per_stack_ceilings_apply_to_the_total() {
    let second = json!({"name": "b", "image": "busybox", "resources": {"limits": {"cpu": "4", "memory": "1Gi"}}});
    let yaml = edited(&[("/spec/containers/1", second)]);
    let r = run(&yaml).unwrap_err();
    assert_eq!(
        r.to_string(),
        "spec.containers[*].resources request 4500m of cpu in total, above the per-stack maximum of 4"
    );
    let unlimited = ValidationPolicy {
        max_cpu_milli: None,
        ..policy()
    };
    assert_eq!(
        validate(&yaml, &[tcp(80)], &stack_id(), &unlimited)
            .unwrap()
            .requested_cpu_milli,
        4500
    );
}

#[test]
fn image_allowlist_applies_to_every_container() {
    let allowlist = ValidationPolicy {
        image_allowlist: vec!["registry.example.com/ctf/".into()],
        ..policy()
    };
    let check = |edits: &[(&str, Value)]| validate(&edited(edits), &[tcp(80)], &stack_id(), &allowlist);
    let r = check(&[]).unwrap_err();
    assert_eq!(r.path, "spec.containers[0].image");
    assert!(r.problem.contains("not from an allowed registry"), "{r}");
    let allowed = ("/spec/containers/0/image", json!("registry.example.com/ctf/web:1"));
    assert!(check(std::slice::from_ref(&allowed)).is_ok());
    for evil in [
        "registry.example.com/ctf-evil/web",
        "registry.example.com.evil.io/ctf/web",
    ] {
        assert_eq!(
            check(&[("/spec/containers/0/image", json!(evil))]).unwrap_err().path,
            "spec.containers[0].image",
            "{evil}"
        );
    }
    let mut init = init_container();
    init["image"] = json!("busybox");
    assert_eq!(
        check(&[allowed, ("/spec/initContainers", json!([init]))])
            .unwrap_err()
            .path,
        "spec.initContainers[0].image"
    );
}

#[test]
fn target_ports_are_checked_first_and_against_regular_containers() {
    let yaml = edited(&[]);
    let r = validate(&yaml, &[], &stack_id(), &policy()).unwrap_err();
    assert_eq!(r.to_string(), "target_port must list 1 to 24 ports");
    let udp = TargetPort {
        container_port: 80,
        protocol: Protocol::Udp,
    };
    let r = validate(&yaml, &[tcp(80), udp], &stack_id(), &policy()).unwrap_err();
    assert_eq!(
        r.to_string(),
        "target_port[1] 80/UDP is not a containerPort of any container"
    );
}

#[test]
fn a_target_port_without_a_probe_is_probed_and_a_declared_probe_kept() {
    let hardened = run(&serde_yaml::to_string(&base()).unwrap()).unwrap();
    let out = serde_json::to_value(&hardened.pod).unwrap();
    assert_eq!(
        out["spec"]["containers"][0]["readinessProbe"],
        json!({"tcpSocket": {"port": 80}, "periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 10})
    );
    let mut manifest = base();
    let own = json!({"httpGet": {"path": "/health", "port": 80}, "periodSeconds": 1});
    set(&mut manifest, "/spec/containers/0/readinessProbe", own.clone());
    let hardened = run(&serde_yaml::to_string(&manifest).unwrap()).unwrap();
    let out = serde_json::to_value(&hardened.pod).unwrap();
    assert_eq!(out["spec"]["containers"][0]["readinessProbe"], own);
}

#[test]
fn yaml_level_hostility_is_rejected_through_validate() {
    let rows = [
        ("", "manifest"),
        ("just a string", "manifest"),
        (
            "apiVersion: v1\nkind: Pod\n---\napiVersion: v1\nkind: Pod\n",
            "manifest",
        ),
        ("apiVersion: v1\nkind: Pod\nkind: Pod\n", "manifest"),
        (
            "apiVersion: v1\nkind: Pod\nmetadata:\n  labels:\n    a: x\n    a: y\n",
            "metadata.labels",
        ),
        ("apiVersion: v1\nkind: Pod\nspec: [unclosed\n", "manifest"),
    ];
    for (yaml, path) in rows {
        assert_eq!(run(yaml).unwrap_err().path, path, "{yaml:?}");
    }
    let small = ValidationPolicy {
        max_manifest_bytes: 64,
        ..policy()
    };
    let r = validate(&edited(&[]), &[tcp(80)], &stack_id(), &small).unwrap_err();
    assert_eq!(r.to_string(), "manifest is larger than 64 bytes");
}

/// The contract's example (`spec.containers[0].securityContext is forbidden`) names the
/// context; since a context may harden the stack, the refusal names the field within it.
#[test]
fn contract_example_message() {
    let r = run(&edited(&[(
        "/spec/containers/0/securityContext",
        json!({"privileged": true}),
    )]))
    .unwrap_err();
    assert!(
        r.to_string()
            .starts_with("spec.containers[0].securityContext.privileged is forbidden"),
        "{r}"
    );
}
