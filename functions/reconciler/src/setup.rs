//! Clients and settings, built once per process.

use std::sync::Arc;

use stack_core::{Config, Reconciler, SetupError, Stacks};

/// The reconciler over the configured table and cluster. It holds a full [`Stacks`] so that
/// batch-delete jobs are resumed through the same lifecycle code as the API's.
pub async fn reconciler(config: Config) -> Result<Reconciler, SetupError> {
    Ok(Reconciler::new(Arc::new(Stacks::connect(config).await?)))
}
