//! The reconciler: one pass observes the store and the cluster, plans (pure) what brings them
//! in line, and applies the plan within a time budget under a lease.

mod apply;
mod live;
mod observe;
mod pass;
mod plan;
mod snapshot;
mod summary;

pub use apply::{ApplyError, Effects, Limits, apply};
pub use observe::{ObserveError, observe};
pub use pass::{LEASE_NAME, PassError, Reconciler, plan_config, run_pass};
pub use plan::{Action, Plan, PlanConfig, Snapshot, plan};
pub use summary::{METRIC_NAMESPACE, Summary};
