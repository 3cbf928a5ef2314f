//! Process-wide state: configuration and clients, built once at init and shared by every
//! request (and every Lambda invocation of a warm sandbox).

use std::sync::Arc;

use stack_core::cluster::{self, Cluster, NamespacePolicy};
use stack_core::config::Config;
use stack_core::stacks::Stacks;
use stack_core::store::Store;
use stack_core::validate::ValidationPolicy;

#[derive(Clone)]
pub struct AppState {
    pub stacks: Arc<Stacks>,
    pub api_key: Option<Arc<str>>,
}

#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error(transparent)]
    Config(#[from] stack_core::config::ConfigError),
    #[error(transparent)]
    Cluster(#[from] stack_core::cluster::ClusterError),
}

impl AppState {
    pub async fn from_config(config: Config) -> Result<Self, InitError> {
        let aws = stack_core::aws::load_sdk_config().await;
        let store = Store::new(
            aws_sdk_dynamodb::Client::new(&aws),
            &config.table,
            config.consistent_read,
        );
        let client = cluster::connect(&config, &aws).await?;
        Ok(Self::with_clients(config, store, client)?)
    }

    /// State over existing clients (tests build their own).
    pub fn with_clients(
        config: Config,
        store: Store,
        client: kube::Client,
    ) -> Result<Self, stack_core::config::ConfigError> {
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
        let api_key = config.api_key.as_deref().map(Arc::from);
        let stacks = Stacks::new(Arc::new(config), store, cluster, policy);
        Ok(Self {
            stacks: Arc::new(stacks),
            api_key,
        })
    }
}
