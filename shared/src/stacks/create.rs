//! Creating a stack.
//!
//! Order of writes, chosen so that a create dying at any step (error, timeout, the process
//! killed) leaves only things the next reconcile pass finds and removes:
//!
//! 1. validate (pure) and claim the `Idempotency-Key` (if any) for a fresh stack id;
//! 2. create the pod, labelled `managed-by` + `stack-id`;
//! 3. create the NodePort service, labelled the same and owned by the pod (the garbage
//!    collector deletes it with the pod);
//! 4. wait for the scheduler (bounded);
//! 5. write the stack record, last.
//!
//! Dying after 2 or 3 leaves labelled objects without a record: orphans the reconciler deletes
//! once they are older than `STACK_ORPHAN_GRACE`. A claimed key without a record is taken over
//! by the next request with the same key and body, and expires on its own. On an ordinary
//! error the create removes what it made before answering, so nothing survives a failed request.
//!
//! Clients give up after 5 s and never retry, so a create has a deadline of its own: steps 1-5
//! get [`CREATE_WORK_BUDGET`], and a create still running then is abandoned: its objects,
//! record and key are removed within [`CREATE_CLEANUP_BUDGET`] and the answer is a 503. Every
//! create answers within [`CREATE_DEADLINE`], however slow the cluster or DynamoDB.

use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::{StackError, Stacks, signed};
use crate::cluster::{Scheduling, node_external_ip};
use crate::model::{StackId, StackRecord, StackStatus, TargetPort};
use crate::store::{IdempotencyClaim, Manifest, StoreError, StoredManifest};
use crate::validate::{self, HardenedPod};

/// A claim this old without a stack record belongs to a create that died.
const ABANDONED_CLAIM_AGE: Duration = Duration::from_secs(30);

/// How long a create may work before it is abandoned (the contract's 3 s answer).
pub const CREATE_WORK_BUDGET: Duration = Duration::from_millis(3000);
/// How long an abandoned create may spend removing what it made; the reconciler removes
/// whatever is still left after that.
pub const CREATE_CLEANUP_BUDGET: Duration = Duration::from_millis(1000);
/// The longest a create takes to answer, success or not: within the clients' 5 s.
pub const CREATE_DEADLINE: Duration = CREATE_WORK_BUDGET.saturating_add(CREATE_CLEANUP_BUDGET);

pub struct CreateRequest {
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

impl Stacks {
    pub async fn create(&self, request: CreateRequest) -> Result<CreateOutcome, StackError> {
        let started = Instant::now();
        let id = StackId::generate();
        let hardened = validate::validate(&request.manifest, &request.target_ports, &id, &self.policy)
            .map_err(|rejection| StackError::Invalid(format!("invalid pod spec: {rejection}")))?;
        // Encoded and measured before anything is created: what cannot be stored is a 400.
        let manifest = StoredManifest::encode(&hardened.yaml)?;
        let work = async {
            if let Some(key) = &request.idempotency_key
                && let Some(existing) = self.claim_key(key, &request.body_sha256, &id).await?
            {
                return Ok(CreateOutcome::Replayed(existing));
            }
            let result = self.create_claimed(&id, hardened, &manifest, &request, started).await;
            if result.is_err() {
                self.release_key(&id, request.idempotency_key.as_deref()).await;
            }
            result.map(CreateOutcome::Created)
        };
        let remaining = CREATE_WORK_BUDGET.saturating_sub(started.elapsed());
        match tokio::time::timeout(remaining, work).await {
            Ok(outcome) => outcome,
            Err(_) => {
                self.abandon(&id, request.idempotency_key.as_deref()).await;
                Err(StackError::Unavailable(format!(
                    "cluster busy: create did not finish within {} ms, retry",
                    CREATE_WORK_BUDGET.as_millis()
                )))
            }
        }
    }

    async fn release_key(&self, id: &StackId, idempotency_key: Option<&str>) {
        if let Some(key) = idempotency_key
            && let Err(err) = self.store.release_idempotency_key(key, id).await
        {
            tracing::warn!(stack_id = %id, error = %err, "could not release idempotency key");
        }
    }

    /// Undoes a create that ran out of time at whatever step it was: its objects, its record
    /// (the write may have landed) and its key, within [`CREATE_CLEANUP_BUDGET`].
    async fn abandon(&self, id: &StackId, idempotency_key: Option<&str>) {
        tracing::warn!(stack_id = %id, "create ran out of time; removing what it made");
        // Cluster and store apart, so that a hanging cluster does not keep the record.
        let forget = async {
            if let Err(err) = self.store.delete_stack_items(id, None).await {
                tracing::warn!(stack_id = %id, error = %err, "could not remove the record of an abandoned create");
            }
            self.release_key(id, idempotency_key).await;
        };
        let undo = async { tokio::join!(self.discard(id), forget) };
        if tokio::time::timeout(CREATE_CLEANUP_BUDGET, undo).await.is_err() {
            tracing::warn!(stack_id = %id, "abandoned create not fully removed; the reconciler finishes it");
        }
    }

    /// Claims `key` for `id`; returns the stack of an earlier identical request instead.
    async fn claim_key(&self, key: &str, body_sha256: &str, id: &StackId) -> Result<Option<StackRecord>, StackError> {
        let now = Timestamp::now();
        let claim = IdempotencyClaim {
            body_sha256: body_sha256.to_owned(),
            stack_id: id.clone(),
            claimed_at: now,
        };
        let expires_at = now.saturating_add(signed(self.config.max_lifetime)).unwrap_or(now);
        let mut held = self.store.claim_idempotency_key(key, &claim, expires_at).await?;
        while let Some(existing) = held {
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
                .take_over_idempotency_key(key, &existing, &claim, expires_at)
                .await?;
            if held.as_ref().is_some_and(|h| h.stack_id == existing.stack_id) {
                return Err(StackError::Conflict(
                    "a request with this Idempotency-Key is still in progress".into(),
                ));
            }
        }
        Ok(None)
    }

    async fn create_claimed(
        &self,
        id: &StackId,
        hardened: HardenedPod,
        manifest: &StoredManifest,
        request: &CreateRequest,
        started: Instant,
    ) -> Result<StackRecord, StackError> {
        self.cluster.prepare_namespace().await?;
        let pod = self.cluster.create_pod(&hardened.pod).await?;
        let built = self.build_record(id, &pod, hardened, request, started).await;
        let record = match built {
            Ok(record) => record,
            Err(err) => {
                self.discard(id).await;
                return Err(err);
            }
        };
        match self.store.put_new_stack_with(&record, manifest).await {
            Ok(()) => Ok(record),
            Err(err) => {
                self.discard(id).await;
                Err(match err {
                    StoreError::ConditionFailed => StackError::Conflict("stack id collision, retry".into()),
                    other => other.into(),
                })
            }
        }
    }

    async fn build_record(
        &self,
        id: &StackId,
        pod: &k8s_openapi::api::core::v1::Pod,
        hardened: HardenedPod,
        request: &CreateRequest,
        started: Instant,
    ) -> Result<StackRecord, StackError> {
        let ports = self.cluster.create_service(id, &request.target_ports, pod).await?;
        let budget = self.config.create_wait.saturating_sub(started.elapsed());
        let (node_id, node_public_ip) = match self.cluster.wait_scheduled(&id.pod_name(), budget).await? {
            Scheduling::Unschedulable(why) => return Err(StackError::Saturated(why)),
            Scheduling::Pending => (String::new(), None),
            Scheduling::Scheduled(node_name) => {
                let node = self.cluster.get_node(&node_name).await?;
                let ip = node.as_ref().and_then(node_external_ip);
                (node_name, ip)
            }
        };
        let now = Timestamp::now();
        Ok(StackRecord {
            stack_id: id.clone(),
            pod_id: id.pod_name(),
            namespace: self.cluster.namespace().to_owned(),
            node_id,
            node_public_ip,
            pod_spec: hardened.yaml,
            ports,
            service_name: id.service_name(),
            status: StackStatus::Creating,
            ttl_expires_at: now.saturating_add(signed(self.config.ttl)).unwrap_or(now),
            created_at: now,
            updated_at: now,
            requested_cpu_milli: hardened.requested_cpu_milli,
            requested_memory_bytes: hardened.requested_memory_bytes,
            idempotency_key: request.idempotency_key.clone(),
        })
    }

    /// Best effort removal of a failed create's objects; the reconciler removes what remains.
    async fn discard(&self, id: &StackId) {
        if let Err(err) = self.cluster.delete_stack_objects(id).await {
            tracing::warn!(stack_id = %id, error = %err, "could not remove objects of a failed create");
        }
    }
}
