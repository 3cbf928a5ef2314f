//! End-to-end tests of `validate` and the helpers they share: `rules` runs `rules.yaml`, one
//! row per rule (accepted and rejected, asserting the field path of every rejection),
//! `principles` what a row cannot say, `corpus` the manifests authors write, `output` the
//! forced settings and resource accounting, `hardening` what authors and the operator add to
//! the forced settings, `round_trip` what accepted output satisfies,
//! `fuzz` the property tests and `bench` the timings.

mod bench;
mod corpus;
mod fuzz;
mod hardening;
mod output;
mod principles;
mod round_trip;
mod rules;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::*;
use crate::model::{MANAGED_BY_LABEL, Protocol, STACK_ID_LABEL};

pub(super) fn policy() -> ValidationPolicy {
    ValidationPolicy {
        namespace: "stacks".into(),
        node_role: "stack".into(),
        max_lifetime_secs: 8 * 3600,
        max_cpu_milli: Some(4000),
        max_memory_bytes: Some(8 << 30),
        cpu_limits: true,
        ephemeral_storage_limit: 1 << 30,
        image_allowlist: Vec::new(),
        runtime_class: None,
        user_namespaces: false,
        empty_dirs_in_memory: false,
        isolation_check_image: None,
        drop_capabilities: crate::config::DropCapabilities::NetRaw,
        add_back_capabilities: strings(crate::config::BASELINE_CAPABILITIES),
        node_taint: None,
        shared_config_maps: strings(&["cfg", "c", "web-cfg", "scripts"]),
        shared_secrets: strings(&["flag", "s"]),
        image_pull_secrets: strings(&["pull"]),
        label_allowlist: strings(crate::config::DEFAULT_LABEL_ALLOWLIST),
        annotation_allowlist: strings(crate::config::DEFAULT_ANNOTATION_ALLOWLIST),
        pod_limits: crate::config::PodLimits::DEFAULT,
        max_manifest_bytes: ValidationPolicy::DEFAULT_MAX_MANIFEST_BYTES,
    }
}

/// JSON-pointer edits of [`base`].
pub(super) type Edits<'a> = Vec<(&'a str, Value)>;

pub(super) fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

pub(super) fn stack_id() -> StackId {
    "stack-0123456789abcdef".parse().expect("valid id")
}

pub(super) fn tcp(port: u16) -> TargetPort {
    TargetPort {
        container_port: port,
        protocol: Protocol::Tcp,
    }
}

/// A small valid manifest every row edits.
pub(super) fn base() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "containers": [{
                "name": "web",
                "image": "nginx:1.27",
                "ports": [{"containerPort": 80}],
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}
            }]
        }
    })
}

pub(super) fn init_container() -> Value {
    json!({"name": "init", "image": "busybox", "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}}})
}

/// Sets the JSON-pointer `pointer` (`~1` for `/` in keys), creating objects on the way; an
/// index one past the end of a list appends.
pub(super) fn set(root: &mut Value, pointer: &str, value: Value) {
    let mut parts: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    let last = parts.pop().expect("non-empty pointer");
    let mut node = root;
    for part in parts {
        node = child(node, &part);
    }
    match node {
        Value::Array(items) => {
            let index: usize = last.parse().expect("list index");
            if index < items.len() {
                items[index] = value
            } else {
                items.push(value)
            }
        }
        Value::Object(map) => {
            map.insert(last, value);
        }
        other => panic!("cannot set {pointer} inside {other}"),
    }
}

fn child<'v>(node: &'v mut Value, part: &str) -> &'v mut Value {
    if node.is_null() {
        *node = json!({});
    }
    match node {
        Value::Array(items) => {
            let index: usize = part.parse().expect("list index");
            if index == items.len() {
                items.push(json!({}));
            }
            &mut items[index]
        }
        Value::Object(map) => map.entry(part.to_owned()).or_insert_with(|| json!({})),
        other => panic!("cannot descend into {other}"),
    }
}

pub(super) fn edited(edits: &[(&str, Value)]) -> String {
    let mut manifest = base();
    for (pointer, value) in edits {
        set(&mut manifest, pointer, value.clone());
    }
    serde_yaml::to_string(&manifest).expect("yaml")
}

pub(super) fn run(yaml: &str) -> Result<HardenedPod, Rejection> {
    validate(yaml, &[tcp(80)], &stack_id(), &policy())
}

/// Strips what `validate` adds and input may not carry: our labels. (The forced security
/// contexts are acceptable input: they only tighten.)
pub(super) fn without_forced_fields(pod: &Pod) -> String {
    let mut pod = pod.clone();
    if let Some(labels) = &mut pod.metadata.labels {
        labels.remove(MANAGED_BY_LABEL);
        labels.remove(STACK_ID_LABEL);
    }
    serde_yaml::to_string(&pod).expect("yaml")
}
