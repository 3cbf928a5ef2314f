//! The lifecycle rule: whether a stack lives on, why it ends, and what its record should say.
//!
//! One pure function, [`judge`], decides for both callers: API reads (one stack or one page)
//! and the reconciler's pass (every stack). Both read a record before its cluster objects,
//! and a create writes the record only after its pod and service exist, so an object missing
//! at read time is gone, however young the stack; no grace is needed for creates in flight.
//! Ending a stack is [`end::end_stack`], the one removal path of the API and the reconciler.

pub mod end;
pub mod views;

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::cluster::Scheduling;
use crate::model::{StackRecord, StackStatus};
use crate::store::ObservedState;
use views::{NodeView, PodView, ServiceView};

pub use end::{ObjectKind, Removal, StackRemover, end_stack};

/// The settings the rule depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// `STACK_SCHEDULING_TIMEOUT`: how long a stack may stay unscheduled, counted from its
    /// record's `created_at` (the functions' clock, the same as `now` and the TTL's).
    pub scheduling_timeout: Duration,
    /// `STACK_REAP_TERMINATED`: end stacks whose pod succeeded or failed before their TTL.
    pub reap_terminated: bool,
}

impl Rules {
    pub fn of(config: &crate::config::Config) -> Self {
        Self {
            scheduling_timeout: config.scheduling_timeout,
            reap_terminated: config.reap_terminated,
        }
    }
}

/// Why a stack ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RemovalReason {
    /// Its TTL passed.
    Expired,
    PodMissing,
    ServiceMissing,
    /// The node its pod was bound to no longer exists.
    NodeMissing,
    /// Not scheduled within the scheduling timeout.
    Unschedulable,
    /// Pod succeeded or failed and `reap_terminated` is on.
    Terminated,
    /// A client deleted it.
    Deleted,
}

/// What the cluster shows of one stack: its pod, its service and the node the pod is bound
/// to (`None` if unbound or if that node does not exist), as the caller found them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Observed<'a> {
    pub pod: Option<&'a PodView>,
    pub service: Option<&'a ServiceView>,
    pub node: Option<&'a NodeView>,
}

/// The rule's answer for one stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Alive, and the record already says what the cluster shows.
    Keep,
    /// Alive; the record should say this.
    Update(ObservedState),
    /// Ended; `mark` is written to the record before anything is deleted, so that clients
    /// see the terminal status even if the removal fails half-way.
    End {
        reason: RemovalReason,
        mark: Option<ObservedState>,
    },
}

impl Verdict {
    fn end(reason: RemovalReason) -> Self {
        Verdict::End { reason, mark: None }
    }
}

pub fn judge(record: &StackRecord, observed: Observed<'_>, now: Timestamp, rules: &Rules) -> Verdict {
    if record.ttl_expires_at <= now {
        return Verdict::end(RemovalReason::Expired);
    }
    // An object without our label, or already being deleted, counts as gone.
    let present = |o: &views::ObjectView| o.managed && !o.terminating;
    let Some(pod) = observed.pod.filter(|p| present(&p.object)) else {
        return Verdict::end(RemovalReason::PodMissing);
    };
    // A hostport stack has no Service: its pod holds its ports.
    if record.exposure.has_service() && observed.service.filter(|s| present(&s.object)).is_none() {
        return Verdict::end(RemovalReason::ServiceMissing);
    }
    let (node_id, node_public_ip) = match &pod.scheduling {
        Scheduling::Scheduled(node_name) => match observed.node.filter(|n| &n.name == node_name) {
            Some(node) => (node_name.clone(), node.external_ip.clone()),
            None => {
                let mark = (record.status != StackStatus::NodeDeleted).then(|| ObservedState {
                    status: StackStatus::NodeDeleted,
                    node_id: node_name.clone(),
                    node_public_ip: record.node_public_ip.clone(),
                });
                return Verdict::End {
                    reason: RemovalReason::NodeMissing,
                    mark,
                };
            }
        },
        Scheduling::Unschedulable(_) | Scheduling::Pending => {
            if older_than(Some(record.created_at), now, rules.scheduling_timeout) {
                return Verdict::end(RemovalReason::Unschedulable);
            }
            (String::new(), None)
        }
    };
    if rules.reap_terminated && matches!(pod.status, StackStatus::Stopped | StackStatus::Failed) {
        return Verdict::end(RemovalReason::Terminated);
    }
    // A pod that ran to its end keeps the status it showed last.
    let status = if pod.status == StackStatus::Creating && record.status.is_terminal() {
        record.status
    } else {
        pod.status
    };
    let observed = ObservedState {
        status,
        node_id,
        node_public_ip,
    };
    if observed == ObservedState::of(record) {
        Verdict::Keep
    } else {
        Verdict::Update(observed)
    }
}

/// Strictly older than `age`; an unknown creation time is never old enough.
pub fn older_than(created_at: Option<Timestamp>, now: Timestamp, age: Duration) -> bool {
    let age = SignedDuration::try_from(age).unwrap_or(SignedDuration::MAX);
    created_at.is_some_and(|created| now.duration_since(created) > age)
}

#[cfg(test)]
mod tests {
    use super::views::ObjectView;
    use super::*;
    use crate::model::{PortMapping, Protocol, StackId};

    const RULES: Rules = Rules {
        scheduling_timeout: Duration::from_secs(20),
        reap_terminated: false,
    };

    fn now() -> Timestamp {
        "2030-01-01T12:00:00Z".parse().unwrap()
    }

    fn ago(secs: i64) -> Timestamp {
        now() - SignedDuration::from_secs(secs)
    }

    /// A `creating` record made `age` seconds ago, with no node yet.
    fn record(age: i64) -> StackRecord {
        StackRecord::test()
            .id("stack-00000000000000aa".parse::<StackId>().unwrap())
            .ports(vec![PortMapping {
                container_port: 80,
                protocol: Protocol::Tcp,
                node_port: 31001,
            }])
            .status(StackStatus::Creating)
            .created_at(ago(age))
            .ttl_expires_at(now() + SignedDuration::from_hours(2))
    }

    fn object(created_secs_ago: i64) -> ObjectView {
        ObjectView {
            name: "stack-00000000000000aa".into(),
            namespace: "stacks".into(),
            managed: true,
            created_at: Some(ago(created_secs_ago)),
            terminating: false,
        }
    }

    fn pod(scheduling: Scheduling, status: StackStatus, created_secs_ago: i64) -> PodView {
        PodView {
            object: object(created_secs_ago),
            status,
            scheduling,
        }
    }

    fn judged(record: &StackRecord, pod: &PodView, node: Option<&NodeView>) -> Verdict {
        let service = ServiceView { object: object(0) };
        let observed = Observed {
            pod: Some(pod),
            service: Some(&service),
            node,
        };
        judge(record, observed, now(), &RULES)
    }

    #[test]
    fn the_scheduling_timeout_counts_from_the_records_creation_not_the_pods() {
        let unschedulable = Scheduling::Unschedulable("0/3 nodes are available".into());
        // The pod's own clock (the apiserver's) says it is old; the record is young: kept.
        let old_pod = pod(unschedulable.clone(), StackStatus::Creating, 3_600);
        assert_eq!(judged(&record(5), &old_pod, None), Verdict::Keep);
        // The record is past the timeout, whatever the pod's creation time says.
        let young_pod = pod(unschedulable, StackStatus::Creating, 1);
        assert_eq!(
            judged(&record(21), &young_pod, None),
            Verdict::End {
                reason: RemovalReason::Unschedulable,
                mark: None
            }
        );
        // Exactly the timeout is not past it.
        let pending = pod(Scheduling::Pending, StackStatus::Creating, 20);
        assert_eq!(judged(&record(20), &pending, None), Verdict::Keep);
    }

    #[test]
    fn a_scheduled_pod_fills_in_node_and_address() {
        let node = NodeView {
            name: "n1".into(),
            external_ip: Some("203.0.113.1".into()),
        };
        let running = pod(Scheduling::Scheduled("n1".into()), StackStatus::Running, 5);
        assert_eq!(
            judged(&record(5), &running, Some(&node)),
            Verdict::Update(ObservedState {
                status: StackStatus::Running,
                node_id: "n1".into(),
                node_public_ip: Some("203.0.113.1".into()),
            })
        );
        // A node of another name is not the pod's node: it is gone.
        let other = NodeView {
            name: "n2".into(),
            external_ip: None,
        };
        assert!(matches!(
            judged(&record(5), &running, Some(&other)),
            Verdict::End {
                reason: RemovalReason::NodeMissing,
                mark: Some(_)
            }
        ));
    }

    #[test]
    fn objects_not_ours_or_terminating_count_as_missing() {
        let mut foreign = pod(Scheduling::Pending, StackStatus::Creating, 1);
        foreign.object.managed = false;
        assert_eq!(
            judged(&record(1), &foreign, None),
            Verdict::end(RemovalReason::PodMissing)
        );
        let mut leaving = pod(Scheduling::Pending, StackStatus::Creating, 1);
        leaving.object.terminating = true;
        assert_eq!(
            judged(&record(1), &leaving, None),
            Verdict::end(RemovalReason::PodMissing)
        );
        let alive = pod(Scheduling::Pending, StackStatus::Creating, 1);
        let observed = Observed {
            pod: Some(&alive),
            service: None,
            node: None,
        };
        assert_eq!(
            judge(&record(1), observed, now(), &RULES),
            Verdict::end(RemovalReason::ServiceMissing)
        );
    }
}
