//! The init container that holds every stack back until its isolation is enforced
//! (`STACK_ISOLATION_CHECK_IMAGE`). A NetworkPolicy enforcer programs a new pod some time after
//! the pod has its address (kube-router here: up to a few seconds; EKS's VPC CNI agent in its
//! default mode likewise), and a participant connects the moment a stack reads `running`: in
//! between, the shell reaches the node's metadata service and the VPC (measured, see
//! `tests/tests/it/isolation.rs`). So the pod proves it first: its init container connects to
//! its own node's kubelet port (always listening, always reachable from a pod without policy, a
//! private address the isolation denies) until the connection fails, and only then does the
//! challenge start. If it still connects after [`CHECK_SECONDS`], nothing enforces the policy:
//! the init container exits 1 and the stack fails with `isolation_not_enforced`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::model::ISOLATION_CHECK_CONTAINER;

/// How long the policy may take to hold before the stack fails.
pub(crate) const CHECK_SECONDS: u32 = 20;
/// The kubelet's port on every node (EKS's nodes listen on all addresses).
const KUBELET_PORT: u16 = 10250;
/// Tries 0.2 s apart before the check slows to one a second.
const QUICK_TRIES: u32 = 10;

/// The check, run by `image` (any image with a POSIX shell and busybox's `nc`).
pub(super) fn init_container(image: &str) -> Container {
    // busybox's nc takes whole seconds: a dropped SYN costs 1 s, a rejected one nothing.
    // Every 0.2 s for the first 2 s (one stack alone is enforced by then), then every second:
    // in a burst of 50 the enforcer takes tens of seconds, and each try forks two processes
    // on the nodes' busy CPU.
    let tries = QUICK_TRIES + CHECK_SECONDS - QUICK_TRIES / 5;
    let script = format!(
        "i=0; pause=0.2; while nc -w 1 \"$NODE_IP\" {KUBELET_PORT} -e true 2>/dev/null; do \
         i=$((i+1)); if [ \"$i\" -ge {tries} ]; then \
         echo \"isolation not enforced: after {CHECK_SECONDS} s this pod still reaches its node at $NODE_IP:{KUBELET_PORT}; \
         is the cluster's NetworkPolicy enforcement on?\" >&2; exit 1; fi; \
         if [ \"$i\" -ge {QUICK_TRIES} ]; then pause=1; fi; sleep $pause; done"
    );
    let quantities = |pairs: &[(&str, &str)]| -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), Quantity((*value).to_owned())))
            .collect()
    };
    Container {
        name: ISOLATION_CHECK_CONTAINER.to_owned(),
        image: Some(image.to_owned()),
        command: Some(vec!["sh".to_owned(), "-c".to_owned(), script]),
        env: Some(vec![EnvVar {
            name: "NODE_IP".to_owned(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "status.hostIP".to_owned(),
                    api_version: None,
                }),
                ..EnvVarSource::default()
            }),
            value: None,
        }]),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(&[("cpu", "10m"), ("memory", "16Mi")])),
            // No CPU limit: the kubelet gives the pod a CFS quota only when every container
            // has one, and under it the sandbox's and this check's start crawl (runc's init
            // alone needs ~40 ms of CPU: 0.4 s at 100m). The script is ours, not the
            // participant's, and the challenge's own containers keep their limits.
            limits: Some(quantities(&[("memory", "16Mi")])),
            ..ResourceRequirements::default()
        }),
        // The script's last line becomes the failed stack's message.
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_probes_its_own_node_and_says_why_it_gives_up() {
        let check = init_container("registry.example/busybox:1");
        assert_eq!(check.name, ISOLATION_CHECK_CONTAINER);
        let env = check.env.unwrap();
        let field = env[0].value_from.as_ref().unwrap().field_ref.as_ref().unwrap();
        assert_eq!(
            (env[0].name.as_str(), field.field_path.as_str()),
            ("NODE_IP", "status.hostIP")
        );
        let script = &check.command.unwrap()[2];
        assert!(script.contains("nc -w 1 \"$NODE_IP\" 10250"), "{script}");
        assert!(
            script.contains("-ge 28 ]"),
            "2 s of 0.2 s tries, then 18 of 1 s: {script}"
        );
        assert!(script.contains("isolation not enforced"), "{script}");
        assert_eq!(
            check.termination_message_policy.as_deref(),
            Some("FallbackToLogsOnError")
        );
    }
}
