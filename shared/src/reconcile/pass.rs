//! One reconcile pass: lease, inventory, plan, apply, release.

use std::sync::Arc;
use std::time::Instant;

use jiff::Timestamp;

use super::apply::{Limits, apply};
use super::inventory::{ForPrepull, InventoryError, take_inventory};
use super::plan::{PlanConfig, plan};
use super::summary::Summary;
use crate::config::Config;
use crate::deadlines::{JOB_IDLE, LEASE_SLACK, RECONCILE_END_RESERVE};
use crate::history::{PassCounts, PassSnapshot};
use crate::lifecycle::Rules;
use crate::stacks::Stacks;
use crate::store::StoreError;

/// Name of the lease item (pk=`LEASE`) that keeps passes from overlapping.
pub const LEASE_NAME: &str = "reconciler";

#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("reconciler lease: {0}")]
    Lease(StoreError),
    #[error(transparent)]
    Inventory(#[from] InventoryError),
}

/// What a pass runs with; built once per process.
pub struct Reconciler {
    stacks: Arc<Stacks>,
    plan: PlanConfig,
    concurrency: usize,
}

impl Reconciler {
    pub fn new(stacks: Arc<Stacks>) -> Self {
        let config = stacks.config();
        Self {
            plan: plan_config(config),
            concurrency: config.reconcile_concurrency,
            stacks,
        }
    }
}

pub(crate) fn plan_config(config: &Config) -> PlanConfig {
    PlanConfig {
        namespace: config.validation.namespace.clone(),
        orphan_grace: config.orphan_grace,
        rules: Rules::of(config),
        job_idle: JOB_IDLE,
        tenants: config.tenants.clone(),
    }
}

/// Runs one pass unless another holds the lease; starts no work after the deadline minus a
/// reserve. Errors only when the pass could not run at all; failed actions are counted in
/// the summary and retried by the next pass.
pub async fn run_pass(reconciler: &Reconciler, deadline: Instant) -> Result<Summary, PassError> {
    let started = Instant::now();
    let store = reconciler.stacks.store();
    let owner = format!("{:016x}", rand::random::<u64>());
    let lease_ttl = deadline.saturating_duration_since(started) + LEASE_SLACK;
    if !store
        .try_acquire_lease(LEASE_NAME, &owner, lease_ttl, Timestamp::now())
        .await
        .map_err(PassError::Lease)?
    {
        tracing::info!("another reconcile pass holds the lease; skipping");
        return Ok(Summary::skipped(millis_since(started)));
    }
    let outcome = reconcile(reconciler, stop_at(started, deadline)).await;
    match store.release_lease(LEASE_NAME, &owner).await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(%owner, "reconciler lease expired during the pass"),
        // It expires on its own.
        Err(err) => tracing::warn!(error = %err, "releasing the reconciler lease failed"),
    }
    let (mut summary, mut history) = outcome?;
    summary.duration_ms = millis_since(started);
    history.add_summary(&summary);
    record_history(reconciler.stacks.as_ref(), &history).await;
    Ok(summary)
}

async fn reconcile(reconciler: &Reconciler, stop_at: Instant) -> Result<(Summary, PassSnapshot), PassError> {
    let stacks = reconciler.stacks.as_ref();
    // Taken before observing: every age then comes out a little young (never too old), and a
    // record counts as expired only if its TTL had passed before it was read, so a renewal
    // that raced the read cannot be undone by this pass.
    let now = Timestamp::now();
    let (inventory, for_prepull) = take_inventory(stacks.store(), stacks.cluster(), &stacks.config().tenants).await?;
    let mut history = PassSnapshot::observed(now, &inventory.records);
    let plan = plan(inventory, now, &reconciler.plan);
    history.count_removals(&plan.actions);
    if plan.foreign > 0 {
        tracing::warn!(records = plan.foreign, "records of another namespace left alone");
    }
    if plan.unreadable > 0 {
        tracing::error!(records = plan.unreadable, "unreadable records: their stacks left alone");
    }
    let limits = Limits {
        concurrency: reconciler.concurrency,
        stop_at,
    };
    let tally = apply(stacks, plan.actions, limits, now).await;
    keep_images(stacks, &for_prepull, now).await;
    let summary = Summary {
        lease_held: true,
        scanned: plan.scanned,
        counts: PassCounts {
            // Each needs an operator: repair the item, or end the stack with `DELETE /stacks/{id}`.
            failures: tally.failures + plan.unreadable,
            ..tally
        },
        duration_ms: 0,
    };
    Ok((summary, history))
}

/// The pre-pull's share of the pass; a failure waits for the next pass (the images on the
/// nodes stay where they are meanwhile).
async fn keep_images(stacks: &Stacks, inventory: &ForPrepull, now: Timestamp) {
    match stacks
        .prepull()
        .keep(&inventory.images_in_use, &inventory.nodes, now)
        .await
    {
        Ok(kept) => tracing::info!(
            images = kept.images,
            failed = kept.failed,
            untainted = kept.untainted.len(),
            "pre-pull kept"
        ),
        Err(err) => tracing::warn!(error = %err, "the pre-pull could not be kept this pass"),
    }
}

/// One small item for the dashboard's charts; a failure only costs a point on a chart.
async fn record_history(stacks: &Stacks, snapshot: &PassSnapshot) {
    if let Err(err) = stacks.store().put_pass_snapshot(snapshot).await {
        tracing::warn!(error = %err, "recording the pass snapshot failed");
    }
}

/// When to stop starting work: the reserve before the deadline, but never more than a
/// quarter of the time there is.
fn stop_at(now: Instant, deadline: Instant) -> Instant {
    let left = deadline.saturating_duration_since(now);
    now + left - RECONCILE_END_RESERVE.min(left / 4)
}

fn millis_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn work_stops_a_reserve_before_the_deadline() {
        let now = Instant::now();
        let at = |secs| stop_at(now, now + Duration::from_secs(secs)).duration_since(now);
        assert_eq!(at(300), Duration::from_secs(285));
        assert_eq!(at(60), Duration::from_secs(45));
        assert_eq!(at(20), Duration::from_secs(15));
        assert_eq!(stop_at(now, now), now);
        assert_eq!(stop_at(now, now - Duration::from_secs(1)), now);
    }
}
