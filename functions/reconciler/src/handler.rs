//! The Lambda side: one pass per scheduled (EventBridge) invocation.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::Value;
use stack_core::{Reconciler, Summary, run_pass};

use crate::report;

/// Runs until the Lambda runtime stops the process.
pub async fn serve(reconciler: Arc<Reconciler>) -> Result<(), lambda_runtime::Error> {
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let reconciler = reconciler.clone();
        async move { handle(&reconciler, event).await }
    }))
    .await
}

/// The event's content does not matter: every invocation is one pass. A pass that could not
/// run is an invocation error; the next schedule tick tries again.
pub async fn handle(reconciler: &Reconciler, event: LambdaEvent<Value>) -> Result<Summary, lambda_runtime::Error> {
    let deadline = instant_of(event.context.deadline());
    match run_pass(reconciler, deadline).await {
        Ok(summary) => {
            report::log(&summary);
            report::emit_emf(&summary, jiff::Timestamp::now());
            Ok(summary)
        }
        Err(err) => {
            tracing::error!(error = %err, request_id = %event.context.request_id, "reconcile pass could not run");
            Err(err.into())
        }
    }
}

/// The invocation deadline on the monotonic clock.
fn instant_of(deadline: SystemTime) -> Instant {
    let left = deadline.duration_since(SystemTime::now()).unwrap_or_default();
    Instant::now() + left
}
