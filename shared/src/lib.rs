//! Shared core of stack-provisioner.

pub mod aws;
pub mod cluster;
pub mod config;
pub mod deadlines;
pub mod eks;
pub mod history;
pub mod init_error;
mod kube_names;
pub mod lifecycle;
pub mod model;
#[cfg(test)]
mod module_graph;
pub mod reconcile;
pub mod stacks;
pub mod store;
pub mod telemetry;
pub mod tenancy;
#[cfg(any(test, feature = "test-fixtures"))]
mod test_fixture;
pub mod validate;
