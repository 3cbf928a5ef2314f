//! Batch deletes: a durable job whose pending ids are processed in chunks, progress saved
//! after each chunk, so that whoever runs next (this process or the reconciler) finishes it.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::{ErrorClass, StackError, Stacks};
use crate::model::{BatchDeleteJob, JobError, JobStatus, StackId, is_job_id, new_job_id};
use crate::store::StoreError;
use crate::tenancy::Scope;

const CHUNK: usize = 16;
/// How often one runner tries to delete a stack while the apiserver or DynamoDB is slow,
/// throttling or down, before counting it failed.
const TRANSIENT_ATTEMPTS: u32 = 5;
/// The wait before the first retry; it doubles with each retry of the same stack.
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Most ids one batch delete may name. Its job is one DynamoDB item (at most 400 KB, which a
/// longer list overflowed: the write failed and the request answered 500): 10,000 ids take
/// about 250 KB, leaving room for the errors it keeps. It is also the most stacks the largest
/// deployment measured runs (`tests/BENCHMARKS.md`), so one request can still end an event.
pub const MAX_BATCH_IDS: usize = 10_000;

/// Whether a job made it to the end within the time it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobProgress {
    Finished,
    /// Time ran out; the job stays unfinished for the next runner.
    Paused,
    /// Someone else saved progress meanwhile and carries on.
    TakenOver,
}

impl Stacks {
    /// Validates the ids and stores a queued job.
    /// The job deletes only stacks `scope` covers; the others count as `not_found`.
    pub async fn start_batch_delete(&self, ids: &[String], scope: &Scope) -> Result<BatchDeleteJob, StackError> {
        let mut job = new_job(ids, Timestamp::now())?;
        job.scope = scope.clone();
        self.store.put_new_job(&job).await?;
        Ok(job)
    }

    /// A job started by a key of another tenant (or of every tenant, for a key of one) is
    /// as good as absent.
    pub async fn get_job(&self, job_id: &str, scope: &Scope) -> Result<BatchDeleteJob, StackError> {
        if !is_job_id(job_id) {
            return Err(StackError::JobNotFound);
        }
        self.store
            .get_job(job_id)
            .await?
            .filter(|job| *scope == Scope::All || job.scope == *scope)
            .ok_or(StackError::JobNotFound)
    }

    /// Processes the job's pending ids until done or `budget` runs out. A stack whose delete
    /// failed for a transient cause is tried again later ([`Retries`]).
    pub async fn advance_job(&self, mut job: BatchDeleteJob, budget: Duration) -> Result<JobProgress, StackError> {
        let started = Instant::now();
        let mut retries = Retries::default();
        while !job.status.is_finished() {
            let chunk: Vec<String> = job.pending.iter().take(CHUNK).cloned().collect();
            let pause = retries.pause_before(&chunk);
            if started.elapsed() + pause >= budget {
                return Ok(JobProgress::Paused);
            }
            tokio::time::sleep(pause).await;
            let outcomes = futures::future::join_all(chunk.iter().map(|id| self.delete_for_job(id, &job.scope))).await;
            let previous_update = job.updated_at;
            let mut again = Vec::new();
            for (id, outcome) in chunk.iter().zip(outcomes) {
                match outcome {
                    Err(err) if retries.again(id, &err) => again.push(id.clone()),
                    outcome => record_outcome(&mut job, id, outcome),
                }
            }
            job.pending.drain(..chunk.len());
            job.pending.extend(again);
            job.status = if job.pending.is_empty() {
                final_status(&job)
            } else {
                JobStatus::Running
            };
            job.updated_at = Timestamp::now().max(previous_update + jiff::SignedDuration::from_micros(1));
            match self.store.save_job(&job, previous_update).await {
                Ok(()) => {}
                Err(StoreError::ConditionFailed) => return Ok(JobProgress::TakenOver),
                Err(err) => return Err(err.into()),
            }
        }
        Ok(JobProgress::Finished)
    }

    // Ids are checked when the job is made; one stored by an older version may not be.
    async fn delete_for_job(&self, id: &str, scope: &Scope) -> Result<(), StackError> {
        let id: StackId = id.parse().map_err(|_| StackError::NotFound)?;
        self.delete(&id, scope).await
    }
}

/// One runner's retries: a stack whose delete failed because a dependency was slow,
/// throttling or down goes back to the end of the job's pending ids, and the chunk holding it
/// waits first, twice as long at each retry of it. After [`TRANSIENT_ATTEMPTS`] it counts as
/// failed, so that every job ends; a job paused meanwhile keeps it pending for the next runner.
#[derive(Debug, Default)]
struct Retries {
    /// Failed attempts per stack id.
    failed: HashMap<String, u32>,
}

impl Retries {
    /// Whether `id`, whose delete just failed with `err`, is tried again.
    fn again(&mut self, id: &str, err: &StackError) -> bool {
        if err.class() != ErrorClass::Unavailable {
            return false;
        }
        let failed = self.failed.entry(id.to_owned()).or_default();
        *failed += 1;
        *failed < TRANSIENT_ATTEMPTS
    }

    /// How long to wait before deleting `chunk`: the longest of its stacks' retry pauses.
    fn pause_before(&self, chunk: &[String]) -> Duration {
        let failed = chunk.iter().filter_map(|id| self.failed.get(id)).max();
        failed.map_or(Duration::ZERO, |&n| {
            FIRST_RETRY_PAUSE.saturating_mul(1_u32 << (n - 1).min(8))
        })
    }
}

/// The queued job for `ids` (as the contract reads them: trimmed, duplicates dropped, none
/// blank, at least one). An id that is not a stack id names no stack, as `DELETE
/// /stacks/{id}` answers 404 for it: it is counted in `not_found` at once and not stored, so
/// that what a job keeps is bounded by [`MAX_BATCH_IDS`] stack ids.
fn new_job(ids: &[String], now: Timestamp) -> Result<BatchDeleteJob, StackError> {
    if ids.is_empty() {
        return Err(StackError::Invalid("invalid input".into()));
    }
    if ids.len() > MAX_BATCH_IDS {
        return Err(StackError::Invalid(format!(
            "too many stack_ids: {}, at most {MAX_BATCH_IDS} per request (send several)",
            ids.len()
        )));
    }
    let mut seen = HashSet::new();
    let mut pending = Vec::new();
    let mut not_found = 0;
    for id in ids {
        let id = id.trim();
        if id.is_empty() {
            return Err(StackError::Invalid("invalid stack_ids".into()));
        }
        if !seen.insert(id) {
            continue;
        }
        match id.parse::<StackId>() {
            Ok(stack_id) => pending.push(stack_id.to_string()),
            Err(_) => not_found += 1,
        }
    }
    let total = u32::try_from(seen.len()).unwrap_or(u32::MAX);
    Ok(BatchDeleteJob {
        job_id: new_job_id(),
        status: JobStatus::Queued,
        total,
        deleted: 0,
        not_found,
        failed: 0,
        errors: Vec::new(),
        pending,
        created_at: now,
        updated_at: now,
        scope: Scope::All,
    })
}

fn record_outcome(job: &mut BatchDeleteJob, id: &str, outcome: Result<(), StackError>) {
    match outcome {
        Ok(()) => job.deleted += 1,
        Err(StackError::NotFound) => job.not_found += 1,
        Err(err) => {
            job.failed += 1;
            if job.errors.len() < BatchDeleteJob::MAX_ERRORS {
                let message: String = err.to_string().chars().take(BatchDeleteJob::MAX_ERROR_CHARS).collect();
                job.errors.push(JobError {
                    stack_id: id.to_owned(),
                    error: message,
                });
            }
        }
    }
}

/// `failed` only when every id failed.
fn final_status(job: &BatchDeleteJob) -> JobStatus {
    if job.total > 0 && job.failed == job.total {
        JobStatus::Failed
    } else {
        JobStatus::Completed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(total: u32) -> BatchDeleteJob {
        let now = Timestamp::now();
        BatchDeleteJob {
            job_id: new_job_id(),
            status: JobStatus::Running,
            total,
            deleted: 0,
            not_found: 0,
            failed: 0,
            errors: vec![],
            pending: vec![],
            created_at: now,
            updated_at: now,
            scope: Default::default(),
        }
    }

    fn strings(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn ids_that_are_no_stack_id_count_as_not_found_and_are_not_stored() {
        let long = format!("stack-{}", "f".repeat(100_000));
        let ids = strings(&[
            " stack-0123456789abcdef ",
            "stack-0123456789abcdef",
            "stack-0123456789ABCDEF",
            "job-0123456789abcdef",
            "../etc",
            "../etc",
            &long,
            "stack-fedcba9876543210",
        ]);
        let job = new_job(&ids, Timestamp::now()).unwrap();
        assert_eq!(job.pending, ["stack-0123456789abcdef", "stack-fedcba9876543210"]);
        assert_eq!((job.total, job.not_found), (6, 4));
        assert_eq!(job.status, JobStatus::Queued);
    }

    #[test]
    fn no_ids_a_blank_one_or_too_many_are_refused() {
        let refused = |ids: Vec<String>| match new_job(&ids, Timestamp::now()) {
            Err(StackError::Invalid(message)) => message,
            other => panic!("{} ids: {other:?}", ids.len()),
        };
        assert_eq!(refused(Vec::new()), "invalid input");
        assert_eq!(refused(strings(&["stack-0123456789abcdef", " "])), "invalid stack_ids");
        let too_many = vec!["stack-0123456789abcdef".to_owned(); MAX_BATCH_IDS + 1];
        assert_eq!(
            refused(too_many),
            "too many stack_ids: 10001, at most 10000 per request (send several)"
        );
        let most = vec!["x".to_owned(); MAX_BATCH_IDS];
        assert_eq!(new_job(&most, Timestamp::now()).unwrap().total, 1);
    }

    /// The largest job fits in its DynamoDB item, with every error it may keep (its JSON is
    /// longer than its item: each string costs 1 byte more in JSON than in a list).
    #[test]
    fn the_largest_job_fits_in_one_item() {
        let ids: Vec<String> = (0..MAX_BATCH_IDS).map(|i| format!("stack-{i:016x}")).collect();
        let mut job = new_job(&ids, Timestamp::now()).unwrap();
        assert_eq!(job.pending.len(), MAX_BATCH_IDS);
        for id in &ids[..BatchDeleteJob::MAX_ERRORS] {
            record_outcome(&mut job, id, Err(StackError::Unavailable("x".repeat(4096))));
        }
        let bytes = serde_json::to_vec(&job).unwrap().len();
        assert!(bytes < crate::store::MAX_ITEM_BYTES - 1024, "{bytes} bytes");
    }

    #[test]
    fn a_transient_failure_is_retried_with_longer_pauses_until_the_last_attempt() {
        let mut retries = Retries::default();
        let chunk = strings(&["a", "b"]);
        assert_eq!(retries.pause_before(&chunk), Duration::ZERO);
        let throttled = StackError::Store(StoreError::Unavailable {
            operation: "DeleteItem",
            source: "throttled".into(),
        });
        let mut pauses = Vec::new();
        for _ in 1..TRANSIENT_ATTEMPTS {
            assert!(retries.again("a", &throttled));
            pauses.push(retries.pause_before(&chunk).as_millis());
        }
        assert_eq!(pauses, [500, 1000, 2000, 4000]);
        assert!(!retries.again("a", &throttled), "the last attempt's failure counts");
        // Not a dependency's trouble: counted at once.
        for err in [StackError::NotFound, StackError::Invalid("bad".into())] {
            assert!(!retries.again("b", &err), "{err:?}");
        }
        assert_eq!(retries.pause_before(&strings(&["b", "c"])), Duration::ZERO);
    }

    #[test]
    fn outcomes_are_counted_and_errors_bounded() {
        let mut j = job(203);
        record_outcome(&mut j, "a", Ok(()));
        record_outcome(&mut j, "b", Err(StackError::NotFound));
        let long = "x".repeat(2000);
        for i in 0..201 {
            record_outcome(&mut j, &format!("c{i}"), Err(StackError::Unavailable(long.clone())));
        }
        assert_eq!((j.deleted, j.not_found, j.failed), (1, 1, 201));
        assert_eq!(j.errors.len(), BatchDeleteJob::MAX_ERRORS);
        assert!(
            j.errors
                .iter()
                .all(|e| e.error.chars().count() == BatchDeleteJob::MAX_ERROR_CHARS)
        );
        assert_eq!(final_status(&j), JobStatus::Completed);
        let mut all_failed = job(1);
        record_outcome(&mut all_failed, "z", Err(StackError::Unavailable("boom".into())));
        assert_eq!(final_status(&all_failed), JobStatus::Failed);
    }
}
