//! Scale benchmark (issue 12): fills the API with stacks through the released API as its own
//! process, driven over HTTP the way platforms drive it (5 s client timeout, no retries), then
//! measures at that size. Prints numbers; asserts nothing. Needs the local environment
//! (`tests/env/up`) and release builds:
//! `cargo build --release -p stack-api -p stack-tests --bin stack-api --bin bench-scale`.
//!
//! ```text
//! bench-scale [--exposure nodeport|hostport] [--stacks 10000] [--clients 32] [--nodes N]
//!             [--port-range 31001-32767]
//! ```
//!
//! 1. Its own table, namespace, node role and simulated nodes (`--nodes`, by default 2 with
//!    node ports and, with host ports, one more than the stacks need: ceil(stacks / range
//!    ports) + 1), and the API process with `STACK_EXPOSURE`, that role, the port range and
//!    create slots and client limits for `--clients` concurrent creates.
//! 2. `--stacks` creates by `--clients` clients, each sending its next create as soon as the
//!    last one answered: creates/s, answers by class, latency of the first and the last 1,000,
//!    `running` vs `creating`; the CPU time each process of the environment, the API and the
//!    benchmark used meanwhile, in all and per stack created, and the ceiling on creates/s
//!    that the local cloud's own CPU per create sets on this machine.
//! 3. 20 more creates: what they answered (503 with Retry-After once full) and how fast.
//! 4. `GET /stats` and `GET /stacks` (one page of the default size): median of 5.
//! 5. A new API process (a Lambda sandbox starting), 3 times: the latency of its first create,
//!    which reads the cluster's port use before it picks, and the CPU the apiserver and the API
//!    spent on it.
//! 6. One reconcile pass with nothing to do, in a child process (this binary again, `--pass`):
//!    duration, list/query calls, peak RSS. When some stacks were answered `creating`, a pass
//!    that settles their status runs first.
//! 7. Duplicates: (node, host port) pairs of the pods, or node ports of the services, held by
//!    two stacks; and whether the records and the 201 answers tell what the cluster has.
//! 8. VmRSS of kube-apiserver, etcd and the API process.
//!
//! Everything it made (namespace and stacks, table, nodes) is deleted at the end, also after
//! an error or Ctrl-C.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::Method;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use serde_json::{Value, json};
use stack_core::{Manifest, StackStatus, Store};
use stack_tests::api_process::{Answer, ApiClient, ApiProcess, HEALTHY_WITHIN};
use stack_tests::bench_fixture::{BenchError, BenchFixture, PODS_TIMEOUT, list_managed};
use stack_tests::endpoints::{self, Endpoints, Exposure};
use stack_tests::env::processes::Component;
use stack_tests::env::{SimulatedNode, TestEnv, unique_name};
use stack_tests::latency::{median, percentile};
use stack_tests::manifests::{BENCH_POD, BENCH_POD_CPU_MILLI, BENCH_POD_MEMORY_MIB, BENCH_PORT};
use stack_tests::pass_process::{PassProcessError, PassReport, PassRequest, run_pass_here, spawn_pass};
use stack_tests::proc_status::{Process, cpu_time, kib_text, status_kib};

const API_KEY: &str = "bench-scale-key";
/// The API's default node-port range.
const DEFAULT_PORT_RANGE: (u16, u16) = (31001, 32767);
/// Creates sent once the benchmark's stacks are made.
const MORE_CREATES: usize = 20;
/// Latency is given for this many creates at the start and at the end.
const EDGE: usize = 1000;
/// Samples of each read.
const READ_SAMPLES: usize = 5;
/// API processes started again, one first create each.
const NEW_SANDBOXES: usize = 3;
/// Pods a simulated node takes at least: room for a whole port range of stacks on one node.
const MIN_PODS_PER_NODE: usize = 2500;
const PROGRESS_EVERY: Duration = Duration::from_secs(15);
/// The local environment's processes, whose CPU during the creates is printed.
const ENV_PROCESSES: [&str; 6] = [
    "kube-apiserver",
    "kube-scheduler",
    "kwok",
    "dynamodb",
    "etcd",
    "kube-controller-manager",
];
/// Goals of a pass with nothing to do over 10,000 stacks (issue 12).
const GOAL_PASS: Duration = Duration::from_secs(5);
const GOAL_LIST_CALLS: u64 = 30;
const GOAL_PEAK_RSS_MB: f64 = 128.0;

#[derive(Debug, Clone)]
struct Options {
    exposure: Exposure,
    stacks: usize,
    clients: usize,
    nodes: usize,
    port_range: (u16, u16),
}

impl Options {
    fn parse(args: &[String]) -> Result<Self, BenchError> {
        let usage = |why: String| {
            BenchError::Usage(format!(
                "{why}\nusage: bench-scale [--exposure nodeport|hostport] [--stacks 10000] [--clients 32] [--nodes N] [--port-range 31001-32767]"
            ))
        };
        let mut values: BTreeMap<&str, &str> = BTreeMap::new();
        let mut rest = args.iter();
        while let Some(flag) = rest.next() {
            let known = ["--exposure", "--stacks", "--clients", "--nodes", "--port-range"];
            let Some(name) = known.into_iter().find(|k| k == flag) else {
                return Err(usage(format!("unknown argument {flag}")));
            };
            let value = rest.next().ok_or_else(|| usage(format!("{flag} needs a value")))?;
            values.insert(name, value);
        }
        let number = |flag: &str, default: usize| match values.get(flag) {
            None => Ok(default),
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| usage(format!("{flag}: expected a positive number, got {v}"))),
        };
        let exposure = match values.get("--exposure") {
            None => Exposure::NodePort,
            Some(v) => Exposure::parse(v).ok_or_else(|| usage(format!("--exposure: nodeport or hostport, got {v}")))?,
        };
        let port_range = match values.get("--port-range") {
            None => DEFAULT_PORT_RANGE,
            Some(v) => v
                .split_once('-')
                .and_then(|(min, max)| Some((min.parse().ok()?, max.parse().ok()?)))
                .filter(|(min, max)| min <= max)
                .ok_or_else(|| usage(format!("--port-range: expected MIN-MAX, got {v}")))?,
        };
        let stacks = number("--stacks", 10_000)?;
        let range_ports = usize::from(port_range.1 - port_range.0) + 1;
        let default_nodes = match exposure {
            Exposure::NodePort => 2,
            Exposure::HostPort => stacks.div_ceil(range_ports) + 1,
        };
        Ok(Self {
            exposure,
            stacks,
            clients: number("--clients", 32)?,
            nodes: number("--nodes", default_nodes)?,
            port_range,
        })
    }

    fn range_ports(&self) -> usize {
        usize::from(self.port_range.1 - self.port_range.0) + 1
    }

    /// Ports the API can hand out: the range once with node ports, once per node with host ports.
    fn port_capacity(&self) -> usize {
        match self.exposure {
            Exposure::NodePort => self.range_ports(),
            Exposure::HostPort => self.range_ports() * self.nodes,
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env = match TestEnv::connect().await {
        Ok(env) => env,
        Err(err) => {
            eprintln!("bench-scale: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(request) = PassRequest::from_args(&args) {
        return pass_process(&env, request).await;
    }
    let options = match Options::parse(&args) {
        Ok(options) => options,
        Err(err) => {
            eprintln!("bench-scale: {err}");
            return ExitCode::from(2);
        }
    };
    let mut fixture = Fixture::default();
    let result = tokio::select! {
        result = run(&env, &options, &mut fixture) => result,
        _ = tokio::signal::ctrl_c() => Err(BenchError::Interrupted),
    };
    if let Err(err) = &result {
        eprintln!("bench-scale: {err}");
    }
    let cleanup = Instant::now();
    if let Some(mut api) = fixture.api.take() {
        api.stop();
    }
    for failure in fixture.made.remove(&env).await {
        eprintln!("cleanup: {failure}");
    }
    println!(
        "cleanup (API process, namespace and its pods, table, nodes): {:.1} s",
        cleanup.elapsed().as_secs_f64()
    );
    if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The child process: one pass, its numbers and how they compare with the goals.
async fn pass_process(env: &TestEnv, request: Result<PassRequest, PassProcessError>) -> ExitCode {
    match request {
        Ok(request) => match run_pass_here(env, &request).await {
            Ok(report) => {
                println!("{report}");
                // The goals are those of a pass with nothing to do.
                let s = &report.summary;
                if s.counts.expired + s.counts.drift + s.counts.orphans + s.counts.status_updates == 0 {
                    println!("{}", goals(&report));
                }
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("bench-scale {}: {err}", request.label);
                ExitCode::FAILURE
            }
        },
        Err(err) => {
            eprintln!("bench-scale: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The scheduler's API rate caps binds, so creates/s: `tests/env/up` sets it as EKS does for
/// the control plane tier in `STACK_ENV_EKS_TIER`.
fn print_scheduler_rate(env: &TestEnv) {
    let scheduler = Component::find(&env.settings, "kube-scheduler").ok();
    let flag = |name: &str| {
        scheduler
            .as_ref()
            .and_then(|s| s.flag(name))
            .unwrap_or_else(|| "default".to_owned())
    };
    println!(
        "  control plane: STACK_ENV_EKS_TIER={}, kube-scheduler --kube-api-qps={} --kube-api-burst={} (one request per bind)",
        std::env::var("STACK_ENV_EKS_TIER").unwrap_or_else(|_| "unknown".to_owned()),
        flag("kube-api-qps"),
        flag("kube-api-burst")
    );
}

fn goals(report: &PassReport) -> String {
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    let calls = report.calls.lists_and_queries();
    let rss_mb = report.peak_rss_kib.map(|kib| kib as f64 * 1.024 / 1000.0);
    format!(
        "  goals (nothing to do, 10,000 stacks): duration {:.3} s <= {} s {}; list/query calls {calls} <= {GOAL_LIST_CALLS} {}; peak RSS {} <= {GOAL_PEAK_RSS_MB} MB {}",
        report.elapsed.as_secs_f64(),
        GOAL_PASS.as_secs(),
        verdict(report.elapsed <= GOAL_PASS),
        verdict(calls <= GOAL_LIST_CALLS),
        rss_mb.map_or("unknown".to_owned(), |mb| format!("{mb:.1} MB")),
        verdict(rss_mb.is_some_and(|mb| mb <= GOAL_PEAK_RSS_MB)),
    )
}

/// What the benchmark made.
#[derive(Default)]
struct Fixture {
    made: BenchFixture,
    api: Option<ApiProcess>,
}

/// One create as the client saw it.
#[derive(Debug, Clone)]
struct Create {
    answer: Answer,
    stack_id: Option<String>,
    /// `status` of a 201.
    stack_status: Option<String>,
    node_id: String,
    node_ports: Vec<u16>,
}

impl Create {
    fn of(answer: Answer) -> Self {
        let created = answer.status == Some(201);
        let text = |key: &str| answer.json[key].as_str().map(str::to_owned);
        Self {
            stack_id: text("stack_id").filter(|_| created),
            stack_status: text("status").filter(|_| created),
            node_id: text("node_id").unwrap_or_default(),
            node_ports: answer.json["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["node_port"].as_u64().and_then(|n| u16::try_from(n).ok()))
                .collect(),
            answer,
        }
    }

    fn error(&self) -> Option<&str> {
        self.answer.json["error"].as_str()
    }
}

async fn run(env: &TestEnv, options: &Options, fixture: &mut Fixture) -> Result<(), BenchError> {
    let table = fixture
        .made
        .table
        .insert(env.fresh_table("scale").await?)
        .name()
        .to_owned();
    // The API makes the namespace on its first create.
    let namespace = fixture.made.namespace.insert(unique_name("scale")).clone();
    // A role of its own keeps other pods off these nodes and these stacks off other nodes.
    let role = unique_name("scale");
    add_nodes(env, options, &role, &mut fixture.made).await?;
    let (min, max) = (options.port_range.0.to_string(), options.port_range.1.to_string());
    // Every client has one create in flight: as many slots never shed one. The client limits
    // are those of as many Lambda processes as clients (each serves one request at a time).
    let slots = (2 * options.clients).to_string();
    let qps = (50 * options.clients).to_string();
    let burst = (100 * options.clients).to_string();
    let settings = [
        ("STACK_EXPOSURE", options.exposure.as_str()),
        ("STACK_NODE_ROLE", role.as_str()),
        ("STACK_NODEPORT_MIN", min.as_str()),
        ("STACK_NODEPORT_MAX", max.as_str()),
        ("STACK_CREATE_CONCURRENCY", slots.as_str()),
        ("K8S_CLIENT_QPS", qps.as_str()),
        ("K8S_CLIENT_BURST", burst.as_str()),
    ];
    let api = fixture.api.insert(ApiProcess::spawn(
        &env.settings,
        &namespace,
        &table,
        API_KEY,
        &settings,
    )?);
    let client = api.healthy_client(API_KEY, HEALTHY_WITHIN).await?;
    let api_pid = api.pid();
    warn_if_exposure_differs(&client, options.exposure).await;
    println!(
        "bench-scale: {} stacks by {} clients, STACK_EXPOSURE={}, ports {}-{} ({} ports), {} nodes of role {role}: room for {} stacks",
        options.stacks,
        options.clients,
        options.exposure.as_str(),
        options.port_range.0,
        options.port_range.1,
        options.range_ports(),
        options.nodes,
        options.port_capacity()
    );
    print_scheduler_rate(env);

    let started = Instant::now();
    let cpu_before = CpuUse::now(env, api_pid);
    let mut creates = create_stacks(&client, options).await;
    let created = |creates: &[Create]| creates.iter().filter(|c| c.stack_id.is_some()).count();
    cpu_before.print_since(started.elapsed(), created(&creates));
    creates.extend(create_more(&client, created(&creates)).await);
    let created = created(&creates);
    read_at_size(&client, created).await;
    creates.extend(first_creates_of_new_sandboxes(env, api, &client, created).await?);
    let api_pid = api.pid();

    let store = Store::new(env.dynamodb.clone(), &table, true);
    let pods: Api<Pod> = Api::namespaced(env.kube.clone(), &namespace);
    wait_pods_running(&pods).await?;
    let unsettled = store
        .list_stacks(Manifest::Omit)
        .await?
        .records
        .iter()
        .filter(|r| r.status != StackStatus::Running)
        .count();
    let pass = |label: &str| {
        PassRequest::new(label, &namespace, &table)
            .expect(0, 0, 0)
            .set("STACK_NODE_ROLE", &role)
            .set("STACK_EXPOSURE", options.exposure.as_str())
            .set("STACK_NODEPORT_MIN", &min)
            .set("STACK_NODEPORT_MAX", &max)
    };
    if unsettled > 0 {
        spawn_pass(&pass(&format!("pass 1 (settles {unsettled} records not `running`)")))?;
    }
    spawn_pass(&pass(&format!("pass (nothing to do, {created} stacks)")))?;

    check_endpoints(env, options.exposure, &namespace, &store, &creates).await?;
    print_memory(env, api_pid, created);
    Ok(())
}

async fn add_nodes(env: &TestEnv, options: &Options, role: &str, made: &mut BenchFixture) -> Result<(), BenchError> {
    let pods = MIN_PODS_PER_NODE.max(options.stacks.div_ceil(options.nodes) + 100);
    let cpu = (pods as u64 * BENCH_POD_CPU_MILLI).div_ceil(1000).max(64);
    let memory_gib = (pods as u64 * BENCH_POD_MEMORY_MIB).div_ceil(1024).max(256);
    let started = Instant::now();
    for i in 0..options.nodes {
        let node = SimulatedNode::new(&format!("{role}-{i}"))
            .role(role)
            .external_ip(&format!("203.0.113.{}", 100 + i % 100))
            .allocatable(&cpu.to_string(), &format!("{memory_gib}Gi"), &pods.to_string());
        made.add_node(env, &node).await?;
    }
    println!(
        "nodes: {} ({cpu} CPU, {memory_gib}Gi, {pods} pods each) ready in {:.1} s",
        options.nodes,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn create_body() -> Value {
    json!({"pod_spec": BENCH_POD, "target_port": [{"container_port": BENCH_PORT.container_port}]})
}

/// `--stacks` creates, `--clients` at a time; in the order they were sent.
async fn create_stacks(client: &ApiClient, options: &Options) -> Vec<Create> {
    let body = create_body();
    let next = AtomicUsize::new(0);
    let answered = AtomicUsize::new(0);
    let started = Instant::now();
    let worker = || async {
        let mut mine = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= options.stacks {
                return mine;
            }
            let answer = client.call(Method::POST, "/stacks", Some(&body), None).await;
            answered.fetch_add(1, Ordering::Relaxed);
            mine.push((i, Create::of(answer)));
        }
    };
    let progress = async {
        loop {
            tokio::time::sleep(PROGRESS_EVERY).await;
            let done = answered.load(Ordering::Relaxed);
            println!(
                "  ... {done} of {} answered after {:.0} s ({:.1}/s)",
                options.stacks,
                started.elapsed().as_secs_f64(),
                done as f64 / started.elapsed().as_secs_f64()
            );
        }
    };
    let workers = futures::future::join_all((0..options.clients).map(|_| worker()));
    let per_worker = tokio::select! {
        all = workers => all,
        () = progress => Vec::new(),
    };
    let wall = started.elapsed();
    let mut creates: Vec<(usize, Create)> = per_worker.into_iter().flatten().collect();
    creates.sort_by_key(|(i, _)| *i);
    let creates: Vec<Create> = creates.into_iter().map(|(_, c)| c).collect();
    report_creates(&creates, options.clients, wall);
    creates
}

fn report_creates(creates: &[Create], clients: usize, wall: Duration) {
    let secs = wall.as_secs_f64();
    let created = creates.iter().filter(|c| c.stack_id.is_some()).count();
    println!(
        "creates: {} requests by {clients} clients in {secs:.1} s: {:.1} answers/s, {:.1} stacks created/s",
        creates.len(),
        creates.len() as f64 / secs,
        created as f64 / secs
    );
    println!("  answers: {}", classes(creates));
    let latencies = |slice: &[Create]| {
        let mut took: Vec<Duration> = slice.iter().map(|c| c.answer.took).collect();
        took.sort();
        format!("p50 {} p99 {}", ms(percentile(&took, 50)), ms(percentile(&took, 99)))
    };
    let edge = EDGE.min(creates.len());
    println!(
        "  latency of the first {edge}: {}; of the last {edge}: {}; slowest {}",
        latencies(&creates[..edge]),
        latencies(&creates[creates.len() - edge..]),
        ms(creates.iter().map(|c| c.answer.took).max().unwrap_or_default())
    );
    let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
    for status in creates.iter().filter_map(|c| c.stack_status.as_deref()) {
        *statuses.entry(status).or_default() += 1;
    }
    println!(
        "  {created} created: running {}, creating {}{}",
        statuses.remove("running").unwrap_or(0),
        statuses.remove("creating").unwrap_or(0),
        if statuses.is_empty() {
            String::new()
        } else {
            format!(", other {statuses:?}")
        }
    );
    print_errors(creates);
}

fn classes(creates: &[Create]) -> String {
    let mut by_class: BTreeMap<&str, usize> = BTreeMap::new();
    for create in creates {
        *by_class.entry(create.answer.class()).or_default() += 1;
    }
    format!("{by_class:?}")
}

/// Error messages of refused creates, most frequent first.
fn print_errors(creates: &[Create]) {
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for create in creates.iter().filter(|c| c.stack_id.is_none()) {
        let what = match (create.answer.status, create.error()) {
            (Some(status), Some(error)) => format!("{status} {error}"),
            (Some(status), None) => status.to_string(),
            (None, _) => create.answer.class().to_owned(),
        };
        *errors.entry(what).or_default() += 1;
    }
    let mut errors: Vec<(String, usize)> = errors.into_iter().collect();
    errors.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    for (what, n) in errors.iter().take(5) {
        println!("  refused {n}x: {what}");
    }
}

/// A few creates once the benchmark's stacks are made (full, if the room was reached).
async fn create_more(client: &ApiClient, created: usize) -> Vec<Create> {
    let free = client.call(Method::GET, "/stats", None, None).await.json["capacity"]["node_ports"]["free"].clone();
    let body = create_body();
    let answers =
        futures::future::join_all((0..MORE_CREATES).map(|_| client.call(Method::POST, "/stacks", Some(&body), None)))
            .await;
    let creates: Vec<Create> = answers.into_iter().map(Create::of).collect();
    let took: Vec<Duration> = creates.iter().map(|c| c.answer.took).collect();
    let mut retry_after: BTreeMap<String, usize> = BTreeMap::new();
    for create in &creates {
        let value = create.answer.retry_after.clone().unwrap_or_else(|| "none".to_owned());
        *retry_after.entry(value).or_default() += 1;
    }
    println!(
        "{MORE_CREATES} more creates at {created} stacks (node ports free per /stats: {free}): answers {}; Retry-After {retry_after:?}; latency min {} median {} max {}",
        classes(&creates),
        ms(took.iter().min().copied().unwrap_or_default()),
        ms(median(&took)),
        ms(took.iter().max().copied().unwrap_or_default()),
    );
    print_errors(&creates);
    creates
}

/// The first create of each of [`NEW_SANDBOXES`] new API processes: each reads the cluster's
/// port use (in hostport mode, the host ports of every pod) before it picks.
async fn first_creates_of_new_sandboxes(
    env: &TestEnv,
    api: &mut ApiProcess,
    client: &ApiClient,
    created: usize,
) -> Result<Vec<Create>, BenchError> {
    let apiserver = Component::find(&env.settings, "kube-apiserver")?.pid();
    let body = create_body();
    let mut creates = Vec::new();
    let mut each = Vec::new();
    for _ in 0..NEW_SANDBOXES {
        api.restart()?;
        client.wait_healthy(HEALTHY_WITHIN).await?;
        let spent = |pid| cpu_time(pid).unwrap_or_default();
        let before = (spent(apiserver), spent(api.pid()));
        let create = Create::of(client.call(Method::POST, "/stacks", Some(&body), None).await);
        each.push(format!(
            "{} in {} (CPU: apiserver {}, API {})",
            create.answer.status.map_or("no answer".to_owned(), |s| s.to_string()),
            ms(create.answer.took),
            ms(spent(apiserver).saturating_sub(before.0)),
            ms(spent(api.pid()).saturating_sub(before.1)),
        ));
        creates.push(create);
    }
    println!(
        "first create of a new API process at {created} stacks (reads the port use first): {}",
        each.join("; ")
    );
    Ok(creates)
}

/// `GET /stats` and one default page of `GET /stacks`, a few times each.
async fn read_at_size(client: &ApiClient, created: usize) {
    for path in ["/stats", "/stacks"] {
        let mut answers = Vec::new();
        for _ in 0..READ_SAMPLES {
            answers.push(client.call(Method::GET, path, None, None).await);
        }
        let took: Vec<Duration> = answers.iter().map(|a| a.took).collect();
        let mut by_class: BTreeMap<&str, usize> = BTreeMap::new();
        for answer in &answers {
            *by_class.entry(answer.class()).or_default() += 1;
        }
        let last = answers.last().map(|a| &a.json).unwrap_or(&Value::Null);
        let shown = match path {
            "/stats" => stats_text(last),
            _ => format!(
                "{} stacks in the page, next_cursor {}",
                last["stacks"].as_array().map_or(0, Vec::len),
                if last["next_cursor"].is_string() {
                    "present"
                } else {
                    "absent"
                }
            ),
        };
        println!(
            "GET {path} at {created} stacks: median of {READ_SAMPLES} {} (min {}, max {}), answers {by_class:?}; {shown}",
            ms(median(&took)),
            ms(took.iter().min().copied().unwrap_or_default()),
            ms(took.iter().max().copied().unwrap_or_default()),
        );
    }
}

/// The API tells its exposure in `/stats` (`capacity.node_ports.exposure`); one that does not
/// tell it exposes through node ports only.
async fn warn_if_exposure_differs(client: &ApiClient, wanted: Exposure) {
    let stats = client.call(Method::GET, "/stats", None, None).await;
    let told = stats.json["capacity"]["node_ports"]["exposure"]
        .as_str()
        .map(str::to_owned);
    let actual = told.as_deref().map_or(Some(Exposure::NodePort), Exposure::parse);
    if actual != Some(wanted) {
        println!(
            "WARNING: STACK_EXPOSURE={} but the API's /stats tells exposure {} (an API without STACK_EXPOSURE uses node ports)",
            wanted.as_str(),
            told.as_deref().unwrap_or("(none)")
        );
    }
}

/// `total_stacks` and `capacity.node_ports`: total/used/free, and whatever else it has.
fn stats_text(stats: &Value) -> String {
    let ports = &stats["capacity"]["node_ports"];
    let mut text = format!(
        "total_stacks {}, node_ports total {} used {} free {}",
        stats["total_stacks"], ports["total"], ports["used"], ports["free"]
    );
    for (key, value) in ports.as_object().into_iter().flatten() {
        if !["total", "used", "free"].contains(&key.as_str()) {
            text.push_str(&format!(", {key} {value}"));
        }
    }
    text
}

/// Waits until every pod of the namespace runs, so that the records can be in sync.
async fn wait_pods_running(pods: &Api<Pod>) -> Result<(), BenchError> {
    let started = Instant::now();
    loop {
        let all = list_managed(pods).await?;
        let running = all
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == all.len() {
            println!(
                "all {running} pods Running ({:.1} s after the reads)",
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if started.elapsed() >= PODS_TIMEOUT {
            println!("only {running} of {} pods Running; passing anyway", all.len());
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// No two stacks on one endpoint, and records and answers telling what the cluster has.
async fn check_endpoints(
    env: &TestEnv,
    exposure: Exposure,
    namespace: &str,
    store: &Store,
    creates: &[Create],
) -> Result<(), BenchError> {
    let pods = list_managed(&Api::<Pod>::namespaced(env.kube.clone(), namespace)).await?;
    let services = list_managed(&Api::<Service>::namespaced(env.kube.clone(), namespace)).await?;
    let (cluster, source) = match exposure {
        Exposure::HostPort => (endpoints::of_pods(&pods), "(node, hostPort) pairs of the pods"),
        Exposure::NodePort => (endpoints::of_services(&services), "nodePorts of the services"),
    };
    let found = endpoints::duplicates(exposure, &cluster);
    println!(
        "duplicates: {} among {} {source} ({} pods, {} services{})",
        found.duplicates,
        found.endpoints,
        pods.len(),
        services.len(),
        if found.unplaced > 0 {
            format!(", {} host ports not placed yet", found.unplaced)
        } else {
            String::new()
        }
    );
    if !found.examples.is_empty() {
        println!("  held twice or more: {:?}", found.examples);
    }
    let records: Endpoints = store
        .list_stacks(Manifest::Omit)
        .await?
        .records
        .iter()
        .map(|r| {
            let ports = r.ports.iter().map(|p| p.node_port);
            (r.stack_id.to_string(), endpoints::claimed(exposure, &r.node_id, ports))
        })
        .collect();
    let answers: Endpoints = creates
        .iter()
        .filter_map(|c| {
            let id = c.stack_id.clone()?;
            Some((
                id,
                endpoints::claimed(exposure, &c.node_id, c.node_ports.iter().copied()),
            ))
        })
        .collect();
    for (what, claims) in [("records", &records), ("201 answers", &answers)] {
        let agreement = endpoints::agreement(claims, &cluster);
        println!(
            "  {what} vs cluster: {} stacks, agree {}, differ {}, told before the pod had a node {}, no object in the cluster {}; cluster stacks not among them {}",
            agreement.claimed,
            agreement.agree,
            agreement.differ,
            agreement.told_before_placement,
            agreement.missing_in_cluster,
            agreement.unclaimed_in_cluster
        );
    }
    Ok(())
}

/// CPU time used so far by the environment's processes, the API and this benchmark: on a
/// shared machine, CPU per create varies far less from run to run than creates/s.
struct CpuUse(Vec<(String, u32, Duration)>);

/// The API process's name in [`CpuUse`].
const API_PROCESS: &str = "stack-api";
/// This benchmark's name in [`CpuUse`].
const BENCH_PROCESS: &str = "bench-scale";

impl CpuUse {
    fn now(env: &TestEnv, api_pid: u32) -> Self {
        let components = ENV_PROCESSES.iter().filter_map(|name| {
            let component = Component::find(&env.settings, name).ok()?;
            Some(((*name).to_owned(), component.pid()))
        });
        let ours = [
            (API_PROCESS.to_owned(), api_pid),
            (BENCH_PROCESS.to_owned(), std::process::id()),
        ];
        Self(
            components
                .chain(ours)
                .map(|(name, pid)| (name, pid, cpu_time(pid).unwrap_or_default()))
                .collect(),
        )
    }

    /// What each process used since this snapshot, most first, against what the cores had.
    fn print_since(&self, wall: Duration, created: usize) {
        let mut used: Vec<(&str, Duration)> = self
            .0
            .iter()
            .map(|(name, pid, before)| {
                let now = cpu_time(*pid).unwrap_or(*before);
                (name.as_str(), now.saturating_sub(*before))
            })
            .collect();
        used.sort_by_key(|(_, spent)| std::cmp::Reverse(*spent));
        let total: Duration = used.iter().map(|(_, spent)| *spent).sum();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let had = wall.as_secs_f64() * cores as f64;
        let share = |spent: Duration| 100.0 * spent.as_secs_f64() / total.as_secs_f64().max(f64::EPSILON);
        let per_create_ms = |spent: Duration| spent.as_secs_f64() * 1000.0 / created.max(1) as f64;
        let each: Vec<String> = used
            .iter()
            .map(|(name, spent)| format!("{name} {:.1} s ({:.0} %)", spent.as_secs_f64(), share(*spent)))
            .collect();
        println!(
            "  CPU during the creates: {:.1} s of the {had:.1} s that {cores} cores had ({:.0} %), {:.1} ms per stack created: {}",
            total.as_secs_f64(),
            100.0 * total.as_secs_f64() / had.max(f64::EPSILON),
            per_create_ms(total),
            each.join(", ")
        );
        // What the simulated cloud (control plane, kubelets, DynamoDB) costs per create is this
        // machine's ceiling, not the API's: in AWS none of it runs beside the clients.
        let spent_by = |wanted: &str| {
            used.iter()
                .filter(|(name, _)| *name == wanted)
                .map(|(_, spent)| *spent)
                .sum::<Duration>()
        };
        let api = spent_by(API_PROCESS);
        let cloud = total.saturating_sub(api).saturating_sub(spent_by(BENCH_PROCESS));
        println!(
            "  the local cloud alone (all but the API and this benchmark): {:.1} ms per stack created, so {cores} cores create at most {:.1}/s whatever the API does; the API: {:.2} ms per stack created",
            per_create_ms(cloud),
            cores as f64 * 1000.0 / per_create_ms(cloud).max(f64::EPSILON),
            per_create_ms(api)
        );
    }
}

fn print_memory(env: &TestEnv, api_pid: u32, created: usize) {
    let rss = |name: &str| {
        Component::find(&env.settings, name)
            .ok()
            .and_then(|c| status_kib(Process::Pid(c.pid()), "VmRSS"))
    };
    println!(
        "VmRSS at {created} stacks: kube-apiserver {}, etcd {}, stack-api {}",
        kib_text(rss("kube-apiserver")),
        kib_text(rss("etcd")),
        kib_text(status_kib(Process::Pid(api_pid), "VmRSS"))
    );
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}
