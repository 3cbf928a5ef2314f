//! The pass's snapshot for the dashboard's charts (`history::PassSnapshot`), built from what the
//! pass read, planned and did: no extra read.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::{Action, Summary};
use crate::history::{PassCounts, PassSnapshot};
use crate::lifecycle::RemovalReason;
use crate::model::StackRecord;

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
            counts: PassCounts::default(),
            duration_ms: 0,
            removals: BTreeMap::new(),
        }
    }

    pub(crate) fn count_removals(&mut self, actions: &[Action]) {
        for action in actions {
            if let Action::Remove(removal) = action {
                *self
                    .removals
                    .entry(removal_reason(removal.reason).to_owned())
                    .or_insert(0) += 1;
            }
        }
    }

    pub(crate) fn add_summary(&mut self, summary: &Summary) {
        self.counts = summary.counts;
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
        RemovalReason::TenantRemoved => "tenant_removed",
    }
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
            counts: PassCounts {
                expired: 1,
                drift: 2,
                failures: 1,
                ..PassCounts::default()
            },
            ..Summary::default()
        };
        let s = PassSnapshot::of(at, &records, &actions, &summary);
        assert_eq!((s.total_stacks, s.active_stacks, s.created_last_minute), (4, 3, 2));
        assert_eq!((s.counts.expired, s.counts.drift, s.counts.failures), (1, 2, 1));
        assert_eq!(
            s.removals,
            BTreeMap::from([("expired".to_owned(), 1), ("pod_missing".to_owned(), 2)])
        );
    }
}
