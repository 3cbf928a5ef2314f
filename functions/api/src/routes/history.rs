//! `GET /history`: what the dashboard charts (reconcile pass snapshots and create refusals of
//! the last day). Two range queries, no scan.

use axum::Json;
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use stack_core::{PassSnapshot, RefusalMinute, Scope};

use crate::error::ApiError;
use crate::extract::Caller;

/// How far back the charts go.
const WINDOW: SignedDuration = SignedDuration::from_hours(24);

#[derive(Serialize, utoipa::ToSchema)]
pub struct History {
    /// Label of the manifests the dashboard groups stacks by (`STACK_CHALLENGE_LABEL`).
    pub challenge_label: String,
    /// One per reconcile pass of the last 24 hours, oldest first.
    pub passes: Vec<PassSnapshot>,
    /// Create refusals per minute and reason over the last 24 hours, oldest first.
    pub refusals: Vec<RefusalMinute>,
}

/// Reconcile passes and create refusals of the last 24 hours.
///
/// Passes are of the whole deployment: a key of one tenant gets none, and only its tenant's
/// refusals.
#[utoipa::path(
    get,
    path = "/history",
    operation_id = "getHistory",
    responses(
        (status = 200, description = "Success", body = History),
        crate::openapi::KeyedRouteErrors,
    ),
)]
pub async fn history(caller: Caller) -> Result<Json<History>, ApiError> {
    let since = Timestamp::now().saturating_sub(WINDOW).unwrap_or(Timestamp::UNIX_EPOCH);
    let store = caller.stacks.store();
    let scope = caller.scope();
    let passes = async {
        match scope {
            Scope::All => store.pass_snapshots_since(since).await,
            Scope::Tenant(_) => Ok(Vec::new()),
        }
    };
    let (passes, refusals) =
        tokio::try_join!(passes, store.refusals_since(since)).map_err(stack_core::StackError::from)?;
    let challenge_label = caller.stacks.config().challenge_label.clone();
    let refusals = refusals
        .into_iter()
        .map(|minute| minute.of_scope(scope))
        .filter(|minute| !minute.counts.is_empty())
        .collect();
    Ok(Json(History {
        challenge_label,
        passes,
        refusals,
    }))
}
