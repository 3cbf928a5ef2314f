//! Clients and settings, built once per process.

use std::sync::Arc;

use stack_core::cluster::{self, Cluster, ClusterError, NamespacePolicy};
use stack_core::config::{Config, ConfigError};
use stack_core::reconcile::Reconciler;
use stack_core::stacks::Stacks;
use stack_core::store::Store;
use stack_core::validate::ValidationPolicy;

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

pub async fn reconciler(config: Config) -> Result<Reconciler, SetupError> {
    let aws = stack_core::aws::load_sdk_config().await;
    let store = Store::new(
        aws_sdk_dynamodb::Client::new(&aws),
        &config.table,
        config.consistent_read,
    );
    let client = cluster::connect(&config, &aws).await?;
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
    // Batch-delete jobs are resumed through the same lifecycle code as the API's.
    let policy = ValidationPolicy::from_config(&config)?;
    let stacks = Stacks::new(Arc::new(config), store, cluster, policy);
    Ok(Reconciler::new(Arc::new(stacks)))
}
