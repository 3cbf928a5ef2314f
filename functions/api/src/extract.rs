//! What handlers take from a request besides its body: who calls, and which stack the path
//! names.

use std::sync::Arc;

use axum::Extension;
use axum::extract::rejection::ExtensionRejection;
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use stack_core::{Principal, Scope, StackId, Stacks};

use crate::error::ApiError;
use crate::state::AppState;

/// The principal [`crate::auth::authorize`] identified, with the stacks it acts on.
pub struct Caller {
    pub stacks: Arc<Stacks>,
    pub principal: Principal,
}

impl Caller {
    /// The stacks it may see.
    pub fn scope(&self) -> &Scope {
        &self.principal.scope
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ExtensionRejection;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Extension(principal) = Extension::<Principal>::from_request_parts(parts, state).await?;
        Ok(Self {
            stacks: Arc::clone(&state.stacks),
            principal,
        })
    }
}

/// The `{stack_id}` of the path. An id that is not of our form can name no stack: 404.
#[derive(utoipa::IntoParams)]
#[into_params(names("stack_id"), parameter_in = Path)]
pub struct StackIdPath(
    /// stack- and 16 lowercase hex digits
    #[param(value_type = String)]
    pub StackId,
);

impl<S: Send + Sync> FromRequestParts<S> for StackIdPath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        raw.parse()
            .map(Self)
            .map_err(|_| ApiError::stack_not_found().into_response())
    }
}
