//! Shared core of stack-provisioner.

pub mod aws;
pub mod cluster;
pub mod config;
pub mod model;
pub mod store;
pub mod telemetry;
