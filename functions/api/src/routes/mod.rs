//! Route handlers: thin mappings between HTTP and [`stack_core::Stacks`].

pub mod batch;
pub mod dashboard;
pub mod health;
pub mod history;
pub mod identity;
pub mod preflight;
pub mod prepull;
pub mod stacks;
