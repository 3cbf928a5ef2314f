//! The reconciler: one pass observes the store and the cluster, plans (pure) what brings them
//! in line, and applies the plan within a time budget under a lease.

mod apply;
mod effects;
mod inventory;
mod pass;
mod plan;
mod snapshot;
mod summary;

pub use pass::{LEASE_NAME, PassError, Reconciler, run_pass};
pub(crate) use plan::Action;
pub use summary::Summary;
