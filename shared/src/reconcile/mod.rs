//! The reconciler: one pass observes the store and the cluster, plans (pure) what brings them
//! in line, and applies the plan within a time budget under a lease.

mod apply;
mod live;
mod observe;
mod pass;
mod plan;
mod summary;
mod views;

pub use apply::{ApplyError, Effects, Limits, RecordWrite, Tally, apply};
pub use live::LiveEffects;
pub use observe::{ObserveError, observe};
pub use pass::{LEASE_NAME, PassError, Reconciler, plan_config, run_pass};
pub use plan::{Action, ObjectKind, Plan, PlanConfig, Removal, RemovalReason, Snapshot, plan};
pub use summary::{METRIC_NAMESPACE, Summary};
pub use views::{NodeView, ObjectView, PodView, ServiceView};
