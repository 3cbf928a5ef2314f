//! An in-process API over the real local environment: the production router and clients,
//! a fresh table and a fresh namespace per harness, so tests run in parallel.

use std::collections::HashMap;

use axum::body::Body;
use http::{HeaderMap, Method, Request};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;
use stack_api::AppState;
use stack_core::{Config, MANAGED_BY_LABEL, MANAGED_BY_VALUE, Manifest, StackRecord, Store};
use tower::ServiceExt;

use crate::black_hole::BlackHole;
use crate::counting::{CallsByKind, dynamodb_counting_by_operation, kube_counting_by_kind};
use crate::env::{SIMULATED_ROLE, TestEnv, TestTable, unique_name};
use crate::tenants;

pub const API_KEY: &str = "local-test-key";

/// A small valid challenge manifest exposing TCP 80.
pub const WEB_POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    challenge: web
spec:
  containers:
    - name: web
      image: nginx:1.27
      ports:
        - containerPort: 80
      resources:
        limits:
          cpu: 100m
          memory: 64Mi
"#;

/// The ports a harness hands out unless a test names its own: the provisioner's default range
/// without its top, 32680-32767, which the real nodes' tests take port by port (`connect.rs`,
/// `isolation.rs`). kube-proxy on the real nodes forwards every NodePort Service of the
/// cluster, so a simulated stack's Service on a port a participant connects to would take
/// the connection.
pub const SIMULATED_NODE_PORTS: (u16, u16) = (31001, 32679);

pub struct ApiHarness {
    pub env: TestEnv,
    pub router: axum::Router,
    pub state: AppState,
    pub namespace: String,
    pub table: TestTable,
    /// Whether [`finish`](Self::finish) removes the namespace and table: a
    /// [`sandbox`](Self::sandbox) shares its harness's.
    owns_namespace_and_table: bool,
    /// Requests the API's clients sent, by kind.
    pub calls: CallsByKind,
    /// The hanging apiserver the stack operations talk to, if the harness has one.
    _black_hole: Option<BlackHole>,
    /// The real nodes' share this harness holds, if its stacks run there.
    _nodes: Option<crate::env::real_nodes::NodesGuard>,
}

/// A response as the client sees it.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub json: Value,
}

impl Reply {
    /// The `stack_id` of a created stack's answer.
    pub fn stack_id(&self) -> String {
        self.json["stack_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no stack_id in {}", self.json))
            .to_owned()
    }

    /// The `error` of a refused answer; empty when it has none.
    pub fn error(&self) -> &str {
        self.json["error"].as_str().unwrap_or_default()
    }

    /// The `(reason, message)` of a failed stack's answer; panics, showing the answer, when
    /// the stack is not `failed`.
    pub fn failure(&self) -> (&str, &str) {
        assert_eq!(self.json["status"], "failed", "{}", self.json);
        let field = |name: &str| self.json[name].as_str().unwrap_or_default();
        (field("reason"), field("message"))
    }
}

impl ApiHarness {
    /// A harness with the defaults tests want: a fresh namespace (made by the API), a
    /// fresh table, API key `local-test-key`, stacks placed on the simulated nodes
    /// ([`SIMULATED_ROLE`]: kwok runs no container, so any image will do).
    pub async fn start() -> Self {
        Self::with_env(&[]).await
    }

    /// Like [`start`](Self::start), with extra environment variables for the config.
    pub async fn with_env(overrides: &[(&str, &str)]) -> Self {
        let env = TestEnv::connect().await.expect("local environment (run tests/env/up)");
        let kube = kube_config(&env).await;
        Self::build(env, kube, overrides, None, None).await
    }

    /// A harness whose stacks run on the real nodes (`role=stack`, containerd and runc) with
    /// images of the environment's registry, which the configuration lets through as an
    /// operator lets a private registry through (`STACK_IMAGE_ALLOWLIST`); `overrides` win.
    pub async fn on_real_nodes(overrides: &[(&str, &str)]) -> Self {
        let guard = crate::env::real_nodes::NodesGuard::shared().await;
        Self::on_real_nodes_holding(guard, overrides).await
    }

    /// [`on_real_nodes`](Self::on_real_nodes) for a test that disturbs every real node: it
    /// runs while no other real-node harness does.
    pub async fn on_real_nodes_alone(overrides: &[(&str, &str)]) -> Self {
        let guard = crate::env::real_nodes::NodesGuard::alone().await;
        Self::on_real_nodes_holding(guard, overrides).await
    }

    async fn on_real_nodes_holding(guard: crate::env::real_nodes::NodesGuard, overrides: &[(&str, &str)]) -> Self {
        let env = TestEnv::connect().await.expect("local environment (run tests/env/up)");
        let registry = env
            .registry()
            .expect("STACK_ENV_REGISTRY (tests/env/up with real nodes)")
            .to_owned();
        assert!(
            env.settings.real_nodes > 0,
            "the environment runs no real node (STACK_ENV_REAL_NODES=0)"
        );
        let settings = crate::env::real_nodes::api_settings(&registry);
        let mut vars: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
        // The operator's knob set to this machine's kube-proxy: under the full parallel test run
        // (two cores, every kwok test's NodePort Services in its rules), an endpoint reached the
        // node's rules more than 1 s after its pod was Ready, once in five full runs.
        vars.push(("STACK_PROXY_SYNC", "2s"));
        vars.extend_from_slice(overrides);
        let kube = kube_config(&env).await;
        let mut harness = Self::build(env, kube, &vars, None, None).await;
        harness._nodes = Some(guard);
        harness
    }

    /// Like [`with_env`](Self::with_env), with the three tenants and keys of every role
    /// ([`tenants::settings`], `limits` as `STACK_TENANTS` writes them); `extra` follow.
    pub async fn with_tenants(limits: &[(&str, u32)], extra: &[(&str, &str)]) -> Self {
        let settings = tenants::settings(limits);
        Self::with_env(&tenant_vars(&settings, extra)).await
    }

    /// Like [`on_real_nodes`](Self::on_real_nodes), with the three tenants and keys of every role.
    pub async fn on_real_nodes_with_tenants(extra: &[(&str, &str)]) -> Self {
        let settings = tenants::settings(&[]);
        Self::on_real_nodes(&tenant_vars(&settings, extra)).await
    }

    /// The registry the real nodes pull from.
    pub fn registry(&self) -> &str {
        self.env.registry().expect("STACK_ENV_REGISTRY")
    }

    /// Like [`with_env`](Self::with_env), with the functions' cluster client made from `kube`
    /// (e.g. one impersonating their identity); `STACK_NAMESPACE` among `overrides` names an
    /// existing namespace (the harness's, which [`finish`](Self::finish) deletes).
    pub async fn with_kube(env: TestEnv, kube: kube::Config, overrides: &[(&str, &str)]) -> Self {
        Self::build(env, kube, overrides, None, None).await
    }

    /// A harness whose stack operations reach an apiserver that accepts connections and never
    /// answers; DynamoDB and the checks through [`TestEnv`] are the real local ones.
    pub async fn with_unresponsive_cluster() -> Self {
        let env = TestEnv::connect().await.expect("local environment (run tests/env/up)");
        let black_hole = BlackHole::start().await;
        let mut kube = kube::Config::new(black_hole.url().parse().expect("black hole url"));
        stack_core::apply_client_limits(&mut kube);
        Self::build(env, kube, &[], Some(black_hole), None).await
    }

    async fn build(
        env: TestEnv,
        kube: kube::Config,
        overrides: &[(&str, &str)],
        black_hole: Option<BlackHole>,
        shared_table: Option<TestTable>,
    ) -> Self {
        // The API creates the namespace itself on first use, unless the test made it.
        let namespace = overrides
            .iter()
            .find(|(name, _)| *name == "STACK_NAMESPACE")
            .map_or_else(|| unique_name("api"), |(_, value)| (*value).to_owned());
        let owns_namespace_and_table = shared_table.is_none();
        let table = match shared_table {
            Some(table) => table,
            None => env.fresh_table("api").await.expect("fresh table"),
        };
        let mut vars: HashMap<String, String> = HashMap::from([
            ("STACK_NAMESPACE".into(), namespace.clone()),
            ("DDB_STACK_TABLE".into(), table.name().to_owned()),
            ("API_KEY".into(), API_KEY.into()),
            ("STACK_NODE_ROLE".into(), SIMULATED_ROLE.into()),
            // No kube-proxy serves the simulated nodes.
            ("STACK_PROXY_SYNC".into(), "0s".into()),
            // Each harness its own pre-pull, which keeps nothing unless its test declares it.
            ("STACK_PREPULL_NAMESPACE".into(), prepull_namespace(&namespace)),
            ("STACK_PREPULL_IN_USE".into(), "false".into()),
            ("STACK_NODEPORT_MIN".into(), SIMULATED_NODE_PORTS.0.to_string()),
            ("STACK_NODEPORT_MAX".into(), SIMULATED_NODE_PORTS.1.to_string()),
        ]);
        for (k, v) in overrides {
            vars.insert((*k).into(), (*v).into());
        }
        let config = Config::from_lookup(|name| vars.get(name).cloned()).expect("test config is valid");
        let calls = CallsByKind::default();
        let kube = kube_counting_by_kind(kube, &calls).expect("kube client");
        let dynamodb = dynamodb_counting_by_operation(&env.dynamodb, &calls);
        let store = Store::new(dynamodb, &config.table, config.consistent_read);
        let state = AppState::with_clients(config, store, kube);
        Self {
            router: stack_api::router(state.clone()),
            state,
            namespace,
            table,
            owns_namespace_and_table,
            calls,
            env,
            _black_hole: black_hole,
            _nodes: None,
        }
    }

    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        self.call_as(API_KEY, method, path, body).await
    }

    /// `method` on every path of `paths` at once; the replies in the paths' order.
    pub async fn call_each(&self, method: Method, paths: impl IntoIterator<Item = String>) -> Vec<Reply> {
        let calls = paths.into_iter().map(|path| {
            let method = method.clone();
            async move { self.call(method, &path, None).await }
        });
        futures::future::join_all(calls).await
    }

    /// [`call`](Self::call) with another key.
    pub async fn call_as(&self, key: &str, method: Method, path: &str, body: Option<Value>) -> Reply {
        let mut builder = Request::builder().method(method).uri(path).header("x-api-key", key);
        if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        let body = body.map(|b| Body::from(b.to_string())).unwrap_or_else(Body::empty);
        self.send(builder.body(body).expect("request")).await
    }

    pub async fn send(&self, request: Request<Body>) -> Reply {
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("router is infallible");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        let json = serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("non-JSON answer {status}: {bytes:?}"));
        Reply { status, headers, json }
    }

    pub async fn create(&self, manifest: &str, target_port: Value) -> Reply {
        self.call(
            Method::POST,
            "/stacks",
            Some(serde_json::json!({ "pod_spec": manifest, "target_port": target_port })),
        )
        .await
    }

    /// Creates a stack of [`WEB_POD`] on port 80 and asserts it was created (201).
    pub async fn create_web(&self) -> Reply {
        let created = self.create(WEB_POD, serde_json::json!(80)).await;
        assert_eq!(created.status, 201, "{}", created.json);
        created
    }

    /// Deletes stack `id` through the API and asserts the delete succeeded (200).
    pub async fn delete_stack(&self, id: &str) {
        let deleted = self.call(Method::DELETE, &format!("/stacks/{id}"), None).await;
        assert_eq!(deleted.status, 200, "{}", deleted.json);
    }

    /// Creates `n` small stacks ([`WEB_POD`]) at once; their ids. A create refused with 503
    /// (the machine too busy for the 3 s budget, as under a full parallel run) is sent again a
    /// moment later: the stacks are what the caller tests, not the create path under load.
    pub async fn create_stacks(&self, n: usize) -> Vec<String> {
        let create = || async {
            let mut reply = self.create(WEB_POD, serde_json::json!(80)).await;
            for _ in 0..5 {
                if reply.status != 503 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                reply = self.create(WEB_POD, serde_json::json!(80)).await;
            }
            reply
        };
        let replies = futures::future::join_all((0..n).map(|_| create())).await;
        replies
            .iter()
            .map(|reply| {
                assert_eq!(reply.status, 201, "{}", reply.json);
                reply.json["stack_id"].as_str().expect("stack_id").to_owned()
            })
            .collect()
    }

    /// `GET /stacks` from the first page, following `next_cursor`: every page's reply.
    pub async fn walk_pages(&self, limit: Option<usize>) -> Vec<Reply> {
        let mut pages = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut params = Vec::new();
            if let Some(limit) = limit {
                params.push(format!("limit={limit}"));
            }
            if let Some(cursor) = &cursor {
                params.push(format!("cursor={cursor}"));
            }
            let page = self
                .call(Method::GET, &format!("/stacks?{}", params.join("&")), None)
                .await;
            assert_eq!(page.status, 200, "{}", page.json);
            cursor = page
                .json
                .get("next_cursor")
                .map(|c| c.as_str().expect("string cursor").to_owned());
            pages.push(page);
            assert!(pages.len() < 100, "pages never end");
            if cursor.is_none() {
                return pages;
            }
        }
    }

    pub fn pods_api(&self) -> Api<Pod> {
        Api::namespaced(self.env.kube.clone(), &self.namespace)
    }

    pub fn services_api(&self) -> Api<Service> {
        Api::namespaced(self.env.kube.clone(), &self.namespace)
    }

    /// Our pods still in the apiserver (terminating ones included).
    pub async fn managed_pods(&self) -> Vec<Pod> {
        self.pods_api().list(&managed()).await.expect("list pods").items
    }

    /// Our pods once those being deleted are gone (a deleted pod has its one-second grace
    /// period, and kwok's moment, to go), waiting at most 10 s: what a refused or removed
    /// stack left behind, if anything.
    pub async fn managed_pods_once_deleted_ones_are_gone(&self) -> Vec<Pod> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let pods = self.managed_pods().await;
            let deleting = pods.iter().any(|p| p.metadata.deletion_timestamp.is_some());
            if !deleting || std::time::Instant::now() >= deadline {
                return pods;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    pub async fn managed_services(&self) -> Vec<Service> {
        self.services_api().list(&managed()).await.expect("list services").items
    }

    pub async fn records(&self) -> Vec<StackRecord> {
        self.state
            .stacks
            .store()
            .list_stacks(Manifest::Include)
            .await
            .expect("list records")
            .records
    }

    /// The ids of the stacks' records, oldest first, in the collection the caller names.
    pub async fn record_ids<C: FromIterator<String>>(&self) -> C {
        self.records().await.iter().map(|r| r.stack_id.to_string()).collect()
    }

    /// Another Lambda sandbox of the same deployment: this harness's namespace and table, its
    /// own clients and views (ports, nodes), configured by `overrides`. Its
    /// [`finish`](Self::finish) leaves both to this harness's.
    pub async fn sandbox(&self, overrides: &[(&str, &str)]) -> Self {
        let env = self.env.clone();
        let kube = kube_config(&env).await;
        let mut vars = vec![("STACK_NAMESPACE", self.namespace.as_str())];
        vars.extend_from_slice(overrides);
        Self::build(env, kube, &vars, None, Some(self.table.clone())).await
    }

    /// Removes the harness's namespace (and so its pods and services) and table, unless it is
    /// another's [`sandbox`](Self::sandbox).
    pub async fn finish(mut self) {
        if self.owns_namespace_and_table {
            remove_namespace_and_table(&self.env, &self.namespace, self.table.name()).await;
        }
        self.owns_namespace_and_table = false;
    }

    /// [`assert_nothing_left`](Self::assert_nothing_left), then [`finish`](Self::finish): how a
    /// test that cleans up after itself ends.
    pub async fn finish_asserting_nothing_left(self) {
        self.assert_nothing_left().await;
        self.finish().await;
    }

    /// Asserts that no pod, service, record or idempotency key of ours is left (a pod being
    /// deleted has its one-second grace period, and kwok's moment, to go).
    pub async fn assert_nothing_left(&self) {
        let pods = self.managed_pods_once_deleted_ones_are_gone().await;
        assert!(
            pods.is_empty(),
            "pods left: {:?}",
            pods.iter().map(|p| p.metadata.name.clone()).collect::<Vec<_>>()
        );
        let services = self.managed_services().await;
        assert!(
            services.is_empty(),
            "services left: {:?}",
            services.iter().map(|s| s.metadata.name.clone()).collect::<Vec<_>>()
        );
        assert!(self.records().await.is_empty(), "records left");
        assert_eq!(
            self.state
                .stacks
                .store()
                .count_idempotency_keys()
                .await
                .expect("count keys"),
            0,
            "idempotency keys left"
        );
        let manifests = self
            .state
            .stacks
            .store()
            .count_manifests()
            .await
            .expect("count manifests");
        assert_eq!(manifests, 0, "manifests left");
    }
}

/// The settings that expose stacks by `exposure` on ports `min` to `max` (inclusive): tests on
/// the shared real nodes each take a range of their own.
pub fn exposed_on<'a>(exposure: &'a str, min: &'a str, max: &'a str) -> [(&'static str, &'a str); 3] {
    [
        ("STACK_EXPOSURE", exposure),
        ("STACK_NODEPORT_MIN", min),
        ("STACK_NODEPORT_MAX", max),
    ]
}

/// The create refusals of `reason` a `/history` answer counts, over all its minutes.
pub fn refusals_of(history: &Value, reason: &str) -> u64 {
    history["refusals"]
        .as_array()
        .expect("refusals array")
        .iter()
        .filter_map(|minute| minute["counts"][reason].as_u64())
        .sum()
}

/// The ids of the stacks of `pages`, in order.
pub fn listed_ids(pages: &[Reply]) -> Vec<String> {
    pages
        .iter()
        .flat_map(|p| p.json["stacks"].as_array().expect("stacks array").iter())
        .map(|s| s["stack_id"].as_str().expect("stack_id").to_owned())
        .collect()
}

/// The admin kubeconfig of the environment as a client config, with the functions' limits.
pub async fn kube_config(env: &TestEnv) -> kube::Config {
    let kubeconfig = kube::config::Kubeconfig::read_from(&env.settings.kubeconfig).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .expect("kube config");
    stack_core::apply_client_limits(&mut config);
    config
}

/// The tenants' `settings` as a harness takes them, then `extra`.
fn tenant_vars<'a>(settings: &'a [(String, String)], extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(extra.iter().copied())
        .collect()
}

fn managed() -> ListParams {
    ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"))
}

/// A harness dropped without [`finish`](ApiHarness::finish), as a failing test's is, removes
/// what it owns all the same: its namespace would keep holding the fixed ports of its stacks
/// (a rerun's would collide with them) and its table would stay. It blocks on a runtime and
/// clients of its own, as the test's runtime may be the thread it blocks.
impl Drop for ApiHarness {
    fn drop(&mut self) {
        if !self.owns_namespace_and_table {
            return;
        }
        let settings = self.env.settings.clone();
        let (namespace, table) = (self.namespace.clone(), self.table.name().to_owned());
        let cleanup = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            runtime.block_on(async {
                let removed = async {
                    if let Ok(env) = TestEnv::with_settings(settings).await {
                        remove_namespace_and_table(&env, &namespace, &table).await;
                    }
                };
                // A fault test may end with a component paused: never wait on it for long.
                let _ = tokio::time::timeout(CLEANUP_BOUND, removed).await;
            });
        });
        let _ = cleanup.join();
    }
}

const CLEANUP_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// Deletes a harness's namespaces (its own and its pre-pull's) and its table, whatever is
/// already gone. Its pods first, with the one-second grace a stack's delete gives them, so
/// that their ports are free as soon as after a stack's delete (a namespace's deletion gives
/// each pod its own grace, 30 s by default).
async fn remove_namespace_and_table(env: &TestEnv, namespace: &str, table: &str) {
    let pods: Api<Pod> = Api::namespaced(env.kube.clone(), namespace);
    let _ = pods
        .delete_collection(
            &kube::api::DeleteParams::default().grace_period(1),
            &ListParams::default(),
        )
        .await;
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(env.kube.clone());
    for namespace in [namespace.to_owned(), prepull_namespace(namespace)] {
        let _ = namespaces
            .delete(&namespace, &kube::api::DeleteParams::background())
            .await;
    }
    let _ = env.dynamodb.delete_table().table_name(table).send().await;
}

/// The pre-pull namespace of a test's stack namespace.
pub fn prepull_namespace(namespace: &str) -> String {
    format!("{namespace}-pp")
}
