//! Integration tests, benchmarks and local-environment tooling of stack-provisioner.

pub mod api;
pub mod api_process;
pub mod bench_fixture;
pub mod black_hole;
pub mod browser;
pub mod challenges;
pub mod counting;
pub mod endpoints;
pub mod env;
pub mod lambda;
pub mod latency;
pub mod manifests;
pub mod node_cpu;
pub mod participant;
pub mod pass_process;
pub mod platform_journey;
pub mod proc_status;
pub mod reconciler;
pub mod registry_tags;
pub mod seeding;
pub mod stalling_proxy;
pub mod tenants;
pub mod throttled_registry;
