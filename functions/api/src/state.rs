//! Process-wide state: configuration and clients, built once at init and shared by every
//! request (and every Lambda invocation of a warm sandbox).

use std::sync::Arc;

use stack_core::{Config, KeyRing, SetupError, Stacks, Store};

#[derive(Clone)]
pub struct AppState {
    pub stacks: Arc<Stacks>,
    /// `API_KEY_ENABLED`: without it every request is an owner of every tenant.
    pub api_key_enabled: bool,
    pub keys: Arc<KeyRing>,
}

impl AppState {
    pub async fn from_config(config: Config) -> Result<Self, SetupError> {
        let (api_key_enabled, keys) = (config.api_key_enabled, Arc::new(config.keys.clone()));
        Ok(Self {
            stacks: Arc::new(Stacks::connect(config).await?),
            api_key_enabled,
            keys,
        })
    }

    /// State over existing clients (tests build their own).
    pub fn with_clients(config: Config, store: Store, client: kube::Client) -> Self {
        let (api_key_enabled, keys) = (config.api_key_enabled, Arc::new(config.keys.clone()));
        Self {
            stacks: Arc::new(Stacks::from_config(config, store, client)),
            api_key_enabled,
            keys,
        }
    }
}
