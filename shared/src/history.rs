//! What the operator's dashboard charts, recorded cheaply (pure types; I/O in `store`):
//! one small snapshot per reconcile pass, and create refusals counted per minute and reason.
//! Both expire through the table's TTL after [`RETENTION`].

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::lifecycle::RemovalReason;
use crate::model::StackRecord;
use crate::reconcile::{Action, Summary};
use crate::stacks::StackError;

/// How long snapshots and refusal counts are kept: a day of charts, plus an hour of slack.
pub const RETENTION: SignedDuration = SignedDuration::from_hours(25);

/// One reconcile pass: the stacks it saw and what it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PassSnapshot {
    pub at: Timestamp,
    pub total_stacks: usize,
    /// `creating` or `running`.
    pub active_stacks: usize,
    /// Records created in the minute before the pass (a stack created and removed between two
    /// passes is not seen).
    pub created_last_minute: usize,
    pub expired: usize,
    pub drift: usize,
    pub orphans: usize,
    pub status_updates: usize,
    pub jobs: usize,
    pub failures: usize,
    pub remaining: usize,
    pub duration_ms: u64,
    /// Removals the pass planned, by reason (`expired`, `pod_missing`, ...).
    #[serde(default)]
    pub removals: BTreeMap<String, usize>,
}

impl PassSnapshot {
    /// `records` as observed at `at`, the pass's planned `actions` and its `summary`.
    pub fn of(at: Timestamp, records: &[StackRecord], actions: &[Action], summary: &Summary) -> Self {
        let mut snapshot = Self::observed(at, records);
        snapshot.count_removals(actions);
        snapshot.add_summary(summary);
        snapshot
    }

    /// The counts of what a pass saw (taken before the plan consumes the records).
    pub fn observed(at: Timestamp, records: &[StackRecord]) -> Self {
        let minute_ago = at.saturating_sub(SignedDuration::from_mins(1)).unwrap_or(at);
        Self {
            at,
            total_stacks: records.len(),
            active_stacks: records.iter().filter(|r| r.status.is_active()).count(),
            created_last_minute: records.iter().filter(|r| r.created_at > minute_ago).count(),
            expired: 0,
            drift: 0,
            orphans: 0,
            status_updates: 0,
            jobs: 0,
            failures: 0,
            remaining: 0,
            duration_ms: 0,
            removals: BTreeMap::new(),
        }
    }

    pub fn count_removals(&mut self, actions: &[Action]) {
        for action in actions {
            if let Action::Remove(removal) = action {
                *self
                    .removals
                    .entry(removal_reason(removal.reason).to_owned())
                    .or_insert(0) += 1;
            }
        }
    }

    pub fn add_summary(&mut self, summary: &Summary) {
        self.expired = summary.expired;
        self.drift = summary.drift;
        self.orphans = summary.orphans;
        self.status_updates = summary.status_updates;
        self.jobs = summary.jobs;
        self.failures = summary.failures;
        self.remaining = summary.remaining;
        self.duration_ms = summary.duration_ms;
    }
}

fn removal_reason(reason: RemovalReason) -> &'static str {
    match reason {
        RemovalReason::Expired => "expired",
        RemovalReason::PodMissing => "pod_missing",
        RemovalReason::ServiceMissing => "service_missing",
        RemovalReason::NodeMissing => "node_missing",
        RemovalReason::Unschedulable => "unschedulable",
        RemovalReason::Rejected => "rejected",
        RemovalReason::Terminated => "terminated",
        RemovalReason::Failed => "failed",
        RemovalReason::RetentionEnded => "retention_ended",
        RemovalReason::Deleted => "deleted",
    }
}

/// Why a create was refused, as counted for the dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefusalReason {
    InvalidSpec,
    Conflict,
    NoNodePort,
    Saturated,
    Unavailable,
    Internal,
}

impl RefusalReason {
    pub fn of(err: &StackError) -> Self {
        match err {
            StackError::Invalid(_) | StackError::NotFound | StackError::JobNotFound => Self::InvalidSpec,
            StackError::Conflict(_) => Self::Conflict,
            StackError::NoNodePort => Self::NoNodePort,
            StackError::Saturated(_) => Self::Saturated,
            StackError::Unavailable(_) => Self::Unavailable,
            StackError::Store(_) | StackError::Cluster(_) => Self::Internal,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidSpec => "invalid_spec",
            Self::Conflict => "conflict",
            Self::NoNodePort => "no_nodeport",
            Self::Saturated => "saturated",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
        }
    }
}

/// Create refusals of one minute, by reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RefusalMinute {
    /// Start of the minute.
    pub minute: Timestamp,
    pub counts: BTreeMap<String, u64>,
}

/// The start of `at`'s minute.
pub fn minute_of(at: Timestamp) -> Timestamp {
    Timestamp::from_second(at.as_second().div_euclid(60) * 60).unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::Removal;
    use crate::model::StackStatus;

    fn record(created_at: Timestamp, status: StackStatus) -> StackRecord {
        StackRecord::test()
            .created_at(created_at)
            .ttl_expires_at(created_at)
            .status(status)
    }

    #[test]
    fn snapshot_counts_active_recent_creates_and_removal_reasons() {
        let at: Timestamp = "2030-01-01T12:00:00Z".parse().unwrap();
        let secs = |s: i64| at.checked_sub(SignedDuration::from_secs(s)).unwrap();
        let records = [
            record(secs(10), StackStatus::Creating),
            record(secs(59), StackStatus::Running),
            record(secs(61), StackStatus::Running),
            record(secs(3600), StackStatus::Failed),
        ];
        let removal = |reason| {
            Action::Remove(Box::new(Removal {
                record: records[3].clone(),
                reason,
                pod: None,
                service: None,
                mark: None,
            }))
        };
        let actions = [
            removal(RemovalReason::Expired),
            removal(RemovalReason::PodMissing),
            removal(RemovalReason::PodMissing),
        ];
        let summary = Summary {
            lease_held: true,
            expired: 1,
            drift: 2,
            failures: 1,
            ..Summary::default()
        };
        let s = PassSnapshot::of(at, &records, &actions, &summary);
        assert_eq!((s.total_stacks, s.active_stacks, s.created_last_minute), (4, 3, 2));
        assert_eq!((s.expired, s.drift, s.failures), (1, 2, 1));
        assert_eq!(
            s.removals,
            BTreeMap::from([("expired".to_owned(), 1), ("pod_missing".to_owned(), 2)])
        );
    }

    #[test]
    fn refusals_are_bucketed_by_minute_and_named_by_class() {
        let at: Timestamp = "2030-01-01T12:34:56.789Z".parse().unwrap();
        assert_eq!(minute_of(at).to_string(), "2030-01-01T12:34:00Z");
        assert_eq!(RefusalReason::of(&StackError::NoNodePort).as_str(), "no_nodeport");
        assert_eq!(
            RefusalReason::of(&StackError::Saturated("quota".into())).as_str(),
            "saturated"
        );
        assert_eq!(
            RefusalReason::of(&StackError::Invalid("x".into())).as_str(),
            "invalid_spec"
        );
    }
}
