//! What authors may add to the hardening, the operator's capability profile and dedicated
//! stack nodes, seen through `validate`: accepted fields reach the pod, merged with the forced
//! settings, and the output validates again to itself.

use serde_json::{Value, json};

use super::{edited, init_container, policy, stack_id, tcp, without_forced_fields};
use crate::config::{DropCapabilities, NodeTaint};
use crate::validate::{HardenedPod, Rejection, ValidationPolicy, validate};

fn run_with(policy: &ValidationPolicy, edits: &[(&str, Value)]) -> Result<HardenedPod, Rejection> {
    validate(&edited(edits), &[tcp(80)], &stack_id(), policy)
}

fn spec_of(hardened: &HardenedPod) -> Value {
    serde_json::to_value(&hardened.pod).expect("json")["spec"].clone()
}

/// The hardened pod as input again.
fn again(policy: &ValidationPolicy, hardened: &HardenedPod) -> HardenedPod {
    let yaml = without_forced_fields(&hardened.pod);
    match validate(&yaml, &[tcp(80)], &stack_id(), policy) {
        Ok(second) => second,
        Err(r) => panic!("the hardened output was refused: {r}\n{yaml}"),
    }
}

fn strict() -> ValidationPolicy {
    ValidationPolicy {
        drop_capabilities: DropCapabilities::All,
        add_back_capabilities: vec!["CHOWN".into(), "SETUID".into(), "SETGID".into()],
        ..policy()
    }
}

#[test]
fn an_authors_tightening_reaches_every_container_merged_with_the_forced_settings() {
    let mut init = init_container();
    init["securityContext"] = json!({"runAsUser": 2000, "capabilities": {"drop": ["ALL"]}});
    let hardened = run_with(
        &policy(),
        &[
            (
                "/spec/securityContext",
                json!({"runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000, "supplementalGroups": [3000]}),
            ),
            (
                "/spec/containers/0/securityContext",
                json!({"readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL", "NET_RAW"]}, "allowPrivilegeEscalation": false}),
            ),
            ("/spec/initContainers", json!([init])),
        ],
    )
    .unwrap();
    let spec = spec_of(&hardened);
    assert_eq!(
        spec["securityContext"],
        json!({
            "runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
            "supplementalGroups": [3000], "seccompProfile": {"type": "RuntimeDefault"}
        })
    );
    assert_eq!(
        spec["containers"][0]["securityContext"],
        json!({
            "privileged": false, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
            "seccompProfile": {"type": "RuntimeDefault"}, "capabilities": {"drop": ["NET_RAW", "ALL"]}
        })
    );
    assert_eq!(
        spec["initContainers"][0]["securityContext"],
        json!({
            "privileged": false, "allowPrivilegeEscalation": false, "runAsUser": 2000,
            "seccompProfile": {"type": "RuntimeDefault"}, "capabilities": {"drop": ["NET_RAW", "ALL"]}
        })
    );
    assert_eq!(again(&policy(), &hardened), hardened);
}

#[test]
fn a_loosening_field_is_refused_wherever_it_is() {
    for (pointer, context, path) in [
        (
            "/spec/containers/0/securityContext",
            json!({"runAsUser": 1000, "privileged": true}),
            "spec.containers[0].securityContext.privileged",
        ),
        (
            "/spec/containers/0/securityContext",
            json!({"capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]}}),
            "spec.containers[0].securityContext.capabilities.add[0]",
        ),
        (
            "/spec/securityContext",
            json!({"seccompProfile": {"type": "Unconfined"}}),
            "spec.securityContext.seccompProfile.type",
        ),
        (
            "/spec/securityContext",
            json!({"runAsNonRoot": true, "runAsUser": 0}),
            "spec.securityContext.runAsUser",
        ),
    ] {
        let r = run_with(&policy(), &[(pointer, context.clone())]).unwrap_err();
        assert_eq!(r.path, path, "{context}: {r}");
    }
}

#[test]
fn the_drop_all_profile_drops_everything_and_hands_back_only_its_list() {
    let bare = run_with(&strict(), &[]).unwrap();
    assert_eq!(
        spec_of(&bare)["containers"][0]["securityContext"]["capabilities"],
        json!({"drop": ["ALL", "NET_RAW"]})
    );
    let asked = run_with(
        &strict(),
        &[(
            "/spec/containers/0/securityContext",
            json!({"capabilities": {"add": ["CHOWN", "SETUID"], "drop": ["KILL"]}}),
        )],
    )
    .unwrap();
    assert_eq!(
        spec_of(&asked)["containers"][0]["securityContext"]["capabilities"],
        json!({"add": ["CHOWN", "SETUID"], "drop": ["ALL", "NET_RAW", "KILL"]})
    );
    assert_eq!(again(&strict(), &asked), asked);
    // In the default profile's list, not in this one's.
    let r = run_with(
        &strict(),
        &[(
            "/spec/containers/0/securityContext",
            json!({"capabilities": {"add": ["CHOWN", "NET_BIND_SERVICE"]}}),
        )],
    )
    .unwrap_err();
    assert_eq!(r.path, "spec.containers[0].securityContext.capabilities.add[1]");
    assert!(r.problem.contains("only CHOWN, SETUID, SETGID may be added"), "{r}");
    assert!(
        run_with(
            &policy(),
            &[(
                "/spec/containers/0/securityContext",
                json!({"capabilities": {"add": ["NET_BIND_SERVICE"]}}),
            )],
        )
        .is_ok()
    );
}

#[test]
fn dedicated_stack_nodes_are_tolerated_by_every_pod_once() {
    let no_taint = run_with(&policy(), &[]).unwrap();
    assert!(spec_of(&no_taint).get("tolerations").is_none());
    for (taint, toleration) in [
        (
            NodeTaint {
                key: "example.com/stacks".into(),
                value: Some("ctf".into()),
                effect: "NoSchedule".into(),
            },
            json!({"key": "example.com/stacks", "operator": "Equal", "value": "ctf", "effect": "NoSchedule"}),
        ),
        // NoExecute, which a manifest's own toleration may not use, and a reserved domain.
        (
            NodeTaint {
                key: "node-role.kubernetes.io/stack".into(),
                value: None,
                effect: "NoExecute".into(),
            },
            json!({"key": "node-role.kubernetes.io/stack", "operator": "Exists", "effect": "NoExecute"}),
        ),
    ] {
        let dedicated = ValidationPolicy {
            node_taint: Some(taint),
            ..policy()
        };
        let own = json!({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"});
        let hardened = run_with(&dedicated, &[("/spec/tolerations", json!([own.clone()]))]).unwrap();
        let spec = spec_of(&hardened);
        assert_eq!(spec["tolerations"], json!([own, toleration.clone()]));
        assert_eq!(spec["nodeSelector"], json!({"role": "stack"}));
        // Listed by the manifest already (a previous output): replaced, not doubled.
        let second = again(&dedicated, &hardened);
        assert_eq!(second, hardened);
        // Without the operator's taint it is an ordinary toleration again.
        if toleration["effect"] == "NoExecute" {
            let r = run_with(&policy(), &[("/spec/tolerations", json!([toleration]))]).unwrap_err();
            assert_eq!(r.path, "spec.tolerations[0].key");
        }
    }
}
