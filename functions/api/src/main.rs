use std::process::ExitCode;

use stack_api::{AppState, router};
use stack_core::{Config, ConfigError, SetupError, refuse_to_start};

/// lambda_http's switch for REST API events: the path is the event's own, without the stage.
const IGNORE_STAGE_IN_PATH: &str = "AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH";

/// Why the API does not start.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    // Routes are stage-agnostic; lambda_http puts the API Gateway stage in front of the path
    // unless this is set (template.yaml sets it), and then every route would answer 404.
    #[error("{IGNORE_STAGE_IN_PATH} is not set: every route would answer 404 behind API Gateway")]
    StageInPath,
    #[error(transparent)]
    Setup(#[from] SetupError),
}

// One thread: a Lambda sandbox serves one request at a time, and the calls a create makes
// concurrently wait on the network, not on a core; a second worker only added cross-thread
// wake-ups (the API's CPU per create fell 11 % with one, bench-scale at 3,000 stacks).
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    stack_core::init_tracing();
    let in_lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    let (app, listen_addr) = match start(in_lambda).await {
        Ok(started) => started,
        Err(err) => {
            refuse_to_start(&err.to_string()).await;
            return ExitCode::FAILURE;
        }
    };
    let served = if in_lambda {
        lambda_http::run(app).await.map_err(|e| e.to_string())
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

/// Configuration, clients and the start-up checks: everything before the first request.
async fn start(in_lambda: bool) -> Result<(axum::Router, std::net::SocketAddr), StartError> {
    let config = Config::from_env()?;
    config.require_api_key()?;
    if in_lambda && std::env::var_os(IGNORE_STAGE_IN_PATH).is_none() {
        return Err(StartError::StageInPath);
    }
    let listen_addr = config.listen_addr;
    let state = AppState::from_config(config).await?;
    Ok((router(state), listen_addr))
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
