//! Every request answers before API Gateway gives up (29 s) and before Lambda ends the
//! invocation: a handler still running then is dropped and the client gets a JSON 503 instead
//! of API Gateway's bare 504. Creates have a shorter deadline of their own (see
//! `stack_core::CREATE_DEADLINE`).

use std::time::{Duration, SystemTime};

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use lambda_http::Context;

use stack_core::{LAMBDA_MARGIN, REQUEST_DEADLINE};

use crate::error::ApiError;

pub async fn enforce(request: Request, next: Next) -> Response {
    let invocation_deadline = request.extensions().get::<Context>().map(Context::deadline);
    let budget = budget(invocation_deadline, SystemTime::now());
    match tokio::time::timeout(budget, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(budget_ms = budget.as_millis(), "request ran out of time");
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "request timed out, retry").into_response()
        }
    }
}

/// What a request may take: [`REQUEST_DEADLINE`], or less when the invocation ends sooner.
fn budget(invocation_deadline: Option<SystemTime>, now: SystemTime) -> Duration {
    let Some(deadline) = invocation_deadline else {
        return REQUEST_DEADLINE;
    };
    deadline
        .duration_since(now)
        .unwrap_or_default()
        .saturating_sub(LAMBDA_MARGIN)
        .min(REQUEST_DEADLINE)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: SystemTime = SystemTime::UNIX_EPOCH;

    fn at(secs: f64) -> Option<SystemTime> {
        Some(NOW + Duration::from_secs_f64(secs))
    }

    #[test]
    fn outside_lambda_the_fixed_deadline_applies() {
        assert_eq!(budget(None, NOW), REQUEST_DEADLINE);
    }

    #[test]
    fn a_short_invocation_leaves_a_margin_to_answer() {
        assert_eq!(budget(at(15.0), NOW), Duration::from_millis(14_500));
        assert_eq!(budget(at(0.3), NOW), Duration::ZERO);
    }

    #[test]
    fn a_long_invocation_is_still_cut_before_api_gateway_gives_up() {
        assert_eq!(budget(at(900.0), NOW), REQUEST_DEADLINE);
    }

    #[test]
    fn a_deadline_already_past_answers_at_once() {
        assert_eq!(budget(Some(NOW), NOW + Duration::from_secs(1)), Duration::ZERO);
    }
}
