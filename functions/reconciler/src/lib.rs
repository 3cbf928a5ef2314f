//! The scheduled reconciler function: one reconcile pass per invocation. The handler lives in
//! the library so that tests can invoke it exactly as the Lambda runtime does.

pub mod handler;
pub mod report;
pub mod setup;
