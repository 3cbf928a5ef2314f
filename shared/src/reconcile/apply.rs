//! Carrying out a plan: bounded concurrency, a time budget, and removals that delete a
//! record only after its cluster objects are gone.

use std::future::Future;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use jiff::Timestamp;

use super::plan::{Action, HoldRepair};
use crate::cluster::ClusterError;
use crate::history::PassCounts;
use crate::lifecycle::end::{RecordWrite, RemoveError, StackRemover};
use crate::lifecycle::{RemovalReason, end_stack};
use crate::model::{BatchDeleteJob, StackId};
use crate::stacks::JobProgress;
use crate::store::StoreError;

/// Why one action failed; the next pass retries it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApplyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("batch delete: {0}")]
    Job(String),
}

impl From<RemoveError> for ApplyError {
    fn from(err: RemoveError) -> Self {
        match err {
            RemoveError::Store(err) => ApplyError::Store(err),
            RemoveError::Cluster(err) => ApplyError::Cluster(err),
        }
    }
}

/// The side effects a plan needs beyond removals; the live implementation is `Stacks`
/// (DynamoDB and the apiserver), tests use an in-memory one.
pub(crate) trait Effects: StackRemover {
    /// Frees an Idempotency-Key if it still belongs to `stack_id`.
    fn release_claim(&self, key: &str, stack_id: &StackId) -> impl Future<Output = Result<(), ApplyError>> + Send;
    fn repair_hold(&self, repair: &HoldRepair) -> impl Future<Output = Result<(), ApplyError>> + Send;
    fn advance_job(
        &self,
        job: BatchDeleteJob,
        budget: Duration,
    ) -> impl Future<Output = Result<JobProgress, ApplyError>> + Send;
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// At most this many actions in flight.
    pub concurrency: usize,
    /// No action starts at or after this instant.
    pub stop_at: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Expired,
    Drift,
    Orphan,
    StatusUpdate,
    Job,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Done,
    /// Nothing left to do (the record vanished, someone else runs the job).
    Moot,
    Failed,
    NotStarted,
}

impl Kind {
    fn of(action: &Action) -> Self {
        match action {
            Action::Remove(r) if matches!(r.reason, RemovalReason::Expired | RemovalReason::RetentionEnded) => {
                Kind::Expired
            }
            Action::Remove(_) => Kind::Drift,
            Action::DeleteOrphan { .. } => Kind::Orphan,
            Action::UpdateStatus { .. } => Kind::StatusUpdate,
            Action::ResumeJob(_) => Kind::Job,
            Action::ReleaseClaim { .. } | Action::RepairHold(HoldRepair::Delete { .. }) => Kind::Orphan,
            Action::RepairHold(HoldRepair::Add { .. } | HoldRepair::Recount { .. }) => Kind::Drift,
        }
    }
}

impl PassCounts {
    fn add(mut self, kind: Kind, outcome: Outcome) -> Self {
        match outcome {
            Outcome::Done => {
                *match kind {
                    Kind::Expired => &mut self.expired,
                    Kind::Drift => &mut self.drift,
                    Kind::Orphan => &mut self.orphans,
                    Kind::StatusUpdate => &mut self.status_updates,
                    Kind::Job => &mut self.jobs,
                } += 1
            }
            Outcome::Moot => {}
            Outcome::Failed => self.failures += 1,
            Outcome::NotStarted => self.remaining += 1,
        }
        self
    }
}

/// Runs the actions in plan order, at most `limits.concurrency` at a time, starting none at
/// or after `limits.stop_at`. Every failure is logged and counted; none stops the others.
pub(crate) async fn apply<E: Effects>(effects: &E, actions: Vec<Action>, limits: Limits, now: Timestamp) -> PassCounts {
    stream::iter(actions)
        .map(|action| async move {
            let kind = Kind::of(&action);
            if Instant::now() >= limits.stop_at {
                return (kind, Outcome::NotStarted);
            }
            (kind, run(effects, action, limits.stop_at, now).await)
        })
        .buffer_unordered(limits.concurrency.max(1))
        .fold(PassCounts::default(), |tally, (kind, outcome)| async move {
            tally.add(kind, outcome)
        })
        .await
}

async fn run<E: Effects>(effects: &E, action: Action, stop_at: Instant, now: Timestamp) -> Outcome {
    match action {
        Action::Remove(removal) => match end_stack(effects, &removal, now).await {
            Ok(()) => {
                tracing::info!(stack_id = %removal.record.stack_id, reason = ?removal.reason, "stack removed");
                Outcome::Done
            }
            Err(err) => failed(&err, "remove stack", removal.record.stack_id.as_str()),
        },
        Action::DeleteOrphan { kind, name } => match effects.delete_object(kind, &name).await {
            Ok(()) => {
                tracing::info!(object = %name, ?kind, "orphan deleted");
                Outcome::Done
            }
            Err(RemoveError::Cluster(ClusterError::NotFound)) => Outcome::Done,
            Err(err) => failed(&err, "delete orphan", &name),
        },
        Action::UpdateStatus { stack_id, observed } => match effects.write_observed(&stack_id, &observed, now).await {
            Ok(RecordWrite::Written) => Outcome::Done,
            Ok(RecordWrite::Gone) => Outcome::Moot,
            Err(err) => failed(&err, "update status", stack_id.as_str()),
        },
        Action::ReleaseClaim { key, stack_id } => match effects.release_claim(&key, &stack_id).await {
            Ok(()) => {
                tracing::info!(stack_id = %stack_id, "idempotency key of a dead create released");
                Outcome::Done
            }
            Err(err) => failed(&err, "release idempotency key", stack_id.as_str()),
        },
        Action::RepairHold(repair) => match effects.repair_hold(&repair).await {
            Ok(()) => {
                tracing::info!(?repair, "tenant hold repaired");
                Outcome::Done
            }
            Err(err) => failed(&err, "repair tenant hold", &format!("{repair:?}")),
        },
        Action::ResumeJob(job) => {
            let job_id = job.job_id.clone();
            match effects
                .advance_job(job, stop_at.saturating_duration_since(Instant::now()))
                .await
            {
                Ok(JobProgress::Finished) => Outcome::Done,
                Ok(JobProgress::Paused) => Outcome::NotStarted,
                Ok(JobProgress::TakenOver) => Outcome::Moot,
                Err(err) => failed(&err, "resume batch delete", &job_id),
            }
        }
    }
}

fn failed(err: &dyn std::error::Error, action: &'static str, subject: &str) -> Outcome {
    tracing::warn!(%subject, action, error = %err, "reconcile action failed");
    Outcome::Failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::{ObjectKind, Removal};
    use crate::model::ObservedState;
    use crate::model::{Failure, FailureReason, JobStatus, StackRecord, StackStatus};
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Records every call in order; fails the names listed in `failing`.
    #[derive(Default)]
    struct Fake {
        calls: Mutex<Vec<String>>,
        /// Records whose delete spares a tombstone.
        unless_failed: Mutex<Vec<String>>,
        failing: HashSet<String>,
        not_found: HashSet<String>,
        gone_records: HashSet<String>,
        job_run: Option<JobProgress>,
        delay: Duration,
        in_flight: AtomicUsize,
        max_in_flight: AtomicUsize,
    }

    impl Fake {
        /// A fake whose every call takes `delay`.
        fn slow(delay: Duration) -> Self {
            Self {
                delay,
                ..Self::default()
            }
        }

        async fn call(&self, what: String) -> Result<(), RemoveError> {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            self.calls.lock().unwrap().push(what.clone());
            if self.failing.contains(&what) {
                Err(RemoveError::Cluster(ClusterError::Incomplete("boom")))
            } else if self.not_found.contains(&what) {
                Err(RemoveError::Cluster(ClusterError::NotFound))
            } else {
                Ok(())
            }
        }

        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }
    }

    impl StackRemover for Fake {
        async fn delete_object(&self, kind: ObjectKind, name: &str) -> Result<(), RemoveError> {
            self.call(format!("{kind:?}/{name}")).await
        }
        async fn delete_record(&self, record: &StackRecord, unless_failed: bool) -> Result<(), RemoveError> {
            if unless_failed {
                self.unless_failed.lock().unwrap().push(record.stack_id.to_string());
            }
            self.call(format!("record/{}", record.stack_id)).await
        }
        async fn write_observed(
            &self,
            id: &StackId,
            o: &ObservedState,
            _: Timestamp,
        ) -> Result<RecordWrite, RemoveError> {
            self.call(format!("status/{id}={}", o.status)).await?;
            Ok(if self.gone_records.contains(id.as_str()) {
                RecordWrite::Gone
            } else {
                RecordWrite::Written
            })
        }
    }

    impl Effects for Fake {
        async fn release_claim(&self, key: &str, _: &StackId) -> Result<(), ApplyError> {
            Ok(self.call(format!("claim/{key}")).await?)
        }
        async fn repair_hold(&self, repair: &HoldRepair) -> Result<(), ApplyError> {
            Ok(self.call(format!("hold/{repair:?}")).await?)
        }
        async fn advance_job(&self, job: BatchDeleteJob, _: Duration) -> Result<JobProgress, ApplyError> {
            self.call(format!("job/{}", job.job_id)).await?;
            Ok(self.job_run.unwrap_or(JobProgress::Finished))
        }
    }

    fn id(n: u64) -> StackId {
        format!("stack-{n:016x}").parse().unwrap()
    }

    fn record(n: u64) -> StackRecord {
        StackRecord::test().id(id(n)).node("n1")
    }

    fn removal(n: u64, reason: RemovalReason) -> Action {
        let r = record(n);
        Action::Remove(Box::new(Removal {
            pod: Some(r.pod_id.clone()),
            service: Some(r.service_name.clone()),
            record: r,
            reason,
            mark: None,
        }))
    }

    /// [`removal`] that first marks the record `status` (on node `n1`), as a failure or a lost
    /// node does.
    fn marked_removal(n: u64, reason: RemovalReason, status: StackStatus, failure: Option<Failure>) -> Action {
        let Action::Remove(mut removal) = removal(n, reason) else {
            unreachable!("removal() builds a removal")
        };
        removal.mark = Some(ObservedState {
            status,
            node_id: "n1".into(),
            node_public_ip: None,
            failure,
        });
        Action::Remove(removal)
    }

    fn update(n: u64) -> Action {
        Action::UpdateStatus {
            stack_id: id(n),
            observed: ObservedState {
                status: StackStatus::Running,
                node_id: "n1".into(),
                node_public_ip: None,
                failure: None,
            },
        }
    }

    fn job() -> Action {
        let now = Timestamp::UNIX_EPOCH;
        Action::ResumeJob(BatchDeleteJob {
            job_id: "job-1".into(),
            status: JobStatus::Running,
            total: 1,
            deleted: 0,
            not_found: 0,
            failed: 0,
            errors: vec![],
            pending: vec!["stack-1".into()],
            created_at: now,
            updated_at: now,
            scope: Default::default(),
        })
    }

    fn limits(concurrency: usize) -> Limits {
        Limits {
            concurrency,
            stop_at: Instant::now() + Duration::from_secs(60),
        }
    }

    async fn go(fake: &Fake, actions: Vec<Action>, limits: Limits) -> PassCounts {
        apply(fake, actions, limits, Timestamp::UNIX_EPOCH).await
    }

    /// The counts of a pass that counted what `set` sets, and nothing else.
    fn counts(set: impl FnOnce(&mut PassCounts)) -> PassCounts {
        let mut counts = PassCounts::default();
        set(&mut counts);
        counts
    }

    #[tokio::test]
    async fn a_removal_deletes_objects_before_the_record() {
        let fake = Fake::default();
        let tally = go(&fake, vec![removal(1, RemovalReason::Expired)], limits(4)).await;
        assert_eq!(tally, counts(|c| c.expired = 1));
        let calls = fake.calls();
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[2], format!("record/{}", id(1)));
    }

    #[tokio::test]
    async fn a_failed_object_delete_keeps_the_record() {
        for failing in [format!("Pod/{}", id(1)), format!("Service/svc-{}", id(1))] {
            let fake = Fake {
                failing: HashSet::from([failing.clone()]),
                ..Fake::default()
            };
            let tally = go(&fake, vec![removal(1, RemovalReason::PodMissing)], limits(4)).await;
            assert_eq!(tally, counts(|c| c.failures = 1), "{failing}");
            assert!(!fake.calls().iter().any(|c| c.starts_with("record/")), "{failing}");
        }
    }

    #[tokio::test]
    async fn not_found_counts_as_deleted() {
        let fake = Fake {
            not_found: HashSet::from([format!("Pod/{}", id(1)), format!("Pod/{}", id(2))]),
            ..Fake::default()
        };
        let orphan = Action::DeleteOrphan {
            kind: ObjectKind::Pod,
            name: id(2).pod_name(),
        };
        let tally = go(&fake, vec![removal(1, RemovalReason::NodeMissing), orphan], limits(4)).await;
        assert_eq!(
            tally,
            counts(|c| {
                c.drift = 1;
                c.orphans = 1
            })
        );
        assert!(fake.calls().contains(&format!("record/{}", id(1))));
    }

    #[tokio::test]
    async fn a_mark_is_written_before_anything_is_deleted() {
        let action = marked_removal(1, RemovalReason::NodeMissing, StackStatus::NodeDeleted, None);
        let fake = Fake::default();
        assert_eq!(go(&fake, vec![action], limits(1)).await, counts(|c| c.drift = 1));
        let calls = fake.calls();
        assert_eq!(calls.first(), Some(&format!("status/{}=node_deleted", id(1))));
        assert_eq!(calls.last(), Some(&format!("record/{}", id(1))));
    }

    #[tokio::test]
    async fn a_failed_stack_loses_its_objects_and_keeps_its_record() {
        let failure = Failure::new(FailureReason::ImageNotFound, "not found");
        let action = marked_removal(1, RemovalReason::Failed, StackStatus::Failed, Some(failure));
        let fake = Fake::default();
        assert_eq!(go(&fake, vec![action], limits(1)).await, counts(|c| c.drift = 1));
        let mut calls = fake.calls();
        assert_eq!(calls.remove(0), format!("status/{}=failed", id(1)));
        calls.sort();
        assert_eq!(calls, [format!("Pod/{}", id(1)), format!("Service/svc-{}", id(1))]);

        // Its retention over, the tombstone goes like an expired stack.
        let fake = Fake::default();
        let tally = go(&fake, vec![removal(1, RemovalReason::RetentionEnded)], limits(1)).await;
        assert_eq!(tally.expired, 1);
        assert_eq!(fake.calls().last(), Some(&format!("record/{}", id(1))));
    }

    #[tokio::test]
    async fn only_drift_spares_a_record_found_failed_meanwhile() {
        let fake = Fake::default();
        let actions = vec![
            removal(1, RemovalReason::PodMissing),
            removal(2, RemovalReason::Expired),
            removal(3, RemovalReason::Rejected),
            removal(4, RemovalReason::RetentionEnded),
            removal(5, RemovalReason::Deleted),
        ];
        go(&fake, actions, limits(1)).await;
        let guarded = fake.unless_failed.lock().unwrap().clone();
        assert_eq!(guarded, [id(1).to_string(), id(3).to_string()]);
    }

    #[tokio::test]
    async fn outcomes_are_counted_by_kind() {
        let fake = Fake {
            gone_records: HashSet::from([id(5).to_string()]),
            ..Fake::default()
        };
        let actions = vec![
            removal(1, RemovalReason::Expired),
            removal(2, RemovalReason::Unschedulable),
            Action::DeleteOrphan {
                kind: ObjectKind::Service,
                name: "svc-x".into(),
            },
            update(4),
            update(5),
            job(),
        ];
        let tally = go(&fake, actions, limits(3)).await;
        assert_eq!(
            tally,
            counts(|c| {
                c.expired = 1;
                c.drift = 1;
                c.orphans = 1;
                c.status_updates = 1;
                c.jobs = 1
            })
        );
    }

    #[tokio::test]
    async fn paused_jobs_are_left_for_the_next_pass_and_taken_over_ones_are_not_counted() {
        let paused = Fake {
            job_run: Some(JobProgress::Paused),
            ..Fake::default()
        };
        assert_eq!(go(&paused, vec![job()], limits(1)).await, counts(|c| c.remaining = 1));
        let taken = Fake {
            job_run: Some(JobProgress::TakenOver),
            ..Fake::default()
        };
        assert_eq!(go(&taken, vec![job()], limits(1)).await, PassCounts::default());
    }

    #[tokio::test]
    async fn concurrency_is_bounded() {
        let fake = Fake::slow(Duration::from_millis(5));
        let actions: Vec<Action> = (0..40).map(update).collect();
        let tally = go(&fake, actions, limits(4)).await;
        assert_eq!(tally.status_updates, 40);
        let max = fake.max_in_flight.load(Ordering::SeqCst);
        assert!((2..=4).contains(&max), "max in flight {max}");
    }

    #[tokio::test]
    async fn nothing_starts_after_the_deadline() {
        let fake = Fake::default();
        let past = Limits {
            concurrency: 4,
            stop_at: Instant::now(),
        };
        let tally = go(&fake, vec![removal(1, RemovalReason::Expired), update(2), job()], past).await;
        assert_eq!(tally, counts(|c| c.remaining = 3));
        assert!(fake.calls().is_empty());
    }

    #[tokio::test]
    async fn work_stops_when_the_budget_runs_out() {
        let fake = Fake::slow(Duration::from_millis(20));
        let actions: Vec<Action> = (0..100).map(update).collect();
        let budget = Limits {
            concurrency: 2,
            stop_at: Instant::now() + Duration::from_millis(100),
        };
        let tally = go(&fake, actions, budget).await;
        assert_eq!(tally.status_updates + tally.remaining, 100);
        assert!(tally.remaining > 50, "{tally:?}");
        assert_eq!(fake.calls().len(), tally.status_updates);
    }
}
