//! Creating a stack.
//!
//! Order of writes, chosen so that a create dying at any step (error, timeout, the process
//! killed) leaves only things the next reconcile pass finds and removes:
//!
//! 1. validate (pure), take a create slot (or answer 503 at once: see [`super::load_shed`])
//!    and claim the `Idempotency-Key` (if any) for a fresh stack id; check that some stack
//!    node could ever run the pod ([`super::fit`], over a cached node list), or answer 400;
//! 2. create the pod, labelled `managed-by` + `stack-id`;
//! 3. expose it: in nodeport mode, create the NodePort service, labelled the same and owned
//!    by the pod (the garbage collector deletes it with the pod); in hostport mode the pod
//!    itself holds its ports (`hostPort`, chosen before step 2);
//! 4. wait, with one watch, until the pod is Ready, shows it never will be (a definite
//!    failure, see [`crate::lifecycle`]), or the scheduler or its kubelet refused it (bounded
//!    by `STACK_CREATE_WAIT`); in hostport mode, a refusal for taken ports (another creator
//!    took them on every node meanwhile, or the node's kubelet found them taken) deletes the
//!    pod and goes back to step 2 with other ports, at most [`HOST_PORT_ATTEMPTS`] times; any
//!    other kubelet refusal (the node out of CPU, memory, pods) is a 503;
//! 5. write the stack record, last, with the pod as applied (in hostport mode with the host
//!    ports it got) as its `pod_spec`; a stack already failed is written as its tombstone and
//!    its objects go through the removal path, and the answer says `failed` and why.
//!
//! Dying after 2 or 3 leaves labelled objects without a record: orphans the reconciler deletes
//! once they are older than `STACK_ORPHAN_GRACE`. A claimed key without a record is taken over
//! by the next request with the same key and body, and expires on its own. On any error the
//! create removes what it made before answering ([`Stacks::undo`], the one undo path), so
//! nothing survives a failed request.
//!
//! Clients give up after 5 s and never retry, so a create has a deadline of its own: steps 1-5
//! get [`CREATE_WORK_BUDGET`](crate::deadlines::CREATE_WORK_BUDGET), and a create still running then is abandoned: its objects,
//! record and key are removed within [`CREATE_CLEANUP_BUDGET`] and the answer is a 503. Every
//! create answers within [`CREATE_DEADLINE`](crate::deadlines::CREATE_DEADLINE), however slow the cluster or DynamoDB.
//! The key claim, the pod creates, the record's put and the pod deletes are not cut off with
//! the future that gave up on them (`crate::late_writes`): the undo frees the key and deletes
//! the pod and the record once their writes have their answer, and one that lands after the
//! cleanup budget removes itself, so a slow apiserver or DynamoDB neither lands a write after
//! the undo's delete nor drops the delete unsent.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use super::{StackError, Stacks, fit, signed};
use crate::cluster::{
    ClusterError, PodDeletion, PodHealth, STACK_NODES_TTL, Scheduling, is_port_conflict, pod_health, scheduling_of,
    with_host_ports,
};
use crate::config::OnUnschedulable;
use crate::deadlines::{ABANDONED_CLAIM_AGE, CREATE_CLEANUP_BUDGET, CREATE_WORK_BUDGET};
use crate::late_writes::Writes;
use crate::lifecycle::{PodVerdict, Removal, RemovalReason, Rules, judge_pod, proxy_sync_left};
use crate::model::{
    Exposure, Failure, MANAGED_BY_LABEL, OWN_LABEL_PREFIX, ObservedState, PortMapping, StackId, StackRecord,
    StackStatus, TargetPort,
};
use crate::store::{IdempotencyClaim, Manifest, StoreError, StoredManifest};
use crate::tenancy::TenantId;
use crate::validate::{self, HardenedPod};

/// Choices of host ports one create tries before answering 503.
const HOST_PORT_ATTEMPTS: usize = 3;
/// How fresh the stack nodes must be to refuse a pod that none of them could run: a node that
/// joined since an older read counts. Bounds the node reads refusals can cause.
const FRESH_FOR_REFUSAL: Duration = Duration::from_secs(5);

pub struct CreateRequest {
    /// Whose stack it is (the caller's key's tenant).
    pub tenant: TenantId,
    pub manifest: String,
    pub target_ports: Vec<TargetPort>,
    pub idempotency_key: Option<String>,
    /// SHA-256 of the request body, to tell a replay from a different request with the same key.
    pub body_sha256: String,
}

#[derive(Debug)]
pub enum CreateOutcome {
    Created(StackRecord),
    /// The same Idempotency-Key and body were seen before: the stack they created.
    Replayed(StackRecord),
}

/// How far a create got: what its undo must remove. Only ever grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Reached {
    /// Nothing written yet.
    Start,
    /// The key claim was sent.
    Claim,
    /// The tenant hold was sent (tenants with a limit).
    Hold,
    /// The tenant's counter counts this create.
    Admitted,
    /// A cluster write was sent: the pod (and maybe its service) may exist.
    Cluster,
    /// The record write was sent: it may have landed.
    Record,
}

/// [`Reached`], readable after the create's future was dropped at its deadline, and its
/// writes, which may still be in flight then (`crate::late_writes`).
struct Progress {
    reached: AtomicU8,
    claim_puts: Writes,
    pod_creates: Writes,
    record_puts: Writes,
}

impl Progress {
    fn new() -> Self {
        Self {
            reached: AtomicU8::new(Reached::Start as u8),
            claim_puts: Writes::default(),
            pod_creates: Writes::default(),
            record_puts: Writes::default(),
        }
    }

    fn reach(&self, step: Reached) {
        self.reached.fetch_max(step as u8, Ordering::Relaxed);
    }

    fn reached(&self) -> Reached {
        match self.reached.load(Ordering::Relaxed) {
            0 => Reached::Start,
            1 => Reached::Claim,
            2 => Reached::Hold,
            3 => Reached::Admitted,
            4 => Reached::Cluster,
            _ => Reached::Record,
        }
    }
}

impl Stacks {
    pub async fn create(&self, mut request: CreateRequest) -> Result<CreateOutcome, StackError> {
        let started = Instant::now();
        let id = StackId::generate();
        let hardened = validate::validate(&request.manifest, &request.target_ports, &id, &self.config.validation)?;
        // Encoded and measured before anything is created: what cannot be stored is a 400. (The
        // host ports a hostport create adds later are a few bytes; should they tip it over, the
        // create is undone and still answers 400.)
        let manifest = StoredManifest::encode(&hardened.yaml)?;
        let _slot = self.create_slots.enter().await?;
        let hardened = self.with_runtime_overhead(hardened).await?;
        let progress = Progress::new();
        // From here on the key is the stored (tenant-scoped) one.
        request.idempotency_key = request
            .idempotency_key
            .as_deref()
            .map(|key| request.tenant.scoped_idempotency_key(key));
        let key = request.idempotency_key.clone();
        let work = async {
            if let Some(key) = &key {
                progress.reach(Reached::Claim);
                let claimed = self.claim_key(key, &request.body_sha256, &id, &progress.claim_puts);
                if let Some(existing) = claimed.await? {
                    return Ok(CreateOutcome::Replayed(existing));
                }
            }
            if self.config.tenants.limit(&request.tenant).is_some() {
                progress.reach(Reached::Hold);
                if self.hold_tenant_slot(&request.tenant, &id).await? {
                    progress.reach(Reached::Admitted);
                }
            }
            self.create_claimed(&id, hardened, manifest, &request, started, &progress)
                .await
                .map(CreateOutcome::Created)
        };
        let remaining = CREATE_WORK_BUDGET.saturating_sub(started.elapsed());
        let result = match tokio::time::timeout(remaining, work).await {
            // Nothing of a stack being made can be "gone" to its caller: its pod was deleted
            // under the create (an operator, an eviction), and a new try makes a new one.
            Ok(Err(StackError::NotFound)) => Err(StackError::Unavailable(
                "the stack's pod was deleted while it was being created, retry".to_owned(),
            )),
            Ok(result) => result,
            Err(_) => {
                // `reached`: the last step sent (`Cluster`: the pod; `Record`: the record), where
                // the time went.
                tracing::warn!(stack_id = %id, reached = ?progress.reached(), "create ran out of time; removing what it made");
                Err(StackError::Unavailable(format!(
                    "cluster busy: create did not finish within {} ms, retry",
                    CREATE_WORK_BUDGET.as_millis()
                )))
            }
        };
        if result.is_err() {
            self.undo(&id, &request.tenant, key.as_deref(), &progress).await;
        }
        result
    }

    /// The one undo path of a failed or abandoned create: whatever it may have made (objects,
    /// record, key claim), removed in parallel within [`CREATE_CLEANUP_BUDGET`]; the reconciler
    /// removes what is still left after that.
    async fn undo(&self, id: &StackId, tenant: &TenantId, idempotency_key: Option<&str>, progress: &Progress) {
        let reached = progress.reached();
        let objects = async {
            if reached >= Reached::Cluster {
                // What landed is deleted below, what lands later deletes itself.
                progress.pod_creates.give_up().await;
                if let Err(err) = self.delete_objects_named_by(id).await {
                    tracing::warn!(stack_id = %id, error = %err, "could not remove objects of a failed create");
                }
            }
        };
        // Apart from the cluster, so that a hanging apiserver does not keep the record.
        let items = async {
            if reached >= Reached::Record {
                // As for the pod: what landed is deleted here, what lands later deletes itself.
                progress.record_puts.give_up().await;
                if let Err(err) = self.store.delete_stack_items(id, None).await {
                    tracing::warn!(stack_id = %id, error = %err, "could not remove the record of a failed create");
                }
            }
            if reached >= Reached::Claim
                && let Some(key) = idempotency_key
            {
                // As for the record: a claim that lands later frees the key itself.
                progress.claim_puts.give_up().await;
                if let Err(err) = self.store.release_idempotency_key(key, id).await {
                    tracing::warn!(stack_id = %id, error = %err, "could not release idempotency key");
                }
            }
            if reached >= Reached::Admitted {
                self.release_tenant_slot(tenant, id).await;
            } else if reached == Reached::Hold {
                self.drop_unadmitted_hold(tenant, id).await;
            }
        };
        if tokio::time::timeout(CREATE_CLEANUP_BUDGET, async { tokio::join!(objects, items) })
            .await
            .is_err()
        {
            tracing::warn!(stack_id = %id, "failed create not fully removed; the reconciler finishes it");
        }
    }

    /// Claims `key` for `id`; returns the stack of an earlier identical request instead. The
    /// claim's writes are `puts`.
    async fn claim_key(
        &self,
        key: &str,
        body_sha256: &str,
        id: &StackId,
        puts: &Writes,
    ) -> Result<Option<StackRecord>, StackError> {
        let now = Timestamp::now();
        let claim = IdempotencyClaim {
            body_sha256: body_sha256.to_owned(),
            stack_id: id.clone(),
            claimed_at: now,
        };
        let expires_at = now.saturating_add(signed(self.config.max_lifetime)).unwrap_or(now);
        let mut held = self
            .store
            .claim_idempotency_key_with(key, &claim, expires_at, puts)
            .await?;
        while let Some(existing) = held {
            // The SDK retried a claim whose first attempt had landed: it is ours.
            if existing.stack_id == *id {
                return Ok(None);
            }
            if existing.body_sha256 != body_sha256 {
                return Err(StackError::Conflict(
                    "Idempotency-Key was already used with a different request".into(),
                ));
            }
            if let Some(record) = self.store.get_stack(&existing.stack_id, Manifest::Include).await? {
                return Ok(Some(record));
            }
            let age = now.duration_since(existing.claimed_at);
            if age.is_negative() || age.unsigned_abs() < ABANDONED_CLAIM_AGE {
                return Err(StackError::Conflict(
                    "a request with this Idempotency-Key is still in progress".into(),
                ));
            }
            held = self
                .store
                .take_over_idempotency_key(key, &existing, &claim, expires_at, puts)
                .await?;
            if held.as_ref().is_some_and(|h| h.stack_id == existing.stack_id) {
                return Err(StackError::Conflict(
                    "a request with this Idempotency-Key is still in progress".into(),
                ));
            }
        }
        Ok(None)
    }

    /// Steps 2-5 of the module header; the caller undoes whatever a failure left.
    async fn create_claimed(
        &self,
        id: &StackId,
        hardened: HardenedPod,
        manifest: StoredManifest,
        request: &CreateRequest,
        started: Instant,
        progress: &Progress,
    ) -> Result<StackRecord, StackError> {
        let namespace = async { self.cluster.prepare_namespace().await.map_err(StackError::from) };
        tokio::try_join!(namespace, self.check_fit(&hardened))?;
        progress.reach(Reached::Cluster);
        let (ports, placement, hardened, manifest) = match self.config.exposure {
            Exposure::NodePort => {
                let pod = self.cluster.create_pod(&hardened.pod, &progress.pod_creates).await?;
                // The scheduler does not need the service: both go on at once (under load,
                // the apiserver's node-port allocation is the slower of the two).
                let (ports, pod) = tokio::try_join!(
                    self.cluster.create_service(id, &request.target_ports, &pod),
                    self.cluster.wait_settled(pod.clone(), self.left(started))
                )?;
                let health = self.after_proxy_sync(pod_health(&pod), started).await;
                (ports, self.placement(&pod, health).await?, hardened, manifest)
            }
            Exposure::HostPort => {
                let (ports, placement, pod) = self
                    .place_on_host_ports(id, &hardened, &request.target_ports, started, progress)
                    .await?;
                // The record shows the pod as applied, host ports included.
                let applied = hardened.with_pod(pod)?;
                let manifest = StoredManifest::encode(&applied.yaml)?;
                (ports, placement, applied, manifest)
            }
        };
        let record = self.new_record(id, hardened, request, ports, placement);
        progress.reach(Reached::Record);
        self.put_record(&record, &manifest, &progress.record_puts).await?;
        if record.status.is_tombstone() {
            // It will never run: its objects go now, its record stays to say why. What a
            // failed removal leaves, the next read or pass removes (the rule's tombstone case).
            tracing::info!(stack_id = %id, reason = ?record.reason, "stack failed at create, removing its objects");
            if let Err(err) = self
                .remove(&Removal::of(record.clone(), RemovalReason::Failed, None))
                .await
            {
                tracing::warn!(stack_id = %id, error = %err, "could not remove the objects of a failed stack");
            }
        }
        Ok(record)
    }

    /// Refuses (400) a pod no stack node could ever run, before anything is created; see
    /// [`fit`]. The node list is cached ([`STACK_NODES_TTL`]), and read again before a refusal
    /// when older than [`FRESH_FOR_REFUSAL`], so a node that just joined counts: at most one
    /// node read per create. A node read that fails leaves the decision to the scheduler, as
    /// before this check (the create's own calls meet the same apiserver).
    async fn check_fit(&self, hardened: &HardenedPod) -> Result<(), StackError> {
        let mut refusal = None;
        for max_age in [STACK_NODES_TTL, FRESH_FOR_REFUSAL] {
            let nodes = match self.cluster.stack_nodes(max_age).await {
                Ok(nodes) => nodes,
                Err(err) => {
                    tracing::warn!(error = %err, "could not read the stack nodes; placement left to the scheduler");
                    return Ok(());
                }
            };
            match fit::check(
                hardened,
                &nodes,
                self.config.on_unschedulable,
                &self.config.validation.node_role,
            ) {
                Ok(()) => return Ok(()),
                Err(rejection) => refusal = Some(rejection),
            }
        }
        refusal.map_or(Ok(()), |rejection| {
            Err(fit_refusal(rejection, self.config.validation.user_namespaces))
        })
    }

    /// What is left of `STACK_CREATE_WAIT`.
    fn left(&self, started: Instant) -> std::time::Duration {
        self.config.create_wait.saturating_sub(started.elapsed())
    }

    /// Steps 2-4 in hostport mode: the pod with host ports of the range that some node still
    /// has free, as far as this process knows; other ports when the scheduler finds them
    /// taken everywhere (the NodePorts filter) or the node's kubelet finds them taken (its
    /// NodePorts admission check), `503 no available nodeport` when no choice is left.
    /// Returns the pod as it was sent, with the host ports that held.
    async fn place_on_host_ports(
        &self,
        id: &StackId,
        hardened: &HardenedPod,
        targets: &[TargetPort],
        started: Instant,
        progress: &Progress,
    ) -> Result<(Vec<PortMapping>, ObservedState, Pod), StackError> {
        let mut rejected = HashSet::new();
        let mut refreshed = false;
        for attempt in 1..=HOST_PORT_ATTEMPTS {
            let ports = self.cluster.pick_ports(targets, &rejected, &mut refreshed).await?;
            let applied = with_host_ports(&hardened.pod, &ports);
            let pod = self.cluster.create_pod(&applied, &progress.pod_creates).await?;
            self.cluster.mark_host_ports_used(&ports);
            let pod = self.cluster.wait_settled(pod, self.left(started)).await?;
            if !host_ports_taken(&pod) {
                return Ok((ports, self.placement(&pod, pod_health(&pod)).await?, applied));
            }
            tracing::debug!(stack_id = %id, attempt, ?ports, "host ports taken, choosing again");
            // At once: the next choice creates a pod of the same name, and this one never ran
            // (no node took it, or its kubelet refused it): there is nothing to tear down.
            self.cluster.delete_pod(&id.pod_name(), PodDeletion::Now).await?;
            self.cluster.release_node_ports(&ports);
            if let [only] = ports.as_slice() {
                // Alone, it is certainly the taken one.
                self.cluster.mark_ports_full(std::slice::from_ref(only));
            }
            rejected.extend(ports.iter().map(|p| p.node_port));
        }
        tracing::info!(stack_id = %id, "chosen host ports taken {HOST_PORT_ATTEMPTS} times, refusing");
        Err(StackError::NoNodePort)
    }

    /// The settled pod's `health`; when it is Ready, after kube-proxy has had
    /// `STACK_PROXY_SYNC` to program the node port (within what is left of
    /// `STACK_CREATE_WAIT`), so that `running` means connectable. The watch has just
    /// delivered it: it was Ready by now at the latest, more precisely than its condition's
    /// whole seconds say.
    async fn after_proxy_sync(&self, health: PodHealth, started: Instant) -> PodHealth {
        let health = health.seen_ready_at(Timestamp::now());
        if let PodHealth::Ready { ready_by } = &health {
            let left = proxy_sync_left(*ready_by, Timestamp::now(), self.config.proxy_sync);
            tokio::time::sleep(left.min(self.left(started))).await;
        }
        health
    }

    /// Where the settled `pod` stands, by the lifecycle rule's pod part: `running` with its
    /// node and address when it was Ready within `STACK_CREATE_WAIT`, `failed` with the
    /// reason when it showed it never will be, else `creating` with what is known so far. A
    /// pod the scheduler refused fails the create unless `STACK_ON_UNSCHEDULABLE=wait`; one
    /// its kubelet refused (the node out of a resource) fails it with the capacity 503.
    async fn placement(&self, pod: &Pod, health: PodHealth) -> Result<ObservedState, StackError> {
        let node_name = match scheduling_of(pod) {
            Scheduling::Unschedulable(why) => {
                return match self.config.on_unschedulable {
                    OnUnschedulable::Fail => Err(StackError::Saturated(why)),
                    // Left pending for an autoscaler to add a node; the lifecycle rule ends it
                    // after the scheduling timeout.
                    OnUnschedulable::Wait => Ok(not_placed()),
                };
            }
            Scheduling::Pending => return Ok(not_placed()),
            Scheduling::Scheduled(node_name) => node_name,
        };
        let (status, failure) = status_at_create(&health, self.config.exposure, &Rules::of(&self.config))?;
        Ok(ObservedState {
            status,
            node_public_ip: self.cluster.node_public_ip(&node_name).await?,
            node_id: node_name,
            failure,
        })
    }

    fn new_record(
        &self,
        id: &StackId,
        hardened: HardenedPod,
        request: &CreateRequest,
        ports: Vec<crate::model::PortMapping>,
        placement: ObservedState,
    ) -> StackRecord {
        let now = Timestamp::now();
        StackRecord {
            stack_id: id.clone(),
            pod_id: id.pod_name(),
            namespace: self.cluster.namespace().to_owned(),
            node_id: placement.node_id,
            node_public_ip: placement.node_public_ip,
            pod_spec: hardened.yaml,
            ports,
            exposure: self.config.exposure,
            service_name: match self.config.exposure {
                Exposure::NodePort => id.service_name(),
                Exposure::HostPort => String::new(),
            },
            status: placement.status,
            ttl_expires_at: now.saturating_add(signed(self.config.ttl)).unwrap_or(now),
            created_at: now,
            updated_at: now,
            requested_cpu_milli: hardened.requested_cpu_milli,
            requested_memory_bytes: hardened.requested_memory_bytes,
            idempotency_key: request.idempotency_key.clone(),
            tenant: request.tenant.clone(),
            labels: Some(own_labels(&hardened.pod)),
            failed_at: placement.failure.is_some().then_some(now),
            reason: placement.failure.as_ref().map(|f| f.reason),
            message: placement.failure.map(|f| f.message),
        }
    }

    /// Writes the record, last. A condition failure can be the SDK's retry finding its own
    /// first attempt: that record is ours, anything else is an id collision.
    async fn put_record(
        &self,
        record: &StackRecord,
        manifest: &StoredManifest,
        puts: &Writes,
    ) -> Result<(), StackError> {
        match self.store.put_new_stack_with(record, manifest, puts).await {
            Ok(()) => Ok(()),
            Err(StoreError::ConditionFailed) => {
                let stored = self.store.get_stack(&record.stack_id, Manifest::Omit).await?;
                if stored.is_some_and(|s| s.created_at == record.created_at) {
                    Ok(())
                } else {
                    Err(StackError::Conflict("stack id collision, retry".into()))
                }
            }
            Err(err) => Err(err.into()),
        }
    }
}

/// Whether the scheduler (on every node) or the pod's kubelet (on its node) found the pod's
/// host ports taken: other ports may fit.
fn host_ports_taken(pod: &Pod) -> bool {
    match scheduling_of(pod) {
        Scheduling::Unschedulable(why) => is_port_conflict(&why),
        Scheduling::Scheduled(_) | Scheduling::Pending => {
            matches!(pod_health(pod), PodHealth::Rejected(r) if r.is_port_conflict())
        }
    }
}

/// What a create answers for its placed pod: the lifecycle rule's pod part for a stack
/// created now (only what is already certain counts, no deadline has passed), and the
/// capacity 503 for a pod its kubelet refused.
fn status_at_create(
    health: &PodHealth,
    exposure: Exposure,
    rules: &Rules,
) -> Result<(StackStatus, Option<Failure>), StackError> {
    let now = Timestamp::now();
    match judge_pod(now, exposure, health, now, rules) {
        PodVerdict::Live(status) => Ok((status, None)),
        PodVerdict::Failed(failure) => Ok((StackStatus::Failed, Some(failure))),
        PodVerdict::Rejected(rejection) => Err(StackError::Saturated(rejection.message)),
    }
}

/// The manifest's labels without ours: what `GET /stacks` shows (the dashboard groups by them).
fn own_labels(pod: &Pod) -> BTreeMap<String, String> {
    let mut labels = pod.metadata.labels.clone().unwrap_or_default();
    labels.retain(|k, _| k != MANAGED_BY_LABEL && !k.starts_with(OWN_LABEL_PREFIX));
    labels
}

/// A stack whose pod has no node yet.
fn not_placed() -> ObservedState {
    ObservedState {
        status: StackStatus::Creating,
        node_id: String::new(),
        node_public_ip: None,
        failure: None,
    }
}

/// A pod no stack node can run is the manifest's fault (400), unless what no node supports is
/// what the operator forced (`STACK_USER_NAMESPACES` on nodes without user namespaces): then
/// every create would fail the same way, and the operator must act (503, as for a missing guard).
fn fit_refusal(rejection: validate::Rejection, user_namespaces_forced: bool) -> StackError {
    if user_namespaces_forced && rejection.path == "spec.hostUsers" {
        let why = format!("STACK_USER_NAMESPACES is on, but hostUsers: {}", rejection.problem);
        return ClusterError::Unguarded(why).into();
    }
    rejection.into()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::PodCondition;

    use super::*;
    use crate::cluster::kubelet;
    use crate::model::FailureReason;

    #[test]
    fn nodes_without_user_namespaces_are_the_operators_problem_when_the_operator_forced_them() {
        let no_support = || validate::Rejection::new("spec.hostUsers", "false needs user namespaces, ...");
        assert_eq!(
            fit_refusal(no_support(), false).class(),
            crate::stacks::ErrorClass::Invalid
        );
        let forced = fit_refusal(no_support(), true);
        assert_eq!(forced.class(), crate::stacks::ErrorClass::Unavailable);
        assert!(forced.to_string().contains("STACK_USER_NAMESPACES is on"), "{forced}");
        // Anything else no node can run stays the manifest's fault.
        let affinity = validate::Rejection::new("spec.nodeSelector", "match no stack node");
        assert_eq!(fit_refusal(affinity, true).class(), crate::stacks::ErrorClass::Invalid);
    }

    const RULES: Rules = Rules {
        scheduling_timeout: Duration::from_secs(20),
        start_timeout: Duration::from_secs(320),
        failed_retention: Duration::from_secs(600),
        reap_terminated: false,
        proxy_sync: Duration::from_secs(1),
    };

    /// Not bound: the scheduler's answer in its `PodScheduled` condition.
    fn unschedulable(message: &str) -> Pod {
        let mut pod = kubelet::just_bound();
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_name = None;
        }
        if let Some(status) = pod.status.as_mut() {
            status.conditions = Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some("Unschedulable".into()),
                message: Some(message.into()),
                ..PodCondition::default()
            }]);
        }
        pod
    }

    #[test]
    fn host_ports_taken_by_the_scheduler_or_the_kubelet_are_chosen_again() {
        assert!(host_ports_taken(&unschedulable(
            "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
        )));
        assert!(host_ports_taken(&kubelet::rejected(
            "NodePorts",
            "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
        )));
        assert!(!host_ports_taken(&unschedulable(
            "0/2 nodes are available: 2 Insufficient cpu."
        )));
        assert!(!host_ports_taken(&kubelet::rejected(
            "OutOfcpu",
            "Node didn't have enough resource: cpu, requested: 2000, used: 3850, capacity: 4000"
        )));
        assert!(!host_ports_taken(&kubelet::ready()));
    }

    #[test]
    fn a_node_port_stack_runs_once_kube_proxy_had_its_sync_after_the_pod_was_ready() {
        let now = Timestamp::now();
        let ready_by = |ago: i64| PodHealth::Ready {
            ready_by: Some(now - jiff::SignedDuration::from_millis(ago)),
        };
        let status = |health: &PodHealth, exposure| status_at_create(health, exposure, &RULES).unwrap().0;
        assert_eq!(status(&ready_by(0), Exposure::NodePort), StackStatus::Creating);
        assert_eq!(status(&ready_by(900), Exposure::NodePort), StackStatus::Creating);
        assert_eq!(status(&ready_by(1_100), Exposure::NodePort), StackStatus::Running);
        // A host port is the pod's own: connectable the moment it is Ready.
        assert_eq!(status(&ready_by(0), Exposure::HostPort), StackStatus::Running);
        // The watch saw it Ready just now: its condition's whole seconds say nothing more.
        let seen = pod_health(&kubelet::ready()).seen_ready_at(now);
        assert_eq!(seen, PodHealth::Ready { ready_by: Some(now) });
        assert_eq!(proxy_sync_left(Some(now), now, RULES.proxy_sync), RULES.proxy_sync);
        assert_eq!(proxy_sync_left(None, now, RULES.proxy_sync), Duration::ZERO);
    }

    #[test]
    fn a_create_answers_running_only_for_a_ready_pod_and_failed_at_once_for_a_definite_cause() {
        let status = |pod: &Pod| {
            status_at_create(&pod_health(pod), Exposure::HostPort, &RULES).map(|(s, f)| (s, f.map(|f| f.reason)))
        };
        assert_eq!(status(&kubelet::ready()).unwrap(), (StackStatus::Running, None));
        assert_eq!(
            status(&kubelet::started_not_ready()).unwrap(),
            (StackStatus::Creating, None)
        );
        assert_eq!(status(&kubelet::pulling()).unwrap(), (StackStatus::Creating, None));
        // Transient: the create answers `creating`, the start timeout decides later.
        let refused = kubelet::waiting_for("ErrImagePull", kubelet::REFUSED);
        assert_eq!(status(&refused).unwrap(), (StackStatus::Creating, None));
        let missing = kubelet::waiting_for("ErrImagePull", kubelet::NOT_FOUND);
        assert_eq!(
            status(&missing).unwrap(),
            (StackStatus::Failed, Some(FailureReason::ImageNotFound))
        );
        // The node refused it: not a failed stack but the capacity 503.
        let full = kubelet::rejected(
            "OutOfmemory",
            "Node didn't have enough resource: memory, requested: 1073741824, used: 7516192768, capacity: 8321499136",
        );
        let err = status(&full).unwrap_err();
        assert!(matches!(err, StackError::Saturated(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "cluster saturated: Pod was rejected: Node didn't have enough resource: memory, requested: 1073741824, used: 7516192768, capacity: 8321499136"
        );
    }
}
