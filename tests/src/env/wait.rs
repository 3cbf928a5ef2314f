//! Watch-based waiting with a deadline.

use std::fmt::Debug;
use std::time::Duration;

use kube::runtime::wait::{Condition, await_condition};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use super::EnvError;

/// Watches `name` until `condition` holds and returns the object that satisfied it
/// (`None` when the condition accepts absence, e.g. `is_deleted`).
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    condition: impl Condition<K>,
) -> Result<Option<K>, EnvError>
where
    K: Clone + Debug + Send + DeserializeOwned + Resource + 'static,
{
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, condition)).await {
        Ok(Ok(object)) => Ok(object),
        Ok(Err(error)) => Err(EnvError::Watch {
            what: what.to_owned(),
            message: error.to_string(),
        }),
        Err(_) => Err(EnvError::Timeout {
            what: what.to_owned(),
            seconds: timeout.as_secs(),
        }),
    }
}
