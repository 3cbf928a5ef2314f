//! Route handlers: thin mappings between HTTP and [`stack_core::stacks::Stacks`].

pub mod batch;
pub mod health;
pub mod stacks;
