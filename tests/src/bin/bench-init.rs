//! Init time of the two Lambda functions, measured locally: each release binary is started as
//! Lambda starts it (`AWS_LAMBDA_RUNTIME_API` and the `AWS_LAMBDA_*` variables set), against
//! a loopback stand-in for the Lambda Runtime API, over the local environment (DynamoDB Local
//! and the real apiserver; run `tests/env/up` first). It prints, per function and run:
//!
//! - init: process start to its first `GET /runtime/invocation/next` (ready for the first event),
//! - first invocation: that event handed over to its response posted (`events/healthz.json`
//!   for the API, `events/scheduled.json` for the reconciler).
//!
//! `cargo build --release -p stack-api -p stack-reconciler -p stack-tests --bin stack-api
//!  --bin stack-reconciler --bin bench-init && target/release/bench-init [--runs N]`

use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::{get, post};
use stack_tests::env::{EnvSettings, TestEnv, unique_name};
use tokio::sync::{Mutex, mpsc};

const API_KEY: &str = "local-test-key";
/// How long a function gets to become ready or answer before the run counts as failed.
const PATIENCE: Duration = Duration::from_secs(30);

/// What the stand-in saw, in order.
#[derive(Debug)]
enum Seen {
    Next,
    Response(Bytes),
    Error(String, Bytes),
}

/// One pending event for the function; handed out once.
struct RuntimeApi {
    event: Mutex<Option<String>>,
    seen: mpsc::UnboundedSender<(Instant, Seen)>,
}

async fn next(State(api): State<Arc<RuntimeApi>>) -> (HeaderMap, String) {
    let _ = api.seen.send((Instant::now(), Seen::Next));
    let Some(event) = api.event.lock().await.take() else {
        // The function waits here for its second event, which never comes.
        return std::future::pending::<(HeaderMap, String)>().await;
    };
    let deadline = SystemTime::now() + Duration::from_secs(60);
    let deadline_ms = deadline
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("lambda-runtime-aws-request-id", "bench-init-request-1".to_owned()),
        ("lambda-runtime-deadline-ms", deadline_ms.to_string()),
        (
            "lambda-runtime-invoked-function-arn",
            "arn:aws:lambda:us-east-1:123456789012:function:bench-init".to_owned(),
        ),
        (
            "lambda-runtime-trace-id",
            "Root=1-00000000-000000000000000000000000".to_owned(),
        ),
        ("content-type", "application/json".to_owned()),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    (headers, event)
}

async fn response(State(api): State<Arc<RuntimeApi>>, body: Bytes) -> StatusCode {
    let _ = api.seen.send((Instant::now(), Seen::Response(body)));
    StatusCode::ACCEPTED
}

async fn invocation_error(State(api): State<Arc<RuntimeApi>>, UrlPath(id): UrlPath<String>, body: Bytes) -> StatusCode {
    let _ = api.seen.send((Instant::now(), Seen::Error(id, body)));
    StatusCode::ACCEPTED
}

async fn init_error(State(api): State<Arc<RuntimeApi>>, body: Bytes) -> StatusCode {
    let _ = api.seen.send((Instant::now(), Seen::Error("init".into(), body)));
    StatusCode::ACCEPTED
}

struct Function {
    name: &'static str,
    binary: &'static str,
    event: &'static str,
    /// A JSON pointer into the first invocation's response and the value it must have, so
    /// that only a real answer counts (not an error that came back fast).
    expect: (&'static str, Expected),
}

#[derive(Debug, Clone, Copy)]
enum Expected {
    Number(u64),
    Bool(bool),
}

impl Expected {
    fn matches(self, value: Option<&serde_json::Value>) -> bool {
        match self {
            Expected::Number(n) => value.and_then(serde_json::Value::as_u64) == Some(n),
            Expected::Bool(b) => value.and_then(serde_json::Value::as_bool) == Some(b),
        }
    }
}

const FUNCTIONS: [Function; 2] = [
    Function {
        name: "api",
        binary: "stack-api",
        event: "healthz.json",
        expect: ("/statusCode", Expected::Number(200)),
    },
    Function {
        name: "reconciler",
        binary: "stack-reconciler",
        event: "scheduled.json",
        expect: ("/lease_held", Expected::Bool(true)),
    },
];

struct Run {
    init: Duration,
    first_invocation: Duration,
}

#[tokio::main]
async fn main() -> ExitCode {
    let runs: usize = std::env::args()
        .skip_while(|a| a != "--runs")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(5);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let bin_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| root.join("target/release"));
    let env = match TestEnv::connect().await {
        Ok(env) => env,
        Err(err) => {
            eprintln!("bench-init: local environment not reachable (run tests/env/up): {err}");
            return ExitCode::FAILURE;
        }
    };
    let table = match env.fresh_table("init").await {
        Ok(table) => table,
        Err(err) => {
            eprintln!("bench-init: {err}");
            return ExitCode::FAILURE;
        }
    };
    let namespace = unique_name("init");
    let mut failed = false;
    for function in &FUNCTIONS {
        let binary = bin_dir.join(function.binary);
        let event = match std::fs::read_to_string(root.join("events").join(function.event)) {
            Ok(event) => event,
            Err(err) => {
                eprintln!("bench-init: events/{}: {err}", function.event);
                failed = true;
                continue;
            }
        };
        let mut measured = Vec::new();
        for run in 1..=runs {
            let child_env = ChildEnv {
                settings: &env.settings,
                table: table.name(),
                namespace: &namespace,
            };
            match measure(&binary, &event, function.expect, &child_env).await {
                Ok(m) => {
                    println!(
                        "{} run {run}: init {:.1} ms, first invocation ({}) {:.1} ms",
                        function.name,
                        ms(m.init),
                        function.event,
                        ms(m.first_invocation)
                    );
                    measured.push(m);
                }
                Err(err) => {
                    eprintln!("{} run {run}: {err}", function.name);
                    failed = true;
                }
            }
        }
        if !measured.is_empty() {
            let init: Vec<Duration> = measured.iter().map(|m| m.init).collect();
            let first: Vec<Duration> = measured.iter().map(|m| m.first_invocation).collect();
            println!(
                "{} ({}): init median {:.1} ms (min {:.1}, max {:.1}); first invocation median {:.1} ms over {} runs",
                function.name,
                binary.display(),
                ms(median(&init)),
                ms(init.iter().min().copied().unwrap_or_default()),
                ms(init.iter().max().copied().unwrap_or_default()),
                ms(median(&first)),
                measured.len()
            );
        }
    }
    if let Err(err) = table.delete().await {
        eprintln!("bench-init: could not delete the table: {err}");
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

struct ChildEnv<'a> {
    settings: &'a EnvSettings,
    table: &'a str,
    namespace: &'a str,
}

/// Starts `binary` as Lambda would and times its init and first invocation.
async fn measure(
    binary: &PathBuf,
    event: &str,
    (pointer, expected): (&str, Expected),
    env: &ChildEnv<'_>,
) -> Result<Run, String> {
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let api = Arc::new(RuntimeApi {
        event: Mutex::new(Some(event.to_owned())),
        seen: seen_tx,
    });
    let router = Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route("/2018-06-01/runtime/invocation/{id}/response", post(response))
        .route("/2018-06-01/runtime/invocation/{id}/error", post(invocation_error))
        .route("/2018-06-01/runtime/init/error", post(init_error))
        .with_state(api);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let runtime_api = listener.local_addr().map_err(|e| e.to_string())?.to_string();
    let server = tokio::spawn(async move { axum::serve(listener, router).await });

    let started = Instant::now();
    let mut child = tokio::process::Command::new(binary)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("AWS_LAMBDA_RUNTIME_API", &runtime_api)
        .env("AWS_LAMBDA_FUNCTION_NAME", "bench-init")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_REGION", &env.settings.region)
        .env("AWS_ACCESS_KEY_ID", &env.settings.access_key_id)
        .env("AWS_SECRET_ACCESS_KEY", &env.settings.secret_access_key)
        .env("AWS_ENDPOINT_URL_DYNAMODB", &env.settings.dynamodb_endpoint)
        .env("K8S_KUBECONFIG", &env.settings.kubeconfig)
        .env("DDB_STACK_TABLE", env.table)
        .env("STACK_NAMESPACE", env.namespace)
        .env("STACK_REQUIRE_INGRESS_NETWORK_POLICY", "false")
        .env("API_KEY", API_KEY)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", binary.display()))?;

    let outcome = async {
        let ready = match seen.recv().await {
            Some((at, Seen::Next)) => at,
            Some((_, Seen::Error(id, body))) => {
                return Err(format!("{id} error: {}", String::from_utf8_lossy(&body)));
            }
            other => return Err(format!("unexpected first call: {other:?}")),
        };
        match seen.recv().await {
            Some((done, Seen::Response(body))) => {
                let answer: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                if !expected.matches(answer.pointer(pointer)) {
                    return Err(format!(
                        "expected {pointer} = {expected:?}, got {}",
                        String::from_utf8_lossy(&body)
                    ));
                }
                Ok(Run {
                    init: ready - started,
                    first_invocation: done - ready,
                })
            }
            Some((_, Seen::Error(id, body))) => Err(format!("{id} error: {}", String::from_utf8_lossy(&body))),
            other => Err(format!("unexpected call: {other:?}")),
        }
    };
    let result = tokio::time::timeout(PATIENCE, outcome)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {PATIENCE:?}")));
    let _ = child.kill().await;
    server.abort();
    result
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(values: &[Duration]) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}
