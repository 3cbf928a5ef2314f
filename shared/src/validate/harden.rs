//! The forced part of every stack pod: identity, labels, placement, lifetime and the security
//! settings. Runs after every rule passed, so it only adds or replaces. The security contexts
//! keep what the manifest asked (only tightening fields pass `security_context`) with the
//! forced settings laid over them: the forced drops and the manifest's add up, none is lost.
//!
//! The admission policy `stack-provisioner-pod-hardening` of `functions/kubernetes-rbac.yaml`
//! refuses, in the cluster, any pod of the stack namespace without these settings (whoever
//! creates it): a setting forced here and not admitted there would refuse every stack, so
//! change both together (tests/tests/it/admission_policy.rs creates this module's output).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Capabilities, Pod, PodSecurityContext, SeccompProfile, SecurityContext};

use super::ValidationPolicy;
use super::isolation_check;
use crate::config::DropCapabilities;
use crate::model::{ISOLATION_CHECK_CONTAINER, MANAGED_BY_LABEL, MANAGED_BY_VALUE, STACK_ID_LABEL, StackId};

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
    // Dedicated stack nodes: the selector keeps stacks on them, the toleration lets them in.
    if let Some(taint) = &policy.node_taint {
        let toleration = taint.toleration();
        let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
        tolerations.retain(|t| *t != toleration);
        tolerations.push(toleration);
    }
    // The operator's sandbox for every stack; the validator refused the manifest's own.
    spec.runtime_class_name = policy.runtime_class.clone();
    // Root in the stack maps to an unprivileged user of the node; a manifest may ask it too.
    if policy.user_namespaces {
        spec.host_users = Some(false);
    }
    // First of the init containers: nothing of the stack runs before its isolation holds.
    if let Some(image) = &policy.isolation_check_image {
        let inits = spec.init_containers.get_or_insert_with(Vec::new);
        inits.retain(|c| c.name != ISOLATION_CHECK_CONTAINER);
        inits.insert(0, isolation_check::init_container(image));
    }
    let asked = spec.security_context.take().unwrap_or_default();
    spec.security_context = Some(PodSecurityContext {
        seccomp_profile: Some(runtime_default()),
        ..asked
    });
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        let asked = container.security_context.take().unwrap_or_default();
        container.security_context = Some(container_security_context(asked, policy.drop_capabilities));
    }
}

fn runtime_default() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    }
}

/// `asked` (validated: it only tightens) with the forced settings over it; the forced drops
/// first, then the manifest's own that are not among them.
fn container_security_context(asked: SecurityContext, profile: DropCapabilities) -> SecurityContext {
    let Capabilities { add, drop: asked_drop } = asked.capabilities.clone().unwrap_or_default();
    let mut drop: Vec<String> = profile.forced().iter().map(|c| (*c).to_owned()).collect();
    for name in asked_drop.into_iter().flatten() {
        if !drop.contains(&name) {
            drop.push(name);
        }
    }
    SecurityContext {
        privileged: Some(false),
        allow_privilege_escalation: Some(false),
        seccomp_profile: Some(runtime_default()),
        capabilities: Some(Capabilities {
            add: add.filter(|names| !names.is_empty()),
            drop: Some(drop),
        }),
        ..asked
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::NodeTaint;

    fn merged(asked: serde_json::Value, profile: DropCapabilities) -> serde_json::Value {
        let asked: SecurityContext = serde_json::from_value(asked).expect("a SecurityContext");
        serde_json::to_value(container_security_context(asked, profile)).expect("json")
    }

    #[test]
    fn the_manifests_drops_add_to_the_forced_ones() {
        let out = merged(
            json!({"capabilities": {"drop": ["SYS_PTRACE", "NET_RAW", "ALL"]}}),
            DropCapabilities::NetRaw,
        );
        assert_eq!(out["capabilities"], json!({"drop": ["NET_RAW", "SYS_PTRACE", "ALL"]}));
        let out = merged(
            json!({"capabilities": {"drop": ["CHOWN"], "add": ["SETUID"]}}),
            DropCapabilities::All,
        );
        assert_eq!(
            out["capabilities"],
            json!({"drop": ["ALL", "NET_RAW", "CHOWN"], "add": ["SETUID"]})
        );
        let out = merged(json!({}), DropCapabilities::All);
        assert_eq!(out["capabilities"], json!({"drop": ["ALL", "NET_RAW"]}));
    }

    #[test]
    fn the_manifests_tightening_is_kept_and_the_forced_settings_win() {
        let out = merged(
            json!({
                "runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000,
                "readOnlyRootFilesystem": true, "procMount": "Default",
                "appArmorProfile": {"type": "RuntimeDefault"},
                "capabilities": {"add": []}
            }),
            DropCapabilities::NetRaw,
        );
        assert_eq!(
            out,
            json!({
                "privileged": false,
                "allowPrivilegeEscalation": false,
                "seccompProfile": {"type": "RuntimeDefault"},
                "capabilities": {"drop": ["NET_RAW"]},
                "runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000,
                "readOnlyRootFilesystem": true, "procMount": "Default",
                "appArmorProfile": {"type": "RuntimeDefault"}
            })
        );
    }

    #[test]
    fn a_taint_without_value_is_tolerated_with_exists() {
        let with_value = NodeTaint {
            key: "example.com/stacks".into(),
            value: Some("ctf".into()),
            effect: "NoExecute".into(),
        };
        assert_eq!(
            serde_json::to_value(with_value.toleration()).unwrap(),
            json!({"key": "example.com/stacks", "operator": "Equal", "value": "ctf", "effect": "NoExecute"})
        );
        let bare = NodeTaint {
            value: None,
            effect: "NoSchedule".into(),
            ..with_value
        };
        assert_eq!(
            serde_json::to_value(bare.toleration()).unwrap(),
            json!({"key": "example.com/stacks", "operator": "Exists", "effect": "NoSchedule"})
        );
    }
}
