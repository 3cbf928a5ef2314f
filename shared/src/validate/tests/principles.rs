//! Issue 10's principles where a row of `rules.yaml` cannot say it: kubectl's YAML and its
//! tags, per-pod bounds under a smaller policy, and refusals that depend on other settings
//! (the message of an unshared Secret, an allowlisted loopback registry, an allowed OS label).

use serde_json::{Value, json};

use super::{edited, init_container, policy, run, stack_id, tcp};
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

/// The refusal names the reference and the setting that would share it (its rows are in
/// `rules.yaml`).
#[test]
fn an_unshared_secret_is_named_with_the_setting_that_shares_it() {
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

/// Even an allowlist that names it does not let a loopback registry in (the rows refusing
/// such images are in `rules.yaml`).
#[test]
fn an_allowlisted_node_local_registry_is_still_refused() {
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

/// A pod asking for Windows nodes could never run, whatever the label allowlist lets through.
#[test]
fn an_os_label_of_a_node_no_stack_runs_on_is_refused_even_when_labels_are_allowed() {
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
