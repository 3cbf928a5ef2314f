//! Process-wide state: configuration and clients, built once at init and shared by every
//! request (and every Lambda invocation of a warm sandbox).

use std::sync::Arc;

use stack_core::config::{Config, ConfigError};
use stack_core::stacks::{SetupError, Stacks};
use stack_core::store::Store;

#[derive(Clone)]
pub struct AppState {
    pub stacks: Arc<Stacks>,
    pub api_key: Option<Arc<str>>,
}

impl AppState {
    pub async fn from_config(config: Config) -> Result<Self, SetupError> {
        let api_key = api_key(&config);
        Ok(Self {
            stacks: Arc::new(Stacks::connect(config).await?),
            api_key,
        })
    }

    /// State over existing clients (tests build their own).
    pub fn with_clients(config: Config, store: Store, client: kube::Client) -> Result<Self, ConfigError> {
        let api_key = api_key(&config);
        Ok(Self {
            stacks: Arc::new(Stacks::from_config(config, store, client)?),
            api_key,
        })
    }
}

fn api_key(config: &Config) -> Option<Arc<str>> {
    config.api_key.as_deref().map(Arc::from)
}
