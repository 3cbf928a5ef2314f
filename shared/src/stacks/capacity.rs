//! Capacity and headroom (pure): node ports of the configured range, and per stack node the
//! allocatable CPU and memory against what active stacks reserve. Computed from the records
//! and the node list a stats call already reads, so it costs no cluster call of its own.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

use crate::model::StackUsage;
use crate::validate::quantity::{parse_bytes, parse_cpu_milli};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Capacity {
    pub node_ports: PortCapacity,
    /// Nodes labelled `role=STACK_NODE_ROLE` (where stacks may run), by name.
    pub nodes: BTreeMap<String, NodeCapacity>,
    /// Sums over `nodes`.
    pub allocatable_cpu_milli: i64,
    pub allocatable_memory_bytes: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct PortCapacity {
    /// Ports in `STACK_NODEPORT_MIN..=STACK_NODEPORT_MAX`.
    pub total: u32,
    pub used: u32,
    pub free: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, utoipa::ToSchema)]
pub struct NodeCapacity {
    pub allocatable_cpu_milli: i64,
    pub allocatable_memory_bytes: i64,
    /// Requests of the active stacks placed on this node.
    pub reserved_cpu_milli: i64,
    pub reserved_memory_bytes: i64,
    /// Stacks placed on this node, whatever their status.
    pub stacks: usize,
    /// Ready condition is `True`.
    pub ready: bool,
}

impl Capacity {
    pub fn of(records: &[StackUsage], nodes: &[Node], node_role: &str, port_range: (u16, u16)) -> Self {
        let mut by_node: BTreeMap<String, NodeCapacity> = nodes
            .iter()
            .filter(|n| has_role(n, node_role))
            .filter_map(|n| Some((n.metadata.name.clone()?, node_capacity(n))))
            .collect();
        for record in records.iter().filter(|r| !r.node_id.is_empty()) {
            // A stack on a node without the role (relabelled since) still counts there.
            let node = by_node.entry(record.node_id.clone()).or_default();
            node.stacks += 1;
            if record.status.is_active() {
                node.reserved_cpu_milli += record.requested_cpu_milli;
                node.reserved_memory_bytes += record.requested_memory_bytes;
            }
        }
        let (min, max) = port_range;
        let total = u32::from(max.saturating_sub(min)) + u32::from(max >= min);
        let used = u32::try_from(records.iter().map(|r| r.ports.len()).sum::<usize>()).unwrap_or(u32::MAX);
        Capacity {
            node_ports: PortCapacity {
                total,
                used,
                free: total.saturating_sub(used),
            },
            allocatable_cpu_milli: by_node.values().map(|n| n.allocatable_cpu_milli).sum(),
            allocatable_memory_bytes: by_node.values().map(|n| n.allocatable_memory_bytes).sum(),
            nodes: by_node,
        }
    }
}

fn has_role(node: &Node, role: &str) -> bool {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("role"))
        .is_some_and(|v| v == role)
}

fn node_capacity(node: &Node) -> NodeCapacity {
    let status = node.status.as_ref();
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let quantity = |name: &str, parse: fn(&str) -> Option<i64>| {
        allocatable
            .and_then(|a| a.get(name))
            .and_then(|q| parse(&q.0))
            .unwrap_or(0)
    };
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    NodeCapacity {
        allocatable_cpu_milli: quantity("cpu", |q| parse_cpu_milli(q).ok()),
        allocatable_memory_bytes: quantity("memory", |q| parse_bytes(q).ok()),
        ready,
        ..NodeCapacity::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::model::{PortMapping, Protocol, StackRecord, StackStatus};

    fn node(name: &str, role: &str, cpu: &str, memory: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([("role".to_owned(), role.to_owned())])),
                ..ObjectMeta::default()
            },
            status: Some(NodeStatus {
                allocatable: Some(BTreeMap::from([
                    ("cpu".to_owned(), Quantity(cpu.into())),
                    ("memory".to_owned(), Quantity(memory.into())),
                ])),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    fn record(node: &str, status: StackStatus, ports: usize) -> StackUsage {
        let record = StackRecord::test()
            .node(node)
            .status(status)
            .ports(
                (0..ports)
                    .map(|i| PortMapping {
                        container_port: 80,
                        protocol: Protocol::Tcp,
                        node_port: 31001 + u16::try_from(i).unwrap(),
                    })
                    .collect(),
            )
            .requests(250, 1 << 20);
        StackUsage::from(&record)
    }

    #[test]
    fn headroom_counts_only_stack_nodes_and_active_reservations() {
        let nodes = [
            node("a", "stack", "2", "4Gi"),
            node("b", "stack", "1500m", "1Gi"),
            node("system", "infra", "8", "32Gi"),
        ];
        let records = [
            record("a", StackStatus::Running, 2),
            record("a", StackStatus::Creating, 1),
            record("a", StackStatus::Stopped, 1),
            record("", StackStatus::Creating, 1),
        ];
        let c = Capacity::of(&records, &nodes, "stack", (31001, 31010));
        assert_eq!(
            c.node_ports,
            PortCapacity {
                total: 10,
                used: 5,
                free: 5
            }
        );
        assert_eq!(c.nodes.keys().collect::<Vec<_>>(), ["a", "b"]);
        let a = &c.nodes["a"];
        assert_eq!(
            (a.stacks, a.reserved_cpu_milli, a.reserved_memory_bytes),
            (3, 500, 2 << 20)
        );
        assert_eq!((a.allocatable_cpu_milli, a.allocatable_memory_bytes), (2000, 4 << 30));
        assert!(a.ready);
        assert_eq!(c.nodes["b"].stacks, 0);
        assert_eq!(c.allocatable_cpu_milli, 3500);
        assert_eq!(c.allocatable_memory_bytes, 5 << 30);
    }

    #[test]
    fn more_ports_used_than_the_range_holds_leaves_none_free() {
        let records = [record("a", StackStatus::Running, 3)];
        let c = Capacity::of(&records, &[], "stack", (31001, 31002));
        assert_eq!((c.node_ports.total, c.node_ports.free), (2, 0));
    }
}
