//! Benchmark of one reconcile pass against the local environment (run `tests/env/up` first).
//!
//! Seeds N stacks straight into DynamoDB and the apiserver: records through the Store, pods as
//! the validator hardens them (so records and pods have their real size) but bound straight to
//! simulated nodes of the benchmark's own, and headless services owned by the pods (5,000
//! NodePort services would not fit the node-port range). 10% are expired, 2% drifted (pod
//! missing), plus 1% orphans (pod and service, no record). Then runs one pass
//! and a second one with nothing left to do, printing durations, calls by kind, peak RSS and
//! the summaries. Everything it made (table, namespace, nodes) is deleted at the end.
//!
//! Each pass runs in a child process (this binary again, `--pass`) that does nothing else, as
//! in a Lambda, so that its peak RSS is the pass's own and not the seeding's.
//!
//! With `--idle` every seeded stack is healthy and only the pass with nothing to do runs, over
//! exactly N stacks.
//!
//! `cargo run --release -p stack-tests --bin bench-reconciler -- --stacks 1000 [--idle]`

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::{ListParams, PostParams};
use stack_core::model::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, Protocol, StackId, TargetPort};
use stack_core::reconcile::{PassError, Reconciler, Summary, run_pass};
use stack_core::store::{Store, StoreError};
use stack_core::validate::{self, Rejection, ValidationPolicy};
use stack_tests::api::kube_config;
use stack_tests::env::{EnvError, SimulatedNode, TestEnv, TestNamespace, TestTable, nodes, unique_name};
use stack_tests::reconciler::{add_schedulable_node, reconciler_config, running_record, stack_service, stacks_over};

/// A small challenge, so that thousands fit on a few simulated nodes.
const BENCH_POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: bench
  labels:
    challenge: bench
spec:
  containers:
    - name: app
      image: registry.example/ctf/app:1
      ports:
        - containerPort: 1337
      resources:
        limits:
          cpu: 10m
          memory: 16Mi
"#;
const BENCH_PORT: TargetPort = TargetPort {
    container_port: 1337,
    protocol: Protocol::Tcp,
};

/// Objects created at once while seeding.
const SEED_CONCURRENCY: usize = 48;
/// Pods per simulated node (the kubelet default is 110; kwok nodes here take 1000).
const PODS_PER_NODE: usize = 1000;
const RUNNING_TIMEOUT: Duration = Duration::from_secs(900);
/// The Lambda's longest possible invocation.
const PASS_BUDGET: Duration = Duration::from_secs(900);

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Pass(#[from] PassError),
    #[error(transparent)]
    Config(#[from] stack_core::config::ConfigError),
    #[error("the benchmark manifest was refused: {0}")]
    Manifest(#[from] Rejection),
    #[error("{0}")]
    Timeout(String),
    #[error("running the pass process: {0}")]
    Process(#[from] std::io::Error),
}

/// What one seeded stack is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seed {
    Healthy,
    Expired,
    /// Record and service, pod gone.
    Drift,
    /// Pod and service, no record.
    Orphan,
}

fn mix(stacks: usize) -> Vec<Seed> {
    // Orphans first: by the time the pass runs they are older than the grace period.
    let orphans = std::iter::repeat_n(Seed::Orphan, stacks / 100);
    let records = (0..stacks).map(|i| match i % 100 {
        0..10 => Seed::Expired,
        10..12 => Seed::Drift,
        _ => Seed::Healthy,
    });
    orphans.chain(records).collect()
}

/// The value following `flag` on the command line.
fn arg(flag: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != flag).nth(1)
}

#[tokio::main]
async fn main() -> ExitCode {
    let env = match TestEnv::connect().await {
        Ok(env) => env,
        Err(err) => {
            eprintln!("bench-reconciler: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(label) = arg("--pass") {
        return match pass_process(&env, &label).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("bench-reconciler {label}: {err}");
                ExitCode::FAILURE
            }
        };
    }
    let stacks: usize = arg("--stacks").and_then(|n| n.parse().ok()).unwrap_or(1000);
    let mut fixture = Fixture::default();
    let result = run(&env, stacks, &mut fixture).await;
    let cleanup = Instant::now();
    fixture.remove(&env).await;
    println!(
        "cleanup (namespace, its pods, table, nodes): {:.1}s",
        secs(cleanup.elapsed())
    );
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bench-reconciler: {err}");
            ExitCode::FAILURE
        }
    }
}

/// What the benchmark made, to be removed however it ends.
#[derive(Default)]
struct Fixture {
    table: Option<TestTable>,
    namespace: Option<TestNamespace>,
    nodes: Vec<String>,
}

impl Fixture {
    async fn remove(&mut self, env: &TestEnv) {
        if let Some(namespace) = self.namespace.take() {
            let pods: Api<Pod> = namespace.api();
            report_cleanup("namespace", namespace.delete().await);
            // kwok finishes the pods' deletion only while their nodes exist; without them the
            // pod garbage collector takes minutes.
            if let Err(err) = wait_no_pods(&pods).await {
                eprintln!("cleanup: {err}");
            }
        }
        if let Some(table) = self.table.take() {
            report_cleanup("table", table.delete().await);
        }
        for node in self.nodes.drain(..) {
            report_cleanup("node", nodes::delete_node(&env.kube, &node).await);
        }
    }
}

async fn wait_no_pods(pods: &Api<Pod>) -> Result<(), BenchError> {
    let deadline = Instant::now() + RUNNING_TIMEOUT;
    while !pods.list(&ListParams::default().limit(1)).await?.items.is_empty() {
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout(
                "pods of the benchmark namespace still there".into(),
            ));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(())
}

fn report_cleanup(what: &str, result: Result<(), EnvError>) {
    if let Err(err) = result {
        eprintln!("cleanup of {what} failed: {err}");
    }
}

async fn run(env: &TestEnv, stacks: usize, fixture: &mut Fixture) -> Result<(), BenchError> {
    let idle = std::env::args().any(|a| a == "--idle");
    let seeds = if idle { vec![Seed::Healthy; stacks] } else { mix(stacks) };
    let pods_needed = seeds.iter().filter(|s| **s != Seed::Drift).count();
    let table = fixture.table.insert(env.fresh_table("bench").await?);
    let table_name = table.name().to_owned();
    let namespace = fixture.namespace.insert(env.fresh_namespace("bench").await?);
    let namespace_name = namespace.name().to_owned();
    // A role of its own keeps the API's scheduler-placed pods (role=stack) off these nodes.
    let role = unique_name("bench");
    let mut targets = Vec::new();
    for i in 0..pods_needed.div_ceil(PODS_PER_NODE) {
        let ip = format!("203.0.113.{}", 100 + i % 100);
        let node = SimulatedNode::new(&format!("{role}-{i}"))
            .role(&role)
            .external_ip(&ip)
            .allocatable("64", "256Gi", &PODS_PER_NODE.to_string());
        fixture.nodes.push(node.name.clone());
        add_schedulable_node(env, &node).await?;
        targets.push((node.name, ip));
    }

    let mix_text = if idle { "all healthy" } else { "10% expired, 2% drift" };
    println!(
        "bench-reconciler: {stacks} stacks ({mix_text}) + {} orphans on {} nodes",
        seeds.iter().filter(|s| **s == Seed::Orphan).count(),
        targets.len()
    );
    let api_config = reconciler_config(&namespace_name, &table_name, &[("STACK_NODE_ROLE", &role)]);
    let seeder = Seeder {
        policy: ValidationPolicy::from_config(&api_config)?,
        pods: Api::namespaced(env.kube.clone(), &namespace_name),
        services: Api::namespaced(env.kube.clone(), &namespace_name),
        store: Store::new(env.dynamodb.clone(), &table_name, true),
        namespace: namespace_name.clone(),
        nodes: targets,
    };
    let started = Instant::now();
    let seeded: Vec<Result<(), BenchError>> = futures::stream::iter(seeds.iter().enumerate())
        .map(|(i, seed)| seeder.seed(i, *seed))
        .buffer_unordered(SEED_CONCURRENCY)
        .collect()
        .await;
    seeded.into_iter().collect::<Result<Vec<()>, _>>()?;
    let seeding = started.elapsed();
    println!(
        "seeding: {:.1}s ({:.0} stacks/s: {} records, {pods_needed} pods, {} services)",
        secs(seeding),
        seeds.len() as f64 / secs(seeding),
        stacks,
        seeds.len()
    );
    let started = Instant::now();
    wait_all_running(&seeder.pods, pods_needed).await?;
    println!(
        "all {pods_needed} pods Running after another {:.1}s",
        secs(started.elapsed())
    );
    println!("peak RSS while seeding: {}", rss_text());

    if idle {
        spawn_pass("pass (nothing to do)", &namespace_name, &table_name, "0,0,0")?;
        return Ok(());
    }
    let expected = ExpectedWork::of(&seeds);
    println!(
        "expected of pass 1: expired {} drift {} orphans {}; deletes: kubernetes {}, dynamodb {}",
        expected.expired, expected.drift, expected.orphans, expected.kube_deletes, expected.record_deletes
    );
    let work = format!("{},{},{}", expected.expired, expected.drift, expected.orphans);
    spawn_pass("pass 1 (work to do)", &namespace_name, &table_name, &work)?;
    spawn_pass("pass 2 (nothing to do)", &namespace_name, &table_name, "0,0,0")?;
    Ok(())
}

/// Runs `--pass` in a child process and waits for it; its output goes straight to ours.
fn spawn_pass(label: &str, namespace: &str, table: &str, expected_work: &str) -> Result<(), BenchError> {
    let status = std::process::Command::new(std::env::current_exe()?)
        .args([
            "--pass",
            label,
            "--namespace",
            namespace,
            "--table",
            table,
            "--expect",
            expected_work,
        ])
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(BenchError::Timeout(format!("{label} failed: {status}")))
    }
}

/// The child process: one pass over the seeded namespace and table, then its numbers.
async fn pass_process(env: &TestEnv, label: &str) -> Result<(), BenchError> {
    let (Some(namespace), Some(table)) = (arg("--namespace"), arg("--table")) else {
        return Err(BenchError::Timeout("--pass needs --namespace and --table".into()));
    };
    let counts = Counts::default();
    let kube = counted_kube(env, &counts).await?;
    let dynamodb = counted_dynamodb(&env.dynamodb, &counts);
    // A short grace: every orphan seeded is old enough by now.
    let config = reconciler_config(&namespace, &table, &[("STACK_ORPHAN_GRACE", "1s")]);
    let reconciler = Reconciler::new(stacks_over(config, kube, dynamodb));
    let summary = measured_pass(&reconciler, &counts, label).await?;
    let done = format!("{},{},{}", summary.expired, summary.drift, summary.orphans);
    if arg("--expect").is_some_and(|expected| expected != done) {
        println!("  WARNING: the pass did not do the expected work (expired,drift,orphans = {done})");
    }
    Ok(())
}

struct Seeder {
    policy: ValidationPolicy,
    pods: Api<Pod>,
    services: Api<Service>,
    store: Store,
    namespace: String,
    nodes: Vec<(String, String)>,
}

impl Seeder {
    async fn seed(&self, i: usize, seed: Seed) -> Result<(), BenchError> {
        let id = StackId::generate();
        let (node, ip) = &self.nodes[i % self.nodes.len()];
        let create = PostParams::default();
        // The pod and pod_spec the API would make, bound to a node without the scheduler.
        let mut hardened = validate::validate(BENCH_POD, &[BENCH_PORT], &id, &self.policy)?;
        if let Some(spec) = hardened.pod.spec.as_mut() {
            spec.node_name = Some(node.clone());
        }
        let owner = match seed {
            Seed::Drift => None,
            _ => Some(self.pods.create(&create, &hardened.pod).await?),
        };
        self.services
            .create(&create, &stack_service(&id, owner.as_ref()))
            .await?;
        let ttl = match seed {
            Seed::Orphan => return Ok(()),
            Seed::Expired => Timestamp::now() - SignedDuration::from_mins(1),
            Seed::Healthy | Seed::Drift => Timestamp::now() + SignedDuration::from_hours(2),
        };
        let mut record = running_record(&id, &self.namespace, node, Some(ip), ttl);
        record.pod_spec = hardened.yaml;
        self.store.put_new_stack(&record).await?;
        Ok(())
    }
}

/// Polls until kwok has every seeded pod Running, so that the records (which say `running`)
/// are in sync and the second pass truly has nothing to do.
async fn wait_all_running(pods: &Api<Pod>, wanted: usize) -> Result<(), BenchError> {
    let deadline = Instant::now() + RUNNING_TIMEOUT;
    loop {
        let running = count_running(pods).await?;
        if running >= wanted {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout(format!("{running} of {wanted} pods Running")));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn count_running(pods: &Api<Pod>) -> Result<usize, kube::Error> {
    let mut params = ListParams::default()
        .labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"))
        .limit(500);
    let mut running = 0;
    loop {
        let page = pods.list(&params).await?;
        running += page
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(running),
        }
    }
}

/// Runs one pass, printing its duration, calls by kind, peak RSS and summary.
async fn measured_pass(reconciler: &Reconciler, counts: &Counts, label: &str) -> Result<Summary, BenchError> {
    let before = counts.snapshot();
    let started = Instant::now();
    let summary = run_pass(reconciler, Instant::now() + PASS_BUDGET).await?;
    let elapsed = started.elapsed();
    let calls = counts.snapshot().minus(&before);
    println!("{label}: {:.3}s", secs(elapsed));
    println!(
        "  kubernetes calls: {} (list {}, delete {}, other {})",
        calls.kube_total(),
        calls.kube_list,
        calls.kube_delete,
        calls.kube_other
    );
    let mut operations: Vec<_> = calls.dynamodb.iter().collect();
    operations.sort();
    let listed: Vec<String> = operations.iter().map(|(op, n)| format!("{op} {n}")).collect();
    println!(
        "  dynamodb calls: {} ({})",
        calls.dynamodb.values().sum::<u64>(),
        listed.join(", ")
    );
    let queries = calls.dynamodb.get("Query").copied().unwrap_or(0);
    println!(
        "  list/query calls: {} (kubernetes {}, dynamodb {queries})",
        calls.kube_list + queries,
        calls.kube_list
    );
    println!("  peak RSS of the pass process: {}", rss_text());
    println!("  summary: {}", serde_json::to_string(&summary).unwrap_or_default());
    Ok(summary)
}

struct ExpectedWork {
    expired: usize,
    drift: usize,
    orphans: usize,
    kube_deletes: usize,
    record_deletes: usize,
}

impl ExpectedWork {
    fn of(seeds: &[Seed]) -> Self {
        let count = |kind| seeds.iter().filter(|s| **s == kind).count();
        let (expired, drift, orphan_stacks) = (count(Seed::Expired), count(Seed::Drift), count(Seed::Orphan));
        Self {
            expired,
            drift,
            // Pod and service of an orphan are two orphans.
            orphans: orphan_stacks * 2,
            kube_deletes: expired * 2 + drift + orphan_stacks * 2,
            record_deletes: expired + drift,
        }
    }
}

/// Requests by kind: Kubernetes by HTTP method, DynamoDB by operation.
#[derive(Default, Clone)]
struct Counts {
    kube_list: Arc<AtomicU64>,
    kube_delete: Arc<AtomicU64>,
    kube_other: Arc<AtomicU64>,
    dynamodb: Arc<Mutex<HashMap<String, u64>>>,
}

struct CountsSnapshot {
    kube_list: u64,
    kube_delete: u64,
    kube_other: u64,
    dynamodb: HashMap<String, u64>,
}

impl Counts {
    fn snapshot(&self) -> CountsSnapshot {
        CountsSnapshot {
            kube_list: self.kube_list.load(Ordering::Relaxed),
            kube_delete: self.kube_delete.load(Ordering::Relaxed),
            kube_other: self.kube_other.load(Ordering::Relaxed),
            dynamodb: self.dynamodb.lock().map(|m| m.clone()).unwrap_or_default(),
        }
    }
}

impl CountsSnapshot {
    fn minus(&self, before: &CountsSnapshot) -> CountsSnapshot {
        let mut dynamodb = self.dynamodb.clone();
        for (op, n) in &before.dynamodb {
            if let Some(after) = dynamodb.get_mut(op) {
                *after -= n;
            }
        }
        dynamodb.retain(|_, n| *n > 0);
        CountsSnapshot {
            kube_list: self.kube_list - before.kube_list,
            kube_delete: self.kube_delete - before.kube_delete,
            kube_other: self.kube_other - before.kube_other,
            dynamodb,
        }
    }

    fn kube_total(&self) -> u64 {
        self.kube_list + self.kube_delete + self.kube_other
    }
}

async fn counted_kube(env: &TestEnv, counts: &Counts) -> Result<kube::Client, BenchError> {
    let counts = counts.clone();
    let layer = tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
        let counter = match *request.method() {
            http::Method::GET => &counts.kube_list,
            http::Method::DELETE => &counts.kube_delete,
            _ => &counts.kube_other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        request
    });
    Ok(kube::client::ClientBuilder::try_from(kube_config(env).await)?
        .with_layer(&layer)
        .build())
}

#[derive(Debug)]
struct OperationCounter(Arc<Mutex<HashMap<String, u64>>>);

impl Intercept for OperationCounter {
    fn name(&self) -> &'static str {
        "OperationCounter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // `X-Amz-Target: DynamoDB_20120810.Query` names the operation.
        let operation = context
            .request()
            .headers()
            .get("x-amz-target")
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or("unknown")
            .to_owned();
        if let Ok(mut counts) = self.0.lock() {
            *counts.entry(operation).or_default() += 1;
        }
        Ok(())
    }
}

fn counted_dynamodb(client: &aws_sdk_dynamodb::Client, counts: &Counts) -> aws_sdk_dynamodb::Client {
    let config = client
        .config()
        .to_builder()
        .interceptor(OperationCounter(counts.dynamodb.clone()))
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// Peak resident set size of this process so far (`VmHWM` in `/proc/self/status`).
fn rss_text() -> String {
    let peak_kib = std::fs::read_to_string("/proc/self/status").ok().and_then(|status| {
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok()
    });
    peak_kib
        .map(|kib| format!("{:.1} MiB ({:.1} MB)", kib as f64 / 1024.0, kib as f64 * 1.024 / 1000.0))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}
