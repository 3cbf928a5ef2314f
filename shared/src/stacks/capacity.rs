//! Capacity and headroom (pure): ports of the configured range in the exposure mode's terms,
//! and per stack node the allocatable CPU and memory against what active stacks reserve.
//! Computed from the records and the node list a stats call already reads, and the process's
//! view of the Services' node ports, so it costs no cluster call of its own.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

use crate::cluster::{NodePortHolders, PortPolicy, has_role, is_ready, is_schedulable_stack_node};
use crate::model::{Exposure, StackUsage};
use crate::quantity::{parse_bytes, parse_cpu_milli};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Capacity {
    pub node_ports: PortCapacity,
    /// Nodes labelled `role=STACK_NODE_ROLE` (where stacks may run), by name.
    pub nodes: BTreeMap<String, NodeCapacity>,
    /// Sums over `nodes`.
    pub allocatable_cpu_milli: i64,
    pub allocatable_memory_bytes: i64,
}

/// Room for stacks' ports. A NodePort Service takes its port on every node, so in nodeport
/// mode the range holds `range_ports` stack ports in all; a host port is taken on one node
/// only, so in hostport mode it holds `range_ports × schedulable_nodes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct PortCapacity {
    /// The mode new stacks get (`STACK_EXPOSURE`).
    pub exposure: Exposure,
    /// Ports in `STACK_NODEPORT_MIN..=STACK_NODEPORT_MAX`.
    pub range_ports: u32,
    /// Stack nodes that take new pods now (labelled with the role, Ready, not cordoned).
    pub schedulable_nodes: u32,
    /// Stack ports the range holds in this mode.
    pub total: u32,
    /// Taken by live stacks of either mode (a stack of the other mode, left from before a
    /// switch, counts with what it blocks: a service's port on every node); failed stacks'
    /// tombstones hold none.
    pub used: u32,
    /// Taken by the node ports of the cluster's other Services (on every node), which no
    /// stack is given; `null` when they could not be read.
    pub held_elsewhere: Option<u32>,
    pub free: u32,
}

impl PortCapacity {
    fn of(
        records: &[StackUsage],
        schedulable_nodes: u32,
        settings: &PortPolicy,
        holders: Option<&NodePortHolders>,
    ) -> Self {
        let (min, max) = settings.range;
        let range_ports = u32::from(max.saturating_sub(min)) + u32::from(max >= min);
        // A failed stack's tombstone lists the ports it had; its objects no longer hold them.
        let ports_of = |exposure| {
            records
                .iter()
                .filter(move |r| r.exposure == exposure && !r.status.is_tombstone())
                .flat_map(|r| r.ports.iter().map(|p| p.node_port))
        };
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let services: HashSet<u16> = ports_of(Exposure::NodePort).collect();
        let elsewhere: HashSet<u16> = holders
            .into_iter()
            .flat_map(NodePortHolders::ports)
            .filter(|p| (min..=max).contains(p) && !services.contains(p))
            .collect();
        let (total, used, held_elsewhere) = match settings.exposure {
            Exposure::NodePort => {
                // Host ports left from hostport mode block their port for services.
                let blocked = ports_of(Exposure::HostPort)
                    .filter(|p| !services.contains(p))
                    .collect::<HashSet<u16>>();
                let used = count(ports_of(Exposure::NodePort).count()).saturating_add(count(blocked.len()));
                (range_ports, used, count(elsewhere.difference(&blocked).count()))
            }
            Exposure::HostPort => {
                let everywhere = count(ports_of(Exposure::NodePort).count()).saturating_mul(schedulable_nodes);
                let used = count(ports_of(Exposure::HostPort).count()).saturating_add(everywhere);
                let held_elsewhere = count(elsewhere.len()).saturating_mul(schedulable_nodes);
                (range_ports.saturating_mul(schedulable_nodes), used, held_elsewhere)
            }
        };
        PortCapacity {
            exposure: settings.exposure,
            range_ports,
            schedulable_nodes,
            total,
            used,
            held_elsewhere: holders.map(|_| held_elsewhere),
            free: total.saturating_sub(used).saturating_sub(held_elsewhere),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, utoipa::ToSchema)]
pub struct NodeCapacity {
    pub allocatable_cpu_milli: i64,
    pub allocatable_memory_bytes: i64,
    /// Requests of the active stacks placed on this node.
    pub reserved_cpu_milli: i64,
    pub reserved_memory_bytes: i64,
    /// Stacks placed on this node, whatever their status (but failed: their pod is gone).
    pub stacks: usize,
    /// Ready condition is `True`.
    pub ready: bool,
}

impl Capacity {
    /// `holders`: the node ports of the cluster's Services (`None`: not read).
    pub(crate) fn of(
        records: &[StackUsage],
        nodes: &[Node],
        ports: &PortPolicy,
        holders: Option<&NodePortHolders>,
    ) -> Self {
        let schedulable = nodes
            .iter()
            .filter(|n| is_schedulable_stack_node(n, &ports.node_role))
            .count();
        let mut by_node: BTreeMap<String, NodeCapacity> = nodes
            .iter()
            .filter(|n| has_role(n, &ports.node_role))
            .filter_map(|n| Some((n.metadata.name.clone()?, node_capacity(n))))
            .collect();
        for record in records
            .iter()
            .filter(|r| !r.node_id.is_empty() && !r.status.is_tombstone())
        {
            // A stack on a node without the role (relabelled since) still counts there.
            let node = by_node.entry(record.node_id.clone()).or_default();
            node.stacks += 1;
            if record.status.is_active() {
                node.reserved_cpu_milli += record.requested_cpu_milli;
                node.reserved_memory_bytes += record.requested_memory_bytes;
            }
        }
        Capacity {
            node_ports: PortCapacity::of(records, u32::try_from(schedulable).unwrap_or(u32::MAX), ports, holders),
            allocatable_cpu_milli: by_node.values().map(|n| n.allocatable_cpu_milli).sum(),
            allocatable_memory_bytes: by_node.values().map(|n| n.allocatable_memory_bytes).sum(),
            nodes: by_node,
        }
    }
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
    let ready = is_ready(node);
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
    use crate::model::{StackRecord, StackStatus};

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
            .tcp_ports(31001, u16::try_from(ports).unwrap())
            .requests(250, 1 << 20);
        StackUsage::from(&record)
    }

    fn hostport(usage: StackUsage) -> StackUsage {
        StackUsage {
            exposure: Exposure::HostPort,
            ..usage
        }
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
        let c = Capacity::of(&records, &nodes, &settings(Exposure::NodePort, (31001, 31010)), None);
        assert_eq!(
            c.node_ports,
            PortCapacity {
                exposure: Exposure::NodePort,
                range_ports: 10,
                schedulable_nodes: 2,
                total: 10,
                used: 5,
                held_elsewhere: None,
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
    fn a_failed_stacks_tombstone_holds_no_port_node_or_resources() {
        let nodes = [node("a", "stack", "2", "4Gi")];
        let live = [record("a", StackStatus::Running, 2)];
        let with_tombstones = [
            record("a", StackStatus::Running, 2),
            record("a", StackStatus::Failed, 1),
            hostport(record("a", StackStatus::Failed, 3)),
        ];
        for exposure in [Exposure::NodePort, Exposure::HostPort] {
            let settings = settings(exposure, (31001, 31010));
            assert_eq!(
                Capacity::of(&with_tombstones, &nodes, &settings, None),
                Capacity::of(&live, &nodes, &settings, None),
                "{exposure:?}"
            );
        }
        let c = Capacity::of(
            &with_tombstones,
            &nodes,
            &settings(Exposure::NodePort, (31001, 31010)),
            None,
        );
        assert_eq!((c.node_ports.used, c.nodes["a"].stacks), (2, 1));
    }

    #[test]
    fn more_ports_used_than_the_range_holds_leaves_none_free() {
        let records = [record("a", StackStatus::Running, 3)];
        let c = Capacity::of(&records, &[], &settings(Exposure::NodePort, (31001, 31002)), None);
        assert_eq!((c.node_ports.total, c.node_ports.free), (2, 0));
    }

    fn settings(exposure: Exposure, range: (u16, u16)) -> PortPolicy {
        PortPolicy {
            exposure,
            range,
            node_role: "stack".into(),
        }
    }

    #[test]
    fn hostport_capacity_is_ports_times_schedulable_nodes_and_counts_leftover_services_everywhere() {
        let mut cordoned = node("c", "stack", "2", "4Gi");
        cordoned.spec.get_or_insert_default().unschedulable = Some(true);
        let nodes = [
            node("a", "stack", "2", "4Gi"),
            node("b", "stack", "2", "4Gi"),
            cordoned,
            node("system", "infra", "8", "32Gi"),
        ];
        let records = [
            hostport(record("a", StackStatus::Running, 2)),
            hostport(record("b", StackStatus::Running, 2)),
            // Left from nodeport mode: its one port is blocked on both nodes.
            record("a", StackStatus::Running, 1),
        ];
        let c = Capacity::of(&records, &nodes, &settings(Exposure::HostPort, (31001, 31010)), None);
        assert_eq!(
            c.node_ports,
            PortCapacity {
                exposure: Exposure::HostPort,
                range_ports: 10,
                schedulable_nodes: 2,
                total: 20,
                used: 6,
                held_elsewhere: None,
                free: 14
            }
        );
        // Back in nodeport mode, the host ports (31001, 31002 on two nodes) block 2 ports, one
        // of them also the service's.
        let c = Capacity::of(&records, &nodes, &settings(Exposure::NodePort, (31001, 31010)), None);
        assert_eq!((c.node_ports.total, c.node_ports.used, c.node_ports.free), (10, 2, 8));

        // The cluster's Services: the node-port stack's own (31001), two others' in the range
        // (31005, and 31002, which host ports also hold) and one outside it.
        let holders: NodePortHolders = [
            (31001, "stacks/svc-a"),
            (31005, "monitoring/grafana"),
            (31002, "ingress/nginx"),
            (40000, "far/away"),
        ]
        .into_iter()
        .map(|(port, service)| (port, "TCP".to_owned(), service.to_owned()))
        .collect();
        let held = |exposure| {
            let c = Capacity::of(&records, &nodes, &settings(exposure, (31001, 31010)), Some(&holders));
            (c.node_ports.used, c.node_ports.held_elsewhere, c.node_ports.free)
        };
        // Two ports on each of the two nodes.
        assert_eq!(held(Exposure::HostPort), (6, Some(4), 10));
        // 31002 already counts as blocked by the host ports.
        assert_eq!(held(Exposure::NodePort), (2, Some(1), 7));
    }
}
