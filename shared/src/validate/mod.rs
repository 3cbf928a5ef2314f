//! The manifest validator: turns the Pod manifest a CTF platform sends into the hardened Pod that
//! is actually applied, or says which field breaks which rule. Pure: no I/O, no clock.
//!
//! Steps, each in its own module: bounded YAML parsing (`bounded_yaml`, with `nesting` as its
//! first pass), kubectl's YAML 1.1 reading of integer and boolean fields (`yaml11`), the Pod
//! schema with unknown fields refused (`schema`), metadata, per-pod counts (`bounds`),
//! pod-level, container, security context (`security_context`) and volume rules, Secret/ConfigMap references (`references`), target
//! ports, the readiness probe a manifest left out (`readiness`), resource normalization and
//! accounting (`resources`), then the forced settings (`harden`).
//!
//! Decisions on fields the rules leave open are documented where they are enforced:
//! `metadata` (name/namespace replaced, `app.kubernetes.io/*` allowed), `pod_spec`
//! (tolerations, affinity, DNS, grace period), `containers` (probe hosts, mounts, sidecars),
//! `volumes` and `resources` (normalization to the limit).

mod bounded_yaml;
mod bounds;
mod containers;
mod harden;
mod images;
pub(crate) mod isolation_check;
mod metadata;
mod nesting;
mod pod_spec;
mod ports;
mod readiness;
mod references;
mod rejection;
mod resources;
mod schema;
mod security_context;
mod volumes;
mod yaml11;

#[cfg(test)]
mod tests;

use k8s_openapi::api::core::v1::Pod;

pub(crate) use crate::config::ValidationPolicy;
pub(crate) use pod_spec::MAX_TERMINATION_GRACE_SECS;
pub(crate) use pod_spec::{NODE_NAME_FIELD, term_can_match};
pub(crate) use ports::validate_target_ports;
pub use rejection::Rejection;

/// An image the operator names outside a manifest (`PUT /prepull`), under the manifests' rules.
pub(crate) fn check_image(image: &str, policy: &ValidationPolicy, field: &str) -> Result<(), Rejection> {
    images::check(image, &policy.image_allowlist).map_err(|problem| Rejection::new(field, problem))
}

use crate::model::{PodOverhead, StackId, TargetPort};

/// A manifest that passed every rule, with the forced settings applied.
#[derive(Debug, Clone, PartialEq)]
pub struct HardenedPod {
    pub pod: Pod,
    /// `pod` as YAML: what is stored and shown as the stack's `pod_spec`.
    pub yaml: String,
    /// The pod's effective CPU request as the scheduler counts it.
    pub requested_cpu_milli: i64,
    /// The pod's effective memory request as the scheduler counts it.
    pub requested_memory_bytes: i64,
}

/// Validates `manifest_yaml` for stack `stack_id` exposing `target_ports`, and hardens it.
pub fn validate(
    manifest_yaml: &str,
    target_ports: &[TargetPort],
    stack_id: &StackId,
    policy: &ValidationPolicy,
) -> Result<HardenedPod, Rejection> {
    validate_target_ports(target_ports)?;
    let (mut raw, scan) = bounded_yaml::read(manifest_yaml, policy.max_manifest_bytes)?;
    bounds::check_raw(&raw, policy)?;
    yaml11::coerce(&mut raw, &scan.plain_yaml11);
    let mut pod = schema::read_pod(&raw)?;
    drop(raw);
    metadata::check(&pod.metadata, policy)?;
    let spec = pod.spec.as_mut().ok_or_else(|| Rejection::required("spec"))?;
    bounds::check(spec, policy)?;
    pod_spec::check(spec, policy)?;
    pod_spec::check_fqdn(spec, &stack_id.pod_name(), &policy.namespace)?;
    containers::check(spec, policy)?;
    volumes::check(spec)?;
    references::check(spec, policy)?;
    ports::check_declared(target_ports, &spec.containers)?;
    readiness::probe_target_ports(&mut spec.containers, target_ports, policy.runtime_class.is_some());
    let totals = resources::normalize(spec, policy)?;
    volumes::cap_empty_dirs(spec, policy.ephemeral_storage_limit, policy.empty_dirs_in_memory);
    harden::apply(&mut pod, stack_id, policy);
    let yaml = to_yaml(&pod)?;
    Ok(HardenedPod {
        pod,
        yaml,
        requested_cpu_milli: totals.cpu_milli,
        requested_memory_bytes: totals.memory_bytes,
    })
}

impl HardenedPod {
    /// The same stack counted as the scheduler counts it under a RuntimeClass of `overhead`.
    pub(crate) fn with_overhead(self, overhead: PodOverhead) -> Self {
        Self {
            requested_cpu_milli: self.requested_cpu_milli.saturating_add(overhead.cpu_milli),
            requested_memory_bytes: self.requested_memory_bytes.saturating_add(overhead.memory_bytes),
            ..self
        }
    }

    /// The same stack with `pod`, this pod as the provisioner changed it to create it (host
    /// ports), and its YAML.
    pub(crate) fn with_pod(self, pod: Pod) -> Result<Self, Rejection> {
        Ok(Self {
            yaml: to_yaml(&pod)?,
            pod,
            ..self
        })
    }
}

/// `pod` as the YAML a stack's `pod_spec` shows.
fn to_yaml(pod: &Pod) -> Result<String, Rejection> {
    serde_yaml::to_string(pod).map_err(|err| Rejection::new("manifest", format!("cannot be encoded: {err}")))
}
