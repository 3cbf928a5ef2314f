//! Ending a stack: the one removal path of API deletes, API reads that find a stack gone,
//! batch deletes and the reconciler.

use std::future::Future;

use jiff::Timestamp;

use super::RemovalReason;
use crate::cluster::ClusterError;
use crate::model::{ObservedState, StackId, StackRecord};
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    Pod,
    /// A pod whose node is gone: no kubelet is left to stop it, so it goes without the grace
    /// period a pod's deletion otherwise waits out.
    StrandedPod,
    Service,
}

/// Whether a status write-back found its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordWrite {
    Written,
    /// The record was deleted meanwhile, or found failed (a tombstone is final).
    Gone,
}

/// The writes a removal needs; the live implementation is `Stacks` (DynamoDB and the
/// apiserver), tests use an in-memory one.
pub(crate) trait StackRemover: Sync {
    /// Deletes one of our objects; already gone counts as success.
    fn delete_object(&self, kind: ObjectKind, name: &str) -> impl Future<Output = Result<(), RemoveError>> + Send;
    /// Deletes the record (and its idempotency key); already gone counts as success. With
    /// `unless_failed`, a record found failed meanwhile (a tombstone) stays, also a success.
    fn delete_record(
        &self,
        record: &StackRecord,
        unless_failed: bool,
    ) -> impl Future<Output = Result<(), RemoveError>> + Send;
    /// The record's objects are gone: what this process remembers of its ports may go too.
    fn objects_released(&self, _record: &StackRecord) {}
    /// The record's objects are gone: its tenant's slot is free again. Never fails a removal
    /// (what is left, the reconciler releases).
    fn release_tenant_slot(&self, _record: &StackRecord) -> impl Future<Output = ()> + Send {
        async {}
    }
    fn write_observed(
        &self,
        id: &StackId,
        observed: &ObservedState,
        now: Timestamp,
    ) -> impl Future<Output = Result<RecordWrite, RemoveError>> + Send;
}

/// Ends a stack: its remaining objects first, then its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    pub record: StackRecord,
    pub reason: RemovalReason,
    /// Our pod, if it is to be deleted (the reconciler names only objects it observed with
    /// our label; an object without it is never deleted).
    pub pod: Option<String>,
    /// Our service, likewise.
    pub service: Option<String>,
    /// Written to the record before anything is deleted, so that clients see the terminal
    /// status even if the removal fails half-way.
    pub mark: Option<ObservedState>,
}

impl Removal {
    /// Removes the record's pod and service (if its mode has one) by name.
    pub fn of(record: StackRecord, reason: RemovalReason, mark: Option<ObservedState>) -> Self {
        Self {
            pod: Some(record.pod_id.clone()),
            service: record.service().map(str::to_owned),
            record,
            reason,
            mark,
        }
    }
}

/// Service and pod first; the record only once both deletes succeeded, so that a failure
/// leaves the record for the next attempt (or pass) to finish. A failed stack keeps its
/// record (marked failed first): the tombstone the lifecycle rule removes after its retention.
pub(crate) async fn end_stack<R: StackRemover>(
    remover: &R,
    removal: &Removal,
    now: Timestamp,
) -> Result<(), RemoveError> {
    if let Some(mark) = &removal.mark {
        // `Gone` only means someone else removed the record (or found it failed); the
        // objects may remain.
        remover.write_observed(&removal.record.stack_id, mark, now).await?;
    }
    let pod = match removal.reason {
        RemovalReason::NodeMissing => ObjectKind::StrandedPod,
        _ => ObjectKind::Pod,
    };
    delete_objects(
        remover,
        removal.service.as_deref(),
        removal.pod.as_deref().map(|name| (pod, name)),
    )
    .await?;
    remover.objects_released(&removal.record);
    remover.release_tenant_slot(&removal.record).await;
    if removal.reason.keeps_record() {
        return Ok(());
    }
    remover
        .delete_record(&removal.record, removal.reason.yields_to_failure())
        .await
}

/// Deletes the named service and pod (of its kind) together; either already gone counts as
/// success.
pub(crate) async fn delete_objects<R: StackRemover>(
    remover: &R,
    service: Option<&str>,
    pod: Option<(ObjectKind, &str)>,
) -> Result<(), RemoveError> {
    let (service, pod) = futures::join!(delete_object(remover, ObjectKind::Service, service), async {
        match pod {
            Some((kind, name)) => delete_object(remover, kind, Some(name)).await,
            None => Ok(()),
        }
    });
    service.and(pod)
}

async fn delete_object<R: StackRemover>(remover: &R, kind: ObjectKind, name: Option<&str>) -> Result<(), RemoveError> {
    match name {
        Some(name) => match remover.delete_object(kind, name).await {
            Err(RemoveError::Cluster(ClusterError::NotFound)) => Ok(()),
            other => other,
        },
        None => Ok(()),
    }
}
