//! The stack nodes as a create needs them to tell a pod that no node could ever run (see
//! `stacks::fit`): what each node offers, read at most once per [`STACK_NODES_TTL`] and shared
//! by concurrent creates. Any full node list the process makes (stats, the hostport port view)
//! refreshes it too.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;

use super::has_role;
use crate::quantity::{parse_bytes, parse_cpu_milli};

/// How long a read of the stack nodes serves creates. Nodes change in minutes; a node that
/// joined since is looked for again before a create is refused (`stacks::create`).
pub(crate) const STACK_NODES_TTL: Duration = Duration::from_secs(30);

/// What a create may ask of one node labelled `role=<STACK_NODE_ROLE>`, whatever its state
/// (a NotReady or cordoned node may come back).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StackNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// `status.allocatable`; `None` when the node reports none that reads (not yet, or not
    /// positive): such a node is not judged on size.
    pub allocatable_cpu_milli: Option<i64>,
    pub allocatable_memory_bytes: Option<i64>,
    /// Its default runtime handler supports user namespaces, as the kubelet reads it: a node
    /// reporting no handlers at all (an older runtime) does not.
    pub user_namespaces: bool,
}

impl StackNode {
    /// `node` as creates see it; `None` without a name.
    pub fn of(node: &Node) -> Option<Self> {
        let status = node.status.as_ref();
        let allocatable = |name: &str, parse: fn(&str) -> Option<i64>| {
            status
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| a.get(name))
                .and_then(|q| parse(&q.0))
        };
        let user_namespaces = status
            .and_then(|s| s.runtime_handlers.as_ref())
            .into_iter()
            .flatten()
            .find(|h| h.name.as_deref().unwrap_or_default().is_empty())
            .and_then(|h| h.features.as_ref()?.user_namespaces)
            .unwrap_or(false);
        Some(Self {
            name: node.metadata.name.clone().filter(|n| !n.is_empty())?,
            labels: node.metadata.labels.clone().unwrap_or_default(),
            allocatable_cpu_milli: allocatable("cpu", |q| parse_cpu_milli(q).ok()),
            allocatable_memory_bytes: allocatable("memory", |q| parse_bytes(q).ok()),
            user_namespaces,
        })
    }
}

/// The stack nodes of `listed`: those labelled `role=<role>`.
pub(super) fn stack_nodes_of(listed: &[Node], role: &str) -> Arc<[StackNode]> {
    listed
        .iter()
        .filter(|n| has_role(n, role))
        .filter_map(StackNode::of)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use k8s_openapi::api::core::v1::{NodeRuntimeHandler, NodeRuntimeHandlerFeatures, NodeStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::cluster::timed_view::TimedView;

    fn node(name: &str, role: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([
                    ("role".to_owned(), role.to_owned()),
                    ("kubernetes.io/hostname".to_owned(), name.to_owned()),
                ])),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    fn handler(name: &str, user_namespaces: Option<bool>) -> NodeRuntimeHandler {
        NodeRuntimeHandler {
            name: Some(name.into()),
            features: Some(NodeRuntimeHandlerFeatures {
                user_namespaces,
                recursive_read_only_mounts: None,
            }),
        }
    }

    #[test]
    fn a_node_reads_as_its_name_labels_allocatable_and_user_namespace_support() {
        let mut n = node("n1", "stack");
        n.status = Some(NodeStatus {
            allocatable: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("3920m".into())),
                ("memory".to_owned(), Quantity("15896Mi".into())),
            ])),
            runtime_handlers: Some(vec![handler("runsc", Some(false)), handler("", Some(true))]),
            ..NodeStatus::default()
        });
        let read = StackNode::of(&n).unwrap();
        assert_eq!(read.name, "n1");
        assert_eq!(read.labels["kubernetes.io/hostname"], "n1");
        assert_eq!(read.allocatable_cpu_milli, Some(3920));
        assert_eq!(read.allocatable_memory_bytes, Some(15896 << 20));
        assert!(read.user_namespaces);

        // Only the default handler counts; none reported means unsupported, as the kubelet reads it.
        n.status.as_mut().unwrap().runtime_handlers = Some(vec![handler("runsc", Some(true))]);
        assert!(!StackNode::of(&n).unwrap().user_namespaces);
        n.status.as_mut().unwrap().runtime_handlers = None;
        n.status.as_mut().unwrap().allocatable = Some(BTreeMap::from([("cpu".to_owned(), Quantity("0".into()))]));
        let read = StackNode::of(&n).unwrap();
        assert!(!read.user_namespaces);
        assert_eq!(
            (read.allocatable_cpu_milli, read.allocatable_memory_bytes),
            (None, None)
        );
        assert_eq!(StackNode::of(&Node::default()), None);
    }

    #[test]
    fn the_view_keeps_stack_nodes_until_stale_and_never_goes_back_in_time() {
        let view = TimedView::<[StackNode]>::default();
        let t0 = Instant::now();
        assert!(view.get(STACK_NODES_TTL, t0).is_none());
        let kept = view.replace(
            stack_nodes_of(&[node("a", "stack"), node("sys", "infra"), node("b", "stack")], "stack"),
            t0,
        );
        let names = |nodes: &[StackNode]| nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&kept), ["a", "b"]);
        assert_eq!(
            names(&view.get(STACK_NODES_TTL, t0 + STACK_NODES_TTL).unwrap()),
            ["a", "b"]
        );
        assert!(
            view.get(STACK_NODES_TTL, t0 + STACK_NODES_TTL + Duration::from_millis(1))
                .is_none()
        );
        assert!(view.get(Duration::from_secs(5), t0 + Duration::from_secs(6)).is_none());

        let t1 = t0 + Duration::from_secs(10);
        view.replace(stack_nodes_of(&[node("c", "stack")], "stack"), t1);
        // A read that started earlier but finished later does not replace a newer one.
        let older = view.replace(stack_nodes_of(&[node("a", "stack")], "stack"), t0);
        assert_eq!(names(&older), ["c"]);
        assert_eq!(names(&view.get(STACK_NODES_TTL, t1).unwrap()), ["c"]);
    }
}
