//! Time to a connectable stack on the real nodes (`tests/env/up` with real nodes): N creates
//! at once through the release API process, each client polling status as a platform does and
//! connecting to `node_public_ip:node_port` when told `running`.
//!
//! ```text
//! cargo build --release -p stack-api -p stack-tests --bin stack-api --bin bench-connect
//! target/release/bench-connect [--bursts 1,25,50,75] [--sequential 10] [--exposure hostport|nodeport]
//!                              [--cpu 50m] [--poll-ms 100] [--rounds 1] [--proxy-sync 1s]
//!                              [--isolation-check on|off] [--cpu-limits on|off] [--runtime-class gvisor]
//! ```
//!
//! Prints, per burst: create → `running` and create → first successful read (p50/p95/p99/max),
//! stacks said `running` whose port refused the participant (goal 0), stacks still `creating`
//! past the start deadline (goal 0), failures, and the CPU each component used per started pod
//! (kubelets, containerd with its shims and runc, kube-apiserver, the API), so that figures
//! compare across machines. Images are on the nodes before the first burst (`up` ran a pod of
//! each node; a warm-up stack per node follows).

use std::time::{Duration, Instant};

use stack_tests::api_process::{ApiClient, ApiProcess};
use stack_tests::bench_fixture::{BenchArgs, BenchFixture, RealNodeStacks};
use stack_tests::challenges::Challenge;
use stack_tests::env::{TestEnv, real_nodes, unique_name};
use stack_tests::latency::spread;
use stack_tests::node_cpu::{CpuUse, shim_cpu};
use stack_tests::platform_journey::{Journey as Outcome, delete_stacks, start_together};

const API_KEY: &str = "bench-connect-key";
/// How long a stack may take before it counts as still `creating` past its start deadline
/// (the API's `STACK_START_TIMEOUT`, set to this).
const START_DEADLINE: Duration = Duration::from_secs(60);
/// The most stacks of the warm-up burst.
const WARM_UP_MOST: usize = 25;

struct Options {
    bursts: Vec<usize>,
    sequential: usize,
    rounds: usize,
    /// `STACK_PROXY_SYNC` of the API (`0s` shows what the wait for kube-proxy prevents).
    proxy_sync: String,
    stack: RealNodeStacks,
}

impl Options {
    fn parse() -> Self {
        let args = BenchArgs::from_env();
        Self {
            bursts: args
                .list("--bursts", "1,25,50,75")
                .iter()
                .filter_map(|n| n.parse().ok())
                .collect(),
            sequential: args.number("--sequential", 10),
            rounds: args.number("--rounds", 1),
            proxy_sync: args.text("--proxy-sync", "1s"),
            stack: RealNodeStacks::parse(&args, "50m"),
        }
    }
}

#[tokio::main]
async fn main() {
    let options = Options::parse();
    let env = TestEnv::connect().await.expect("local environment (tests/env/up)");
    let registry = env
        .registry()
        .expect("STACK_ENV_REGISTRY: real nodes (tests/env/up)")
        .to_owned();
    let mut fixture = BenchFixture::default();
    let result = run(&env, &options, &registry, &mut fixture).await;
    for failure in fixture.remove(&env).await {
        eprintln!("bench-connect: cleanup: {failure}");
    }
    if let Err(message) = result {
        eprintln!("bench-connect: {message}");
        std::process::exit(1);
    }
}

async fn run(env: &TestEnv, options: &Options, registry: &str, fixture: &mut BenchFixture) -> Result<(), String> {
    let table = fixture.fresh_table(env, "connect").await.map_err(|e| e.to_string())?;
    let namespace = fixture.namespace.insert(unique_name("connect")).clone();
    let most = options.bursts.iter().copied().max().unwrap_or(1);
    // One Lambda sandbox per create in AWS: as many create slots as creates at once.
    let slots = (2 * most).to_string();
    let deadline = format!("{}s", START_DEADLINE.as_secs());
    let stack_settings = options.stack.api_settings(registry);
    let mut settings: Vec<(&str, &str)> = stack_settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
    settings.extend([
        ("STACK_CREATE_CONCURRENCY", slots.as_str()),
        ("STACK_START_TIMEOUT", deadline.as_str()),
        ("STACK_PROXY_SYNC", options.proxy_sync.as_str()),
    ]);
    let (api, client) = ApiProcess::spawn_healthy(&env.settings, &namespace, &table, API_KEY, &settings)
        .await
        .map_err(|e| e.to_string())?;
    println!("bench-connect: the API's warnings go to {}", api.log_path().display());
    println!(
        "bench-connect: STACK_EXPOSURE={} (STACK_PROXY_SYNC={}, {}), {} real nodes, challenge {} (cpu {}), status polled every {} ms",
        options.stack.exposure,
        options.proxy_sync,
        options.stack.settings_said(),
        env.settings.real_nodes,
        real_nodes::image(registry, "tcp"),
        options.stack.cpu,
        options.stack.poll.as_millis()
    );
    // Warm-up: the API's clients and port view, the image on every node, and DynamoDB Local's
    // JVM: after a fresh `up` it had served a few requests only, and a first 50 at once lost
    // 47 creates to 503 at their record's write (DynamoDB itself is never cold).
    let warm_up = most.min(WARM_UP_MOST).max(env.settings.real_nodes.max(1));
    let warm = burst(&client, options, registry, warm_up).await;
    delete_stacks(&client, &warm).await;
    wait_no_pods(env, &namespace).await;

    println!(
        "{:<22} {:>4}  {:<34} {:<34} {:>7} {:>8} {:>6}",
        "burst",
        "n",
        "create -> running p50/p95/p99/max",
        "create -> connected p50/p95/p99/max",
        "refused",
        "creating",
        "failed"
    );
    for _ in 0..options.rounds {
        let mut sequential = Vec::new();
        let cpu = CpuUse::now(&env.settings, api.pid());
        for _ in 0..options.sequential {
            let outcomes = burst(&client, options, registry, 1).await;
            delete_stacks(&client, &outcomes).await;
            sequential.extend(outcomes);
            wait_no_pods(env, &namespace).await;
        }
        if !sequential.is_empty() {
            report(&format!("1 at a time x{}", options.sequential), &sequential);
            println!(
                "    CPU ms per started pod: {}",
                cpu.per_pod(sequential.len(), Duration::ZERO)
            );
        }
        for &n in options.bursts.iter().filter(|&&n| n > 1) {
            let cpu = CpuUse::now(&env.settings, api.pid());
            let outcomes = burst(&client, options, registry, n).await;
            let shims = shim_cpu();
            report(&format!("{n} at once"), &outcomes);
            println!("    CPU ms per started pod: {}", cpu.per_pod(outcomes.len(), shims));
            delete_stacks(&client, &outcomes).await;
            // The next burst starts on quiet nodes, their CPU requests free again.
            wait_no_pods(env, &namespace).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    drop(api);
    Ok(())
}

/// `n` participants start at the same instant.
async fn burst(client: &ApiClient, options: &Options, registry: &str, n: usize) -> Vec<Outcome> {
    let challenges: Vec<Challenge> = (0..n)
        .map(|_| Challenge::local(registry, "tcp").with_cpu(&options.stack.cpu))
        .collect();
    start_together(client, &challenges, options.stack.poll, START_DEADLINE).await
}

/// Until the namespace's pods are gone (their kubelets stopped them).
async fn wait_no_pods(env: &TestEnv, namespace: &str) {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(env.kube.clone(), namespace);
    let until = Instant::now() + Duration::from_secs(120);
    while Instant::now() < until {
        match pods.list_metadata(&kube::api::ListParams::default()).await {
            Ok(list) if list.items.is_empty() => return,
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    eprintln!("bench-connect: pods of {namespace} still there after 120 s");
}

fn report(label: &str, outcomes: &[Outcome]) {
    let summary = |pick: fn(&Outcome) -> Option<Duration>| {
        let mut times: Vec<Duration> = outcomes.iter().filter_map(pick).collect();
        times.sort();
        spread(&times)
    };
    let refused: usize = outcomes.iter().filter(|o| o.refused_after_running > 0).count();
    let creating = outcomes.iter().filter(|o| o.creating_past_deadline).count();
    let failed: Vec<&str> = outcomes.iter().filter_map(|o| o.failed.as_deref()).collect();
    println!(
        "{label:<22} {:>4}  {:<34} {:<34} {refused:>7} {creating:>8} {:>6}",
        outcomes.len(),
        summary(|o| o.running),
        summary(|o| o.connected),
        failed.len()
    );
    for failure in failed.iter().take(3) {
        println!("    failed: {failure}");
    }
    for refusal in outcomes.iter().filter_map(|o| o.first_refusal.as_deref()).take(3) {
        println!("    refused after running: {refusal}");
    }
}
