//! What the operator's dashboard charts, recorded cheaply (the types only: a pass's snapshot is
//! built in `reconcile::snapshot`, a refusal's class in `stacks`, both stored by `store`):
//! one small snapshot per reconcile pass, and create refusals counted per minute and reason.
//! Both expire through the table's TTL after [`RETENTION`].

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::tenancy::{Scope, TenantId};

/// How long snapshots and refusal counts are kept: a day of charts, plus an hour of slack.
pub(crate) const RETENTION: SignedDuration = SignedDuration::from_hours(25);

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
    #[serde(flatten)]
    pub counts: PassCounts,
    pub duration_ms: u64,
    /// Removals the pass planned, by reason (`expired`, `pod_missing`, ...).
    #[serde(default)]
    pub removals: BTreeMap<String, usize>,
}

/// What one reconcile pass did, as the reconciler counts it, answers it and charts it. Work
/// counts are of work done; what failed is in `failures`, what the time budget left for the
/// next pass in `remaining`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PassCounts {
    /// Stacks ended because their TTL passed, and failed stacks' records whose retention
    /// (`STACK_FAILED_RETENTION`) passed.
    pub expired: usize,
    /// Stacks ended because the cluster lost part of them, never scheduled them, refused
    /// their pod, their pod failed or could not start (objects removed, record kept) or
    /// (with `STACK_REAP_TERMINATED`) their pod succeeded.
    pub drift: usize,
    /// Unclaimed objects of ours deleted.
    pub orphans: usize,
    pub status_updates: usize,
    /// Batch-delete jobs carried to completion.
    pub jobs: usize,
    pub failures: usize,
    pub remaining: usize,
}

/// Why a create was refused, as counted for the dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefusalReason {
    InvalidSpec,
    Conflict,
    NoNodePort,
    Saturated,
    /// The tenant held its limit of stacks (`STACK_TENANTS`).
    TenantLimit,
    Unavailable,
    Internal,
}

impl RefusalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidSpec => "invalid_spec",
            Self::Conflict => "conflict",
            Self::NoNodePort => "no_nodeport",
            Self::Saturated => "saturated",
            Self::TenantLimit => "tenant_limit",
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

/// The name a tenant's count of `reason` is kept under, beside the deployment's (tenant names
/// hold no `/`).
pub(crate) fn tenant_count(tenant: &TenantId, reason: RefusalReason) -> String {
    format!("{tenant}/{}", reason.as_str())
}

impl RefusalMinute {
    /// The counts `scope` may see: the deployment's for every tenant, else its tenant's own.
    pub fn of_scope(self, scope: &Scope) -> Self {
        let counts = self
            .counts
            .into_iter()
            .filter_map(|(name, count)| match (scope.tenant(), name.split_once('/')) {
                (None, None) => Some((name, count)),
                (Some(tenant), Some((of, reason))) if of == tenant.as_str() => Some((reason.to_owned(), count)),
                _ => None,
            })
            .collect();
        Self {
            minute: self.minute,
            counts,
        }
    }
}

/// The start of `at`'s minute.
pub(crate) fn minute_of(at: Timestamp) -> Timestamp {
    Timestamp::from_second(at.as_second().div_euclid(60) * 60).unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_sees_the_deployments_refusals_or_only_its_tenants() {
        let ctf = TenantId::parse("ctf").unwrap();
        let minute = RefusalMinute {
            minute: Timestamp::UNIX_EPOCH,
            counts: BTreeMap::from([
                ("tenant_limit".to_owned(), 3),
                (tenant_count(&ctf, RefusalReason::TenantLimit), 2),
                ("uni/tenant_limit".to_owned(), 1),
            ]),
        };
        let all = minute.clone().of_scope(&Scope::All).counts;
        assert_eq!(all, BTreeMap::from([("tenant_limit".to_owned(), 3)]));
        let own = minute.of_scope(&Scope::Tenant(ctf)).counts;
        assert_eq!(own, BTreeMap::from([("tenant_limit".to_owned(), 2)]));
    }

    #[test]
    fn refusals_are_bucketed_by_minute() {
        let at: Timestamp = "2030-01-01T12:34:56.789Z".parse().unwrap();
        assert_eq!(minute_of(at).to_string(), "2030-01-01T12:34:00Z");
        assert_eq!(RefusalReason::NoNodePort.as_str(), "no_nodeport");
    }
}
