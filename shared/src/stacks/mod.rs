//! The stack lifecycle: create, read (refreshed from the cluster), renew, delete and batch
//! delete. Handlers map these to HTTP; the reconciler shares the removal path.

mod batch;
mod capacity;
mod create;
mod event;
mod fit;
mod forecast;
mod load_shed;
pub(crate) mod preflight;
mod prepull;
mod read;
mod tenant_limit;

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

pub(crate) use batch::JobProgress;
pub use batch::MAX_BATCH_IDS;
pub use create::{CreateOutcome, CreateRequest};
pub use event::{EventPlan, ExpectedStacks};
pub use forecast::Forecast;
pub use prepull::MAX_PREPULL_IMAGES;
pub use read::Stats;

use crate::cluster::{self, Cluster, ClusterError, NamespacePolicy, PodDeletion, PortPolicy};
use crate::config::{Config, ConfigError};
use crate::history::RefusalReason;
use crate::lifecycle::end::{ObjectKind, RecordWrite, RemoveError, StackRemover, delete_objects};
use crate::lifecycle::{Removal, RemovalReason, end_stack};
use crate::model::{ObservedState, StackId, StackRecord};
use crate::prepull::Prepull;
use crate::store::{Manifest, Store, StoreError, Unreadable, UnstorableManifest};
use crate::tenancy::{Scope, TenantId};
use crate::validate::{HardenedPod, Rejection};

/// Start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Preflight(#[from] preflight::PreflightError),
}

/// What a stack operation can fail with; [`StackError::class`] sorts them for the client.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// The request is at fault.
    #[error("{0}")]
    Invalid(String),
    #[error("stack not found")]
    NotFound,
    #[error("job not found")]
    JobNotFound,
    /// The request conflicts with the stack's state.
    #[error("{0}")]
    Conflict(String),
    #[error("no available nodeport")]
    NoNodePort,
    #[error("cluster saturated: {0}")]
    Saturated(String),
    /// The tenant holds as many stacks as `STACK_TENANTS` allows it.
    #[error("tenant {tenant} holds its limit of {limit} stacks; end one or retry later")]
    TenantLimit { tenant: TenantId, limit: u32 },
    /// Refused for now (load shed, deadline passed, guard rails missing): retry later.
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Store(StoreError),
    #[error(transparent)]
    Cluster(ClusterError),
}

/// The only distinctions clients make (plus 409 for our extensions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// 400: the request can never succeed as sent.
    Invalid,
    /// 404: the stack or job is gone.
    NotFound,
    /// 409: conflicts with the current state (idempotency key, lifetime cap).
    Conflict,
    /// 503 with `Retry-After`: no capacity, or a dependency is slow, throttling or down.
    Unavailable,
    /// 500: our own defect or configuration.
    Internal,
}

impl StackError {
    /// The one table from failure to what the client is told.
    pub fn class(&self) -> ErrorClass {
        match self {
            StackError::Invalid(_) => ErrorClass::Invalid,
            StackError::NotFound | StackError::JobNotFound => ErrorClass::NotFound,
            StackError::Conflict(_) => ErrorClass::Conflict,
            StackError::NoNodePort
            | StackError::Saturated(_)
            | StackError::TenantLimit { .. }
            | StackError::Unavailable(_) => ErrorClass::Unavailable,
            StackError::Store(err) if err.is_transient() => ErrorClass::Unavailable,
            StackError::Cluster(err) if err.is_transient() => ErrorClass::Unavailable,
            StackError::Store(_) | StackError::Cluster(_) => ErrorClass::Internal,
        }
    }
}

impl From<StoreError> for StackError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Unstorable(why) => why.into(),
            other => StackError::Store(other),
        }
    }
}

/// The 400 of a pod spec we cannot take: the request's fault, whoever found it.
fn invalid_pod_spec(why: impl std::fmt::Display) -> StackError {
    StackError::Invalid(format!("invalid pod spec: {why}"))
}

/// A manifest the validator refuses is the request's fault.
impl From<Rejection> for StackError {
    fn from(rejection: Rejection) -> Self {
        invalid_pod_spec(rejection)
    }
}

/// A manifest too large to keep is the request's fault, refused before anything is created.
impl From<UnstorableManifest> for StackError {
    fn from(why: UnstorableManifest) -> Self {
        invalid_pod_spec(why)
    }
}

impl From<RemoveError> for StackError {
    fn from(err: RemoveError) -> Self {
        match err {
            RemoveError::Store(err) => err.into(),
            RemoveError::Cluster(err) => err.into(),
        }
    }
}

impl From<ClusterError> for StackError {
    fn from(err: ClusterError) -> Self {
        match err {
            ClusterError::NotFound => StackError::NotFound,
            ClusterError::Saturated(why) => StackError::Saturated(why),
            ClusterError::Rejected(why) => invalid_pod_spec(why),
            ClusterError::NodePortsExhausted => StackError::NoNodePort,
            ClusterError::Unguarded(why) => StackError::Unavailable(format!("stack creation refused: {why}")),
            other => StackError::Cluster(other),
        }
    }
}

/// Stack operations over one store and one cluster namespace; built once per process.
pub struct Stacks {
    config: Arc<Config>,
    store: Store,
    cluster: Cluster,
    prepull: Prepull,
    create_slots: load_shed::CreateSlots,
}

impl Stacks {
    pub fn new(config: Arc<Config>, store: Store, cluster: Cluster) -> Self {
        let create_slots = load_shed::CreateSlots::new(config.create_concurrency, config.create_queue_wait);
        Self {
            prepull: Prepull::new(cluster.client().clone(), &config),
            config,
            store,
            cluster,
            create_slots,
        }
    }

    /// Everything the configuration describes, over the given clients.
    pub fn from_config(config: Config, store: Store, client: kube::Client) -> Self {
        let namespace_policy = NamespacePolicy {
            isolation: config.isolation.clone(),
            require_isolation: config.require_isolation,
            checked_per_stack: config.validation.isolation_check_image.is_some(),
        };
        let port_policy = PortPolicy::of(&config);
        let cluster = Cluster::new(client, &config.validation.namespace, namespace_policy, port_policy);
        Self::new(Arc::new(config), store, cluster)
    }

    /// Builds the clients once per process (AWS SDK with our timeouts, Kubernetes per
    /// [`cluster::connect`]) and everything over them, then checks that the table and the
    /// cluster are there ([`preflight`]).
    pub async fn connect(config: Config) -> Result<Self, SetupError> {
        let aws = crate::aws::load_sdk_config().await;
        let store = Store::new(
            aws_sdk_dynamodb::Client::new(&aws),
            &config.table,
            config.consistent_read,
        );
        let client = cluster::connect(&config, &aws).await?;
        let stacks = Self::from_config(config, store, client);
        preflight::check(&stacks.config, &stacks.store, &stacks.cluster).await?;
        Ok(stacks)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// `hardened` counted as the scheduler counts it: with the overhead of the RuntimeClass
    /// every stack runs under, if any.
    pub(crate) async fn with_runtime_overhead(&self, hardened: HardenedPod) -> Result<HardenedPod, StackError> {
        match &self.config.validation.runtime_class {
            Some(class) => Ok(hardened.with_overhead(self.cluster.runtime_overhead(class).await?)),
            None => Ok(hardened),
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    pub(crate) fn prepull(&self) -> &Prepull {
        &self.prepull
    }

    /// Extends the stack's TTL to now + `STACK_TTL`, capped at its maximum lifetime. A failed
    /// stack cannot be renewed: only its tombstone is left.
    pub async fn renew(&self, id: &StackId, scope: &Scope) -> Result<StackRecord, StackError> {
        let mut record = self.get(id, scope).await?;
        if record.status.is_tombstone() {
            return Err(StackError::Conflict("stack failed; it cannot be renewed".into()));
        }
        let now = Timestamp::now();
        let cap = record
            .created_at
            .saturating_add(signed(self.config.max_lifetime))
            .unwrap_or(record.created_at);
        if record.ttl_expires_at >= cap {
            return Err(StackError::Conflict("stack reached its maximum lifetime".into()));
        }
        let wanted = now.saturating_add(signed(self.config.ttl)).unwrap_or(now).min(cap);
        let new_expiry = wanted.max(record.ttl_expires_at);
        match self.store.renew_stack(id, record.ttl_expires_at, new_expiry, now).await {
            Ok(()) => {
                record.ttl_expires_at = new_expiry;
                record.updated_at = now;
                Ok(record)
            }
            Err(StoreError::ConditionFailed) => Err(StackError::Conflict("stack changed meanwhile, retry".into())),
            Err(err) => Err(err.into()),
        }
    }

    /// Ends a stack through the one removal path, [`end_stack`]: a failure leaves the record
    /// for the reconciler to finish.
    pub async fn remove(&self, removal: &Removal) -> Result<(), StackError> {
        Ok(end_stack(self, removal, Timestamp::now()).await?)
    }

    /// Deletes a stack `scope` covers; any other answers [`StackError::NotFound`], as for a
    /// stack that does not exist.
    pub async fn delete(&self, id: &StackId, scope: &Scope) -> Result<(), StackError> {
        let record = match self.store.get_stack(id, Manifest::Omit).await {
            // Whose it is cannot be read: only a key of every tenant may remove it.
            Err(StoreError::Unreadable(unreadable)) if *scope == Scope::All => {
                return self.delete_unreadable(id, &unreadable).await;
            }
            Err(StoreError::Unreadable(_)) => return Err(StackError::NotFound),
            read => owned(read?, scope)?,
        };
        self.remove(&Removal::of(record, RemovalReason::Deleted, None)).await
    }

    /// A stack whose record does not read still goes: by the names its id gives, objects
    /// first, then its items. Its idempotency key, unknown here, is released by the reconciler.
    async fn delete_unreadable(&self, id: &StackId, unreadable: &Unreadable) -> Result<(), StackError> {
        tracing::warn!(error = %unreadable, "deleting a stack whose record does not read");
        self.delete_objects_named_by(id).await?;
        Ok(self.store.delete_stack_items(id, None).await?)
    }

    /// Deletes the service and pod the id names, whether or not the stack's mode has a service.
    async fn delete_objects_named_by(&self, id: &StackId) -> Result<(), RemoveError> {
        let (service, pod) = (id.service_name(), id.pod_name());
        delete_objects(self, Some(&service), Some((ObjectKind::Pod, &pod))).await
    }
}

/// The removal path's writes, live.
impl StackRemover for Stacks {
    async fn delete_object(&self, kind: ObjectKind, name: &str) -> Result<(), RemoveError> {
        match kind {
            ObjectKind::Pod => self.cluster.delete_pod(name, PodDeletion::Graceful).await?,
            ObjectKind::StrandedPod => self.cluster.delete_pod(name, PodDeletion::Now).await?,
            ObjectKind::Service => self.cluster.delete_service(name).await?,
        }
        Ok(())
    }

    async fn delete_record(&self, record: &StackRecord, unless_failed: bool) -> Result<(), RemoveError> {
        if !unless_failed {
            return Ok(self.store.delete_stack(record).await?);
        }
        match self.store.delete_stack_unless_failed(record).await {
            Err(StoreError::ConditionFailed) => {
                tracing::debug!(stack_id = %record.stack_id, "stack failed meanwhile: its tombstone stays");
                Ok(())
            }
            deleted => Ok(deleted?),
        }
    }

    fn objects_released(&self, record: &StackRecord) {
        self.cluster.release_node_ports(&record.ports);
    }

    async fn release_tenant_slot(&self, record: &StackRecord) {
        Stacks::release_tenant_slot(self, &record.tenant, &record.stack_id).await;
    }

    async fn write_observed(
        &self,
        id: &StackId,
        observed: &ObservedState,
        now: Timestamp,
    ) -> Result<RecordWrite, RemoveError> {
        match self.store.update_observed(id, observed, now).await {
            Ok(()) => Ok(RecordWrite::Written),
            Err(StoreError::ConditionFailed) => Ok(RecordWrite::Gone),
            Err(err) => Err(err.into()),
        }
    }
}

/// The record if `scope` covers its tenant; a stack of another tenant is as good as absent.
fn owned(record: Option<StackRecord>, scope: &Scope) -> Result<StackRecord, StackError> {
    record
        .filter(|record| scope.covers(&record.tenant))
        .ok_or(StackError::NotFound)
}

pub(crate) fn signed(d: std::time::Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

impl RefusalReason {
    /// The class of refusal a create's error counts as on the dashboard.
    pub fn of(err: &StackError) -> Self {
        match err {
            StackError::Invalid(_) | StackError::NotFound | StackError::JobNotFound => Self::InvalidSpec,
            StackError::Conflict(_) => Self::Conflict,
            StackError::NoNodePort => Self::NoNodePort,
            StackError::Saturated(_) => Self::Saturated,
            StackError::TenantLimit { .. } => Self::TenantLimit,
            StackError::Unavailable(_) => Self::Unavailable,
            // As the client was told: a 503 is DynamoDB's or the apiserver's trouble, a 500 ours.
            StackError::Store(_) | StackError::Cluster(_) => match err.class() {
                ErrorClass::Unavailable => Self::Unavailable,
                _ => Self::Internal,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_too_large_to_store_is_the_requests_fault() {
        let why = UnstorableManifest::TooLarge {
            bytes: 600_000,
            stored: 420_000,
            max: 409_600,
        };
        let err = StackError::from(StoreError::Unstorable(why.clone()));
        let StackError::Invalid(message) = err else {
            panic!("{err:?}");
        };
        assert_eq!(message, format!("invalid pod spec: {why}"));
        assert!(message.contains("420000"), "{message}");
        assert!(matches!(
            StackError::from(StoreError::ConditionFailed),
            StackError::Store(StoreError::ConditionFailed)
        ));
    }

    #[test]
    fn create_refusals_count_by_their_class() {
        assert_eq!(RefusalReason::of(&StackError::NoNodePort).as_str(), "no_nodeport");
        assert_eq!(
            RefusalReason::of(&StackError::Saturated("quota".into())).as_str(),
            "saturated"
        );
        assert_eq!(
            RefusalReason::of(&StackError::Invalid("x".into())).as_str(),
            "invalid_spec"
        );
        // DynamoDB or the apiserver throttling is a 503, not our defect.
        let throttled = StoreError::Unavailable {
            operation: "PutItem",
            source: "ProvisionedThroughputExceededException".into(),
        };
        for transient in [StackError::from(throttled), StackError::from(ClusterError::Conflict)] {
            assert_eq!(transient.class(), ErrorClass::Unavailable, "{transient:?}");
            assert_eq!(RefusalReason::of(&transient).as_str(), "unavailable", "{transient:?}");
        }
        let malformed = StackError::from(StoreError::Malformed("status".into()));
        assert_eq!(malformed.class(), ErrorClass::Internal);
        assert_eq!(RefusalReason::of(&malformed).as_str(), "internal");
    }
}
