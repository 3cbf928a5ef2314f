//! Batch deletes: a durable job whose pending ids are processed in chunks, progress saved
//! after each chunk, so that whoever runs next (this process or the reconciler) finishes it.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::{StackError, Stacks};
use crate::model::{BatchDeleteJob, JobError, JobStatus, StackId, is_job_id, new_job_id};
use crate::store::StoreError;

const CHUNK: usize = 16;

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
    pub async fn start_batch_delete(&self, ids: &[String]) -> Result<BatchDeleteJob, StackError> {
        if ids.is_empty() {
            return Err(StackError::Invalid("invalid input".into()));
        }
        let mut seen = HashSet::new();
        let mut pending = Vec::new();
        for id in ids {
            let id = id.trim();
            if id.is_empty() {
                return Err(StackError::Invalid("invalid stack_ids".into()));
            }
            if seen.insert(id.to_owned()) {
                pending.push(id.to_owned());
            }
        }
        let now = Timestamp::now();
        let job = BatchDeleteJob {
            job_id: new_job_id(),
            status: JobStatus::Queued,
            total: u32::try_from(pending.len()).unwrap_or(u32::MAX),
            deleted: 0,
            not_found: 0,
            failed: 0,
            errors: Vec::new(),
            pending,
            created_at: now,
            updated_at: now,
        };
        self.store.put_new_job(&job).await?;
        Ok(job)
    }

    pub async fn get_job(&self, job_id: &str) -> Result<BatchDeleteJob, StackError> {
        if !is_job_id(job_id) {
            return Err(StackError::JobNotFound);
        }
        self.store.get_job(job_id).await?.ok_or(StackError::JobNotFound)
    }

    /// Processes the job's pending ids until done or `budget` runs out.
    pub async fn advance_job(&self, mut job: BatchDeleteJob, budget: Duration) -> Result<JobProgress, StackError> {
        let started = Instant::now();
        while !job.status.is_finished() {
            if started.elapsed() >= budget {
                return Ok(JobProgress::Paused);
            }
            let chunk: Vec<String> = job.pending.iter().take(CHUNK).cloned().collect();
            let outcomes = futures::future::join_all(chunk.iter().map(|id| self.delete_for_job(id))).await;
            let previous_update = job.updated_at;
            for (id, outcome) in chunk.iter().zip(outcomes) {
                record_outcome(&mut job, id, outcome);
            }
            job.pending.drain(..chunk.len());
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

    async fn delete_for_job(&self, id: &str) -> Result<(), StackError> {
        let id: StackId = id.parse().map_err(|_| StackError::NotFound)?;
        self.delete(&id).await
    }
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
        }
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
