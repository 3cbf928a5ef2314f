//! The stack API: routes of the HTTP contract over the shared stack core.

pub mod auth;
pub mod deadline;
pub mod error;
pub mod extract;
pub mod openapi;
pub mod refusals;
pub mod request_log;
pub mod router;
pub mod routes;
pub mod state;
pub mod wire;

pub use router::router;
pub use state::AppState;
