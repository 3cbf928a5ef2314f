//! Per-pod bounds on how much one manifest may declare (`STACK_MAX_CONTAINERS` and friends):
//! each container costs the node a process, a writable layer and log files, whatever its
//! resources say. Checked before the per-item rules, so a huge list is refused at once.

use k8s_openapi::api::core::v1::PodSpec;
use serde_json::Value;

use super::{Rejection, ValidationPolicy};

/// Most labels, and most annotations, on a stack pod (real pods carry a handful; each key costs
/// checks here and in every component that reads the pod).
pub(super) const MAX_METADATA_ENTRIES: usize = 128;

/// The same counts on the parsed manifest, before the typed Pod is built: a manifest with
/// thousands of entries is refused without paying for its schema checks. What is not yet of
/// the expected shape counts as empty here; the schema step reports it.
pub(super) fn check_raw(manifest: &Value, policy: &ValidationPolicy) -> Result<(), Rejection> {
    for field in ["labels", "annotations"] {
        let count = manifest["metadata"][field].as_object().map_or(0, serde_json::Map::len);
        if count > MAX_METADATA_ENTRIES {
            return Err(Rejection::new(
                format!("metadata.{field}"),
                format!("lists {count} {field}, more than the {MAX_METADATA_ENTRIES} a stack may have"),
            ));
        }
    }
    let spec = &manifest["spec"];
    let list = |value: &Value| value.as_array().map_or(0, Vec::len);
    let containers = list(&spec["containers"]);
    let init_containers = list(&spec["initContainers"]);
    let all = || {
        [&spec["containers"], &spec["initContainers"]]
            .into_iter()
            .filter_map(Value::as_array)
            .flatten()
    };
    let env = all().map(|c| list(&c["env"]) + list(&c["envFrom"])).sum();
    let ports = all().map(|c| list(&c["ports"])).sum();
    verdict(
        policy,
        [containers, init_containers, list(&spec["volumes"]), env, ports],
    )
}

pub(super) fn check(spec: &PodSpec, policy: &ValidationPolicy) -> Result<(), Rejection> {
    let all_containers = || spec.containers.iter().chain(spec.init_containers.iter().flatten());
    verdict(
        policy,
        [
            spec.containers.len(),
            spec.init_containers.as_ref().map_or(0, Vec::len),
            spec.volumes.as_ref().map_or(0, Vec::len),
            all_containers()
                .map(|c| c.env.as_ref().map_or(0, Vec::len) + c.env_from.as_ref().map_or(0, Vec::len))
                .sum(),
            all_containers().map(|c| c.ports.as_ref().map_or(0, Vec::len)).sum(),
        ],
    )
}

/// `counts`: containers, init containers, volumes, env entries, ports.
fn verdict(policy: &ValidationPolicy, counts: [usize; 5]) -> Result<(), Rejection> {
    let limits = &policy.pod_limits;
    let [containers, init_containers, volumes, env, ports] = counts;
    let counts = [
        (
            "spec.containers",
            containers,
            limits.containers,
            "containers",
            "STACK_MAX_CONTAINERS",
        ),
        (
            "spec.initContainers",
            init_containers,
            limits.init_containers,
            "init containers",
            "STACK_MAX_INIT_CONTAINERS",
        ),
        ("spec.volumes", volumes, limits.volumes, "volumes", "STACK_MAX_VOLUMES"),
        (
            "spec.containers[*].env",
            env,
            limits.env,
            "env and envFrom entries over all containers",
            "STACK_MAX_ENV",
        ),
        (
            "spec.containers[*].ports",
            ports,
            limits.ports,
            "ports over all containers",
            "STACK_MAX_CONTAINER_PORTS",
        ),
    ];
    match counts.iter().find(|(_, count, max, _, _)| count > max) {
        Some((path, count, max, what, setting)) => Err(Rejection::new(
            *path,
            format!("lists {count} {what}, more than the {max} a stack may have ({setting})"),
        )),
        None => Ok(()),
    }
}
