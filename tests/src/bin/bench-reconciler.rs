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

use stack_tests::bench_fixture::{BenchError, BenchFixture, PODS_TIMEOUT, value_after, wait_all_running};
use stack_tests::env::{TestEnv, unique_name};
use stack_tests::pass_process::{PassRequest, run_pass_here, spawn_pass};
use stack_tests::proc_status::{kib_text, peak_rss_kib};
use stack_tests::reconciler::reconciler_config;
use stack_tests::seeding::{Seed, Seeder, add_seed_nodes};

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

#[tokio::main]
async fn main() -> ExitCode {
    let env = TestEnv::connect().await.expect("local environment (tests/env/up)");
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
    let stacks: usize = value_after(&args, "--stacks")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
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
    let table_name = fixture.fresh_table(env, "bench").await?;
    let namespace_name = fixture.fresh_namespace(env, "bench").await?;
    // A role of its own keeps the API's scheduler-placed pods (role=stack) off these nodes.
    let role = unique_name("bench");
    let targets = add_seed_nodes(env, fixture, &role, pods_needed).await?;

    let mix_text = if idle { "all healthy" } else { "10% expired, 2% drift" };
    println!(
        "bench-reconciler: {stacks} stacks ({mix_text}) + {} orphans on {} nodes",
        seeds.iter().filter(|s| **s == Seed::Orphan).count(),
        targets.len()
    );
    let api_config = reconciler_config(&namespace_name, &table_name, &[("STACK_NODE_ROLE", &role)]);
    let seeder = Seeder::new(env, &api_config, targets);
    let started = Instant::now();
    seeder.seed_all(&seeds).await?;
    let seeding = started.elapsed();
    println!(
        "seeding: {:.1}s ({:.0} stacks/s: {} records, {pods_needed} pods, {} services)",
        secs(seeding),
        seeds.len() as f64 / secs(seeding),
        stacks,
        seeds.len()
    );
    let started = Instant::now();
    wait_all_running(seeder.pods(), pods_needed, PODS_TIMEOUT).await?;
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
