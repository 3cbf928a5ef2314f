//! Stacks a benchmark seeds straight into DynamoDB and the apiserver: records through the
//! Store, pods as the validator hardens them (so records and pods have their real size) but
//! bound straight to simulated nodes of the benchmark's own, and headless services owned by the
//! pods (thousands of NodePort services would not fit the node-port range).

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::PostParams;
use stack_core::{Config, StackId, Store, ValidationPolicy, validate};

use crate::bench_fixture::{BenchError, BenchFixture};
use crate::env::{EnvError, SimulatedNode, TestEnv};
use crate::manifests::{BENCH_POD, BENCH_PORT};
use crate::reconciler::{running_record, stack_service};

/// What one seeded stack is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seed {
    Healthy,
    Expired,
    /// Record and service, pod gone.
    Drift,
    /// Pod and service, no record.
    Orphan,
}

/// Objects created at once while seeding.
const SEED_CONCURRENCY: usize = 48;
/// Pods per simulated node (the kubelet default is 110; kwok nodes here take 1000).
const PODS_PER_NODE: usize = 1000;

/// Adds (through `fixture`, which removes them) as many simulated nodes of `role` as `pods`
/// need; each node's name and external IP.
pub async fn add_seed_nodes(
    env: &TestEnv,
    fixture: &mut BenchFixture,
    role: &str,
    pods: usize,
) -> Result<Vec<(String, String)>, EnvError> {
    let mut targets = Vec::new();
    for i in 0..pods.div_ceil(PODS_PER_NODE) {
        let ip = format!("203.0.113.{}", 100 + i % 100);
        let node = SimulatedNode::new(&format!("{role}-{i}"))
            .role(role)
            .external_ip(&ip)
            .allocatable("64", "256Gi", &PODS_PER_NODE.to_string());
        fixture.add_node(env, &node).await?;
        targets.push((node.name, ip));
    }
    Ok(targets)
}

/// Seeds stacks as the API configured by `config` would make them, spread over `nodes`.
pub struct Seeder {
    policy: ValidationPolicy,
    pods: Api<Pod>,
    services: Api<Service>,
    store: Store,
    nodes: Vec<(String, String)>,
}

impl Seeder {
    /// Over the namespace and table of `config`, on `nodes` (name and external IP).
    pub fn new(env: &TestEnv, config: &Config, nodes: Vec<(String, String)>) -> Self {
        let namespace = &config.validation.namespace;
        Self {
            policy: config.validation.clone(),
            pods: Api::namespaced(env.kube.clone(), namespace),
            services: Api::namespaced(env.kube.clone(), namespace),
            store: Store::new(env.dynamodb.clone(), &config.table, true),
            nodes,
        }
    }

    /// The namespace's pods.
    pub fn pods(&self) -> &Api<Pod> {
        &self.pods
    }

    /// Seeds one stack of each of `seeds`, [`SEED_CONCURRENCY`] at a time.
    pub async fn seed_all(&self, seeds: &[Seed]) -> Result<(), BenchError> {
        let seeded: Vec<Result<(), BenchError>> = futures::stream::iter(seeds.iter().enumerate())
            .map(|(i, seed)| self.seed(i, *seed))
            .buffer_unordered(SEED_CONCURRENCY)
            .collect()
            .await;
        seeded.into_iter().collect()
    }

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
        let mut record = running_record(&id, &self.policy.namespace, node, Some(ip), ttl);
        record.pod_spec = hardened.yaml;
        self.store.put_new_stack(&record).await?;
        Ok(())
    }
}
