//! The lifecycle rule: whether a stack lives on, why it ends, and what its record should say.
//!
//! One pure function, [`judge`], decides for both callers: API reads (one stack or one page)
//! and the reconciler's pass (every stack); a create applies its pod part, [`judge_pod`], to
//! what it saw before answering. Both read a record before its cluster objects,
//! and a create writes the record only after its pod and service exist, so an object missing
//! at read time is gone, however young the stack; no grace is needed for creates in flight.
//! Ending a stack is [`end::end_stack`], the one removal path of the API and the reconciler.
//!
//! Statuses tell what a participant meets: `running` only while the pod is Ready
//! (connectable now), `creating` until then. A pod that cannot start fails its stack: at the
//! first observation for a definite cause (the image does not exist, the registry refuses,
//! the container cannot be configured or started, a container exited), and for a transient
//! one (registry unreachable, back-off, still pulling, started but not ready) once the stack
//! is older than `STACK_START_TIMEOUT`, so no stack stays `creating` past it. A failed stack's
//! objects go at once; its record stays as a tombstone (status, reason, message) for
//! `STACK_FAILED_RETENTION`, then goes too. A pod its kubelet refused to admit (a host port
//! taken, the node out of a resource) is not the challenge's failure: the stack is gone.

pub(crate) mod end;
pub(crate) mod views;

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::cluster::{NodePortHolders, PodHealth, Rejection, Scheduling};
use crate::config::format_duration;
use crate::model::{Exposure, Failure, FailureReason, ObservedState, StackRecord, StackStatus};
use views::{NodeView, PodView, ServiceView};

pub(crate) use end::{ObjectKind, Removal, end_stack};

/// The settings the rule depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rules {
    /// `STACK_SCHEDULING_TIMEOUT`: how long a stack may stay unscheduled, counted from its
    /// record's `created_at` (the functions' clock, the same as `now` and the TTL's).
    pub scheduling_timeout: Duration,
    /// `STACK_START_TIMEOUT`: how long a stack may take to become Ready, counted like the
    /// scheduling timeout (and at least as long, so an unscheduled stack is gone first).
    pub start_timeout: Duration,
    /// `STACK_FAILED_RETENTION`: how long a failed stack's record is kept, from `failed_at`.
    pub failed_retention: Duration,
    /// `STACK_REAP_TERMINATED`: end stacks whose pod succeeded before their TTL (failed ones
    /// always release their objects at once).
    pub reap_terminated: bool,
    /// `STACK_PROXY_SYNC`: how long after its pod is Ready a node-port stack answers (kube-proxy
    /// programs the node port after the pod's endpoint is published).
    pub proxy_sync: Duration,
}

impl Rules {
    pub(crate) fn of(config: &crate::config::Config) -> Self {
        Self {
            scheduling_timeout: config.scheduling_timeout,
            start_timeout: config.start_timeout,
            failed_retention: config.failed_retention,
            reap_terminated: config.reap_terminated,
            proxy_sync: config.proxy_sync,
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
    /// Its kubelet refused the pod (host port taken, node out of a resource): gone, like an
    /// unschedulable one, since the challenge itself is not at fault.
    Rejected,
    /// Pod succeeded and `reap_terminated` is on.
    Terminated,
    /// Its pod failed or cannot start: the objects go, the record stays as a tombstone.
    Failed,
    /// A failed stack's tombstone outlived `STACK_FAILED_RETENTION`.
    RetentionEnded,
    /// A client deleted it.
    Deleted,
    /// Its tenant was removed from `STACK_TENANTS`.
    TenantRemoved,
}

impl RemovalReason {
    /// Only a failure keeps the record (the tombstone clients read the reason from).
    pub(crate) fn keeps_record(self) -> bool {
        self == RemovalReason::Failed
    }

    /// Judged on a live record: if a concurrent read or pass has meanwhile found the stack
    /// failed, its tombstone is not removed for this reason (the objects are gone either way).
    pub(crate) fn yields_to_failure(self) -> bool {
        matches!(
            self,
            RemovalReason::PodMissing
                | RemovalReason::ServiceMissing
                | RemovalReason::NodeMissing
                | RemovalReason::Unschedulable
                | RemovalReason::Rejected
                | RemovalReason::Terminated
        )
    }
}

/// What the cluster shows of one stack: its pod, its service and the node the pod is bound
/// to (`None` if unbound or if that node does not exist), as the caller found them, and the
/// node ports the cluster's Services hold (`None`: not read, no port is judged taken).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StackObjects<'a> {
    pub pod: Option<&'a PodView>,
    pub service: Option<&'a ServiceView>,
    pub node: Option<&'a NodeView>,
    pub node_port_holders: Option<&'a NodePortHolders>,
}

/// The rule's answer for one stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Alive (or a tombstone within its retention), and the record already says what the
    /// cluster shows.
    Keep,
    /// Alive; the record should say this.
    Update(ObservedState),
    /// Ended (objects removed, and the record unless [`RemovalReason::keeps_record`]);
    /// `mark` is written to the record before anything is deleted, so that clients see the
    /// terminal status even if the removal fails half-way.
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

/// What a pod's health means for its stack, `now`, for a stack created at `created_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PodVerdict {
    /// It lives on with this status.
    Live(StackStatus),
    /// It failed: definitely, or still not Ready past its start deadline.
    Failed(Failure),
    /// Its kubelet refused the pod: not a failure of the challenge.
    Rejected(Rejection),
}

/// The pod part of [`judge`], which a create also applies: Ready is `running` (for a stack
/// exposed through a Service, once kube-proxy has had `proxy_sync` to program its node port:
/// `running` means a participant's connection succeeds now), starting is `creating` until the
/// start deadline and a failure after it, a definite failure fails at once, a succeeded pod is
/// `stopped`.
pub(crate) fn judge_pod(
    created_at: Timestamp,
    exposure: Exposure,
    health: &PodHealth,
    now: Timestamp,
    rules: &Rules,
) -> PodVerdict {
    match health {
        PodHealth::Ready { ready_by } if exposure.has_service() && !proxied(*ready_by, now, rules.proxy_sync) => {
            PodVerdict::Live(StackStatus::Creating)
        }
        PodHealth::Ready { .. } => PodVerdict::Live(StackStatus::Running),
        PodHealth::Succeeded => PodVerdict::Live(StackStatus::Stopped),
        PodHealth::Failed(failure) => PodVerdict::Failed(failure.clone()),
        PodHealth::Rejected(rejection) => PodVerdict::Rejected(rejection.clone()),
        PodHealth::Starting(holdup) if older_than(Some(created_at), now, rules.start_timeout) => {
            PodVerdict::Failed(Failure::new(
                holdup.reason,
                format!(
                    "not ready within {} of its creation: {}",
                    format_duration(rules.start_timeout),
                    holdup.message
                ),
            ))
        }
        PodHealth::Starting(_) => PodVerdict::Live(StackStatus::Creating),
    }
}

/// Whether kube-proxy has had `sync` since the pod was Ready (by `ready_by` at the latest); a
/// pod whose Ready time is unknown counts as long Ready, and a zero `sync` (no kube-proxy to
/// wait for) as synced at once.
fn proxied(ready_by: Option<Timestamp>, now: Timestamp, sync: Duration) -> bool {
    let sync_signed = SignedDuration::try_from(sync).unwrap_or(SignedDuration::MAX);
    sync.is_zero() || ready_by.is_none_or(|ready| now.duration_since(ready) >= sync_signed)
}

/// How much of `sync` is left since `ready_by` (zero once it has passed).
pub(crate) fn proxy_sync_left(ready_by: Option<Timestamp>, now: Timestamp, sync: Duration) -> Duration {
    let waited = ready_by.map_or(sync, |ready| {
        Duration::try_from(now.duration_since(ready)).unwrap_or(Duration::ZERO)
    });
    sync.saturating_sub(waited)
}

pub(crate) fn judge(record: &StackRecord, observed: StackObjects<'_>, now: Timestamp, rules: &Rules) -> Verdict {
    if record.ttl_expires_at <= now {
        return Verdict::end(RemovalReason::Expired);
    }
    // An object without our label, or already being deleted, counts as gone.
    let present = |o: &views::ObjectView| o.managed && !o.terminating;
    if record.status.is_tombstone() {
        let left =
            observed.pod.is_some_and(|p| present(&p.object)) || observed.service.is_some_and(|s| present(&s.object));
        return tombstone(record, left, now, rules);
    }
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
                    failure: None,
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
    let failed = |failure| Verdict::End {
        reason: RemovalReason::Failed,
        mark: Some(ObservedState {
            status: StackStatus::Failed,
            node_id: node_id.clone(),
            node_public_ip: node_public_ip.clone(),
            failure: Some(failure),
        }),
    };
    let status = match &pod.health {
        // A pod that ran to its end keeps the status it showed last.
        PodHealth::Starting(_) if record.status.is_terminal() => record.status,
        health => match judge_pod(record.created_at, record.exposure, health, now, rules) {
            PodVerdict::Rejected(_) => return Verdict::end(RemovalReason::Rejected),
            PodVerdict::Failed(failure) => return failed(failure),
            PodVerdict::Live(StackStatus::Stopped) if rules.reap_terminated => {
                return Verdict::end(RemovalReason::Terminated);
            }
            PodVerdict::Live(status) => status,
        },
    };
    if !status.is_terminal()
        && let Some(failure) = port_taken(record, observed.node_port_holders)
    {
        return failed(failure);
    }
    let observed = ObservedState {
        status,
        node_id,
        node_public_ip,
        failure: None,
    };
    if observed == ObservedState::of(record) {
        Verdict::Keep
    } else {
        Verdict::Update(observed)
    }
}

/// A hostport stack one of whose ports a Service of the cluster holds: kube-proxy forwards a
/// node port on every node ahead of a host port, so its participants reach that Service, for
/// as long as both exist. (A stack behind a NodePort Service holds its port itself.)
fn port_taken(record: &StackRecord, holders: Option<&NodePortHolders>) -> Option<Failure> {
    if record.exposure != Exposure::HostPort {
        return None;
    }
    let (port, service) = holders?.taken(&record.ports)?;
    Some(Failure::new(
        FailureReason::PortTaken,
        format!(
            "port {}/{} is also the node port of Service {service}, which kube-proxy forwards on every node \
             ahead of the stack's host port",
            port.node_port, port.protocol
        ),
    ))
}

/// A failed stack: its record stays, holding nothing, for the retention; objects still
/// `left` (a removal that failed half-way) are removed again.
fn tombstone(record: &StackRecord, left: bool, now: Timestamp, rules: &Rules) -> Verdict {
    if older_than(Some(record.failed_since()), now, rules.failed_retention) {
        Verdict::end(RemovalReason::RetentionEnded)
    } else if left {
        Verdict::end(RemovalReason::Failed)
    } else {
        Verdict::Keep
    }
}

/// Strictly older than `age`; an unknown creation time is never old enough.
pub(crate) fn older_than(created_at: Option<Timestamp>, now: Timestamp, age: Duration) -> bool {
    let age = SignedDuration::try_from(age).unwrap_or(SignedDuration::MAX);
    created_at.is_some_and(|created| now.duration_since(created) > age)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::views::ObjectView;
    use super::*;
    use crate::cluster::kubelet;
    use crate::model::{FailureReason as R, PortMapping, Protocol, StackId};

    const RULES: Rules = Rules {
        scheduling_timeout: Duration::from_secs(20),
        start_timeout: Duration::from_secs(300),
        failed_retention: Duration::from_secs(600),
        reap_terminated: false,
        proxy_sync: Duration::from_secs(1),
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

    /// Failed `secs` ago: a tombstone.
    fn tombstone(secs: i64) -> StackRecord {
        record(3_600).failed(R::ImageNotFound, "container web: ErrImagePull: not found", ago(secs))
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

    fn pod(scheduling: Scheduling, health: PodHealth, created_secs_ago: i64) -> PodView {
        PodView {
            object: object(created_secs_ago),
            health,
            scheduling,
        }
    }

    fn starting() -> PodHealth {
        PodHealth::Starting(Failure::new(R::StartTimeout, "phase Pending"))
    }

    fn n1() -> NodeView {
        NodeView {
            name: "n1".into(),
            external_ip: Some("203.0.113.1".into()),
        }
    }

    /// What a read or a pass sees: the pod as its kubelet left it, on node `n1`, which exists.
    fn judged_pod(record: &StackRecord, pod: &Pod, rules: &Rules) -> Verdict {
        let view = PodView::of(pod);
        let service = ServiceView { object: object(0) };
        let node = n1();
        let observed = StackObjects {
            pod: Some(&view),
            service: Some(&service),
            node: Some(&node),
            node_port_holders: None,
        };
        judge(record, observed, now(), rules)
    }

    fn judged(record: &StackRecord, pod: &PodView, node: Option<&NodeView>) -> Verdict {
        let service = ServiceView { object: object(0) };
        let observed = StackObjects {
            pod: Some(pod),
            service: Some(&service),
            node,
            node_port_holders: None,
        };
        judge(record, observed, now(), &RULES)
    }

    fn on_n1(status: StackStatus) -> ObservedState {
        ObservedState {
            status,
            node_id: "n1".into(),
            node_public_ip: Some("203.0.113.1".into()),
            failure: None,
        }
    }

    /// The failure a verdict ends a stack with, if it fails it.
    fn failure_of(verdict: &Verdict) -> Option<&Failure> {
        match verdict {
            Verdict::End {
                reason: RemovalReason::Failed,
                mark:
                    Some(ObservedState {
                        status: StackStatus::Failed,
                        failure: Some(failure),
                        ..
                    }),
            } => Some(failure),
            _ => None,
        }
    }

    #[test]
    fn the_scheduling_timeout_counts_from_the_records_creation_not_the_pods() {
        let unschedulable = Scheduling::Unschedulable("0/3 nodes are available".into());
        // The pod's own clock (the apiserver's) says it is old; the record is young: kept.
        let old_pod = pod(unschedulable.clone(), starting(), 3_600);
        assert_eq!(judged(&record(5), &old_pod, None), Verdict::Keep);
        // The record is past the timeout, whatever the pod's creation time says.
        let young_pod = pod(unschedulable, starting(), 1);
        assert_eq!(
            judged(&record(21), &young_pod, None),
            Verdict::End {
                reason: RemovalReason::Unschedulable,
                mark: None
            }
        );
        // Exactly the timeout is not past it.
        let pending = pod(Scheduling::Pending, starting(), 20);
        assert_eq!(judged(&record(20), &pending, None), Verdict::Keep);
        // Unscheduled past both deadlines: gone (404), not failed.
        let pending = pod(Scheduling::Pending, starting(), 400);
        assert_eq!(
            judged(&record(400), &pending, None),
            Verdict::end(RemovalReason::Unschedulable)
        );
    }

    #[test]
    fn a_scheduled_pod_fills_in_node_and_address() {
        let node = n1();
        let ready = pod(
            Scheduling::Scheduled("n1".into()),
            PodHealth::Ready { ready_by: None },
            5,
        );
        assert_eq!(
            judged(&record(5), &ready, Some(&node)),
            Verdict::Update(on_n1(StackStatus::Running))
        );
        // A node of another name is not the pod's node: it is gone.
        let other = NodeView {
            name: "n2".into(),
            external_ip: None,
        };
        assert!(matches!(
            judged(&record(5), &ready, Some(&other)),
            Verdict::End {
                reason: RemovalReason::NodeMissing,
                mark: Some(_)
            }
        ));
    }

    #[test]
    fn objects_not_ours_or_terminating_count_as_missing() {
        let mut foreign = pod(Scheduling::Pending, starting(), 1);
        foreign.object.managed = false;
        assert_eq!(
            judged(&record(1), &foreign, None),
            Verdict::end(RemovalReason::PodMissing)
        );
        let mut leaving = pod(Scheduling::Pending, starting(), 1);
        leaving.object.terminating = true;
        assert_eq!(
            judged(&record(1), &leaving, None),
            Verdict::end(RemovalReason::PodMissing)
        );
        let alive = pod(Scheduling::Pending, starting(), 1);
        let observed = StackObjects {
            pod: Some(&alive),
            ..StackObjects::default()
        };
        assert_eq!(
            judge(&record(1), observed, now(), &RULES),
            Verdict::end(RemovalReason::ServiceMissing)
        );
    }

    #[test]
    fn a_node_port_stack_reads_running_once_kube_proxy_had_its_sync() {
        // Ready since the whole second `now() - since`: by one second later at the latest.
        let ready = |since: i64| PodHealth::Ready {
            ready_by: Some(ago(since) + SignedDuration::from_secs(1)),
        };
        let judged = |exposure, health: &PodHealth| judge_pod(ago(5), exposure, health, now(), &RULES);
        for (exposure, ready_since, status) in [
            (Exposure::NodePort, 0, StackStatus::Creating),
            (Exposure::NodePort, 1, StackStatus::Creating),
            (Exposure::NodePort, 2, StackStatus::Running),
            (Exposure::HostPort, 0, StackStatus::Running),
        ] {
            let verdict = judged(exposure, &ready(ready_since));
            assert_eq!(
                verdict,
                PodVerdict::Live(status),
                "{exposure:?} ready {ready_since}s ago"
            );
        }
        // No kube-proxy to wait for (STACK_PROXY_SYNC=0s).
        let no_proxy = Rules {
            proxy_sync: Duration::ZERO,
            ..RULES
        };
        assert_eq!(
            judge_pod(ago(5), Exposure::NodePort, &ready(0), now(), &no_proxy),
            PodVerdict::Live(StackStatus::Running)
        );
        // A Ready time the kubelet did not give: long Ready.
        let unknown = PodHealth::Ready { ready_by: None };
        assert_eq!(
            judged(Exposure::NodePort, &unknown),
            PodVerdict::Live(StackStatus::Running)
        );
        // Not a start failure past the deadline: it is about to answer.
        assert_eq!(
            judge_pod(ago(301), Exposure::NodePort, &ready(0), now(), &RULES),
            PodVerdict::Live(StackStatus::Creating)
        );
    }

    #[test]
    fn running_means_ready_and_a_started_pod_not_ready_is_creating() {
        assert_eq!(
            judged_pod(&record(5), &kubelet::ready(), &RULES),
            Verdict::Update(on_n1(StackStatus::Running))
        );
        // Phase Running, container started, readiness probe not passed: not connectable.
        assert_eq!(
            judged_pod(&record(5), &kubelet::started_not_ready(), &RULES),
            Verdict::Update(on_n1(StackStatus::Creating))
        );
        // A running stack whose pod lost its readiness is not connectable any more.
        let running = record(60)
            .node("n1")
            .public_ip("203.0.113.1")
            .status(StackStatus::Running);
        assert_eq!(
            judged_pod(&running, &kubelet::started_not_ready(), &RULES),
            Verdict::Update(on_n1(StackStatus::Creating))
        );
        assert_eq!(judged_pod(&running, &kubelet::ready(), &RULES), Verdict::Keep);
    }

    #[test]
    fn a_hostport_stack_fails_once_a_service_holds_one_of_its_ports() {
        let ready = PodView::of(&kubelet::ready());
        let (service, node) = (ServiceView { object: object(0) }, n1());
        let judged = |record: &StackRecord, pod: &PodView, holders: Option<&NodePortHolders>| {
            let observed = StackObjects {
                pod: Some(pod),
                service: Some(&service),
                node: Some(&node),
                node_port_holders: holders,
            };
            judge(record, observed, now(), &RULES)
        };
        let holders = |protocol: &str| -> NodePortHolders {
            [(31001, protocol.to_owned(), "monitoring/grafana".to_owned())]
                .into_iter()
                .collect()
        };
        let running = record(60)
            .exposure(Exposure::HostPort)
            .node("n1")
            .public_ip("203.0.113.1")
            .status(StackStatus::Running);

        let verdict = judged(&running, &ready, Some(&holders("TCP")));
        let failure = failure_of(&verdict).unwrap_or_else(|| panic!("{verdict:?}"));
        assert_eq!(failure.reason, R::PortTaken);
        assert!(
            failure.message.contains("31001/TCP") && failure.message.contains("monitoring/grafana"),
            "{}",
            failure.message
        );
        let Verdict::End { mark: Some(mark), .. } = &verdict else {
            unreachable!()
        };
        assert_eq!(mark.node_id, "n1");
        // Still starting, it could never be reached either.
        let starting_pod = pod(Scheduling::Scheduled("n1".into()), starting(), 1);
        let creating = record(1).exposure(Exposure::HostPort);
        assert!(failure_of(&judged(&creating, &starting_pod, Some(&holders("TCP")))).is_some());

        // Not read, another protocol's node port, or a node-port stack (its own Service holds
        // its port): it lives on.
        assert_eq!(judged(&running, &ready, None), Verdict::Keep);
        assert_eq!(judged(&running, &ready, Some(&holders("UDP"))), Verdict::Keep);
        let behind_service = record(60)
            .node("n1")
            .public_ip("203.0.113.1")
            .status(StackStatus::Running);
        assert_eq!(judged(&behind_service, &ready, Some(&holders("TCP"))), Verdict::Keep);
    }

    /// When a kubelet trouble fails a stack.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Fails {
        /// Definite: at the first observation.
        AtOnce,
        /// Transient: only once the stack is older than its start timeout.
        PastStartTimeout,
    }

    #[test]
    fn each_kubelet_trouble_fails_a_stack_with_its_reason_at_once_or_past_the_start_timeout() {
        use Fails::{AtOnce, PastStartTimeout};
        use kubelet::{NOT_FOUND, REFUSED, back_off, exited, waiting_for};
        let refused_back_off = back_off(REFUSED);
        let not_found_back_off = back_off(NOT_FOUND);
        let cases: Vec<(Pod, R, Fails)> = vec![
            (waiting_for("ErrImagePull", NOT_FOUND), R::ImageNotFound, AtOnce),
            (
                waiting_for("ImagePullBackOff", &not_found_back_off),
                R::ImageNotFound,
                AtOnce,
            ),
            (
                waiting_for("ErrImagePull", kubelet::UNAUTHORIZED),
                R::ImagePullDenied,
                AtOnce,
            ),
            (
                waiting_for("ErrImagePull", kubelet::PULL_ACCESS_DENIED),
                R::ImagePullDenied,
                AtOnce,
            ),
            (
                waiting_for("InvalidImageName", "couldn't parse image name \"Web\""),
                R::InvalidImageName,
                AtOnce,
            ),
            (
                waiting_for("CreateContainerConfigError", kubelet::RUN_AS_ROOT),
                R::ContainerConfigError,
                AtOnce,
            ),
            (
                waiting_for("CreateContainerError", "no command specified"),
                R::ContainerStartError,
                AtOnce,
            ),
            (
                waiting_for("RunContainerError", kubelet::NO_ENTRYPOINT),
                R::ContainerStartError,
                AtOnce,
            ),
            (
                exited(128, "StartError", Some(kubelet::NO_ENTRYPOINT)),
                R::ContainerStartError,
                AtOnce,
            ),
            (exited(1, "Error", None), R::ContainerExited, AtOnce),
            (exited(137, "OOMKilled", None), R::ContainerExited, AtOnce),
            (kubelet::one_of_two_exited(2, "Error"), R::ContainerExited, AtOnce),
            (
                kubelet::evicted("The node was low on resource: memory. "),
                R::Evicted,
                AtOnce,
            ),
            (
                waiting_for("ErrImagePull", REFUSED),
                R::ImagePullFailed,
                PastStartTimeout,
            ),
            (
                waiting_for("ImagePullBackOff", &refused_back_off),
                R::ImagePullFailed,
                PastStartTimeout,
            ),
            (
                waiting_for("ImagePullBackOff", "Back-off pulling image \"10.80.0.1:5000/web:1\""),
                R::ImagePullFailed,
                PastStartTimeout,
            ),
            (
                waiting_for("CreateContainerError", "context deadline exceeded"),
                R::ContainerStartError,
                PastStartTimeout,
            ),
            (kubelet::pulling(), R::StartTimeout, PastStartTimeout),
            (kubelet::just_bound(), R::StartTimeout, PastStartTimeout),
            (kubelet::started_not_ready(), R::StartTimeout, PastStartTimeout),
        ];
        for (pod, reason, fails) in cases {
            let failing_age = match fails {
                // One second old: no deadline has passed.
                AtOnce => 1,
                PastStartTimeout => {
                    for age in [1, 299, 300] {
                        assert_eq!(
                            judged_pod(&record(age), &pod, &RULES),
                            Verdict::Update(on_n1(StackStatus::Creating)),
                            "{reason} at {age}s"
                        );
                    }
                    301
                }
            };
            let verdict = judged_pod(&record(failing_age), &pod, &RULES);
            let failure = failure_of(&verdict).unwrap_or_else(|| panic!("{reason}: {verdict:?}"));
            assert_eq!(failure.reason, reason);
            if fails == PastStartTimeout {
                assert!(
                    failure.message.starts_with("not ready within 5m of its creation: "),
                    "{}",
                    failure.message
                );
            }
            let Verdict::End { mark: Some(mark), .. } = &verdict else {
                unreachable!()
            };
            // The tombstone says where it was.
            assert_eq!(
                (mark.node_id.as_str(), mark.node_public_ip.as_deref()),
                ("n1", Some("203.0.113.1"))
            );
        }
    }

    #[test]
    fn a_longer_start_timeout_keeps_a_slow_pull_creating() {
        let slow = Rules {
            start_timeout: Duration::from_secs(900),
            ..RULES
        };
        let still = judged_pod(&record(600), &kubelet::pulling(), &slow);
        assert_eq!(still, Verdict::Update(on_n1(StackStatus::Creating)));
    }

    #[test]
    fn no_stack_is_creating_past_its_start_deadline() {
        let pods = [
            kubelet::ready(),
            kubelet::started_not_ready(),
            kubelet::pulling(),
            kubelet::just_bound(),
            kubelet::waiting_for("ErrImagePull", kubelet::REFUSED),
            kubelet::waiting_for("ErrImagePull", kubelet::NOT_FOUND),
            kubelet::exited(1, "Error", None),
            kubelet::exited(0, "Completed", None),
        ];
        for pod in &pods {
            let verdict = judged_pod(&record(301), pod, &RULES);
            let status = match &verdict {
                Verdict::Keep => StackStatus::Creating,
                Verdict::Update(observed) => observed.status,
                Verdict::End { .. } => continue,
            };
            assert_ne!(status, StackStatus::Creating, "{verdict:?}");
        }
    }

    #[test]
    fn the_failure_message_names_the_deadline_and_what_held_the_pod() {
        let verdict = judge_pod(
            ago(301),
            Exposure::NodePort,
            &PodView::of(&kubelet::started_not_ready()).health,
            now(),
            &RULES,
        );
        assert_eq!(
            verdict,
            PodVerdict::Failed(Failure::new(
                R::StartTimeout,
                "not ready within 5m of its creation: phase Running; containers with unready status: [web]"
            ))
        );
    }

    #[test]
    fn a_pod_its_kubelet_refused_is_gone_not_failed() {
        for (reason, message) in [
            (
                "NodePorts",
                "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports",
            ),
            (
                "OutOfcpu",
                "Node didn't have enough resource: cpu, requested: 2000, used: 3850, capacity: 4000",
            ),
            (
                "OutOfpods",
                "Node didn't have enough resource: pods, requested: 1, used: 110, capacity: 110",
            ),
        ] {
            for age in [1, 3_600] {
                assert_eq!(
                    judged_pod(&record(age), &kubelet::rejected(reason, message), &RULES),
                    Verdict::end(RemovalReason::Rejected),
                    "{reason}"
                );
            }
        }
    }

    #[test]
    fn a_succeeded_pod_is_stopped_and_reaped_only_when_asked() {
        let done = kubelet::exited(0, "Completed", None);
        let running = record(60)
            .node("n1")
            .public_ip("203.0.113.1")
            .status(StackStatus::Running);
        assert_eq!(
            judged_pod(&running, &done, &RULES),
            Verdict::Update(on_n1(StackStatus::Stopped))
        );
        let reaping = Rules {
            reap_terminated: true,
            ..RULES
        };
        assert_eq!(
            judged_pod(&running, &done, &reaping),
            Verdict::end(RemovalReason::Terminated)
        );
        // A failed pod leaves a tombstone whether reaping or not.
        let failed = judged_pod(&running, &kubelet::exited(1, "Error", None), &reaping);
        assert_eq!(failure_of(&failed).map(|f| f.reason), Some(R::ContainerExited));
    }

    #[test]
    fn a_tombstone_is_kept_within_its_retention_and_removed_after_it() {
        let nothing = StackObjects::default();
        for (failed_secs_ago, want) in [
            (1, Verdict::Keep),
            (600, Verdict::Keep),
            (601, Verdict::end(RemovalReason::RetentionEnded)),
        ] {
            // Its pod is gone, as a failure leaves it: not "pod missing".
            assert_eq!(
                judge(&tombstone(failed_secs_ago), nothing, now(), &RULES),
                want,
                "{failed_secs_ago}s"
            );
        }
        // Records from before `failed_at` existed count from their last update.
        let mut old = tombstone(1);
        old.failed_at = None;
        old.updated_at = ago(601);
        assert_eq!(
            judge(&old, nothing, now(), &RULES),
            Verdict::end(RemovalReason::RetentionEnded)
        );
        // The TTL still applies.
        let expired = tombstone(1).ttl_expires_at(ago(1));
        assert_eq!(
            judge(&expired, nothing, now(), &RULES),
            Verdict::end(RemovalReason::Expired)
        );
    }

    #[test]
    fn a_tombstones_leftover_objects_are_removed_again_and_its_record_kept() {
        let left = PodView::of(&kubelet::waiting_for("ErrImagePull", kubelet::NOT_FOUND));
        let service = ServiceView { object: object(0) };
        for observed in [
            StackObjects {
                pod: Some(&left),
                ..StackObjects::default()
            },
            StackObjects {
                service: Some(&service),
                ..StackObjects::default()
            },
        ] {
            let verdict = judge(&tombstone(1), observed, now(), &RULES);
            assert_eq!(verdict, Verdict::end(RemovalReason::Failed));
            assert!(RemovalReason::Failed.keeps_record());
        }
        // On its way out, or not ours: nothing to do.
        let mut leaving = left.clone();
        leaving.object.terminating = true;
        let mut foreign = left;
        foreign.object.managed = false;
        for pod in [&leaving, &foreign] {
            let observed = StackObjects {
                pod: Some(pod),
                ..StackObjects::default()
            };
            assert_eq!(judge(&tombstone(1), observed, now(), &RULES), Verdict::Keep);
        }
    }

    #[test]
    fn only_a_failure_keeps_the_record_and_only_drift_yields_to_one() {
        use RemovalReason as Why;
        let all = [
            Why::Expired,
            Why::PodMissing,
            Why::ServiceMissing,
            Why::NodeMissing,
            Why::Unschedulable,
            Why::Rejected,
            Why::Terminated,
            Why::Failed,
            Why::RetentionEnded,
            Why::Deleted,
        ];
        let kept: Vec<Why> = all.into_iter().filter(|r| r.keeps_record()).collect();
        assert_eq!(kept, [Why::Failed]);
        let yielding: Vec<Why> = all.into_iter().filter(|r| r.yields_to_failure()).collect();
        assert_eq!(
            yielding,
            [
                Why::PodMissing,
                Why::ServiceMissing,
                Why::NodeMissing,
                Why::Unschedulable,
                Why::Rejected,
                Why::Terminated
            ]
        );
    }
}
