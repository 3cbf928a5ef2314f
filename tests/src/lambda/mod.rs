//! The two functions as Lambda runs them, locally: each `bootstrap` that `sam build` made
//! for `provided.al2023` runs under the AWS Lambda Runtime Interface Emulator with the
//! environment `template.yaml` gives it, against the local cloud; API Gateway's two halves
//! around the API function (the REST proxy event it sends, its reading of the answer) are
//! here too. Used by the emulator tests (`tests/it/lambda`), `bench-init` and
//! `tests/env/invoke`.

pub mod artifacts;
pub mod emulator;
pub mod gateway;
pub mod local_gateway;
pub mod rest_event;
pub mod sandbox;
pub mod template;

use std::path::PathBuf;

pub use emulator::{Emulator, Invocation};
pub use gateway::{Gateway, GatewayResponse};
pub use rest_event::RestRequest;
pub use sandbox::{LOCAL_API_KEY, LambdaFunction, LocalFunction, Sandbox};
pub use template::{Deployment, FunctionDefinition};

#[derive(Debug, thiserror::Error)]
pub enum LambdaError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("template {path}: {reason}")]
    Template { path: PathBuf, reason: String },
    #[error("{path} is missing: run {fix}")]
    Missing { path: PathBuf, fix: &'static str },
    #[error("{bootstrap} is older than {newer}: run {fix}")]
    Stale {
        bootstrap: PathBuf,
        newer: PathBuf,
        fix: &'static str,
    },
    #[error("no home directory to find the install cache in (set STACK_ENV_CACHE)")]
    NoHome,
    #[error("finding a free loopback port: {0}")]
    FreePort(#[source] std::io::Error),
    #[error("starting {program}: {source}")]
    Spawn { program: PathBuf, source: std::io::Error },
    #[error("the emulator stopped: {0}")]
    Exited(String),
    #[error("invoking: {0}")]
    Invoke(String),
    #[error("{0}")]
    Answer(String),
}
