//! Per-pod bounds on how much one manifest may declare (`STACK_MAX_CONTAINERS` and friends):
//! each container costs the node a process, a writable layer and log files, whatever its
//! resources say. Checked before the per-item rules, so a huge list is refused at once.

use k8s_openapi::api::core::v1::PodSpec;

use super::{Rejection, ValidationPolicy};

pub fn check(spec: &PodSpec, policy: &ValidationPolicy) -> Result<(), Rejection> {
    let limits = &policy.pod_limits;
    let all_containers = || spec.containers.iter().chain(spec.init_containers.iter().flatten());
    let counts = [
        (
            "spec.containers",
            spec.containers.len(),
            limits.containers,
            "containers",
            "STACK_MAX_CONTAINERS",
        ),
        (
            "spec.initContainers",
            spec.init_containers.as_ref().map_or(0, Vec::len),
            limits.init_containers,
            "init containers",
            "STACK_MAX_INIT_CONTAINERS",
        ),
        (
            "spec.volumes",
            spec.volumes.as_ref().map_or(0, Vec::len),
            limits.volumes,
            "volumes",
            "STACK_MAX_VOLUMES",
        ),
        (
            "spec.containers[*].env",
            all_containers()
                .map(|c| c.env.as_ref().map_or(0, Vec::len) + c.env_from.as_ref().map_or(0, Vec::len))
                .sum(),
            limits.env,
            "env and envFrom entries over all containers",
            "STACK_MAX_ENV",
        ),
        (
            "spec.containers[*].ports",
            all_containers().map(|c| c.ports.as_ref().map_or(0, Vec::len)).sum(),
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
