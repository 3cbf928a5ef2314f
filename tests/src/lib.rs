//! Integration tests, benchmarks and local-environment tooling of stack-provisioner.

pub mod api;
pub mod black_hole;
pub mod browser;
pub mod counting;
pub mod env;
pub mod manifests;
pub mod reconciler;
