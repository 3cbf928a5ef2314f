//! The reconciler: in Lambda, one pass per scheduled invocation; locally (no
//! `AWS_LAMBDA_RUNTIME_API`), one pass, its summary on stdout, then exit.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stack_core::{Config, refuse_to_start, run_pass};
use stack_reconciler::{handler, report, setup};

/// Time budget of a local pass (a Lambda pass takes its deadline from the invocation).
const LOCAL_BUDGET: Duration = Duration::from_secs(300);

#[tokio::main]
async fn main() -> ExitCode {
    stack_core::init_tracing();
    let started = match Config::from_env() {
        Ok(config) => setup::reconciler(config).await,
        Err(err) => Err(err.into()),
    };
    let reconciler = match started {
        Ok(reconciler) => Arc::new(reconciler),
        Err(err) => {
            refuse_to_start(&err.to_string()).await;
            return ExitCode::FAILURE;
        }
    };
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some() {
        match handler::serve(reconciler).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                tracing::error!(error = %err, "lambda runtime stopped");
                ExitCode::FAILURE
            }
        }
    } else {
        match run_pass(&reconciler, Instant::now() + LOCAL_BUDGET).await {
            Ok(summary) => {
                report::log(&summary);
                println!("{}", report::summary_line(&summary));
                ExitCode::SUCCESS
            }
            Err(err) => {
                tracing::error!(error = %err, "reconcile pass could not run");
                ExitCode::FAILURE
            }
        }
    }
}
