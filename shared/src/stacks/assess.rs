//! Whether a stack is still alive and what its record should say (pure).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::cluster::{Scheduling, node_external_ip, observed_status, scheduling_of};
use crate::model::{StackRecord, StackStatus};
use crate::store::ObservedState;

/// Why a stack counts as gone: its remains are removed and it answers 404.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoneReason {
    Expired,
    PodMissing,
    ServiceMissing,
    NodeMissing,
    /// Still unscheduled past the scheduling timeout.
    NeverScheduled,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assessment {
    Alive(ObservedState),
    Gone(GoneReason),
}

/// What the cluster shows of one stack.
#[derive(Debug, Clone, Copy)]
pub struct StackObjects<'a> {
    pub pod: Option<&'a Pod>,
    pub service_exists: bool,
    /// The node the pod is bound to; `None` if unbound or if that node does not exist.
    pub node: Option<&'a Node>,
}

pub fn assess(
    record: &StackRecord,
    objects: StackObjects<'_>,
    now: Timestamp,
    scheduling_timeout: std::time::Duration,
) -> Assessment {
    if record.ttl_expires_at <= now {
        return Assessment::Gone(GoneReason::Expired);
    }
    let Some(pod) = objects.pod.filter(|p| p.metadata.deletion_timestamp.is_none()) else {
        return Assessment::Gone(GoneReason::PodMissing);
    };
    if !objects.service_exists {
        return Assessment::Gone(GoneReason::ServiceMissing);
    }
    let status = observed_status(pod);
    let (node_id, node_public_ip) = match scheduling_of(pod) {
        Scheduling::Scheduled(node_name) => match objects.node {
            Some(node) => (node_name, node_external_ip(node)),
            None => return Assessment::Gone(GoneReason::NodeMissing),
        },
        Scheduling::Pending | Scheduling::Unschedulable(_) => {
            let waited = now.duration_since(record.created_at);
            if waited.unsigned_abs() > scheduling_timeout && waited.is_positive() {
                return Assessment::Gone(GoneReason::NeverScheduled);
            }
            (String::new(), None)
        }
    };
    // A pod that has run to its end keeps what it showed last.
    let status = if status == StackStatus::Creating && record.status.is_terminal() {
        record.status
    } else {
        status
    };
    Assessment::Alive(ObservedState {
        status,
        node_id,
        node_public_ip,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PortMapping, Protocol, StackId};
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::time::Duration;

    const TIMEOUT: Duration = Duration::from_secs(20);

    fn record(created: Timestamp) -> StackRecord {
        let id = StackId::generate();
        StackRecord {
            pod_id: id.pod_name(),
            service_name: id.service_name(),
            stack_id: id,
            namespace: "stacks".into(),
            node_id: String::new(),
            node_public_ip: None,
            pod_spec: String::new(),
            ports: vec![PortMapping {
                container_port: 80,
                protocol: Protocol::Tcp,
                node_port: 31001,
            }],
            status: StackStatus::Creating,
            ttl_expires_at: created + jiff::SignedDuration::from_hours(2),
            created_at: created,
            updated_at: created,
            requested_cpu_milli: 100,
            requested_memory_bytes: 1 << 20,
            idempotency_key: None,
        }
    }

    fn pod(node: Option<&str>, phase: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn node(ip: &str) -> Node {
        Node {
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress {
                    type_: "ExternalIP".into(),
                    address: ip.into(),
                }]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn running_pod_on_live_node_is_alive_with_its_address() {
        let now = Timestamp::now();
        let (p, n) = (pod(Some("n1"), "Running"), node("203.0.113.1"));
        let got = assess(
            &record(now),
            StackObjects {
                pod: Some(&p),
                service_exists: true,
                node: Some(&n),
            },
            now,
            TIMEOUT,
        );
        assert_eq!(
            got,
            Assessment::Alive(ObservedState {
                status: StackStatus::Running,
                node_id: "n1".into(),
                node_public_ip: Some("203.0.113.1".into())
            })
        );
    }

    #[test]
    fn every_way_of_being_gone() {
        let now = Timestamp::now();
        let r = record(now);
        let (p, n) = (pod(Some("n1"), "Running"), node("203.0.113.1"));
        let alive = StackObjects {
            pod: Some(&p),
            service_exists: true,
            node: Some(&n),
        };
        let gone = |objects, at| match assess(&r, objects, at, TIMEOUT) {
            Assessment::Gone(reason) => Some(reason),
            Assessment::Alive(_) => None,
        };
        assert_eq!(gone(alive, now), None);
        assert_eq!(gone(alive, r.ttl_expires_at), Some(GoneReason::Expired));
        assert_eq!(
            gone(StackObjects { pod: None, ..alive }, now),
            Some(GoneReason::PodMissing)
        );
        assert_eq!(
            gone(
                StackObjects {
                    service_exists: false,
                    ..alive
                },
                now
            ),
            Some(GoneReason::ServiceMissing)
        );
        assert_eq!(
            gone(StackObjects { node: None, ..alive }, now),
            Some(GoneReason::NodeMissing)
        );
        let mut deleting = p.clone();
        deleting.metadata.deletion_timestamp = Some(Time(now));
        assert_eq!(
            gone(
                StackObjects {
                    pod: Some(&deleting),
                    ..alive
                },
                now
            ),
            Some(GoneReason::PodMissing)
        );
    }

    #[test]
    fn unscheduled_pod_is_given_the_scheduling_timeout() {
        let created = Timestamp::now();
        let r = record(created);
        let p = pod(None, "Pending");
        let objects = StackObjects {
            pod: Some(&p),
            service_exists: true,
            node: None,
        };
        let soon = created + jiff::SignedDuration::from_secs(5);
        assert!(matches!(
            assess(&r, objects, soon, TIMEOUT),
            Assessment::Alive(ObservedState {
                status: StackStatus::Creating,
                ..
            })
        ));
        let late = created + jiff::SignedDuration::from_secs(21);
        assert_eq!(
            assess(&r, objects, late, TIMEOUT),
            Assessment::Gone(GoneReason::NeverScheduled)
        );
    }

    #[test]
    fn terminated_pods_keep_their_stack_until_ttl() {
        let now = Timestamp::now();
        let n = node("203.0.113.1");
        for (phase, status) in [("Succeeded", StackStatus::Stopped), ("Failed", StackStatus::Failed)] {
            let p = pod(Some("n1"), phase);
            let got = assess(
                &record(now),
                StackObjects {
                    pod: Some(&p),
                    service_exists: true,
                    node: Some(&n),
                },
                now,
                TIMEOUT,
            );
            assert!(
                matches!(got, Assessment::Alive(ObservedState { status: s, .. }) if s == status),
                "{phase}"
            );
        }
    }
}
