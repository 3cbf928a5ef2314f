//! What a benchmark makes in the local environment (a table, a namespace full of pods, simulated
//! nodes of its own), removed however the benchmark ends, and waits over thousands of pods.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use stack_core::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

use crate::api_process::ApiProcessError;
use crate::browser::BrowserError;
use crate::env::{EnvError, SimulatedNode, TestEnv, TestTable, nodes, real_nodes};
use crate::pass_process::PassProcessError;
use crate::reconciler::add_schedulable_node;

/// The value after `flag` among a benchmark's arguments (`--stacks 24`).
pub fn value_after(args: &[String], flag: &str) -> Option<String> {
    let at = args.iter().position(|a| a == flag)?;
    args.get(at + 1).cloned()
}

/// A benchmark's command line, read flag by flag (`--stacks 24`), each with its default.
pub struct BenchArgs(Vec<String>);

impl BenchArgs {
    pub fn from_env() -> Self {
        Self(std::env::args().collect())
    }

    /// The value of `flag`, or `default`.
    pub fn text(&self, flag: &str, default: &str) -> String {
        value_after(&self.0, flag).unwrap_or_else(|| default.to_owned())
    }

    /// The value of `flag` as a number, if it is one.
    pub fn parsed<T: std::str::FromStr>(&self, flag: &str) -> Option<T> {
        value_after(&self.0, flag).and_then(|n| n.parse().ok())
    }

    /// The value of `flag` as a number, or `default` when absent or not one.
    pub fn number<T: std::str::FromStr>(&self, flag: &str, default: T) -> T {
        self.parsed(flag).unwrap_or(default)
    }

    /// The comma-separated values of `flag` (or of `default`), blanks left out.
    pub fn list(&self, flag: &str, default: &str) -> Vec<String> {
        self.text(flag, default)
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// Whether `flag` is on: unless it says `off`.
    pub fn on(&self, flag: &str) -> bool {
        value_after(&self.0, flag).is_none_or(|v| v != "off")
    }
}

/// What the real-node start benchmarks (`bench-connect`, `bench-startgun`) both read from their
/// command line: how the stacks are exposed and started, and how their clients poll.
pub struct RealNodeStacks {
    /// `--exposure`: the API's `STACK_EXPOSURE` (default `hostport`).
    pub exposure: String,
    /// `--cpu`: each challenge's CPU (its manifest's limit).
    pub cpu: String,
    /// `--poll-ms`: how often each client polls its stack's status (default 100 ms).
    pub poll: Duration,
    /// `--isolation-check`: whether stacks wait for their isolation to be enforced
    /// (`STACK_ISOLATION_CHECK_IMAGE`); on unless `off`.
    pub isolation_check: bool,
    /// `--cpu-limits`: the API's `STACK_CPU_LIMITS`; on unless `off`.
    pub cpu_limits: bool,
    /// `--runtime-class`: the API's `STACK_RUNTIME_CLASS` (`gvisor` on the real nodes); the
    /// nodes' default, runc, when not given.
    pub runtime_class: Option<String>,
}

impl RealNodeStacks {
    /// The flags of `args`, with `default_cpu` for `--cpu`.
    pub fn parse(args: &BenchArgs, default_cpu: &str) -> Self {
        Self {
            exposure: args.text("--exposure", "hostport"),
            cpu: args.text("--cpu", default_cpu),
            poll: Duration::from_millis(args.number("--poll-ms", 100)),
            isolation_check: args.on("--isolation-check"),
            cpu_limits: args.on("--cpu-limits"),
            runtime_class: args.parsed("--runtime-class"),
        }
    }

    /// The API's settings for these stacks: [`real_nodes::api_settings`] of `registry` with
    /// `STACK_EXPOSURE` and `STACK_CPU_LIMITS`, and the isolation check image blank when the
    /// check is off (set blank, not left out: the API process would inherit env.sh's).
    pub fn api_settings(&self, registry: &str) -> Vec<(&'static str, String)> {
        let mut settings = real_nodes::api_settings(registry);
        if !self.isolation_check {
            for (name, value) in &mut settings {
                if *name == "STACK_ISOLATION_CHECK_IMAGE" {
                    value.clear();
                }
            }
        }
        settings.push(("STACK_EXPOSURE", self.exposure.clone()));
        settings.push(("STACK_CPU_LIMITS", self.cpu_limits.to_string()));
        settings.push(("STACK_RUNTIME_CLASS", self.runtime_class.clone().unwrap_or_default()));
        settings
    }

    /// How the benchmarks print the isolation check, the CPU limits and the runtime.
    pub fn settings_said(&self) -> String {
        let on = |yes: bool| if yes { "on" } else { "off" };
        format!(
            "isolation check {}, cpu limits {}, runtime class {}",
            on(self.isolation_check),
            on(self.cpu_limits),
            self.runtime_class.as_deref().unwrap_or("(none: runc)")
        )
    }
}

/// How long a benchmark waits for thousands of pods to run or to go.
pub const PODS_TIMEOUT: Duration = Duration::from_secs(900);
const PAGE: u32 = 500;

/// What a benchmark can fail with: its own wrong use, or anything it drives.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Store(#[from] stack_core::StoreError),
    #[error(transparent)]
    Stacks(#[from] stack_core::StackError),
    #[error(transparent)]
    Cluster(#[from] stack_core::ClusterError),
    #[error(transparent)]
    Config(#[from] stack_core::ConfigError),
    #[error("the benchmark manifest was refused: {0}")]
    Manifest(#[from] stack_core::Rejection),
    #[error(transparent)]
    Api(#[from] ApiProcessError),
    #[error(transparent)]
    Pass(#[from] PassProcessError),
    #[error(transparent)]
    Browser(#[from] BrowserError),
    #[error("webdriver: {0}")]
    WebDriver(#[from] fantoccini::error::CmdError),
    #[error("query: {0}")]
    Query(String),
    #[error("{0}")]
    Timeout(String),
    #[error("interrupted")]
    Interrupted,
}

/// Everything a benchmark made; [`BenchFixture::remove`] deletes it.
#[derive(Default)]
pub struct BenchFixture {
    pub table: Option<TestTable>,
    /// Made by the benchmark or by the API it runs.
    pub namespace: Option<String>,
    pub nodes: Vec<String>,
}

impl BenchFixture {
    /// A fresh table (remembered for removal); its name.
    pub async fn fresh_table(&mut self, env: &TestEnv, prefix: &str) -> Result<String, EnvError> {
        let table = self.table.insert(env.fresh_table(prefix).await?);
        Ok(table.name().to_owned())
    }

    /// A fresh namespace (remembered for removal); its name.
    pub async fn fresh_namespace(&mut self, env: &TestEnv, prefix: &str) -> Result<String, EnvError> {
        let namespace = env.fresh_namespace(prefix).await?;
        Ok(self.namespace.insert(namespace.name().to_owned()).clone())
    }

    /// Adds a simulated node (remembered for removal) and waits until pods can be placed on it.
    pub async fn add_node(&mut self, env: &TestEnv, node: &SimulatedNode) -> Result<(), EnvError> {
        self.nodes.push(node.name.clone());
        add_schedulable_node(env, node).await
    }

    /// Deletes the namespace and waits for its pods to be gone (kwok finishes a pod's deletion
    /// only while its node exists; without it the pod garbage collector takes minutes), then
    /// the table and the nodes. Everything is attempted; the failures are returned.
    pub async fn remove(&mut self, env: &TestEnv) -> Vec<EnvError> {
        let mut failures = Vec::new();
        if let Some(namespace) = self.namespace.take() {
            let deleted = Api::<Namespace>::all(env.kube.clone())
                .delete(&namespace, &DeleteParams::background())
                .await;
            match deleted {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(source) => failures.push(EnvError::Kube {
                    operation: format!("delete namespace {namespace}"),
                    source,
                }),
            }
            let pods: Api<Pod> = Api::namespaced(env.kube.clone(), &namespace);
            if let Err(err) = wait_no_pods(&pods, PODS_TIMEOUT).await {
                failures.push(err);
            }
        }
        if let Some(table) = self.table.take()
            && let Err(err) = table.delete().await
        {
            failures.push(err);
        }
        for node in self.nodes.drain(..) {
            if let Err(err) = nodes::delete_node(&env.kube, &node).await {
                failures.push(err);
            }
        }
        failures
    }
}

/// Polls until no pod is left, at most `timeout`.
pub async fn wait_no_pods(pods: &Api<Pod>, timeout: Duration) -> Result<(), EnvError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = pods
            .list(&ListParams::default().limit(1))
            .await
            .map_err(|source| EnvError::Kube {
                operation: "list pods".to_owned(),
                source,
            })?;
        if left.items.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(EnvError::Timeout {
                what: "the pods of the benchmark namespace to go".to_owned(),
                seconds: timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Polls until kwok has at least `wanted` of our pods `Running`, at most `timeout`.
pub async fn wait_all_running(pods: &Api<Pod>, wanted: usize, timeout: Duration) -> Result<(), EnvError> {
    let deadline = Instant::now() + timeout;
    loop {
        let running = count_running(pods).await.map_err(|source| EnvError::Kube {
            operation: "list pods".to_owned(),
            source,
        })?;
        if running >= wanted {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(EnvError::Timeout {
                what: format!("{wanted} pods Running ({running} are)"),
                seconds: timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Our pods (labelled `managed-by`) in phase `Running`.
pub async fn count_running(pods: &Api<Pod>) -> Result<usize, kube::Error> {
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    Ok(list_managed(pods).await?.iter().filter(|p| running(p)).count())
}

/// Every object of ours (labelled `managed-by`) through `api`, page by page.
pub async fn list_managed<K>(api: &Api<K>) -> Result<Vec<K>, kube::Error>
where
    K: Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let mut params = ListParams::default()
        .labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"))
        .limit(PAGE);
    let mut items = Vec::new();
    loop {
        let page = api.list(&params).await?;
        items.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(items),
        }
    }
}
