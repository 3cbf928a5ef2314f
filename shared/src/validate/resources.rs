//! CPU, memory and ephemeral storage of every container.
//!
//! Each container must give CPU and memory (in requests or limits). Both are normalized to
//! requests = limits = the limit when given, else the request: the stack reserves what it may
//! use (Guaranteed QoS), so nodes are never overcommitted. A request above its limit is refused.
//! With `STACK_CPU_LIMITS=false` CPU stays a request only: no CFS quota, so a stack starts at
//! the node's idle speed (runc's init needs ~60 ms of CPU, over a second under a 50m quota) and
//! may use idle CPU, while a busy node still shares itself by requests (Burstable QoS).
//! The pod's effective request follows Kubernetes: max(sum of app containers and sidecars, the
//! largest init step), and is refused (400, not a pending pod and a 503 later) above the
//! configured per-stack ceilings or above what any node could hold.
//!
//! Ephemeral storage is a per-stack budget (`STACK_EPHEMERAL_STORAGE_LIMIT`): every container
//! gets a limit, and the limits of all containers (init containers included: their writable
//! layers stay on the node) add up to at most the budget. Containers that set a limit keep it;
//! the others share what is left evenly (whole MiB). The kubelet evicts a pod whose disk use
//! (writable layers, logs, disk emptyDirs) passes the sum of its limits.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::rejection::{ContainerPath, forbid_if};
use super::{Rejection, ValidationPolicy};
use crate::quantity::{QuantityError, format_bytes, format_cpu_milli, parse_bytes, parse_cpu_milli};

const CPU: &str = "cpu";
const MEMORY: &str = "memory";
const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// CPU no node could ever offer a pod (the largest EC2 instances have 448 vCPUs).
pub(super) const MAX_NODE_CPU_MILLI: i64 = 512_000;
/// Memory no node could ever offer a pod (the largest EC2 instances have 24 TiB).
pub(super) const MAX_NODE_MEMORY_BYTES: i64 = 32 << 40;

const MIB: i64 = 1 << 20;

/// What the pod reserves on its node, as the scheduler counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct StackResources {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
}

/// Checks every container's resources, rewrites them in normalized form and returns the pod's
/// effective request, refused when above the policy's per-stack ceilings.
pub(super) fn normalize(spec: &mut PodSpec, policy: &ValidationPolicy) -> Result<StackResources, Rejection> {
    let mut storage = plan_storage(spec, policy)?.into_iter();
    let mut next_share = || storage.next().unwrap_or(policy.ephemeral_storage_limit);
    let cpu_limit = policy.cpu_limits;
    let mut apps = StackResources::default();
    for (index, container) in spec.containers.iter_mut().enumerate() {
        let own = normalize_container(container, ContainerPath { init: false, index }, next_share(), cpu_limit)?;
        apps = add(apps, own)?;
    }
    let mut sidecars = StackResources::default();
    let mut init_peak = StackResources::default();
    for (index, container) in spec.init_containers.iter_mut().flatten().enumerate() {
        let own = normalize_container(container, ContainerPath { init: true, index }, next_share(), cpu_limit)?;
        // A sidecar keeps running next to everything started after it; a plain init
        // container runs alone with the sidecars started before it.
        let step = if container.restart_policy.as_deref() == Some("Always") {
            sidecars = add(sidecars, own)?;
            apps = add(apps, own)?;
            sidecars
        } else {
            add(own, sidecars)?
        };
        init_peak = max(init_peak, step);
    }
    let total = max(apps, init_peak);
    check_ceiling(total.cpu_milli, policy.max_cpu_milli, "cpu", format_cpu_milli)?;
    check_ceiling(total.memory_bytes, policy.max_memory_bytes, "memory", format_bytes)?;
    check_node_cap(total.cpu_milli, MAX_NODE_CPU_MILLI, "cpu", format_cpu_milli)?;
    check_node_cap(total.memory_bytes, MAX_NODE_MEMORY_BYTES, "memory", format_bytes)?;
    Ok(total)
}

/// Each container's ephemeral-storage limit, app containers then init containers.
fn plan_storage(spec: &PodSpec, policy: &ValidationPolicy) -> Result<Vec<i64>, Rejection> {
    let budget = policy.ephemeral_storage_limit;
    let apps = spec.containers.iter().enumerate().map(|(index, c)| (c, false, index));
    let inits = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(index, c)| (c, true, index));
    let mut asked = Vec::new();
    for (container, init, index) in apps.chain(inits) {
        let at = ContainerPath { init, index };
        let limit = match container.resources.as_ref().and_then(|r| r.limits.as_ref()) {
            Some(limits) => read(limits, EPHEMERAL_STORAGE, "limits", at, parse_bytes)?,
            None => None,
        };
        if limit.is_some_and(|bytes| bytes > budget) {
            return Err(Rejection::new(
                at.field(&format!("resources.limits.{EPHEMERAL_STORAGE}")),
                format!("must not exceed {}", format_bytes(budget)),
            ));
        }
        asked.push(limit);
    }
    let explicit = asked
        .iter()
        .flatten()
        .try_fold(0i64, |sum, bytes| sum.checked_add(*bytes));
    let left = explicit
        .and_then(|sum| budget.checked_sub(sum))
        .filter(|left| *left >= 0);
    let unlimited = asked.iter().filter(|limit| limit.is_none()).count() as i64;
    let share = left.map(|left| if unlimited == 0 { left } else { left / unlimited });
    let share = share.map(|share| if share >= MIB { share / MIB * MIB } else { share });
    match share {
        Some(share) if unlimited == 0 || share > 0 => {
            Ok(asked.into_iter().map(|limit| limit.unwrap_or(share)).collect())
        }
        _ => Err(Rejection::new(
            "spec.containers[*].resources",
            format!(
                "ask more {EPHEMERAL_STORAGE} in total than the per-stack budget of {} leaves every container (STACK_EPHEMERAL_STORAGE_LIMIT)",
                format_bytes(budget)
            ),
        )),
    }
}

fn normalize_container(
    container: &mut Container,
    at: ContainerPath,
    storage_limit: i64,
    cpu_limit: bool,
) -> Result<StackResources, Rejection> {
    let ResourceRequirements {
        claims,
        limits,
        requests,
    } = container.resources.take().unwrap_or_default();
    forbid_if(
        claims.is_some(),
        at.field("resources.claims"),
        "stacks may not claim devices",
    )?;
    let requests = requests.unwrap_or_default();
    let limits = limits.unwrap_or_default();
    for (which, map) in [("requests", &requests), ("limits", &limits)] {
        if let Some(name) = map
            .keys()
            .find(|name| ![CPU, MEMORY, EPHEMERAL_STORAGE].contains(&name.as_str()))
        {
            return Err(Rejection::forbidden_because(
                at.field(&format!("resources.{which}.{name}")),
                "only cpu, memory and ephemeral-storage may be requested",
            ));
        }
    }
    let cpu_milli = pick(&requests, &limits, CPU, at, parse_cpu_milli)?;
    let memory_bytes = pick(&requests, &limits, MEMORY, at, parse_bytes)?;
    let storage_request = read(&requests, EPHEMERAL_STORAGE, "requests", at, parse_bytes)?;
    if storage_request.is_some_and(|bytes| bytes > storage_limit) {
        return Err(Rejection::new(
            at.field(&format!("resources.requests.{EPHEMERAL_STORAGE}")),
            format!(
                "must not exceed the container's limit of {} (its share of the per-stack budget)",
                format_bytes(storage_limit)
            ),
        ));
    }

    let mut new_requests = BTreeMap::from([
        (CPU.to_owned(), Quantity(format_cpu_milli(cpu_milli))),
        (MEMORY.to_owned(), Quantity(format_bytes(memory_bytes))),
    ]);
    if let Some(bytes) = storage_request {
        new_requests.insert(EPHEMERAL_STORAGE.to_owned(), Quantity(format_bytes(bytes)));
    }
    let mut new_limits = new_requests.clone();
    new_limits.insert(EPHEMERAL_STORAGE.to_owned(), Quantity(format_bytes(storage_limit)));
    if !cpu_limit {
        new_limits.remove(CPU);
    }
    container.resources = Some(ResourceRequirements {
        claims: None,
        limits: Some(new_limits),
        requests: Some(new_requests),
    });
    Ok(StackResources {
        cpu_milli,
        memory_bytes,
    })
}

/// The normalized value of `name`: the limit if given, else the request.
fn pick(
    requests: &BTreeMap<String, Quantity>,
    limits: &BTreeMap<String, Quantity>,
    name: &str,
    at: ContainerPath,
    parse: fn(&str) -> Result<i64, QuantityError>,
) -> Result<i64, Rejection> {
    let request = read(requests, name, "requests", at, parse)?;
    let limit = read(limits, name, "limits", at, parse)?;
    match (request, limit) {
        (None, None) => Err(Rejection::new(
            at.field("resources"),
            format!("must set {name} in requests or limits"),
        )),
        (Some(request), Some(limit)) if request > limit => Err(Rejection::new(
            at.field(&format!("resources.requests.{name}")),
            format!("must not exceed limits.{name}"),
        )),
        (_, Some(value)) | (Some(value), None) => Ok(value),
    }
}

fn read(
    map: &BTreeMap<String, Quantity>,
    name: &str,
    which: &str,
    at: ContainerPath,
    parse: fn(&str) -> Result<i64, QuantityError>,
) -> Result<Option<i64>, Rejection> {
    map.get(name)
        .map(|quantity| parse(&quantity.0))
        .transpose()
        .map_err(|err| Rejection::new(at.field(&format!("resources.{which}.{name}")), err.to_string()))
}

fn add(a: StackResources, b: StackResources) -> Result<StackResources, Rejection> {
    let too_large = || Rejection::new("spec", "requests more resources in total than can be counted");
    Ok(StackResources {
        cpu_milli: a.cpu_milli.checked_add(b.cpu_milli).ok_or_else(too_large)?,
        memory_bytes: a.memory_bytes.checked_add(b.memory_bytes).ok_or_else(too_large)?,
    })
}

fn max(a: StackResources, b: StackResources) -> StackResources {
    StackResources {
        cpu_milli: a.cpu_milli.max(b.cpu_milli),
        memory_bytes: a.memory_bytes.max(b.memory_bytes),
    }
}

/// A request no node could hold would leave the pod pending until the create gives up.
fn check_node_cap(total: i64, cap: i64, name: &str, format: fn(i64) -> String) -> Result<(), Rejection> {
    if total > cap {
        return Err(Rejection::new(
            "spec.containers[*].resources",
            format!(
                "request {} of {name} in total, more than any node can hold ({})",
                format(total),
                format(cap)
            ),
        ));
    }
    Ok(())
}

fn check_ceiling(total: i64, ceiling: Option<i64>, name: &str, format: fn(i64) -> String) -> Result<(), Rejection> {
    match ceiling {
        Some(ceiling) if total > ceiling => Err(Rejection::new(
            "spec.containers[*].resources",
            format!(
                "request {} of {name} in total, above the per-stack maximum of {}",
                format(total),
                format(ceiling)
            ),
        )),
        _ => Ok(()),
    }
}
