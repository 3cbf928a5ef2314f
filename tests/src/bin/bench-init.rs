//! Cold starts of the two functions as Lambda runs them: each run starts a fresh sandbox of
//! the AWS Lambda Runtime Interface Emulator with the bootstrap `sam build` made and the
//! environment `template.yaml` gives the function, over the local environment (run
//! `tests/env/up` first), and invokes it. Per function and run it prints the emulator's own
//! figures (what Lambda reports as Init Duration and Duration):
//!
//! - init: the bootstrap's start (its start-up checks included) to its first request for an
//!   event;
//! - API: the first create after init (`events/create-v1.json`), then a second one, warm;
//! - reconciler: the first pass after init (`events/scheduled.json`).
//!
//! `tests/env/check-deploy --build` (release, as deployed; ~10 min cold) then
//! `cargo build --release -p stack-tests --bin bench-init && target/release/bench-init
//! [--runs N] [--build-dir DIR]` (default: this checkout's `target/sam-build/<arch>`); or,
//! without sam's packaging, the release binaries cargo builds next to it: `cargo build
//! --release -p stack-api -p stack-reconciler -p stack-tests --bin stack-api --bin
//! stack-reconciler --bin bench-init && target/release/bench-init --cargo`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use stack_tests::env::{TestEnv, unique_name};
use stack_tests::lambda::artifacts::{self, Bootstraps};
use stack_tests::lambda::emulator::report;
use stack_tests::lambda::{LambdaFunction, LocalFunction, Sandbox};

const CREATE_EVENT: &str = include_str!("../../../events/create-v1.json");
const SCHEDULED_EVENT: &str = include_str!("../../../events/scheduled.json");

/// One cold start: init, the first invocation, and (API) a second one.
struct ColdStart {
    init: Duration,
    first: Duration,
    second: Option<Duration>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let runs: usize = flag("--runs").and_then(|n| n.parse().ok()).unwrap_or(5);
    let bootstraps = if std::env::args().any(|a| a == "--cargo") {
        Bootstraps::Cargo(cargo_output_dir())
    } else {
        Bootstraps::SamBuild(
            flag("--build-dir")
                .map(PathBuf::from)
                .unwrap_or_else(artifacts::build_dir),
        )
    };
    let env = match TestEnv::connect().await {
        Ok(env) => env,
        Err(err) => {
            eprintln!("bench-init: {err}");
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
    println!("bootstraps: {}", bootstraps.describe());
    let mut failed = false;
    for function in [LambdaFunction::Api, LambdaFunction::Reconciler] {
        let local = LocalFunction::new(function, &env.settings)
            .on_simulated_nodes(table.name(), &namespace)
            .bootstraps(bootstraps.clone());
        // Run 0 warms the environment up (the namespace made on first use, DynamoDB Local's
        // JIT) and is not counted: a deployed function finds its namespace there.
        if let Err(err) = cold_start(&local).await {
            eprintln!("{} warm-up: {err}", name(function));
            failed = true;
            continue;
        }
        let mut measured = Vec::new();
        for run in 1..=runs {
            match cold_start(&local).await {
                Ok(start) => {
                    println!("{} run {run}: {}", name(function), describe(function, &start));
                    measured.push(start);
                }
                Err(err) => {
                    eprintln!("{} run {run}: {err}", name(function));
                    failed = true;
                }
            }
        }
        if !measured.is_empty() {
            print_medians(function, &measured);
        }
    }
    let namespaces = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(env.kube.clone());
    let _ = namespaces
        .delete(&namespace, &kube::api::DeleteParams::background())
        .await;
    if let Err(err) = table.delete().await {
        eprintln!("bench-init: could not delete the table: {err}");
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// Where cargo put this binary, and so the functions' binaries of the same build.
fn cargo_output_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(PathBuf::from))
        .unwrap_or_else(|| artifacts::repo_dir().join("target/release"))
}

fn flag(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

fn name(function: LambdaFunction) -> &'static str {
    match function {
        LambdaFunction::Api => "api",
        LambdaFunction::Reconciler => "reconciler",
    }
}

async fn cold_start(local: &LocalFunction) -> Result<ColdStart, String> {
    let sandbox = local.start().await.map_err(|e| e.to_string())?;
    let measured = measure(local.function(), &sandbox).await;
    sandbox.stop().await;
    measured
}

async fn measure(function: LambdaFunction, sandbox: &Sandbox) -> Result<ColdStart, String> {
    let (event, invocations) = match function {
        LambdaFunction::Api => (CREATE_EVENT, 2),
        LambdaFunction::Reconciler => (SCHEDULED_EVENT, 1),
    };
    for _ in 0..invocations {
        let invocation = sandbox.invoke(event.as_bytes()).await.map_err(|e| e.to_string())?;
        let answer: Value = invocation.json().map_err(|e| e.to_string())?;
        let worked = match function {
            LambdaFunction::Api => answer["statusCode"] == 201,
            LambdaFunction::Reconciler => answer["lease_held"] == true,
        };
        if invocation.status != 200 || !worked {
            return Err(format!(
                "unexpected answer {}: {answer}\n{}",
                invocation.status,
                sandbox.log()
            ));
        }
    }
    let log = sandbox.log();
    let init = report::inits(&log).first().copied();
    let durations = report::invocations(&log);
    match (init, durations.first()) {
        (Some(init), Some(first)) => Ok(ColdStart {
            init,
            first: *first,
            second: durations.get(1).copied(),
        }),
        _ => Err(format!("the emulator reported no init or invocation:\n{log}")),
    }
}

fn describe(function: LambdaFunction, start: &ColdStart) -> String {
    let first = match function {
        LambdaFunction::Api => "first create",
        LambdaFunction::Reconciler => "first pass",
    };
    let mut line = format!("init {:.1} ms, {first} {:.1} ms", ms(start.init), ms(start.first));
    if let Some(second) = start.second {
        line.push_str(&format!(", second create {:.1} ms", ms(second)));
    }
    line
}

fn print_medians(function: LambdaFunction, measured: &[ColdStart]) {
    let init: Vec<Duration> = measured.iter().map(|m| m.init).collect();
    let first: Vec<Duration> = measured.iter().map(|m| m.first).collect();
    let second: Vec<Duration> = measured.iter().filter_map(|m| m.second).collect();
    let mut line = format!(
        "{}: median over {} runs: init {:.1} ms (min {:.1}, max {:.1}), first {} {:.1} ms",
        name(function),
        measured.len(),
        ms(median(&init)),
        ms(init.iter().min().copied().unwrap_or_default()),
        ms(init.iter().max().copied().unwrap_or_default()),
        match function {
            LambdaFunction::Api => "create",
            LambdaFunction::Reconciler => "pass",
        },
        ms(median(&first)),
    );
    if !second.is_empty() {
        line.push_str(&format!(", second create {:.1} ms", ms(median(&second))));
    }
    println!("{line}");
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(values: &[Duration]) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}
