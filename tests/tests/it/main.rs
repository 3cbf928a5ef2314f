//! The integration tests against the local environment (`tests/env/up`), one module per
//! area in one binary, so the dependency graph is linked once instead of once per file.
//!
//! One test stays a binary of its own: `faults.rs` stops the environment's shared processes
//! (SIGSTOP on the apiserver or DynamoDB), which must not happen while tests of other modules
//! run (cargo runs test binaries one after another, never side by side).

mod admission_policy;
mod api;
mod connect;
mod dashboard;
mod eks_token;
mod ground;
mod history;
mod hostport;
mod isolation;
mod lambda;
mod preflight;
mod prepull;
mod rbac;
mod reconciler;
mod store;
mod tenancy;
