//! Test harness for the local environment started by `tests/env/up`: DynamoDB Local and a
//! real Kubernetes control plane with kwok-simulated nodes.
//!
//! Every test gets its own table and namespace, so tests run in parallel:
//!
//! ```no_run
//! # async fn demo() -> Result<(), stack_tests::env::EnvError> {
//! let env = stack_tests::env::TestEnv::connect().await?;
//! let table = env.fresh_table("api").await?;
//! let namespace = env.fresh_namespace("api").await?;
//! // ... run the code under test against table.name() and namespace.name() ...
//! table.delete().await?;
//! namespace.delete().await?;
//! # Ok(()) }
//! ```

mod cluster;
pub mod cluster_dns;
mod dynamodb;
mod error;
pub mod kubeconfig;
pub mod nodes;
pub mod processes;
pub mod rbac_manifest;
pub mod real_nodes;
mod settings;
pub mod template;
mod wait;

pub use cluster::{TEST_NAMESPACE_LABEL, TestNamespace, kube_client, kube_config};
pub use dynamodb::{TestTable, create_table, dynamodb_client};
pub use error::EnvError;
pub use nodes::{SIMULATED_ROLE, SimulatedNode};
pub use settings::{DynamoDbLocal, EnvSettings, env_file_path, parse_env_file};
pub use template::TableDefinition;
pub use wait::wait_for;

/// Clients for the local environment.
///
/// Build one per test: `#[tokio::test]` gives every test its own runtime, and a client's
/// connections die with the runtime that opened them, so clients cannot be shared across tests.
#[derive(Clone)]
pub struct TestEnv {
    pub settings: EnvSettings,
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub kube: kube::Client,
}

impl TestEnv {
    /// Connects with the settings of `env.sh` (see [`EnvSettings::load`]).
    pub async fn connect() -> Result<Self, EnvError> {
        Self::with_settings(EnvSettings::load()?).await
    }

    /// Connects with `settings` (e.g. another's, on a runtime of its own).
    pub(crate) async fn with_settings(settings: EnvSettings) -> Result<Self, EnvError> {
        let kube = kube_client(&settings).await?;
        let dynamodb = dynamodb_client(&settings);
        Ok(Self {
            settings,
            dynamodb,
            kube,
        })
    }

    /// The registry the real nodes pull from (`STACK_ENV_REGISTRY`: `up` with real nodes).
    pub fn registry(&self) -> Option<&str> {
        self.settings.registry.as_deref()
    }

    /// A new table with the `StackTable` schema of `template.yaml`.
    pub async fn fresh_table(&self, prefix: &str) -> Result<TestTable, EnvError> {
        TestTable::create(&self.dynamodb, prefix).await
    }

    /// A new namespace, ready for pods.
    pub async fn fresh_namespace(&self, prefix: &str) -> Result<TestNamespace, EnvError> {
        TestNamespace::create(&self.kube, prefix).await
    }
}

/// `<prefix>-<8 random hex digits>`: a valid DNS label and DynamoDB table name when the prefix
/// is lowercase alphanumeric with dashes (longer prefixes are cut to keep it under 63).
pub fn unique_name(prefix: &str) -> String {
    let prefix: String = prefix.chars().take(50).collect();
    format!("{prefix}-{:08x}", rand::random::<u32>())
}
