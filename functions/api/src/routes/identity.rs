//! `GET /identity`: who the key is, so that a page (the dashboard) shows only what the key
//! may do.

use axum::{Extension, Json};
use serde::Serialize;
use stack_core::{Action, Principal, Role};

#[derive(Serialize, utoipa::ToSchema)]
pub struct Identity {
    pub role: Role,
    /// The key's tenant; `null` for a key that sees every tenant (`*`, or any key while the
    /// deployment has one tenant).
    pub tenant: Option<String>,
    /// Whether the key may create stacks.
    pub may_create: bool,
    /// Whether it may renew and delete stacks.
    pub may_change: bool,
    /// Whether it may read stats and history.
    pub may_observe: bool,
    /// Whether it may start batch deletes.
    pub may_batch_delete: bool,
}

/// The role and tenant of the key.
#[utoipa::path(
    get,
    path = "/identity",
    operation_id = "getIdentity",
    responses(
        (status = 200, description = "Success", body = Identity),
        crate::openapi::KeyMissing,
    ),
)]
pub async fn identity(Extension(principal): Extension<Principal>) -> Json<Identity> {
    Json(Identity {
        role: principal.role,
        tenant: principal.scope.tenant().map(ToString::to_string),
        may_create: principal.may(Action::Create),
        may_change: principal.may(Action::Change),
        may_observe: principal.may(Action::Observe),
        may_batch_delete: principal.may(Action::BatchDelete),
    })
}
