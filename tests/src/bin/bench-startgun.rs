//! The start gun (issue 28): every participant of an event clicks "start" at once, on the real
//! nodes, with challenge images of a realistic size served by a registry that behaves like a
//! real one (`stack_tests::throttled_registry` in front of the local registry).
//!
//! ```text
//! cargo build --release -p stack-api -p stack-tests --bin stack-api --bin bench-startgun
//! target/release/bench-startgun [--stacks N] [--images 120:2,250:3,400:4] [--cpu 75m]
//!                               [--bandwidth-mb 20] [--total-bandwidth-mb 0] [--latency-ms 30]
//!                               [--scenarios cold,warm,prepulled[,join]] [--poll-ms 100]
//!                               [--exposure hostport|nodeport] [--isolation-check on|off]
//!                               [--cpu-limits on|off]
//!                               [--reconcile-every-s 60]
//! ```
//!
//! The images (`tests/env/bench-images`: `stack-env/tcp:1` with layers of random data) are
//! built once and pushed to the environment's registry when missing; the stacks name them at
//! the throttled registry (`STACK_ENV_SLOW_REGISTRY`), so every pull pays its bandwidth and
//! latency. N creates at once (default: as many as the real nodes' free CPU holds at `--cpu`),
//! spread over the challenges, each client polling status as a platform does and connecting
//! to `node_public_ip:port` when told `running`. Scenarios, each a line:
//! - `cold`: the challenge images removed from every real node first;
//! - `warm`: the images on every node (the baseline);
//! - `prepulled`: the images removed, declared to the provisioner's pre-pull (`PUT /prepull`),
//!   the burst once `GET /prepull` says go (skipped while the API has no such route);
//! - `join` (asked for only: the node stays until `tests/env/down`): the images on the nodes and
//!   declared to the pre-pull, one node more than the nodes hold, and a node joins
//!   (`tests/env/add-node`) as the burst starts, with the startup taint the provisioner lifts
//!   once it has every declared image; printed: when it registered, was Ready and untainted,
//!   and whether a stack on it waited for a pull.
//!
//! Printed per scenario: create → `running` and → first successful read p50/p95/p99/max, stacks
//! said `running` that refused (goal 0), still `creating` at the deadline, failed, participants
//! whose pod pulled its image (the kubelet's `Pulling` event), the slowest participant and what
//! it waited for, the registry's traffic and the CPU per started pod per component.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use http::Method;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::{Value, json};
use stack_tests::api::prepull_namespace;
use stack_tests::api_process::{ApiClient, ApiProcess};
use stack_tests::bench_fixture::{BenchArgs, BenchFixture, RealNodeStacks};
use stack_tests::challenges::Challenge;
use stack_tests::env::{TestEnv, real_nodes, unique_name};
use stack_tests::latency::{percentile, spread};
use stack_tests::node_cpu::{CpuUse, shim_cpu};
use stack_tests::platform_journey::{Journey as Outcome, delete_stacks, start_together};
use stack_tests::reconciler::TestReconciler;
use stack_tests::throttled_registry::{Throttle, ThrottledRegistry};

const API_KEY: &str = "bench-startgun-key";
/// How long a participant waits before counting as still `creating` (the API's
/// `STACK_START_TIMEOUT` is longer: a cold pull through a slow registry takes minutes).
const START_DEADLINE: Duration = Duration::from_secs(300);
const API_START_TIMEOUT: &str = "10m";
/// How long the pre-pull may take to say go.
const PREPULL_DEADLINE: Duration = Duration::from_secs(600);
/// How long participants of the `join` scenario wait (the joining node may never be untainted).
const JOIN_DEADLINE: Duration = Duration::from_secs(150);
/// The taint a joining node registers with (`tests/env/add-node`).
const JOIN_TAINT: &str = "stack-provisioner.io/images-pending";

struct Options {
    stacks: Option<usize>,
    images: Vec<String>,
    throttle: Throttle,
    scenarios: Vec<String>,
    stack: RealNodeStacks,
    /// How often the join scenario runs a reconcile pass (EventBridge's schedule: every minute).
    reconcile_every: Duration,
}

impl Options {
    fn parse() -> Self {
        let args = BenchArgs::from_env();
        let rate = |mb: u64| (mb > 0).then_some(mb * 1_000_000);
        Self {
            stacks: args.parsed("--stacks"),
            images: args.list("--images", "120:2,250:3,400:4"),
            throttle: Throttle {
                per_connection: rate(args.number("--bandwidth-mb", 20)),
                total: rate(args.number("--total-bandwidth-mb", 0)),
                latency: Duration::from_millis(args.number("--latency-ms", 30)),
            },
            scenarios: args.list("--scenarios", "cold,warm,prepulled"),
            stack: RealNodeStacks::parse(&args, "75m"),
            reconcile_every: Duration::from_secs(args.number("--reconcile-every-s", 60)),
        }
    }
}

/// The environment this benchmark runs against.
struct Bench<'a> {
    env: &'a TestEnv,
    options: &'a Options,
    client: ApiClient,
    api_pid: u32,
    namespace: String,
    /// The challenges' images, as the stacks name them (at the throttled registry).
    images: Vec<String>,
    registry: &'a ThrottledRegistry,
    /// ExternalIP → node name of the real nodes.
    nodes: HashMap<String, String>,
    /// The reconciler over the API's namespace and table: what takes the startup taint off.
    reconciler: TestReconciler,
}

#[tokio::main]
async fn main() {
    let options = Options::parse();
    let env = TestEnv::connect().await.expect("local environment (tests/env/up)");
    let mut fixture = BenchFixture::default();
    let result = run(&env, &options, &mut fixture).await;
    for failure in fixture.remove(&env).await {
        eprintln!("bench-startgun: cleanup: {failure}");
    }
    if let Err(message) = result {
        eprintln!("bench-startgun: {message}");
        std::process::exit(1);
    }
}

async fn run(env: &TestEnv, options: &Options, fixture: &mut BenchFixture) -> Result<(), String> {
    let registry = env
        .registry()
        .ok_or("STACK_ENV_REGISTRY: real nodes (tests/env/up)")?
        .to_owned();
    let slow =
        env.settings.slow_registry.clone().ok_or(
            "STACK_ENV_SLOW_REGISTRY is not set: an environment started before it existed (tests/env/down, up)",
        )?;
    if env.settings.real_nodes == 0 {
        return Err("no real nodes (STACK_ENV_REAL_NODES)".into());
    }
    let built = Instant::now();
    let pushed = build_images(&options.images)?;
    println!(
        "bench-startgun: {} images ready in {:.1} s: {}",
        pushed.len(),
        built.elapsed().as_secs_f64(),
        pushed.join(", ")
    );
    let images: Vec<String> = pushed.iter().map(|image| image.replacen(&registry, &slow, 1)).collect();
    let parse = |address: &str| address.parse::<SocketAddr>().map_err(|e| format!("{address}: {e}"));
    let throttled = ThrottledRegistry::start(parse(&slow)?, parse(&registry)?, options.throttle)
        .await
        .map_err(|e| format!("listening on {slow}: {e}"))?;

    let table = fixture.fresh_table(env, "startgun").await.map_err(|e| e.to_string())?;
    let namespace = fixture.namespace.insert(unique_name("startgun")).clone();
    let nodes = real_node_addresses(env).await?;
    let stacks = match options.stacks {
        Some(n) => n,
        None => room_on_real_nodes(env, &options.stack.cpu).await?,
    };
    // One Lambda sandbox per create in AWS: as many create slots as creates at once.
    let slots = (2 * stacks).to_string();
    let allowlist = format!("{registry}/,{slow}/");
    // The pre-pull's helper copies busybox into its pods (the main branch's pre-pull).
    let helper = real_nodes::image(&registry, "busybox");
    let mut real = options.stack.api_settings(&registry);
    for (name, value) in &mut real {
        if *name == "STACK_IMAGE_ALLOWLIST" {
            value.clone_from(&allowlist);
        }
    }
    let prepull_namespace = prepull_namespace(&namespace);
    let mut settings: Vec<(&str, &str)> = real.iter().map(|(k, v)| (*k, v.as_str())).collect();
    if options.scenarios.iter().any(|s| s == "join") {
        // The stacks the nodes cannot hold wait for the joining node, as with an autoscaler.
        settings.push(("STACK_ON_UNSCHEDULABLE", "wait"));
    }
    settings.extend([
        ("STACK_CREATE_CONCURRENCY", slots.as_str()),
        ("STACK_START_TIMEOUT", API_START_TIMEOUT),
        ("STACK_PREPULL_HELPER_IMAGE", helper.as_str()),
        ("STACK_PREPULL_NAMESPACE", prepull_namespace.as_str()),
        // As deployed: the images of running stacks stay on every node.
        ("STACK_PREPULL_IN_USE", "true"),
    ]);
    let reconciler = TestReconciler::new(env, &namespace, &table, &settings).await;
    let (api, client) = ApiProcess::spawn_healthy(&env.settings, &namespace, &table, API_KEY, &settings)
        .await
        .map_err(|e| e.to_string())?;
    println!("bench-startgun: the API's warnings go to {}", api.log_path().display());
    let bench = Bench {
        env,
        options,
        client,
        api_pid: api.pid(),
        namespace,
        images,
        registry: &throttled,
        nodes,
        reconciler,
    };
    println!(
        "bench-startgun: {stacks} stacks at once on {} real nodes (cpu {}), STACK_EXPOSURE={}, {}, status polled every {} ms; registry {}",
        env.settings.real_nodes,
        options.stack.cpu,
        options.stack.exposure,
        options.stack.settings_said(),
        options.stack.poll.as_millis(),
        options.throttle.describe()
    );
    // Warm-up: the API's clients and port view, a small stack per node.
    let warm = bench
        .burst_of(&real_nodes::image(&registry, "tcp"), env.settings.real_nodes)
        .await;
    bench.end(&warm).await;

    println!(
        "{:<10} {:>4}  {:<30} {:<30} {:>7} {:>8} {:>6} {:>7}",
        "scenario",
        "n",
        "create->running p50/95/99/max",
        "create->connected p50/95/99/max",
        "refused",
        "creating",
        "failed",
        "pulled"
    );
    let mut p99s: BTreeMap<String, Duration> = BTreeMap::new();
    for scenario in &options.scenarios {
        let ready = match scenario.as_str() {
            "cold" => bench.remove_images().await.map(|()| true),
            "warm" => bench.pull_images().await.map(|()| true),
            "prepulled" => match bench.remove_images().await {
                Ok(()) => bench.prepull().await,
                Err(e) => Err(e),
            },
            "join" => bench.join(stacks).await.map(|()| false),
            other => Err(format!("unknown scenario {other} (cold, warm, prepulled, join)")),
        };
        match ready {
            Ok(true) => {}
            Ok(false) => continue,
            Err(message) => {
                println!("{scenario:<10} not run: {message}");
                continue;
            }
        }
        if let Some(p99) = bench.scenario(scenario, stacks).await {
            p99s.insert(scenario.clone(), p99);
        }
    }
    if let (Some(warm), Some(prepulled)) = (p99s.get("warm"), p99s.get("prepulled")) {
        println!(
            "pre-pulled p99 / warm p99: {:.2} (goal <= 1.2)",
            prepulled.as_secs_f64() / warm.as_secs_f64().max(0.001)
        );
    }
    if options.scenarios.iter().any(|s| s == "prepulled") {
        // Nothing declared any more: the pre-pull's DaemonSet goes.
        bench
            .client
            .call(Method::PUT, "/prepull", Some(&json!({ "images": [] })), None)
            .await;
    }
    drop(api);
    // The pre-pull's namespace goes with the benchmark's (the fixture removes that one).
    let _ = Api::<Namespace>::all(env.kube.clone())
        .delete(&prepull_namespace, &DeleteParams::background())
        .await;
    Ok(())
}

/// `tests/env/bench-images`: the images at the environment's registry, built and pushed when
/// missing.
fn build_images(specs: &[String]) -> Result<Vec<String>, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("env/bench-images");
    let output = Command::new(&script)
        .args(specs)
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

async fn real_nodes_list(env: &TestEnv) -> Result<Vec<Node>, String> {
    let (key, value) = real_nodes::REAL_NODE_LABEL;
    Api::<Node>::all(env.kube.clone())
        .list(&ListParams::default().labels(&format!("{key}={value}")))
        .await
        .map(|list| list.items)
        .map_err(|e| format!("list the real nodes: {e}"))
}

async fn real_node_addresses(env: &TestEnv) -> Result<HashMap<String, String>, String> {
    Ok(real_nodes_list(env)
        .await?
        .into_iter()
        .filter_map(|node| {
            let name = node.metadata.name.clone()?;
            let ip = node
                .status?
                .addresses?
                .into_iter()
                .find(|a| a.type_ == "ExternalIP")?
                .address;
            Some((ip, name))
        })
        .collect())
}

/// How many stacks of `cpu` the real nodes' free CPU holds (allocatable less what their pods
/// request): the most a burst can start at once.
async fn room_on_real_nodes(env: &TestEnv, cpu: &str) -> Result<usize, String> {
    let per_stack = milli(cpu)
        .filter(|m| *m > 0)
        .ok_or(format!("--cpu {cpu}: not a CPU quantity"))?;
    let pods = Api::<Pod>::all(env.kube.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("list pods: {e}"))?;
    let mut room = 0;
    for node in real_nodes_list(env).await? {
        let name = node.metadata.name.clone().unwrap_or_default();
        let allocatable = node
            .status
            .and_then(|s| s.allocatable)
            .and_then(|a| a.get("cpu").and_then(|q| milli(&q.0)))
            .unwrap_or(0);
        let requested: u64 = pods
            .items
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()))
            .filter(|p| {
                !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
            })
            .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter()))
            .filter_map(|c| {
                c.resources
                    .as_ref()?
                    .requests
                    .as_ref()?
                    .get("cpu")
                    .and_then(|q| milli(&q.0))
            })
            .sum();
        room += allocatable.saturating_sub(requested) / per_stack;
    }
    Ok(room as usize)
}

/// Millicores of a CPU quantity (`75m`, `2`, `1.5`).
fn milli(quantity: &str) -> Option<u64> {
    match quantity.strip_suffix('m') {
        Some(m) => m.parse().ok(),
        None => quantity.parse::<f64>().ok().map(|cores| (cores * 1000.0) as u64),
    }
}

impl Bench<'_> {
    /// Runs one burst of `n` over the challenges, prints its line, ends its stacks; the p99 of
    /// create → connected.
    async fn scenario(&self, name: &str, n: usize) -> Option<Duration> {
        let cpu = CpuUse::now(&self.env.settings, self.api_pid);
        let (connections, bytes) = self.registry.traffic();
        let outcomes = self.burst(n, START_DEADLINE).await;
        let shims = shim_cpu();
        let pulls = self.pulls().await;
        let pulled = waited_for_a_pull(&outcomes, &pulls);
        let p99 = report(name, &outcomes, pulled);
        let (connections_now, bytes_now) = self.registry.traffic();
        println!(
            "    registry: {} connections, {:.0} MB served; CPU ms per started pod: {}",
            connections_now - connections,
            (bytes_now - bytes) as f64 / 1e6,
            cpu.per_pod(outcomes.len(), shims)
        );
        self.print_slowest_and_end(&outcomes, &pulls).await;
        p99
    }

    /// `n` participants start at the same instant, participant i on challenge i mod images.
    async fn burst(&self, n: usize, deadline: Duration) -> Vec<Outcome> {
        let mut outcomes = self.burst_over(&self.images, n, deadline).await;
        for (i, outcome) in outcomes.iter_mut().enumerate() {
            outcome.challenge = i % self.images.len();
        }
        outcomes
    }

    /// `n` stacks of one image (the warm-up).
    async fn burst_of(&self, image: &str, n: usize) -> Vec<Outcome> {
        self.burst_over(&[image.to_owned()], n, START_DEADLINE).await
    }

    /// `n` participants at once, participant i on image i mod images.
    async fn burst_over(&self, images: &[String], n: usize, deadline: Duration) -> Vec<Outcome> {
        let challenges: Vec<Challenge> = (0..n)
            .map(|i| Challenge::of_image(&images[i % images.len()], 8080).with_cpu(&self.options.stack.cpu))
            .collect();
        start_together(&self.client, &challenges, self.options.stack.poll, deadline).await
    }

    /// Deletes the stacks and waits until their pods are gone, so the next burst starts on quiet
    /// nodes with their CPU free.
    async fn end(&self, outcomes: &[Outcome]) {
        delete_stacks(&self.client, outcomes).await;
        let pods: Api<Pod> = Api::namespaced(self.env.kube.clone(), &self.namespace);
        let until = Instant::now() + Duration::from_secs(300);
        loop {
            match pods.list_metadata(&ListParams::default()).await {
                Ok(list) if list.items.is_empty() => break,
                left if Instant::now() > until => {
                    // The next burst would find their CPU taken: say so.
                    let left = left.map_or("some".to_owned(), |l| l.items.len().to_string());
                    println!("    {left} pods still there 300 s after their deletes");
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    /// `crictl` against real node `index`'s containerd (`tests/env/crictl`, which builds it
    /// the first time).
    fn crictl(&self, index: usize, args: &[&str]) -> Result<std::process::Output, String> {
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("env/crictl"))
            .arg(index.to_string())
            .args(args)
            .output()
            .map_err(|e| format!("crictl: {e}"))
    }

    /// Removes the challenge images from every real node (containerd's CRI, as the kubelet's
    /// image garbage collection does), and checks they are gone.
    async fn remove_images(&self) -> Result<(), String> {
        for index in 1..=self.env.settings.real_nodes {
            // The exited containers of deleted pods (the kubelet collects them within a minute)
            // hold their image's layers as snapshots: a pull would find them unpacked and fetch
            // nothing. Gone with their sandboxes, the image's removal removes its layers.
            let listed = |args: &[&str]| -> Result<Vec<String>, String> {
                let output = self.crictl(index, args)?;
                Ok(String::from_utf8_lossy(&output.stdout)
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect())
            };
            let exited = listed(&["ps", "-a", "--state", "exited", "-q"])?;
            if !exited.is_empty() {
                let mut args = vec!["rm"];
                args.extend(exited.iter().map(String::as_str));
                self.crictl(index, &args)?;
            }
            let stopped = listed(&["pods", "--state", "notready", "-q"])?;
            if !stopped.is_empty() {
                let mut args = vec!["rmp"];
                args.extend(stopped.iter().map(String::as_str));
                self.crictl(index, &args)?;
            }
            for image in &self.images {
                self.crictl(index, &["rmi", image])?;
                if self.crictl(index, &["inspecti", image])?.status.success() {
                    return Err(format!("{image} is still on {}", real_nodes::node_name(index)));
                }
            }
        }
        Ok(())
    }

    /// Pulls every challenge image on every real node that lacks it.
    async fn pull_images(&self) -> Result<(), String> {
        for index in 1..=self.env.settings.real_nodes {
            for image in &self.images {
                if self.crictl(index, &["inspecti", image])?.status.success() {
                    continue;
                }
                let pulled = self.crictl(index, &["pull", image])?;
                if !pulled.status.success() {
                    return Err(format!(
                        "crictl pull {image} on {}: {}",
                        real_nodes::node_name(index),
                        String::from_utf8_lossy(&pulled.stderr)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Declares the images to the provisioner's pre-pull and waits until it says go; `false`
    /// (the scenario skipped) when the API has no pre-pull.
    async fn prepull(&self) -> Result<bool, String> {
        let started = Instant::now();
        let declared = self
            .client
            .call(Method::PUT, "/prepull", Some(&json!({ "images": self.images })), None)
            .await;
        match declared.status {
            Some(200..=202) => {}
            Some(404 | 405) => {
                println!(
                    "{:<10} skipped: PUT /prepull answered {} (this API has no pre-pull yet)",
                    "prepulled",
                    declared.status.unwrap_or_default()
                );
                return Ok(false);
            }
            _ => return Err(format!("PUT /prepull answered {}: {}", declared.class(), declared.json)),
        }
        let mut last = Value::Null;
        while started.elapsed() < PREPULL_DEADLINE {
            let report = self.client.call(Method::GET, "/prepull", None, None).await;
            if report.status == Some(200) {
                if report.json["go"].as_bool() == Some(true) {
                    println!(
                        "    pre-pull said go {:.1} s after the declaration: {}",
                        started.elapsed().as_secs_f64(),
                        report.json["summary"].as_str().unwrap_or("")
                    );
                    return Ok(true);
                }
                last = report.json;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Err(format!(
            "the pre-pull did not say go within {} s: {last}",
            PREPULL_DEADLINE.as_secs()
        ))
    }

    /// A node joins as the burst starts: the images warm on the nodes there are and declared to
    /// the pre-pull, one node's worth of stacks more than they hold.
    async fn join(&self, stacks: usize) -> Result<(), String> {
        self.pull_images().await?;
        let prepull = self
            .client
            .call(Method::PUT, "/prepull", Some(&json!({ "images": self.images })), None)
            .await;
        let declared = matches!(prepull.status, Some(200..=202));
        let existing = real_nodes_list(self.env).await?.len();
        // What the nodes there are hold, whatever --stacks says, and one node's worth more:
        // those stacks can only run on the joining node.
        let room = room_on_real_nodes(self.env, &self.options.stack.cpu).await?.max(stacks);
        let n = room + room / existing.max(1);
        let name = real_nodes::node_name(existing + 1);
        println!(
            "    join: {n} stacks for {existing} nodes and {name}, joining now; images {}",
            if declared {
                "declared to the pre-pull"
            } else {
                "not declared (PUT /prepull: no pre-pull in this API), so nothing lifts the node's taint"
            }
        );
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("env/add-node");
        let start = Instant::now();
        let adding = tokio::process::Command::new(&script).output();
        let watching = watch_joining(self.env, &name, start);
        let cpu = CpuUse::now(&self.env.settings, self.api_pid);
        // Reconcile passes on their schedule meanwhile: one of them takes the taint off.
        let passes = async {
            loop {
                tokio::time::sleep(self.options.reconcile_every).await;
                self.reconciler.pass().await;
            }
        };
        let work = async { tokio::join!(self.burst(n, JOIN_DEADLINE), adding, watching) };
        let (outcomes, added, seen) = tokio::select! {
            done = work => done,
            () = passes => return Err("the reconcile loop ended".into()),
        };
        let shims = shim_cpu();
        match added {
            Ok(output) if output.status.success() => {}
            Ok(output) => println!(
                "    add-node failed: {}",
                String::from_utf8_lossy(&output.stderr)
                    .lines()
                    .last()
                    .unwrap_or_default()
            ),
            Err(e) => println!("    add-node: {e}"),
        }
        let pulls = self.pulls().await;
        let pulled = waited_for_a_pull(&outcomes, &pulls);
        report("join", &outcomes, pulled);
        println!("    CPU ms per started pod: {}", cpu.per_pod(outcomes.len(), shims));
        let at = |t: Option<Duration>| t.map_or("never".to_owned(), |t| format!("+{:.1} s", t.as_secs_f64()));
        let on_new: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.node_ip.is_some() && o.node_ip == seen.ip)
            .collect();
        let pulled_on_new = waited_for_a_pull(on_new.iter().copied(), &pulls);
        println!(
            "    {name}: registered {}, Ready {}, untainted {} (from the burst's start); {} stacks ran on it, {} of them waited for a pull",
            at(seen.registered),
            at(seen.ready),
            at(seen.untainted),
            on_new.len(),
            pulled_on_new
        );
        self.print_slowest_and_end(&outcomes, &pulls).await;
        Ok(())
    }

    /// The participant who connected last and what it waited for; then the burst's stacks end.
    async fn print_slowest_and_end(&self, outcomes: &[Outcome], pulls: &HashMap<String, Pull>) {
        if let Some(slowest) = outcomes
            .iter()
            .filter(|o| o.connected.is_some())
            .max_by_key(|o| o.connected)
        {
            println!("    slowest: {}", self.explain(slowest, pulls).await);
        }
        self.end(outcomes).await;
    }

    /// What the kubelets said about each stack's pod: whether it pulled its image and how long
    /// that took (the `Pulled` event's message), by pod name (the stack id).
    async fn pulls(&self) -> HashMap<String, Pull> {
        let events: Api<Event> = Api::namespaced(self.env.kube.clone(), &self.namespace);
        let mut pulls: HashMap<String, Pull> = HashMap::new();
        let Ok(list) = events.list(&ListParams::default()).await else {
            return pulls;
        };
        let challenge = |message: &str| self.images.iter().any(|image| message.contains(image.as_str()));
        for event in list.items {
            let (Some(pod), Some(reason), Some(message)) = (
                event.involved_object.name,
                event.reason.as_deref(),
                event.message.as_deref(),
            ) else {
                continue;
            };
            if !challenge(message) {
                continue;
            }
            let time = event
                .first_timestamp
                .map(|t| t.0)
                .or_else(|| event.event_time.map(|t| t.0));
            let pull = pulls.entry(pod).or_default();
            match reason {
                "Pulling" => {
                    pull.pulled = true;
                    pull.pulling_at = time;
                }
                "Pulled" => {
                    pull.message = Some(message.to_owned());
                    pull.pulled_at = time;
                }
                _ => {}
            }
        }
        pulls
    }

    /// The slowest participant: who, where, and what it waited for.
    async fn explain(&self, outcome: &Outcome, pulls: &HashMap<String, Pull>) -> String {
        let seconds = |d: Option<Duration>| d.map_or("-".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()));
        let id = outcome.stack_id.as_deref().unwrap_or("-");
        // A node that joined during the run is not in the map: its address stands for it.
        let node = outcome
            .node_ip
            .as_ref()
            .map_or("-", |ip| self.nodes.get(ip).unwrap_or(ip).as_str());
        let image = self.images[outcome.challenge].rsplit('/').next().unwrap_or_default();
        let waited = match pulls.get(id) {
            Some(Pull {
                pulled: true,
                message: Some(message),
                ..
            }) => format!("its image pull: {}", after_image(message)),
            Some(Pull { pulled: true, .. }) => "its image pull (no Pulled event yet)".to_owned(),
            _ => "no pull (image present): the start itself".to_owned(),
        };
        format!(
            "{id} ({image}) on {node}: running at {}, connected at {}; waited for {waited}; {}",
            seconds(outcome.running),
            seconds(outcome.connected),
            self.timeline(id, pulls.get(id)).await
        )
    }

    /// The pod's steps as the cluster recorded them (whole seconds), from its creation: when it
    /// was scheduled, its isolation check (the init containers) done, its image pulled, Ready.
    async fn timeline(&self, id: &str, pull: Option<&Pull>) -> String {
        let pods: Api<Pod> = Api::namespaced(self.env.kube.clone(), &self.namespace);
        let Ok(Some(pod)) = pods.get_opt(id).await else {
            return "pod gone".to_owned();
        };
        let Some(created) = pod.metadata.creation_timestamp.as_ref().map(|t| t.0) else {
            return "pod without a creation time".to_owned();
        };
        let at = |t: jiff::Timestamp| format!("+{:.0} s", t.duration_since(created).as_secs_f64());
        let mut steps: Vec<(jiff::Timestamp, String)> = Vec::new();
        for condition in pod.status.iter().flat_map(|s| s.conditions.iter().flatten()) {
            let what = match condition.type_.as_str() {
                "PodScheduled" => "scheduled",
                "Initialized" => "isolation check done",
                "Ready" => "Ready",
                _ => continue,
            };
            if let (Some(time), "True") = (&condition.last_transition_time, condition.status.as_str()) {
                steps.push((time.0, what.to_owned()));
            }
        }
        if let Some(pull) = pull {
            steps.extend(pull.pulling_at.map(|t| (t, "pull started".to_owned())));
            steps.extend(pull.pulled_at.map(|t| (t, "pulled".to_owned())));
        }
        steps.sort();
        let steps: Vec<String> = steps.into_iter().map(|(t, what)| format!("{what} {}", at(t))).collect();
        format!("pod: {}", steps.join(", "))
    }
}

/// When a joining node registered, was Ready, lost its startup taint, and its address.
#[derive(Debug, Default)]
struct Joined {
    registered: Option<Duration>,
    ready: Option<Duration>,
    untainted: Option<Duration>,
    ip: Option<String>,
}

/// Polls the joining node `name` every 200 ms until it is untainted or the join deadline.
async fn watch_joining(env: &TestEnv, name: &str, start: Instant) -> Joined {
    let nodes: Api<Node> = Api::all(env.kube.clone());
    let mut seen = Joined::default();
    while start.elapsed() < JOIN_DEADLINE {
        if let Ok(Some(node)) = nodes.get_opt(name).await {
            let now = Some(start.elapsed());
            seen.registered = seen.registered.or(now);
            let status = node.status.as_ref();
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if ready {
                seen.ready = seen.ready.or(now);
            }
            seen.ip = seen.ip.take().or_else(|| {
                status?
                    .addresses
                    .as_ref()?
                    .iter()
                    .find(|a| a.type_ == "ExternalIP")
                    .map(|a| a.address.clone())
            });
            let tainted = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == JOIN_TAINT));
            if ready && seen.ip.is_some() && !tainted {
                seen.untainted = now;
                return seen;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen
}

/// What the kubelet said about one pod's challenge image.
#[derive(Debug, Default)]
struct Pull {
    /// A `Pulling` event: the image was not on the node.
    pulled: bool,
    /// The `Pulled` event's message (`Successfully pulled image "..." in 12.3s (20.1s
    /// including waiting). Image size: ...`).
    message: Option<String>,
    pulling_at: Option<jiff::Timestamp>,
    pulled_at: Option<jiff::Timestamp>,
}

/// The `Pulled` message from after the image's name: its durations and size.
fn after_image(message: &str) -> &str {
    message.rsplit_once("\" ").map_or(message, |(_, rest)| rest)
}

/// How many of `outcomes` had their pod pull its image (a `Pulling` event).
fn waited_for_a_pull<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>, pulls: &HashMap<String, Pull>) -> usize {
    outcomes
        .into_iter()
        .filter(|o| {
            o.stack_id
                .as_ref()
                .is_some_and(|id| pulls.get(id).is_some_and(|p| p.pulled))
        })
        .count()
}

/// Prints the scenario's line; the p99 of create → connected.
fn report(label: &str, outcomes: &[Outcome], pulled: usize) -> Option<Duration> {
    let sorted = |pick: fn(&Outcome) -> Option<Duration>| {
        let mut times: Vec<Duration> = outcomes.iter().filter_map(pick).collect();
        times.sort();
        times
    };
    let running = sorted(|o| o.running);
    let connected = sorted(|o| o.connected);
    let refused = outcomes.iter().filter(|o| o.refused_after_running > 0).count();
    let creating = outcomes.iter().filter(|o| o.creating_past_deadline).count();
    let failed: Vec<&str> = outcomes.iter().filter_map(|o| o.failed.as_deref()).collect();
    println!(
        "{label:<10} {:>4}  {:<30} {:<30} {refused:>7} {creating:>8} {:>6} {pulled:>7}",
        outcomes.len(),
        spread(&running),
        spread(&connected),
        failed.len()
    );
    for failure in failed.iter().take(3) {
        println!("    failed: {failure}");
    }
    for o in outcomes.iter().filter(|o| o.refused_after_running > 0).take(3) {
        println!(
            "    said running, then refused {} time(s): {} ({}), first: {}; connected at {}",
            o.refused_after_running,
            o.stack_id.as_deref().unwrap_or("-"),
            o.node_ip.as_deref().unwrap_or("-"),
            o.first_refusal.as_deref().unwrap_or("-"),
            o.connected
                .map_or("never".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()))
        );
    }
    (!connected.is_empty()).then(|| percentile(&connected, 99))
}
