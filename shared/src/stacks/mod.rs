//! The stack lifecycle: create, read (refreshed from the cluster), renew, delete and batch
//! delete. Handlers map these to HTTP; the reconciler shares the removal path.

mod assess;
mod batch;
mod capacity;
mod create;
mod read;

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

pub use assess::{Assessment, GoneReason, StackObjects, assess};
pub use batch::JobProgress;
pub use capacity::{Capacity, NodeCapacity, PortCapacity};
pub use create::{CREATE_DEADLINE, CREATE_WORK_BUDGET, CreateOutcome, CreateRequest};
pub use read::Stats;

use crate::cluster::{self, Cluster, ClusterError, NamespacePolicy};
use crate::config::{Config, ConfigError};
use crate::model::{StackId, StackRecord};
use crate::store::{Manifest, Store, StoreError};
use crate::validate::ValidationPolicy;

/// Start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// What a stack operation can fail with, sorted by what the client must be told.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// The request is at fault (400).
    #[error("{0}")]
    Invalid(String),
    #[error("stack not found")]
    NotFound,
    #[error("job not found")]
    JobNotFound,
    /// The request conflicts with the stack's state (409).
    #[error("{0}")]
    Conflict(String),
    /// No capacity right now (503); the client may retry later.
    #[error("no available nodeport")]
    NoNodePort,
    #[error("cluster saturated: {0}")]
    Saturated(String),
    #[error("{0}")]
    Unavailable(String),
    /// Our side failed (500).
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Cluster(ClusterError),
}

impl From<ClusterError> for StackError {
    fn from(err: ClusterError) -> Self {
        match err {
            ClusterError::NotFound => StackError::NotFound,
            ClusterError::Saturated(why) => StackError::Saturated(why),
            ClusterError::Rejected(why) => StackError::Invalid(format!("invalid pod spec: {why}")),
            ClusterError::NodePortsExhausted => StackError::NoNodePort,
            ClusterError::MissingIngressPolicy(ns) => StackError::Unavailable(format!(
                "stack creation refused: namespace {ns} has no ingress NetworkPolicy"
            )),
            other => StackError::Cluster(other),
        }
    }
}

/// Stack operations over one store and one cluster namespace; built once per process.
pub struct Stacks {
    config: Arc<Config>,
    store: Store,
    cluster: Cluster,
    policy: ValidationPolicy,
}

impl Stacks {
    pub fn new(config: Arc<Config>, store: Store, cluster: Cluster, policy: ValidationPolicy) -> Self {
        Self {
            config,
            store,
            cluster,
            policy,
        }
    }

    /// Everything the configuration describes, over the given clients.
    pub fn from_config(config: Config, store: Store, client: kube::Client) -> Result<Self, ConfigError> {
        let policy = ValidationPolicy::from_config(&config)?;
        let namespace_policy = NamespacePolicy {
            deny_egress_cidrs: config.deny_egress_cidrs.clone(),
            require_ingress_policy: config.require_ingress_network_policy,
        };
        let cluster = Cluster::new(
            client,
            &config.namespace,
            namespace_policy,
            (config.nodeport_min, config.nodeport_max),
        );
        Ok(Self::new(Arc::new(config), store, cluster, policy))
    }

    /// Builds the clients once per process (AWS SDK with our timeouts, Kubernetes per
    /// [`cluster::connect`]) and everything over them.
    pub async fn connect(config: Config) -> Result<Self, SetupError> {
        let aws = crate::aws::load_sdk_config().await;
        let store = Store::new(
            aws_sdk_dynamodb::Client::new(&aws),
            &config.table,
            config.consistent_read,
        );
        let client = cluster::connect(&config, &aws).await?;
        Ok(Self::from_config(config, store, client)?)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Extends the stack's TTL to now + `STACK_TTL`, capped at its maximum lifetime.
    pub async fn renew(&self, id: &StackId) -> Result<StackRecord, StackError> {
        let mut record = self.get(id).await?;
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

    /// Removes a stack: its cluster objects first, the record only once they are gone, so a
    /// failure leaves the record for the reconciler to finish.
    pub async fn remove(&self, record: &StackRecord) -> Result<(), StackError> {
        self.cluster.delete_stack_objects(&record.stack_id).await?;
        self.cluster.release_node_ports(&record.ports);
        self.store.delete_stack(record).await?;
        Ok(())
    }

    pub async fn delete(&self, id: &StackId) -> Result<(), StackError> {
        let record = self
            .store
            .get_stack(id, Manifest::Omit)
            .await?
            .ok_or(StackError::NotFound)?;
        self.remove(&record).await
    }
}

pub(crate) fn signed(d: std::time::Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}
