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

use std::process::ExitCode;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::PostParams;
use stack_core::{StackId, Store, ValidationPolicy, validate};
use stack_tests::bench_fixture::{BenchError, BenchFixture, PODS_TIMEOUT, wait_all_running};
use stack_tests::env::{SimulatedNode, TestEnv, unique_name};
use stack_tests::manifests::{BENCH_POD, BENCH_PORT};
use stack_tests::pass_process::{PassRequest, run_pass_here, spawn_pass};
use stack_tests::proc_status::{kib_text, peak_rss_kib};
use stack_tests::reconciler::{reconciler_config, running_record, stack_service};

/// Objects created at once while seeding.
const SEED_CONCURRENCY: usize = 48;
/// Pods per simulated node (the kubelet default is 110; kwok nodes here take 1000).
const PODS_PER_NODE: usize = 1000;

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
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(request) = PassRequest::from_args(&args) {
        let report = match request {
            Ok(request) => run_pass_here(&env, &request).await,
            Err(err) => Err(err),
        };
        return match report {
            Ok(report) => {
                println!("{report}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("bench-reconciler: {err}");
                ExitCode::FAILURE
            }
        };
    }
    let stacks: usize = arg("--stacks").and_then(|n| n.parse().ok()).unwrap_or(1000);
    let mut fixture = BenchFixture::default();
    let result = run(&env, stacks, &mut fixture).await;
    let cleanup = Instant::now();
    for failure in fixture.remove(&env).await {
        eprintln!("cleanup: {failure}");
    }
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

async fn run(env: &TestEnv, stacks: usize, fixture: &mut BenchFixture) -> Result<(), BenchError> {
    let idle = std::env::args().any(|a| a == "--idle");
    let seeds = if idle { vec![Seed::Healthy; stacks] } else { mix(stacks) };
    let pods_needed = seeds.iter().filter(|s| **s != Seed::Drift).count();
    let table = fixture.table.insert(env.fresh_table("bench").await?);
    let table_name = table.name().to_owned();
    let namespace = env.fresh_namespace("bench").await?;
    let namespace_name = fixture.namespace.insert(namespace.name().to_owned()).clone();
    // A role of its own keeps the API's scheduler-placed pods (role=stack) off these nodes.
    let role = unique_name("bench");
    let mut targets = Vec::new();
    for i in 0..pods_needed.div_ceil(PODS_PER_NODE) {
        let ip = format!("203.0.113.{}", 100 + i % 100);
        let node = SimulatedNode::new(&format!("{role}-{i}"))
            .role(&role)
            .external_ip(&ip)
            .allocatable("64", "256Gi", &PODS_PER_NODE.to_string());
        fixture.add_node(env, &node).await?;
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
        policy: api_config.validation.clone(),
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
    wait_all_running(&seeder.pods, pods_needed, PODS_TIMEOUT).await?;
    println!(
        "all {pods_needed} pods Running after another {:.1}s",
        secs(started.elapsed())
    );
    println!("peak RSS while seeding: {}", kib_text(peak_rss_kib()));

    let pass = |label: &str| {
        PassRequest::new(label, &namespace_name, &table_name)
            // A short grace: every orphan seeded is old enough by now.
            .set("STACK_ORPHAN_GRACE", "1s")
    };
    if idle {
        spawn_pass(&pass("pass (nothing to do)").expect(0, 0, 0))?;
        return Ok(());
    }
    let expected = ExpectedWork::of(&seeds);
    println!(
        "expected of pass 1: expired {} drift {} orphans {}; deletes: kubernetes {}, dynamodb {}",
        expected.expired, expected.drift, expected.orphans, expected.kube_deletes, expected.record_deletes
    );
    spawn_pass(&pass("pass 1 (work to do)").expect(expected.expired, expected.drift, expected.orphans))?;
    spawn_pass(&pass("pass 2 (nothing to do)").expect(0, 0, 0))?;
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
        let mut hardened = validate(BENCH_POD, &[BENCH_PORT], &id, &self.policy)?;
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

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}
