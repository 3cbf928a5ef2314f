//! The reconciler's decisions: what one pass should do, given what it observed (pure). Whether
//! a stack lives is [`crate::lifecycle::judge`]'s call; this adds what only a whole view of
//! the namespace shows: orphans, dead creates' claims and stalled jobs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use crate::cluster::NodePortHolders;
use crate::lifecycle::RemovalReason;
use crate::lifecycle::views::{NodeView, ObjectView, PodView, ServiceView};
use crate::lifecycle::{ObjectKind, Removal, Rules, StackObjects, Verdict, judge, older_than};
use crate::model::{BatchDeleteJob, ObservedState, StackId, StackRecord};
use crate::store::{IdempotencyClaim, TenantHold};
use crate::tenancy::{TenantId, Tenants};

/// The settings the plan depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlanConfig {
    /// `STACK_NAMESPACE`: only records and objects of this namespace are acted on.
    pub namespace: String,
    /// `STACK_ORPHAN_GRACE`: how old an unclaimed object, or a claim without a record, must
    /// be before it is treated as leaked rather than a create in flight.
    pub orphan_grace: Duration,
    /// The lifecycle rule's settings.
    pub rules: Rules,
    /// How long an unfinished batch-delete job must have made no progress before the
    /// reconciler takes it over from whoever started it.
    pub job_idle: Duration,
    /// `STACK_TENANTS`: a stack of a tenant no longer listed ends; tenants with a limit have
    /// their holds repaired.
    pub tenants: Tenants,
}

/// Everything one pass observed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inventory {
    pub records: Vec<StackRecord>,
    /// Keys (stack ids) of records that exist but do not read: their stacks are left alone,
    /// objects and claims included, until someone repairs the item or deletes the stack.
    pub unreadable: Vec<String>,
    pub pods: Vec<PodView>,
    pub services: Vec<ServiceView>,
    pub nodes: Vec<NodeView>,
    /// The node ports of every Service of the cluster, listed with our services when some
    /// record is a hostport stack (none else).
    pub node_port_holders: Arc<NodePortHolders>,
    pub jobs: Vec<BatchDeleteJob>,
    /// Idempotency-Key claims, by key.
    pub claims: Vec<(String, IdempotencyClaim)>,
    /// Each tenant with a limit: its counter as read before its holds were listed, and its
    /// holds (see `stacks::tenant_limit`).
    pub held: Vec<TenantHolds>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Remove(Box<Removal>),
    /// An object of ours that no record claims, older than the orphan grace.
    DeleteOrphan {
        kind: ObjectKind,
        name: String,
    },
    /// The cluster shows something else than the record says.
    UpdateStatus {
        stack_id: StackId,
        observed: ObservedState,
    },
    /// A batch-delete job nobody is advancing.
    ResumeJob(BatchDeleteJob),
    /// An Idempotency-Key claim whose create died before writing its record, older than the
    /// orphan grace: freed so that nothing of a dead create outlives the next pass.
    ReleaseClaim {
        key: String,
        stack_id: StackId,
    },
    /// A tenant hold to write or delete so that the holds are the tenant's live stacks.
    RepairHold(HoldRepair),
}

/// One tenant's counter and holds, the counter read first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TenantHolds {
    pub tenant: TenantId,
    pub counter: Option<u64>,
    pub holds: Vec<TenantHold>,
}

/// How a tenant's holds and counter differ from its live stacks. Only a recount changes the
/// counter (see `stacks::tenant_limit` for why that is safe).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldRepair {
    /// A hold whose stack holds nothing (no record and older than the orphan grace: a dead
    /// create's; or a failed stack's tombstone, or a record gone, whose release did not land).
    Delete { tenant: TenantId, stack_id: StackId },
    /// A live stack of a tenant with a limit that holds nothing (made before the limit).
    Add { tenant: TenantId, hold: TenantHold },
    /// The counter, set to the number of holds listed if it is still `seen`.
    Recount {
        tenant: TenantId,
        seen: Option<u64>,
        held: u64,
    },
}

/// What one pass should do, most urgent first: removals free capacity, status updates only
/// refresh what clients already get on their next read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub actions: Vec<Action>,
    /// Records looked at.
    pub scanned: usize,
    /// Records of another namespace (the configuration changed): left alone.
    pub foreign: usize,
    /// Records that do not read: left alone, counted as failures.
    pub unreadable: usize,
}

/// Our objects of the stack namespace, by name.
struct Objects<'a> {
    pods: HashMap<&'a str, &'a PodView>,
    services: HashMap<&'a str, &'a ServiceView>,
    nodes: HashMap<&'a str, &'a NodeView>,
}

impl<'a> Objects<'a> {
    fn index(inventory: &'a Inventory, config: &PlanConfig) -> Self {
        Self {
            pods: ours_by_name(&inventory.pods, |p| &p.object, &config.namespace),
            services: ours_by_name(&inventory.services, |s| &s.object, &config.namespace),
            nodes: inventory.nodes.iter().map(|n| (n.name.as_str(), n)).collect(),
        }
    }
}

/// Those of `objects` that are ours in `namespace`, by name; `view` is each one's metadata.
fn ours_by_name<'a, T>(
    objects: &'a [T],
    view: impl Fn(&'a T) -> &'a ObjectView,
    namespace: &str,
) -> HashMap<&'a str, &'a T> {
    objects
        .iter()
        .map(|object| (view(object), object))
        .filter(|(view, _)| view.is_ours_in(namespace))
        .map(|(view, object)| (view.name.as_str(), object))
        .collect()
}

pub(crate) fn plan(inventory: Inventory, now: Timestamp, config: &PlanConfig) -> Plan {
    let objects = Objects::index(&inventory, config);
    let mut result = Plan {
        scanned: inventory.records.len(),
        unreadable: inventory.unreadable.len(),
        ..Plan::default()
    };
    let mut removals = Vec::new();
    let mut updates = Vec::new();
    // What an unreadable record would claim, by the names its id gives.
    let unreadable: Vec<StackId> = inventory.unreadable.iter().filter_map(|sk| sk.parse().ok()).collect();
    let unreadable_objects: Vec<(String, String)> =
        unreadable.iter().map(|id| (id.pod_name(), id.service_name())).collect();
    let mut claimed_pods: HashSet<&str> = unreadable_objects.iter().map(|(pod, _)| pod.as_str()).collect();
    let mut claimed_services: HashSet<&str> = unreadable_objects.iter().map(|(_, svc)| svc.as_str()).collect();

    for record in &inventory.records {
        claimed_pods.insert(record.pod_id.as_str());
        claimed_services.extend(record.service());
        if record.namespace != config.namespace {
            result.foreign += 1;
            continue;
        }
        let pod = objects.pods.get(record.pod_id.as_str()).copied();
        let service = record.service().and_then(|name| objects.services.get(name).copied());
        let node = pod.and_then(|p| objects.nodes.get(p.scheduling.node()?).copied());
        let observed = StackObjects {
            pod,
            service,
            node,
            node_port_holders: Some(inventory.node_port_holders.as_ref()),
        };
        let verdict = if config.tenants.contains(&record.tenant) {
            judge(record, observed, now, &config.rules)
        } else {
            Verdict::End {
                reason: RemovalReason::TenantRemoved,
                mark: None,
            }
        };
        match verdict {
            Verdict::Keep => {}
            Verdict::Update(observed) => updates.push(Action::UpdateStatus {
                stack_id: record.stack_id.clone(),
                observed,
            }),
            Verdict::End { reason, mark } => removals.push(Action::Remove(Box::new(Removal {
                record: record.clone(),
                reason,
                pod: pod.map(|p| p.object.name.clone()),
                service: service.map(|s| s.object.name.clone()),
                mark,
            }))),
        }
    }

    result.actions = removals;
    // Walk the inventory's own order (not the maps') so that plans are deterministic.
    let services = inventory
        .services
        .iter()
        .map(|s| (ObjectKind::Service, &s.object, &claimed_services));
    let pods = inventory
        .pods
        .iter()
        .map(|p| (ObjectKind::Pod, &p.object, &claimed_pods));
    for (kind, object, claimed) in services.chain(pods) {
        let orphan = object.is_ours_in(&config.namespace)
            && !object.terminating
            && !claimed.contains(object.name.as_str())
            && older_than(object.created_at, now, config.orphan_grace);
        if orphan {
            result.actions.push(Action::DeleteOrphan {
                kind,
                name: object.name.clone(),
            });
        }
    }
    let recorded: HashSet<&StackId> = inventory
        .records
        .iter()
        .map(|r| &r.stack_id)
        .chain(&unreadable)
        .collect();
    for (key, claim) in &inventory.claims {
        if !recorded.contains(&claim.stack_id) && older_than(Some(claim.claimed_at), now, config.orphan_grace) {
            result.actions.push(Action::ReleaseClaim {
                key: key.clone(),
                stack_id: claim.stack_id.clone(),
            });
        }
    }
    result
        .actions
        .extend(hold_repairs(&inventory, &removed_ids(&result.actions), now, config));
    for job in &inventory.jobs {
        if !job.status.is_finished() && older_than(Some(job.updated_at), now, config.job_idle) {
            result.actions.push(Action::ResumeJob(job.clone()));
        }
    }
    result.actions.extend(updates);
    result
}

/// Stacks this plan ends (their holds go with them).
fn removed_ids(actions: &[Action]) -> HashSet<StackId> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Remove(removal) => Some(removal.record.stack_id.clone()),
            _ => None,
        })
        .collect()
}

/// The holds of each tenant with a limit brought in line with its live stacks: a stack holds
/// a slot while its record is live (not a tombstone) and this pass does not end it; a hold
/// younger than the orphan grace may be a create in flight, and stays. The counter is set to
/// the holds listed (this pass's deletions and additions count at the next one).
fn hold_repairs(inventory: &Inventory, removed: &HashSet<StackId>, now: Timestamp, config: &PlanConfig) -> Vec<Action> {
    let live: HashMap<&StackId, &StackRecord> = inventory
        .records
        .iter()
        .filter(|r| !r.status.is_tombstone() && !removed.contains(&r.stack_id))
        .map(|r| (&r.stack_id, r))
        .collect();
    let recorded: HashSet<&StackId> = inventory.records.iter().map(|r| &r.stack_id).collect();
    let mut repairs = Vec::new();
    for TenantHolds { tenant, counter, holds } in &inventory.held {
        let held = u64::try_from(holds.len()).unwrap_or(u64::MAX);
        if *counter != Some(held) && !(counter.is_none() && held == 0) {
            repairs.push(HoldRepair::Recount {
                tenant: tenant.clone(),
                seen: *counter,
                held,
            });
        }
        for hold in holds {
            let owned = live.get(&hold.stack_id).is_some_and(|r| &r.tenant == tenant);
            let stale = if recorded.contains(&hold.stack_id) {
                !owned && !removed.contains(&hold.stack_id)
            } else {
                older_than(Some(hold.held_at), now, config.orphan_grace)
            };
            if stale {
                repairs.push(HoldRepair::Delete {
                    tenant: tenant.clone(),
                    stack_id: hold.stack_id.clone(),
                });
            }
        }
        let held_ids: HashSet<&StackId> = holds.iter().map(|h| &h.stack_id).collect();
        for record in live
            .values()
            .filter(|r| &r.tenant == tenant && !held_ids.contains(&r.stack_id))
        {
            repairs.push(HoldRepair::Add {
                tenant: tenant.clone(),
                hold: TenantHold {
                    stack_id: record.stack_id.clone(),
                    held_at: record.created_at,
                    released: false,
                },
            });
        }
    }
    // Deterministic order (the live map's is not).
    repairs.sort_by_key(|repair| format!("{repair:?}"));
    repairs.into_iter().map(Action::RepairHold).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{PodHealth, Scheduling, kubelet};
    use crate::lifecycle::RemovalReason;
    use crate::model::{Exposure, Failure, FailureReason, JobStatus, StackStatus};
    use jiff::SignedDuration;

    const NS: &str = "stacks";
    const GRACE: Duration = Duration::from_secs(120);
    const SCHED: Duration = Duration::from_secs(20);
    const START: Duration = Duration::from_secs(300);
    const RETENTION: Duration = Duration::from_secs(600);

    fn config() -> PlanConfig {
        PlanConfig {
            namespace: NS.into(),
            orphan_grace: GRACE,
            rules: Rules {
                scheduling_timeout: SCHED,
                start_timeout: START,
                failed_retention: RETENTION,
                reap_terminated: false,
                proxy_sync: Duration::from_secs(1),
            },
            job_idle: Duration::from_secs(30),
            tenants: Tenants::default(),
        }
    }

    fn reaping() -> PlanConfig {
        let mut config = config();
        config.rules.reap_terminated = true;
        config
    }

    fn now() -> Timestamp {
        "2030-01-01T12:00:00Z".parse().unwrap()
    }

    fn ago(secs: i64) -> Timestamp {
        now() - SignedDuration::from_secs(secs)
    }

    fn id(n: u64) -> StackId {
        format!("stack-{n:016x}").parse().unwrap()
    }

    /// A running stack on node `n1`, created ten minutes ago, expiring in an hour.
    fn record(n: u64) -> StackRecord {
        StackRecord::test()
            .id(id(n))
            .node("n1")
            .public_ip("203.0.113.1")
            .tcp_ports(31001, 1)
            .created_at(ago(600))
            .ttl_expires_at(now() + SignedDuration::from_hours(1))
            .requests(100, 1 << 20)
    }

    fn object(name: String, created_at: Timestamp) -> ObjectView {
        ObjectView {
            name,
            namespace: NS.into(),
            managed: true,
            created_at: Some(created_at),
            terminating: false,
        }
    }

    fn pod(n: u64) -> PodView {
        PodView {
            object: object(id(n).pod_name(), ago(600)),
            health: PodHealth::Ready { ready_by: None },
            scheduling: Scheduling::Scheduled("n1".into()),
        }
    }

    /// Not Ready yet, nothing wrong seen.
    fn starting() -> PodHealth {
        PodHealth::Starting(Failure::new(FailureReason::StartTimeout, "phase Pending"))
    }

    /// What the kubelet shows of a container that exited 1.
    fn failed_health() -> PodHealth {
        PodView::of(&kubelet::exited(1, "Error", None)).health
    }

    /// Stack `n`, failed `secs` ago: its objects gone, its record a tombstone.
    fn tombstone(n: u64, secs: i64) -> StackRecord {
        record(n).failed(
            FailureReason::ImageNotFound,
            "container web: ErrImagePull: not found",
            ago(secs),
        )
    }

    fn service(n: u64) -> ServiceView {
        ServiceView {
            object: object(id(n).service_name(), ago(600)),
        }
    }

    fn node(name: &str, ip: &str) -> NodeView {
        NodeView {
            name: name.into(),
            external_ip: Some(ip.into()),
        }
    }

    /// Stack 1, healthy and in sync with its record.
    fn healthy() -> Inventory {
        Inventory {
            records: vec![record(1)],
            unreadable: vec![],
            pods: vec![pod(1)],
            services: vec![service(1)],
            nodes: vec![node("n1", "203.0.113.1")],
            node_port_holders: Arc::default(),
            jobs: vec![],
            claims: vec![],
            held: vec![],
        }
    }

    fn run(inventory: Inventory) -> Plan {
        plan(inventory, now(), &config())
    }

    fn removal(plan: &Plan) -> Option<&Removal> {
        plan.actions.iter().find_map(|a| match a {
            Action::Remove(r) => Some(r.as_ref()),
            _ => None,
        })
    }

    fn reason(plan: &Plan) -> Option<RemovalReason> {
        removal(plan).map(|r| r.reason)
    }

    fn job(status: JobStatus, updated_secs_ago: i64) -> BatchDeleteJob {
        BatchDeleteJob {
            job_id: "job-0000000000000001".into(),
            status,
            total: 2,
            deleted: 1,
            not_found: 0,
            failed: 0,
            errors: vec![],
            pending: vec![id(9).to_string()],
            created_at: ago(3600),
            updated_at: ago(updated_secs_ago),
            scope: Default::default(),
        }
    }

    #[test]
    fn a_stack_in_sync_needs_nothing() {
        let p = run(healthy());
        assert_eq!(p.actions, vec![]);
        assert_eq!((p.scanned, p.foreign), (1, 0));
    }

    #[test]
    fn record_ending_rules() {
        type Edit = fn(&mut Inventory);
        let cases: Vec<(&str, Edit, Option<RemovalReason>)> = vec![
            ("ttl in the future", |_| {}, None),
            (
                "ttl reached exactly",
                |s| s.records[0].ttl_expires_at = now(),
                Some(RemovalReason::Expired),
            ),
            (
                "ttl passed",
                |s| s.records[0].ttl_expires_at = ago(1),
                Some(RemovalReason::Expired),
            ),
            (
                "ttl passed while creating and young",
                |s| {
                    s.records[0].ttl_expires_at = ago(1);
                    s.records[0].status = StackStatus::Creating;
                    s.records[0].created_at = ago(5);
                },
                Some(RemovalReason::Expired),
            ),
            ("pod gone", |s| s.pods.clear(), Some(RemovalReason::PodMissing)),
            (
                "pod terminating",
                |s| s.pods[0].object.terminating = true,
                Some(RemovalReason::PodMissing),
            ),
            (
                "pod without our label",
                |s| s.pods[0].object.managed = false,
                Some(RemovalReason::PodMissing),
            ),
            (
                "pod in another namespace",
                |s| s.pods[0].object.namespace = "other".into(),
                Some(RemovalReason::PodMissing),
            ),
            (
                "service gone",
                |s| s.services.clear(),
                Some(RemovalReason::ServiceMissing),
            ),
            (
                "service terminating",
                |s| s.services[0].object.terminating = true,
                Some(RemovalReason::ServiceMissing),
            ),
            ("node gone", |s| s.nodes.clear(), Some(RemovalReason::NodeMissing)),
            (
                "pod on another, missing node",
                |s| s.pods[0].scheduling = Scheduling::Scheduled("n9".into()),
                Some(RemovalReason::NodeMissing),
            ),
            (
                "unschedulable past the timeout",
                |s| {
                    s.pods[0].scheduling = Scheduling::Unschedulable("0/3 nodes".into());
                    s.records[0].created_at = ago(21);
                },
                Some(RemovalReason::Unschedulable),
            ),
            (
                "unschedulable within the timeout",
                |s| {
                    s.pods[0].scheduling = Scheduling::Unschedulable("0/3 nodes".into());
                    s.records[0].created_at = ago(19);
                },
                None,
            ),
            (
                "no scheduling decision past the timeout",
                |s| {
                    s.pods[0].scheduling = Scheduling::Pending;
                    s.records[0].created_at = ago(21);
                },
                Some(RemovalReason::Unschedulable),
            ),
            (
                "succeeded pod kept until ttl",
                |s| s.pods[0].health = PodHealth::Succeeded,
                None,
            ),
            (
                "failed pod: objects removed, record kept",
                |s| s.pods[0].health = failed_health(),
                Some(RemovalReason::Failed),
            ),
            (
                "pod refused by its kubelet",
                |s| {
                    s.pods[0].health = PodView::of(&kubelet::rejected(
                        "OutOfmemory",
                        "Node didn't have enough resource: memory",
                    ))
                    .health;
                },
                Some(RemovalReason::Rejected),
            ),
        ];
        for (name, edit, want) in cases {
            let mut inventory = healthy();
            edit(&mut inventory);
            assert_eq!(reason(&run(inventory)), want, "{name}");
        }
    }

    #[test]
    fn succeeded_pods_are_reaped_only_when_configured_and_failed_ones_always_leave_a_tombstone() {
        let mut inventory = healthy();
        inventory.pods[0].health = PodHealth::Succeeded;
        let reaping = reaping();
        assert_eq!(
            reason(&plan(inventory.clone(), now(), &reaping)),
            Some(RemovalReason::Terminated)
        );
        assert_eq!(reason(&plan(inventory, now(), &config())), None);
        let mut inventory = healthy();
        inventory.pods[0].health = failed_health();
        for config in [config(), reaping.clone()] {
            assert_eq!(
                reason(&plan(inventory.clone(), now(), &config)),
                Some(RemovalReason::Failed)
            );
        }
        assert_eq!(
            plan(healthy(), now(), &reaping).actions,
            vec![],
            "running pods are never reaped"
        );
    }

    #[test]
    fn a_missing_object_ends_even_a_young_creating_stack() {
        // The record is read before the objects and written after them: missing is gone.
        type Edit = fn(&mut Inventory);
        let missing: Vec<(&str, Edit)> = vec![
            ("pod", |s| s.pods.clear()),
            ("service", |s| s.services.clear()),
            ("node", |s| s.nodes.clear()),
        ];
        for (what, edit) in missing {
            let mut inventory = healthy();
            inventory.records[0].created_at = ago(1);
            inventory.records[0].status = StackStatus::Creating;
            edit(&mut inventory);
            assert!(removal(&run(inventory)).is_some(), "{what} missing");
        }
    }

    #[test]
    fn removal_deletes_only_our_observed_objects() {
        let mut inventory = healthy();
        inventory.records[0].ttl_expires_at = ago(1);
        let p = run(inventory);
        let r = removal(&p).unwrap();
        assert_eq!(
            r.record,
            healthy().records[0].clone().tap(|r| r.ttl_expires_at = ago(1))
        );
        assert_eq!(r.pod.as_deref(), Some(id(1).pod_name().as_str()));
        assert_eq!(r.service.as_deref(), Some(id(1).service_name().as_str()));
        assert_eq!(r.mark, None);

        // The pod lost our label: the record goes, the pod is not touched.
        let mut inventory = healthy();
        inventory.pods[0].object.managed = false;
        let p = run(inventory);
        let r = removal(&p).unwrap();
        assert_eq!((r.pod.clone(), r.service.is_some()), (None, true));

        // A terminating pod is still deleted again (idempotent) before the record goes.
        let mut inventory = healthy();
        inventory.pods[0].object.terminating = true;
        assert!(removal(&run(inventory)).unwrap().pod.is_some());
    }

    #[test]
    fn a_lost_node_is_written_as_node_deleted_before_removal() {
        let mut inventory = healthy();
        inventory.nodes.clear();
        let p = run(inventory);
        let r = removal(&p).unwrap();
        assert_eq!(
            r.mark,
            Some(ObservedState {
                status: StackStatus::NodeDeleted,
                node_id: "n1".into(),
                node_public_ip: Some("203.0.113.1".into()),
                failure: None,
            })
        );
        // Already marked by an earlier pass whose removal failed: not written again.
        let mut inventory = healthy();
        inventory.nodes.clear();
        inventory.records[0].status = StackStatus::NodeDeleted;
        assert_eq!(removal(&run(inventory)).unwrap().mark, None);
    }

    /// Stack 1's record as a create leaves it: creating, on no node yet.
    fn just_created(inventory: &mut Inventory) {
        let record = &mut inventory.records[0];
        record.status = StackStatus::Creating;
        record.node_id = String::new();
        record.node_public_ip = None;
    }

    #[test]
    fn status_write_backs_happen_only_on_change() {
        type Edit = fn(&mut Inventory);
        let running_on_n1 = ObservedState {
            status: StackStatus::Running,
            node_id: "n1".into(),
            node_public_ip: Some("203.0.113.1".into()),
            failure: None,
        };
        let creating_on_n1 = ObservedState {
            status: StackStatus::Creating,
            ..running_on_n1.clone()
        };
        let cases: Vec<(&str, Edit, Option<ObservedState>)> = vec![
            ("nothing changed", |_| {}, None),
            (
                "pending -> creating record scheduled and running",
                just_created,
                Some(running_on_n1.clone()),
            ),
            (
                "still pending stays creating",
                |s| {
                    just_created(s);
                    s.pods[0].health = starting();
                    s.pods[0].scheduling = Scheduling::Pending;
                    s.records[0].created_at = ago(5);
                },
                None,
            ),
            (
                "scheduled but not ready yet",
                |s| {
                    just_created(s);
                    s.records[0].created_at = ago(60);
                    s.pods[0].health = starting();
                },
                Some(creating_on_n1.clone()),
            ),
            (
                "running record, readiness lost within the start timeout -> creating",
                |s| {
                    s.records[0].created_at = ago(60);
                    s.pods[0].health = starting();
                },
                Some(creating_on_n1),
            ),
            (
                "succeeded -> stopped",
                |s| s.pods[0].health = PodHealth::Succeeded,
                Some(ObservedState {
                    status: StackStatus::Stopped,
                    ..running_on_n1.clone()
                }),
            ),
            (
                "terminal record keeps its status when the phase is unknown",
                |s| {
                    s.records[0].status = StackStatus::Stopped;
                    s.pods[0].health = starting();
                },
                None,
            ),
            (
                "node address appeared",
                |s| s.records[0].node_public_ip = None,
                Some(running_on_n1.clone()),
            ),
            (
                "node without external address",
                |s| s.nodes[0].external_ip = None,
                Some(ObservedState {
                    node_public_ip: None,
                    ..running_on_n1.clone()
                }),
            ),
            (
                "node address changed",
                |s| s.nodes[0].external_ip = Some("198.51.100.4".into()),
                Some(ObservedState {
                    node_public_ip: Some("198.51.100.4".into()),
                    ..running_on_n1.clone()
                }),
            ),
        ];
        for (name, edit, want) in cases {
            let mut inventory = healthy();
            edit(&mut inventory);
            let p = run(inventory);
            let got: Vec<&ObservedState> = p
                .actions
                .iter()
                .filter_map(|a| match a {
                    Action::UpdateStatus { stack_id, observed } if *stack_id == id(1) => Some(observed),
                    _ => None,
                })
                .collect();
            assert_eq!(got, want.iter().collect::<Vec<_>>(), "{name}");
            assert!(removal(&p).is_none(), "{name}");
        }
    }

    #[test]
    fn a_failing_stack_loses_its_objects_and_keeps_its_record_marked_failed() {
        let mut inventory = healthy();
        inventory.pods[0].health = PodView::of(&kubelet::waiting_for("ErrImagePull", kubelet::NOT_FOUND)).health;
        let p = run(inventory);
        assert_eq!(p.actions.len(), 1, "{:?}", p.actions);
        let r = removal(&p).unwrap();
        assert_eq!(r.reason, RemovalReason::Failed);
        assert!(r.reason.keeps_record());
        assert_eq!(r.pod.as_deref(), Some(id(1).pod_name().as_str()));
        assert_eq!(r.service.as_deref(), Some(id(1).service_name().as_str()));
        let mark = r.mark.as_ref().unwrap();
        assert_eq!(mark.status, StackStatus::Failed);
        assert_eq!(
            mark.failure.as_ref().map(|f| f.reason),
            Some(FailureReason::ImageNotFound)
        );

        // Past its start deadline, a stack that is not Ready fails (it is never left creating).
        let mut inventory = healthy();
        inventory.pods[0].health = starting();
        let r = run(inventory);
        let mark = removal(&r).and_then(|r| r.mark.clone()).unwrap();
        assert_eq!(mark.failure.map(|f| f.reason), Some(FailureReason::StartTimeout));
    }

    #[test]
    fn a_pass_fails_a_hostport_stack_whose_port_a_service_of_the_cluster_took() {
        let taken: Arc<NodePortHolders> = Arc::new(
            [(31001, "TCP".to_owned(), "monitoring/grafana".to_owned())]
                .into_iter()
                .collect(),
        );
        let mut inventory = healthy();
        inventory.records[0].exposure = Exposure::HostPort;
        inventory.records[0].status = StackStatus::Running;
        inventory.services.clear();
        inventory.node_port_holders = Arc::clone(&taken);
        let p = run(inventory);
        let r = removal(&p).expect("the stack ends");
        assert_eq!(
            (r.reason, r.pod.is_some(), r.service.is_none()),
            (RemovalReason::Failed, true, true)
        );
        let mark = r.mark.as_ref().unwrap();
        assert_eq!(mark.failure.as_ref().map(|f| f.reason), Some(FailureReason::PortTaken));

        // A node-port stack's port is held by its own Service.
        let mut inventory = healthy();
        inventory.node_port_holders = taken;
        assert!(removal(&run(inventory)).is_none());
    }

    #[test]
    fn a_tombstone_is_neither_drift_nor_orphaned_and_goes_after_its_retention() {
        // Within the window, without objects (as a failure leaves it): nothing to do, its
        // idempotency key stays with it.
        let claim = (
            "key-1".to_owned(),
            IdempotencyClaim {
                body_sha256: "h".into(),
                stack_id: id(1),
                claimed_at: ago(3_600),
            },
        );
        let quiet = Inventory {
            records: vec![tombstone(1, 599)],
            nodes: vec![node("n1", "203.0.113.1")],
            claims: vec![claim.clone()],
            ..Inventory::default()
        };
        let p = run(quiet.clone());
        assert_eq!(p.actions, vec![]);
        assert_eq!(p.scanned, 1);

        // Objects left by a removal that failed half-way are removed again; the record stays.
        let mut leftovers = quiet.clone();
        leftovers.pods.push(pod(1));
        leftovers.services.push(service(1));
        let p = run(leftovers);
        assert_eq!(p.actions.len(), 1, "{:?}", p.actions);
        let r = removal(&p).unwrap();
        assert_eq!((r.reason, r.mark.clone()), (RemovalReason::Failed, None));
        assert!(r.pod.is_some() && r.service.is_some());

        // After the window: the record goes (its key with it, in the same removal).
        let mut old = quiet.clone();
        old.records = vec![tombstone(1, 601)];
        let p = run(old);
        assert_eq!(p.actions.len(), 1, "{:?}", p.actions);
        let r = removal(&p).unwrap();
        assert_eq!(r.reason, RemovalReason::RetentionEnded);
        assert_eq!((r.pod.clone(), r.service.clone()), (None, None));

        // A stale claim of a tombstone is not released apart from it.
        let mut released = quiet;
        released.records.clear();
        assert!(
            run(released)
                .actions
                .iter()
                .any(|a| matches!(a, Action::ReleaseClaim { .. }))
        );
    }

    #[test]
    fn orphans_need_our_label_our_namespace_and_the_grace() {
        type Edit = fn(&mut ObjectView);
        let cases: Vec<(&str, Edit, bool)> = vec![
            ("old and ours", |_| {}, true),
            ("just past the grace", |o| o.created_at = Some(ago(121)), true),
            ("exactly the grace", |o| o.created_at = Some(ago(120)), false),
            ("young (create in flight)", |o| o.created_at = Some(ago(30)), false),
            ("unknown age", |o| o.created_at = None, false),
            ("no managed-by label", |o| o.managed = false, false),
            ("another namespace", |o| o.namespace = "default".into(), false),
            ("already terminating", |o| o.terminating = true, false),
        ];
        for (name, edit, want) in cases {
            let mut inventory = Inventory {
                nodes: vec![node("n1", "203.0.113.1")],
                ..Inventory::default()
            };
            let (mut p, mut s) = (pod(7), service(7));
            edit(&mut p.object);
            edit(&mut s.object);
            inventory.pods.push(p);
            inventory.services.push(s);
            let want: Vec<Action> = if want {
                vec![
                    Action::DeleteOrphan {
                        kind: ObjectKind::Service,
                        name: id(7).service_name(),
                    },
                    Action::DeleteOrphan {
                        kind: ObjectKind::Pod,
                        name: id(7).pod_name(),
                    },
                ]
            } else {
                vec![]
            };
            assert_eq!(run(inventory).actions, want, "{name}");
        }
    }

    #[test]
    fn objects_claimed_by_a_record_are_never_orphans() {
        // An old pod whose record lost its service: removed with its stack, not as an orphan.
        let mut inventory = healthy();
        inventory.pods[0].object.created_at = Some(ago(1_000));
        inventory.services.clear();
        let p = run(inventory);
        assert_eq!(p.actions.len(), 1);
        assert!(matches!(&p.actions[0], Action::Remove(r) if r.pod.is_some()));

        // A stack being removed is one action, its objects are not orphans besides.
        let mut inventory = healthy();
        inventory.records[0].ttl_expires_at = ago(1);
        let p = run(inventory);
        assert_eq!(p.actions.len(), 1);
        assert!(matches!(p.actions[0], Action::Remove(_)));
    }

    #[test]
    fn records_of_another_namespace_are_left_alone() {
        let mut inventory = healthy();
        inventory.records[0].namespace = "old-stacks".into();
        inventory.records[0].ttl_expires_at = ago(1);
        inventory.pods.clear();
        let p = run(inventory);
        assert_eq!(p.actions, vec![]);
        assert_eq!(p.foreign, 1);
    }

    #[test]
    fn a_record_that_does_not_read_keeps_its_objects_and_claim() {
        let claim = (
            "key-7".to_owned(),
            IdempotencyClaim {
                body_sha256: "h".into(),
                stack_id: id(7),
                claimed_at: ago(3600),
            },
        );
        // Stack 7's objects and claim are old enough to go, were nothing to claim them.
        let mut inventory = healthy();
        inventory.pods.push(pod(7));
        inventory.services.push(service(7));
        inventory.claims.push(claim);
        let unclaimed = run(inventory.clone());
        assert_eq!(unclaimed.actions.len(), 3, "{:?}", unclaimed.actions);

        inventory.unreadable = vec![id(7).to_string(), "not-an-id".into()];
        let p = run(inventory);
        assert_eq!(p.actions, vec![]);
        assert_eq!((p.scanned, p.unreadable), (1, 2));
    }

    #[test]
    fn only_idle_unfinished_jobs_are_resumed() {
        for (status, idle_secs, want) in [
            (JobStatus::Queued, 31, true),
            (JobStatus::Running, 31, true),
            (JobStatus::Running, 30, false),
            (JobStatus::Running, 5, false),
            (JobStatus::Completed, 3600, false),
            (JobStatus::Failed, 3600, false),
        ] {
            let inventory = Inventory {
                jobs: vec![job(status, idle_secs)],
                ..Inventory::default()
            };
            let resumed = run(inventory)
                .actions
                .iter()
                .any(|a| matches!(a, Action::ResumeJob(j) if j.pending.len() == 1));
            assert_eq!(resumed, want, "{status:?} idle {idle_secs}s");
        }
    }

    #[test]
    fn claims_of_dead_creates_are_released_after_the_grace() {
        let claim = |n: u64, secs: i64| {
            (
                format!("key-{n}"),
                IdempotencyClaim {
                    body_sha256: "h".into(),
                    stack_id: id(n),
                    claimed_at: ago(secs),
                },
            )
        };
        let mut inventory = healthy();
        // 1 has its record; 2 died long ago; 3 may still be creating.
        inventory.claims = vec![claim(1, 3600), claim(2, 121), claim(3, 119)];
        let released: Vec<Action> = run(inventory)
            .actions
            .into_iter()
            .filter(|a| matches!(a, Action::ReleaseClaim { .. }))
            .collect();
        assert_eq!(
            released,
            vec![Action::ReleaseClaim {
                key: "key-2".into(),
                stack_id: id(2)
            }]
        );
    }

    #[test]
    fn removals_come_first_and_status_updates_last() {
        let mut inventory = healthy();
        // 1: status drift; 2: expired; orphan 3; job.
        inventory.records[0].node_public_ip = None;
        inventory.records.push(record(2).tap(|r| r.ttl_expires_at = ago(1)));
        inventory.pods.push(pod(3));
        inventory.jobs.push(job(JobStatus::Running, 600));
        let kinds: Vec<&str> = run(inventory)
            .actions
            .iter()
            .map(|a| match a {
                Action::Remove(_) => "remove",
                Action::DeleteOrphan { .. } | Action::ReleaseClaim { .. } => "orphan",
                Action::RepairHold(_) => "hold",
                Action::ResumeJob(_) => "job",
                Action::UpdateStatus { .. } => "update",
            })
            .collect();
        assert_eq!(kinds, ["remove", "orphan", "job", "update"]);
    }

    /// Healthy, expired, drifted (pod missing, young and old), updated stacks and orphans,
    /// 1,000 of each.
    fn large_inventory(per_kind: u64) -> Inventory {
        let mut s = Inventory {
            nodes: (0..50).map(|i| node(&format!("n{i}"), "203.0.113.1")).collect(),
            ..Inventory::default()
        };
        for i in 0..per_kind * 5 {
            let mut r = record(i);
            r.node_id = format!("n{}", i % 50);
            let mut p = pod(i);
            p.scheduling = Scheduling::Scheduled(r.node_id.clone());
            match i % 5 {
                0 => {}
                1 => r.ttl_expires_at = ago(1),
                2 => {
                    s.records.push(r);
                    s.services.push(service(i));
                    continue;
                }
                3 => {
                    r.status = StackStatus::Creating;
                    r.created_at = ago(10);
                    s.records.push(r);
                    continue;
                }
                _ => r.node_public_ip = None,
            }
            s.records.push(r);
            s.pods.push(p);
            s.services.push(service(i));
        }
        for i in 0..per_kind {
            s.pods.push(pod(1_000_000 + i));
        }
        s
    }

    #[test]
    fn plans_five_thousand_stacks_quickly() {
        let inventory = large_inventory(1_000);
        let started = std::time::Instant::now();
        let p = run(inventory);
        let elapsed = started.elapsed();
        println!(
            "planned {} records into {} actions in {elapsed:?}",
            p.scanned,
            p.actions.len()
        );
        let count = |f: fn(&Action) -> bool| p.actions.iter().filter(|a| f(a)).count();
        assert_eq!(p.scanned, 5_000);
        assert_eq!(
            count(|a| matches!(a, Action::Remove(r) if r.reason == RemovalReason::Expired)),
            1_000
        );
        assert_eq!(
            count(|a| matches!(a, Action::Remove(r) if r.reason == RemovalReason::PodMissing)),
            2_000
        );
        assert_eq!(count(|a| matches!(a, Action::UpdateStatus { .. })), 1_000);
        assert_eq!(count(|a| matches!(a, Action::DeleteOrphan { .. })), 1_000);
    }

    trait Tap: Sized {
        fn tap(mut self, f: impl FnOnce(&mut Self)) -> Self {
            f(&mut self);
            self
        }
    }
    impl<T> Tap for T {}

    fn tenant(name: &str) -> TenantId {
        TenantId::parse(name).unwrap()
    }

    fn hold(n: u64, secs_ago: i64) -> TenantHold {
        TenantHold {
            stack_id: id(n),
            held_at: ago(secs_ago),
            released: false,
        }
    }

    fn ctf_holds(counter: Option<u64>, holds: Vec<TenantHold>) -> Vec<TenantHolds> {
        vec![TenantHolds {
            tenant: tenant("ctf"),
            counter,
            holds,
        }]
    }

    fn with_tenants(spec: &str) -> PlanConfig {
        let mut config = config();
        config.tenants = Tenants::parse(spec).unwrap();
        config
    }

    fn repairs(plan: &Plan) -> Vec<&HoldRepair> {
        plan.actions
            .iter()
            .filter_map(|a| match a {
                Action::RepairHold(repair) => Some(repair),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_stack_of_a_tenant_no_longer_configured_ends_and_others_stay() {
        let mut inventory = healthy();
        inventory.records[0].tenant = tenant("gone");
        let ended = plan(inventory.clone(), now(), &with_tenants("ctf,default"));
        assert_eq!(reason(&ended), Some(RemovalReason::TenantRemoved));
        let kept = plan(inventory, now(), &with_tenants("gone"));
        assert_eq!(kept.actions, []);
    }

    #[test]
    fn holds_follow_the_live_stacks_of_tenants_with_a_limit() {
        let config = with_tenants("ctf=5,default");
        let mut inventory = healthy();
        inventory.records[0].tenant = tenant("ctf");
        // Stack 1 is live without a hold (made before the limit): one is added; the counter
        // already says 0 holds.
        inventory.held = ctf_holds(Some(0), vec![]);
        let added = plan(inventory.clone(), now(), &config);
        assert!(
            matches!(repairs(&added)[..], [HoldRepair::Add { hold, .. }] if hold.stack_id == id(1)),
            "{added:?}"
        );
        // A dead create's old hold goes, a young one may be a create in flight and stays, a
        // tombstone's goes; the counter is set to the holds listed (4), from what it was.
        let tombstone = tombstone(9, 30).tap(|r| r.tenant = tenant("ctf"));
        inventory.records.push(tombstone);
        inventory.held = ctf_holds(Some(6), vec![hold(1, 600), hold(7, 600), hold(8, 5), hold(9, 600)]);
        let repaired = plan(inventory.clone(), now(), &config);
        let repaired = repairs(&repaired);
        assert!(repaired.contains(&&HoldRepair::Recount {
            tenant: tenant("ctf"),
            seen: Some(6),
            held: 4
        }));
        let deleted: Vec<&StackId> = repaired
            .iter()
            .filter_map(|r| match r {
                HoldRepair::Delete { stack_id, .. } => Some(stack_id),
                _ => None,
            })
            .collect();
        assert_eq!(deleted, [&id(7), &id(9)]);
        assert!(!repaired.iter().any(|r| matches!(r, HoldRepair::Add { .. })));
        // In step: nothing to do.
        inventory.records.pop();
        inventory.held = ctf_holds(Some(1), vec![hold(1, 600)]);
        assert_eq!(repairs(&plan(inventory, now(), &config)), Vec::<&HoldRepair>::new());
    }
}
