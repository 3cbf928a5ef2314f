use std::process::ExitCode;

use stack_api::{AppState, lambda, router};
use stack_core::config::Config;

#[tokio::main]
async fn main() -> ExitCode {
    stack_core::telemetry::init();
    let config = match Config::from_env().and_then(|c| c.require_api_key().map(|()| c)) {
        Ok(config) => config,
        Err(err) => {
            tracing::error!(error = %err, "refusing to start");
            return ExitCode::FAILURE;
        }
    };
    let in_lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    let listen_addr = config.listen_addr;
    let state = match AppState::from_config(config).await {
        Ok(state) => state,
        Err(err) => {
            tracing::error!(error = %err, "start-up failed");
            return ExitCode::FAILURE;
        }
    };
    let app = router(state);
    let served = if in_lambda {
        lambda::run(app).await.map_err(|e| e.to_string())
    } else {
        serve_locally(app, listen_addr).await.map_err(|e| e.to_string())
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = %err, "server stopped");
            ExitCode::FAILURE
        }
    }
}

async fn serve_locally(app: axum::Router, addr: std::net::SocketAddr) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(url = %format!("http://{}", listener.local_addr()?), "stack-api listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
