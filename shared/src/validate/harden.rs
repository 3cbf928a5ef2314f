//! The forced part of every stack pod: identity, labels, placement, lifetime and the security
//! settings. Runs after every rule passed, so it only adds or replaces.
//!
//! The admission policy `stack-provisioner-pod-hardening` of `functions/kubernetes-rbac.yaml`
//! refuses, in the cluster, any pod of the stack namespace without these settings (whoever
//! creates it): a setting forced here and not admitted there would refuse every stack, so
//! change both together (tests/tests/it/admission_policy.rs creates this module's output).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Capabilities, Pod, PodSecurityContext, SeccompProfile, SecurityContext};

use super::ValidationPolicy;
use crate::model::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, STACK_ID_LABEL, StackId};

/// Capabilities dropped from every container; raw sockets allow spoofing on the node network.
pub const DROPPED_CAPABILITIES: [&str; 1] = ["NET_RAW"];

pub(super) fn apply(pod: &mut Pod, stack_id: &StackId, policy: &ValidationPolicy) {
    let meta = &mut pod.metadata;
    meta.name = Some(stack_id.pod_name());
    meta.generate_name = None;
    meta.namespace = Some(policy.namespace.clone());
    // Set by the apiserver on create; accepted from `kubectl get -o yaml` output.
    meta.creation_timestamp = None;
    meta.uid = None;
    meta.generation = None;
    meta.self_link = None;
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned());
    labels.insert(STACK_ID_LABEL.to_owned(), stack_id.to_string());

    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.restart_policy = Some("Never".into());
    spec.automount_service_account_token = Some(false);
    spec.enable_service_links = Some(false);
    // Only their defaults were accepted; admission fills them in again.
    spec.service_account = None;
    spec.service_account_name = None;
    spec.scheduler_name = None;
    spec.priority = None;
    spec.preemption_policy = None;
    // A shorter deadline asked by the manifest is kept: it can only end the pod sooner.
    spec.active_deadline_seconds = Some(
        spec.active_deadline_seconds
            .map_or(policy.max_lifetime_secs, |asked| asked.min(policy.max_lifetime_secs)),
    );
    spec.node_selector = Some(BTreeMap::from([("role".to_owned(), policy.node_role.clone())]));
    // The operator's sandbox for every stack; the validator refused the manifest's own.
    spec.runtime_class_name = policy.runtime_class.clone();
    spec.security_context = Some(PodSecurityContext {
        seccomp_profile: Some(runtime_default()),
        ..Default::default()
    });
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        container.security_context = Some(container_security_context());
    }
}

fn runtime_default() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    }
}

fn container_security_context() -> SecurityContext {
    SecurityContext {
        privileged: Some(false),
        allow_privilege_escalation: Some(false),
        seccomp_profile: Some(runtime_default()),
        capabilities: Some(Capabilities {
            add: None,
            drop: Some(DROPPED_CAPABILITIES.iter().map(|c| (*c).to_owned()).collect()),
        }),
        ..Default::default()
    }
}
