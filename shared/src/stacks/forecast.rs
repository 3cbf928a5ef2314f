//! Whether the stacks an event expects will fit, before its start gun (`POST /preflight`):
//! go or no-go per limit, with the headroom left (pure; `Stacks::preflight` gathers the room).
//!
//! Limits, each judged on its own so that every one set too low is named:
//! - `node_ports`: the ports the stacks take against the range's free ones (in the exposure
//!   mode's terms, as `/stats` counts them);
//! - `cpu`, `memory`, `pods`: the stacks' requests against what the schedulable stack nodes
//!   have left (pods: the node's allocatable pods less the stacks on it);
//! - `placement`: the stacks placed one by one, largest CPU first, on the node with the most
//!   CPU left that holds them whole, as a spreading scheduler would: sums can fit where nodes
//!   cannot (a stack larger than any node's remainder);
//! - `images`: each image present on every schedulable stack node (the kubelet's image list),
//!   else the first stacks on a node without it wait for the pull;
//! - `tenant`: the stacks against what the tenant's limit leaves it;
//! - `create_rate`: the stacks over the opening window against the rate the control plane
//!   binds pods at (`STACK_CREATE_RATE`).

use std::collections::BTreeSet;

use serde::Serialize;

use crate::cluster::holds_image;

/// CPU, memory and pods: what one stack takes, or what a node has left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Resources {
    pub(super) cpu_milli: i64,
    pub(super) memory_bytes: i64,
    pub(super) pods: i64,
}

impl Resources {
    /// One stack's requests (it takes one pod).
    pub(super) fn of_one_stack(cpu_milli: i64, memory_bytes: i64) -> Self {
        Self {
            cpu_milli,
            memory_bytes,
            pods: 1,
        }
    }

    fn holds(&self, stack: &Resources) -> bool {
        self.cpu_milli >= stack.cpu_milli && self.memory_bytes >= stack.memory_bytes && self.pods >= stack.pods
    }

    fn take(&mut self, stack: &Resources) {
        self.cpu_milli -= stack.cpu_milli;
        self.memory_bytes -= stack.memory_bytes;
        self.pods -= stack.pods;
    }
}

/// Stacks of one manifest an event expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Expected {
    pub(super) count: u32,
    pub(super) each: Resources,
    pub(super) ports: u32,
    pub(super) images: Vec<String>,
}

/// One schedulable stack node's room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NodeRoom {
    pub(super) name: String,
    pub(super) left: Resources,
    /// Image references the node holds (every name the kubelet lists for each image).
    pub(super) images: BTreeSet<String>,
}

/// What the cluster has left now.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Room {
    pub(super) node_ports_free: u32,
    pub(super) nodes: Vec<NodeRoom>,
    /// The tenant the stacks are for, its limit and how many it holds, if it has a limit.
    pub(super) tenant: Option<(String, u32, u64)>,
    /// Pods per second the control plane binds.
    pub(super) create_rate: f64,
    /// The window the stacks will be created in, if the operator gave one.
    pub(super) opening_seconds: Option<f64>,
}

/// One limit's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Check {
    /// `node_ports`, `cpu`, `memory`, `pods`, `placement`, `images`, `tenant` or `create_rate`.
    pub limit: &'static str,
    pub go: bool,
    /// What the stacks need (ports, CPU millicores, bytes, pods, stacks, images, stacks,
    /// creates per second).
    pub needed: f64,
    /// What is there.
    pub available: f64,
    /// `available - needed`: what is left after them, or (negative) what is missing.
    pub headroom: f64,
    pub detail: String,
}

/// The go/no-go of a whole event.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Forecast {
    pub go: bool,
    /// One line: `go: ...` or `no-go: <limit> (<detail>); ...`.
    pub summary: String,
    pub checks: Vec<Check>,
}

pub(super) fn forecast(expected: &[Expected], room: &Room) -> Forecast {
    let stacks: u64 = expected.iter().map(|e| u64::from(e.count)).sum();
    let sum =
        |f: fn(&Expected) -> i64| -> i64 { expected.iter().map(|e| f(e).saturating_mul(i64::from(e.count))).sum() };
    let nodes_sum = |f: fn(&NodeRoom) -> i64| -> i64 { room.nodes.iter().map(f).sum() };
    let mut checks = vec![
        check(
            "node_ports",
            sum(|e| i64::from(e.ports)) as f64,
            f64::from(room.node_ports_free),
            "ports of the range",
        ),
        check(
            "cpu",
            sum(|e| e.each.cpu_milli) as f64,
            nodes_sum(|n| n.left.cpu_milli) as f64,
            "CPU millicores left on the stack nodes",
        ),
        check(
            "memory",
            sum(|e| e.each.memory_bytes) as f64,
            nodes_sum(|n| n.left.memory_bytes) as f64,
            "bytes of memory left on the stack nodes",
        ),
        check(
            "pods",
            stacks as f64,
            nodes_sum(|n| n.left.pods) as f64,
            "pods the stack nodes take",
        ),
        placement(expected, &room.nodes, stacks),
        images(expected, &room.nodes),
    ];
    if let Some((tenant, limit, held)) = &room.tenant {
        let left = u64::from(*limit).saturating_sub(*held);
        checks.push(check(
            "tenant",
            stacks as f64,
            left as f64,
            &format!("stacks tenant {tenant} may still hold (limit {limit}, {held} held)"),
        ));
    }
    if let Some(seconds) = room.opening_seconds.filter(|s| *s > 0.0) {
        checks.push(check(
            "create_rate",
            stacks as f64 / seconds,
            room.create_rate,
            &format!("creates per second over {seconds} s, against the control plane's pod binds per second"),
        ));
    }
    let failing: Vec<String> = checks
        .iter()
        .filter(|c| !c.go)
        .map(|c| format!("{} ({})", c.limit, c.detail))
        .collect();
    let go = failing.is_empty();
    let summary = if go {
        format!("go: {stacks} stacks fit every limit ({} checked)", checks.len())
    } else {
        format!("no-go: {}", failing.join("; "))
    };
    Forecast { go, summary, checks }
}

fn check(limit: &'static str, needed: f64, available: f64, what: &str) -> Check {
    let go = needed <= available;
    Check {
        limit,
        go,
        needed,
        available,
        headroom: available - needed,
        detail: format!("needs {needed}, {available} {what}"),
    }
}

/// How many of the stacks the nodes hold one by one (largest CPU first, each on the node with
/// the most CPU left that takes it whole).
fn placement(expected: &[Expected], nodes: &[NodeRoom], stacks: u64) -> Check {
    let mut left: Vec<Resources> = nodes.iter().map(|n| n.left).collect();
    let mut kinds: Vec<&Expected> = expected.iter().collect();
    kinds.sort_by_key(|e| std::cmp::Reverse(e.each.cpu_milli));
    let mut placed = 0_u64;
    let mut first_left_out = None;
    for kind in kinds {
        for _ in 0..kind.count {
            match left
                .iter_mut()
                .filter(|n| n.holds(&kind.each))
                .max_by_key(|n| n.cpu_milli)
            {
                Some(node) => {
                    node.take(&kind.each);
                    placed += 1;
                }
                None => {
                    first_left_out.get_or_insert(kind.each);
                    break;
                }
            }
        }
    }
    let mut verdict = check(
        "placement",
        stacks as f64,
        placed as f64,
        "of them placed on the stack nodes",
    );
    if let Some(Resources {
        cpu_milli,
        memory_bytes,
        ..
    }) = first_left_out
    {
        verdict.detail = format!(
            "{placed} of {stacks} stacks fit on {} stack nodes; no node has room left for one of {cpu_milli}m CPU and {memory_bytes} bytes",
            nodes.len()
        );
    }
    verdict
}

/// Images on every node: an image missing on some is a no-go (its first stacks there wait for
/// the pull), named with how many nodes hold it.
fn images(expected: &[Expected], nodes: &[NodeRoom]) -> Check {
    let wanted: BTreeSet<&str> = expected
        .iter()
        .flat_map(|e| e.images.iter().map(String::as_str))
        .collect();
    let mut missing = Vec::new();
    for image in &wanted {
        let holding = nodes.iter().filter(|n| holds_image(&n.images, image)).count();
        if holding < nodes.len() || nodes.is_empty() {
            missing.push(format!("{image} on {holding} of {} nodes", nodes.len()));
        }
    }
    let present = wanted.len() - missing.len();
    let mut verdict = check(
        "images",
        wanted.len() as f64,
        present as f64,
        "images on every stack node",
    );
    if !missing.is_empty() {
        verdict.detail = format!("missing: {}", missing.join(", "));
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cpu: i64, memory: i64, pods: i64, images: &[&str]) -> NodeRoom {
        NodeRoom {
            name: name.into(),
            left: Resources {
                cpu_milli: cpu,
                memory_bytes: memory,
                pods,
            },
            images: images.iter().map(|i| (*i).to_owned()).collect(),
        }
    }

    fn expected(count: u32, cpu: i64) -> Expected {
        Expected {
            count,
            each: Resources::of_one_stack(cpu, 1 << 20),
            ports: 1,
            images: vec!["registry.example/ctf/web:1".into()],
        }
    }

    fn room(nodes: Vec<NodeRoom>) -> Room {
        Room {
            node_ports_free: 100,
            nodes,
            tenant: None,
            create_rate: 50.0,
            opening_seconds: None,
        }
    }

    fn verdict<'a>(f: &'a Forecast, limit: &str) -> &'a Check {
        f.checks.iter().find(|c| c.limit == limit).expect(limit)
    }

    #[test]
    fn everything_within_room_is_go_with_the_headroom_left() {
        let nodes = vec![
            node("a", 4000, 8 << 30, 110, &["registry.example/ctf/web:1"]),
            node("b", 4000, 8 << 30, 110, &["registry.example/ctf/web:1"]),
        ];
        let f = forecast(&[expected(20, 250)], &room(nodes));
        assert!(f.go, "{f:?}");
        assert_eq!(verdict(&f, "node_ports").headroom, 80.0);
        assert_eq!(verdict(&f, "cpu").headroom, 3000.0);
        assert_eq!(verdict(&f, "placement").available, 20.0);
        assert!(f.summary.starts_with("go: 20 stacks"), "{}", f.summary);
    }

    #[test]
    fn each_limit_too_low_is_named_with_what_is_missing() {
        let nodes = vec![node("a", 1000, 8 << 30, 3, &[])];
        let mut r = room(nodes);
        r.node_ports_free = 2;
        r.tenant = Some(("ctf".into(), 3, 2));
        r.opening_seconds = Some(1.0);
        r.create_rate = 2.0;
        let f = forecast(&[expected(5, 300)], &r);
        assert!(!f.go);
        for (limit, headroom) in [
            ("node_ports", -3.0),
            ("cpu", -500.0),
            ("pods", -2.0),
            ("placement", -2.0),
            ("images", -1.0),
            ("tenant", -4.0),
            ("create_rate", -3.0),
        ] {
            let c = verdict(&f, limit);
            assert!(!c.go, "{limit}: {c:?}");
            assert_eq!(c.headroom, headroom, "{limit}: {c:?}");
            assert!(f.summary.contains(limit), "{}", f.summary);
        }
        assert!(verdict(&f, "memory").go);
    }

    #[test]
    fn placement_sees_what_sums_hide() {
        // 3 CPUs left in all, but no node has 2 of them.
        let nodes = vec![node("a", 1500, 1 << 30, 10, &[]), node("b", 1500, 1 << 30, 10, &[])];
        let f = forecast(&[expected(1, 2000)], &room(nodes));
        assert!(verdict(&f, "cpu").go);
        let placement = verdict(&f, "placement");
        assert!(!placement.go && placement.detail.contains("0 of 1"), "{placement:?}");
    }
}
