//! Where a pod stands with the scheduler, and what a node offers stacks: its role, readiness and
//! public address (pure).

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::model::STARTUP_TAINT;

/// Where the scheduler stands with a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scheduling {
    /// Bound to this node.
    Scheduled(String),
    /// The scheduler found no node; its message says why.
    Unschedulable(String),
    /// No decision yet.
    Pending,
}

impl Scheduling {
    /// The node the pod is bound to, if any.
    pub(crate) fn node(&self) -> Option<&str> {
        match self {
            Scheduling::Scheduled(node) => Some(node),
            Scheduling::Unschedulable(_) | Scheduling::Pending => None,
        }
    }
}

pub(crate) fn scheduling_of(pod: &Pod) -> Scheduling {
    if let Some(node) = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
    {
        return Scheduling::Scheduled(node);
    }
    let unschedulable = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
    match unschedulable {
        Some(c) => Scheduling::Unschedulable(c.message.clone().unwrap_or_else(|| "no node can take the pod".into())),
        None => Scheduling::Pending,
    }
}

/// Whether the scheduler's refusal names taken host ports (the NodePorts filter): another
/// choice of ports may fit where these did not.
pub(crate) fn is_port_conflict(unschedulable: &str) -> bool {
    unschedulable.contains("didn't have free ports")
}

/// The node is labelled `role=<role>` (`STACK_NODE_ROLE`: where stacks may run).
pub(crate) fn has_role(node: &Node, role: &str) -> bool {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("role"))
        .is_some_and(|v| v == role)
}

/// A node stacks may be placed on now: a stack node that is up and no longer waits for its
/// images (the startup taint).
pub(crate) fn is_schedulable_stack_node(node: &Node, role: &str) -> bool {
    is_stack_node_up(node, role) && !has_startup_taint(node)
}

/// Labelled with the role, Ready, not cordoned: a node the pre-pull serves, joining or not.
pub(crate) fn is_stack_node_up(node: &Node, role: &str) -> bool {
    let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
    has_role(node, role) && !cordoned && is_ready(node)
}

/// The node still carries [`STARTUP_TAINT`]: it waits for the pre-pull.
pub(crate) fn has_startup_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| taints.iter().any(|t| t.key == STARTUP_TAINT))
}

/// The node's Ready condition is `True`.
pub(crate) fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The node's first `ExternalIP` address.
pub fn node_external_ip(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "ExternalIP" && !a.address.is_empty())
        .map(|a| a.address.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus, PodCondition, PodSpec, PodStatus};

    fn pod(node: Option<&str>, phase: Option<&str>, conditions: Vec<PodCondition>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: phase.map(Into::into),
                conditions: Some(conditions),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn scheduling_decisions() {
        assert_eq!(
            scheduling_of(&pod(Some("n1"), None, vec![])),
            Scheduling::Scheduled("n1".into())
        );
        assert_eq!(scheduling_of(&pod(None, Some("Pending"), vec![])), Scheduling::Pending);
        let refused = PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some("0/3 nodes are available".into()),
            ..PodCondition::default()
        };
        assert_eq!(
            scheduling_of(&pod(None, Some("Pending"), vec![refused])),
            Scheduling::Unschedulable("0/3 nodes are available".into())
        );
    }

    #[test]
    fn only_the_node_ports_filter_is_a_port_conflict() {
        // kube-scheduler 1.34's messages.
        assert!(is_port_conflict(
            "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 node(s) didn't have free ports for the requested pod ports. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        ));
        assert!(!is_port_conflict("0/2 nodes are available: 2 Insufficient cpu."));
    }

    #[test]
    fn first_external_ip_wins() {
        let address = |t: &str, a: &str| NodeAddress {
            type_: t.into(),
            address: a.into(),
        };
        let node = Node {
            status: Some(NodeStatus {
                addresses: Some(vec![
                    address("InternalIP", "10.0.0.1"),
                    address("ExternalIP", "203.0.113.7"),
                    address("ExternalIP", "203.0.113.8"),
                ]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        };
        assert_eq!(node_external_ip(&node).as_deref(), Some("203.0.113.7"));
        assert_eq!(node_external_ip(&Node::default()), None);
    }

    #[test]
    fn a_node_waiting_for_its_images_is_up_but_takes_no_stack() {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"role": "stack"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        assert!(is_schedulable_stack_node(&node, "stack"));
        node.spec.get_or_insert_default().taints = Some(vec![k8s_openapi::api::core::v1::Taint {
            key: STARTUP_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]);
        assert!(has_startup_taint(&node));
        assert!(is_stack_node_up(&node, "stack"));
        assert!(!is_schedulable_stack_node(&node, "stack"));
    }
}
