//! Fault benchmark: the released API as its own process, driven over HTTP the way platforms
//! drive it (5 s client timeout, no retries), with faults injected. Prints numbers; asserts
//! nothing (the fault tests do). Needs the local environment (`tests/env/up`) and release
//! builds of the API and the benchmark:
//! `cargo build --release -p stack-api -p stack-tests --bin stack-api --bin bench-faults`.
//!
//! ```text
//! bench-faults burst  [--creates 200]             one burst of concurrent creates
//! bench-faults idle   [--rounds 10]               16 creates, an idle gap of 0.5-10 s, 16 deletes
//! bench-faults rounds [--rounds 200] [--seed N]   creates, reads and deletes with one random fault
//!                                                 each (API killed, apiserver or DynamoDB stopped,
//!                                                 idle gap), then one reconcile pass, then checks
//! ```

use std::collections::{BTreeMap, HashSet};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use http::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use stack_core::{Manifest, StackId};
use stack_tests::api::WEB_POD;
use stack_tests::api_process::{Answer, ApiClient, ApiProcess, HEALTHY_WITHIN};
use stack_tests::env::processes::Component;
use stack_tests::env::{TestEnv, TestTable, unique_name};
use stack_tests::latency::percentile;
use stack_tests::reconciler::TestReconciler;

const API_KEY: &str = "bench-faults-key";

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str, default: u64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let mode = args.first().map_or("rounds", String::as_str);
    let bench = match Bench::start().await {
        Ok(bench) => bench,
        Err(why) => {
            eprintln!("bench-faults: {why}");
            return ExitCode::FAILURE;
        }
    };
    let bench = match mode {
        "burst" => {
            bench.burst(flag("--creates", 200) as usize).await;
            bench
        }
        "idle" => {
            bench.idle(flag("--rounds", 10) as usize).await;
            bench
        }
        "rounds" => bench.rounds(flag("--rounds", 200) as usize, flag("--seed", 1)).await,
        other => {
            eprintln!("bench-faults: unknown mode {other} (burst, idle, rounds)");
            bench.finish().await;
            return ExitCode::from(2);
        }
    };
    bench.finish().await;
    ExitCode::SUCCESS
}

#[derive(Debug, Default)]
struct Tally {
    by_class: BTreeMap<&'static str, usize>,
    slowest: Duration,
}

impl Tally {
    fn add(&mut self, answer: &Answer) {
        *self.by_class.entry(answer.class()).or_default() += 1;
        if answer.status.is_some() {
            self.slowest = self.slowest.max(answer.took);
        }
    }

    fn print(&self, label: &str) {
        println!(
            "{label}: answers {:?}, slowest answer {:?}",
            self.by_class, self.slowest
        );
    }
}

/// The API process and what it works on.
struct Bench {
    env: TestEnv,
    table: TestTable,
    namespace: String,
    api: ApiProcess,
    client: ApiClient,
    reconciler: TestReconciler,
}

impl Bench {
    async fn start() -> Result<Self, String> {
        let env = TestEnv::connect().await.map_err(|e| e.to_string())?;
        let table = env.fresh_table("faults").await.map_err(|e| e.to_string())?;
        let namespace = unique_name("faults");
        let api =
            ApiProcess::spawn(&env.settings, &namespace, table.name(), API_KEY, &[]).map_err(|e| e.to_string())?;
        let client = ApiClient::new(api.addr(), API_KEY);
        let reconciler = TestReconciler::new(&env, &namespace, table.name(), &[("STACK_ORPHAN_GRACE", "1s")]).await;
        let bench = Self {
            env,
            table,
            namespace,
            api,
            client,
            reconciler,
        };
        bench
            .client
            .wait_healthy(HEALTHY_WITHIN)
            .await
            .map_err(|e| e.to_string())?;
        Ok(bench)
    }

    async fn restart_api(&mut self) {
        if let Err(why) = self.api.restart() {
            eprintln!("bench-faults: restart failed: {why}");
        }
        if let Err(why) = self.client.wait_healthy(HEALTHY_WITHIN).await {
            eprintln!("bench-faults: {why}");
        }
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>, key: Option<&str>) -> Answer {
        self.client.call(method, path, body.as_ref(), key).await
    }

    async fn create(&self, key: Option<&str>) -> Answer {
        let body = json!({"pod_spec": WEB_POD, "target_port": [{"container_port": 80}]});
        self.call(Method::POST, "/stacks", Some(body), key).await
    }

    /// Stacks, pods and services that exist now.
    async fn inventory(&self) -> Inventory {
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(self.env.kube.clone(), &self.namespace);
        let services: kube::Api<k8s_openapi::api::core::v1::Service> =
            kube::Api::namespaced(self.env.kube.clone(), &self.namespace);
        let live = |meta: &kube::api::ObjectMeta| meta.deletion_timestamp.is_none();
        let params = kube::api::ListParams::default();
        let names = |items: Vec<kube::api::ObjectMeta>| -> HashSet<String> {
            items.into_iter().filter(live).filter_map(|m| m.name).collect()
        };
        let store = self.reconciler.stacks.store();
        Inventory {
            pods: names(
                pods.list(&params)
                    .await
                    .map(|l| l.items.into_iter().map(|p| p.metadata).collect())
                    .unwrap_or_default(),
            ),
            services: names(
                services
                    .list(&params)
                    .await
                    .map(|l| l.items.into_iter().map(|s| s.metadata).collect())
                    .unwrap_or_default(),
            ),
            records: store
                .list_stacks(Manifest::Omit)
                .await
                .unwrap_or_default()
                .records
                .into_iter()
                .map(|r| r.stack_id.to_string())
                .collect(),
            manifests: store.count_manifests().await.unwrap_or_default(),
            claims: store
                .list_idempotency_claims()
                .await
                .unwrap_or_default()
                .into_iter()
                .map(|(_, claim)| claim.stack_id.to_string())
                .collect(),
        }
    }

    async fn delete_all(&self, ids: impl Iterator<Item = String>) {
        let deletes =
            ids.map(|id| async move { self.call(Method::DELETE, &format!("/stacks/{id}"), None, None).await });
        futures::future::join_all(deletes).await;
    }

    async fn burst(&self, creates: usize) {
        let started = Instant::now();
        let answers = futures::future::join_all((0..creates).map(|i| {
            let key = format!("burst-{i}");
            async move { self.create(Some(&key)).await }
        }))
        .await;
        let wall = started.elapsed();
        let mut tally = Tally::default();
        let mut acknowledged = HashSet::new();
        let mut ports = Vec::new();
        for answer in &answers {
            tally.add(answer);
            if answer.status == Some(201) {
                acknowledged.insert(answer.json["stack_id"].as_str().unwrap_or_default().to_owned());
                ports.extend(
                    answer.json["ports"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p["node_port"].as_u64()),
                );
            }
        }
        let unique_ports: HashSet<u64> = ports.iter().copied().collect();
        let inventory = self.inventory().await;
        let mut latencies: Vec<Duration> = answers.iter().map(|a| a.took).collect();
        latencies.sort();
        println!("burst of {creates} concurrent creates in {wall:?}");
        tally.print("burst");
        println!(
            "client latency p50 {:?}, p99 {:?}, max {:?}; answers >= 4 s: {}",
            percentile(&latencies, 50),
            percentile(&latencies, 99),
            latencies.last().copied().unwrap_or_default(),
            latencies.iter().filter(|t| **t >= Duration::from_secs(4)).count()
        );
        println!(
            "after the burst, before any reconcile pass: {} acknowledged; leftovers {}; duplicate node ports {}",
            acknowledged.len(),
            inventory.leftovers(&acknowledged, &HashSet::new()),
            ports.len() - unique_ports.len()
        );
        self.delete_all(acknowledged.into_iter()).await;
    }

    async fn idle(&self, rounds: usize) {
        let mut tally = Tally::default();
        let mut rng = StdRng::seed_from_u64(7);
        for round in 0..rounds {
            let created = futures::future::join_all((0..16).map(|_| self.create(None))).await;
            created.iter().for_each(|a| tally.add(a));
            let gap = Duration::from_millis(rng.random_range(500..=10_000));
            tokio::time::sleep(gap).await;
            let ids: Vec<String> = created
                .iter()
                .filter_map(|a| a.json["stack_id"].as_str().map(str::to_owned))
                .collect();
            let deletes = ids
                .iter()
                .map(|id| async move { self.call(Method::DELETE, &format!("/stacks/{id}"), None, None).await });
            let deleted = futures::future::join_all(deletes).await;
            deleted.iter().for_each(|a| tally.add(a));
            let errors = deleted
                .iter()
                .chain(&created)
                .filter(|a| a.status.is_none_or(|s| s >= 500))
                .count();
            println!("idle round {round}: gap {gap:?}, answers >= 500 or missing: {errors}");
        }
        tally.print(&format!("idle ({rounds} rounds of 16 creates, a gap, 16 deletes)"));
    }

    async fn rounds(mut self, rounds: usize, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut tally = Tally::default();
        let mut alive: Vec<String> = Vec::new();
        let (mut lost, mut leftovers, mut unanswered_complete) = (0, 0, 0);
        let mut faults: BTreeMap<&'static str, usize> = BTreeMap::new();
        let started = Instant::now();
        for round in 0..rounds {
            let fault = ["kill-api", "stop-apiserver", "stop-dynamodb", "idle-gap"][rng.random_range(0..4)];
            *faults.entry(fault).or_default() += 1;
            let fault_at = Duration::from_millis(rng.random_range(0..2000));
            let fault_for = Duration::from_millis(rng.random_range(1000..4000));
            // Reads and deletes of stacks made in earlier rounds, creates of new ones.
            let to_delete: Vec<String> = alive.drain(..alive.len().min(8)).collect();
            let to_read: Vec<String> = alive.iter().take(8).cloned().collect();
            let offsets: Vec<Duration> = (0..40)
                .map(|_| Duration::from_millis(rng.random_range(0..2500)))
                .collect();
            let this = &self;
            let creates = (0..24).map(|i| {
                let at = offsets[i];
                let key = format!("round-{round}-{i}");
                async move {
                    tokio::time::sleep(at).await;
                    this.create(Some(&key)).await
                }
            });
            let deletes = to_delete.iter().enumerate().map(|(i, id)| {
                let at = offsets[24 + i];
                async move {
                    tokio::time::sleep(at).await;
                    (
                        id.clone(),
                        this.call(Method::DELETE, &format!("/stacks/{id}"), None, None).await,
                    )
                }
            });
            let reads = to_read.iter().enumerate().map(|(i, id)| {
                let at = offsets[32 + i];
                async move {
                    tokio::time::sleep(at).await;
                    this.call(Method::GET, &format!("/stacks/{id}/status"), None, None)
                        .await
                }
            });
            let traffic = async {
                tokio::join!(
                    futures::future::join_all(creates),
                    futures::future::join_all(deletes),
                    futures::future::join_all(reads)
                )
            };
            let inject = async {
                tokio::time::sleep(fault_at).await;
                match fault {
                    "kill-api" => {
                        // SIGKILL mid-traffic; the process comes back below.
                        let _ = Command::new("kill")
                            .args(["-KILL", &this.api.pid().to_string()])
                            .status();
                    }
                    "stop-apiserver" | "stop-dynamodb" => {
                        let name = if fault == "stop-apiserver" {
                            "kube-apiserver"
                        } else {
                            "dynamodb"
                        };
                        match Component::find(&this.env.settings, name).and_then(|c| c.pause()) {
                            Ok(paused) => {
                                tokio::time::sleep(fault_for).await;
                                let _ = paused.resume();
                            }
                            Err(why) => eprintln!("bench-faults: cannot stop {name}: {why}"),
                        }
                    }
                    _ => {}
                }
            };
            let ((created, deleted, read), ()) = tokio::join!(traffic, inject);
            if fault == "kill-api" {
                self.restart_api().await;
            }
            if fault == "idle-gap" {
                tokio::time::sleep(Duration::from_millis(rng.random_range(3500..5500))).await;
            }
            created.iter().chain(&read).for_each(|a| tally.add(a));
            deleted.iter().for_each(|(_, a)| tally.add(a));
            let acknowledged: HashSet<String> = created
                .iter()
                .filter(|a| a.status == Some(201))
                .filter_map(|a| a.json["stack_id"].as_str().map(str::to_owned))
                .collect();
            // Requests stuck behind a stopped process land after it continues; then one pass.
            tokio::time::sleep(Duration::from_millis(2000)).await;
            let summary = self.reconciler.pass().await;
            let inventory = self.inventory().await;
            let mut expected: HashSet<String> = alive.iter().cloned().collect();
            expected.extend(acknowledged.iter().cloned());
            let round_lost = expected.iter().filter(|id| !inventory.records.contains(*id)).count();
            // Complete stacks nobody expects: a create cut off before answering (API killed; a
            // retry with the same Idempotency-Key gets it) or a delete refused with 503 (the
            // stack stays until its TTL). Kept, not leaked.
            let complete_unanswered: HashSet<String> = inventory
                .records
                .iter()
                .filter(|id| !expected.contains(*id))
                .filter(|id| {
                    let pod = id.parse::<StackId>().map(|i| i.pod_name()).unwrap_or_default();
                    inventory.pods.contains(&pod)
                })
                .cloned()
                .collect();
            let round_leftovers = inventory.leftovers(&expected, &complete_unanswered);
            lost += round_lost;
            leftovers += round_leftovers;
            unanswered_complete += complete_unanswered.len();
            alive = expected
                .into_iter()
                .filter(|id| inventory.records.contains(id))
                .collect();
            alive.extend(complete_unanswered);
            alive.sort();
            println!(
                "round {round}: {fault} at {fault_at:?} for {fault_for:?}; created {}, lost {round_lost}, leftovers after the pass {round_leftovers} (pass: {} orphans, {} drift)",
                acknowledged.len(),
                summary.counts.orphans,
                summary.counts.drift
            );
        }
        println!("{rounds} rounds in {:?}, faults {faults:?}", started.elapsed());
        tally.print("all rounds");
        println!(
            "acknowledged stacks lost: {lost}; leftovers after a pass: {leftovers}; complete stacks kept (create cut off before answering, or delete refused with 503): {unanswered_complete}"
        );
        self.delete_all(alive.into_iter()).await;
        self
    }

    async fn finish(mut self) {
        self.api.stop();
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(self.env.kube.clone());
        let _ = namespaces
            .delete(&self.namespace, &kube::api::DeleteParams::background())
            .await;
        let _ = self.table.delete().await;
    }
}

/// What exists after a round, by stack id / object name.
struct Inventory {
    pods: HashSet<String>,
    services: HashSet<String>,
    records: HashSet<String>,
    manifests: usize,
    claims: Vec<String>,
}

impl Inventory {
    /// Objects, records, manifests and claims that belong to no stack in `expected` or `also`.
    fn leftovers(&self, expected: &HashSet<String>, also: &HashSet<String>) -> usize {
        let known = |id: &str| expected.contains(id) || also.contains(id);
        let stack_of_service = |name: &String| name.strip_prefix("svc-").unwrap_or(name).to_owned();
        let pods = self.pods.iter().filter(|p| !known(p)).count();
        let services = self.services.iter().filter(|s| !known(&stack_of_service(s))).count();
        let records = self.records.iter().filter(|r| !known(r)).count();
        let manifests = self.manifests.saturating_sub(self.records.len());
        let claims = self.claims.iter().filter(|c| !self.records.contains(*c)).count();
        pods + services + records + manifests + claims
    }
}
