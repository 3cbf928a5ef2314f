//! The released API binary as a process of its own over the local environment, and a plain
//! HTTP client driving it the way platforms do: a 5 s timeout and no retries.

use std::fs::{File, OpenOptions};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::env::{EnvSettings, SIMULATED_ROLE};

/// Platforms give up after 5 s and never retry.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a started API may take to answer `/healthz`.
pub const HEALTHY_WITHIN: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ApiProcessError {
    #[error("locating this executable: {0}")]
    CurrentExe(#[source] std::io::Error),
    #[error("finding a free loopback port: {0}")]
    FreePort(#[source] std::io::Error),
    #[error("opening the API's log {path}: {source}")]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("starting {binary}: {source} (build it with cargo build --release -p stack-api)")]
    Spawn {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the API did not become healthy within {} s", .0.as_secs())]
    Unhealthy(Duration),
}

/// The `stack-api` binary next to the running one (a release bench runs the release API), in
/// local mode on a free loopback port. Killed when dropped. Its warnings and errors (JSON, one
/// a line: why a create was refused, `reached` and all) go to [`ApiProcess::log_path`].
pub struct ApiProcess {
    child: Child,
    binary: PathBuf,
    log: PathBuf,
    addr: SocketAddr,
    vars: Vec<(String, String)>,
}

impl ApiProcess {
    /// Starts the API over `namespace` and `table` of the environment with key `api_key`,
    /// stacks on the simulated nodes with any image, plus
    /// `extra` variables (which win).
    pub fn spawn(
        settings: &EnvSettings,
        namespace: &str,
        table: &str,
        api_key: &str,
        extra: &[(&str, &str)],
    ) -> Result<Self, ApiProcessError> {
        let binary = std::env::current_exe()
            .map_err(ApiProcessError::CurrentExe)?
            .with_file_name("stack-api");
        let addr = free_addr()?;
        let kubeconfig = settings.kubeconfig.display().to_string();
        let mut vars: Vec<(String, String)> = [
            ("STACK_NAMESPACE", namespace),
            ("DDB_STACK_TABLE", table),
            ("API_KEY", api_key),
            ("STACK_NODE_ROLE", SIMULATED_ROLE),
            ("STACK_PROXY_SYNC", "0s"),
            ("STACK_IMAGE_ALLOWLIST", ""),
            ("K8S_KUBECONFIG", &kubeconfig),
            ("AWS_ENDPOINT_URL_DYNAMODB", &settings.dynamodb.endpoint),
            ("AWS_REGION", &settings.dynamodb.region),
            ("AWS_ACCESS_KEY_ID", &settings.dynamodb.access_key_id),
            ("AWS_SECRET_ACCESS_KEY", &settings.dynamodb.secret_access_key),
            ("RUST_LOG", "warn"),
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        vars.push(("LISTEN_ADDR".to_owned(), addr.to_string()));
        let log = settings
            .state_dir
            .as_ref()
            .map_or_else(std::env::temp_dir, |dir| dir.join("logs"))
            .join(format!("api-{namespace}.log"));
        let child = start(&binary, &vars, &log)?;
        Ok(Self {
            child,
            binary,
            log,
            addr,
            vars,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A client of this process with `api_key`, once `/healthz` answers 200 (at most `within`).
    pub async fn healthy_client(&self, api_key: &str, within: Duration) -> Result<ApiClient, ApiProcessError> {
        let client = ApiClient::new(self.addr(), api_key);
        client.wait_healthy(within).await?;
        Ok(client)
    }

    /// [`ApiProcess::spawn`], then a client once it answers (at most [`HEALTHY_WITHIN`]).
    pub async fn spawn_healthy(
        settings: &EnvSettings,
        namespace: &str,
        table: &str,
        api_key: &str,
        extra: &[(&str, &str)],
    ) -> Result<(Self, ApiClient), ApiProcessError> {
        let api = Self::spawn(settings, namespace, table, api_key, extra)?;
        let client = api.healthy_client(api_key, HEALTHY_WITHIN).await?;
        Ok((api, client))
    }

    /// Where the process's log lines go (appended across restarts).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process (if it still runs) and starts it again, same address and variables.
    pub fn restart(&mut self) -> Result<(), ApiProcessError> {
        self.stop();
        self.child = start(&self.binary, &self.vars, &self.log)?;
        Ok(())
    }

    /// Kills the process and reaps it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ApiProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

fn start(binary: &PathBuf, vars: &[(String, String)], log: &Path) -> Result<Child, ApiProcessError> {
    Command::new(binary)
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .stdout(open_log(log)?)
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| ApiProcessError::Spawn {
            binary: binary.clone(),
            source,
        })
}

fn open_log(path: &Path) -> Result<File, ApiProcessError> {
    let failed = |source| ApiProcessError::Log {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    OpenOptions::new().create(true).append(true).open(path).map_err(failed)
}

fn free_addr() -> Result<SocketAddr, ApiProcessError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(ApiProcessError::FreePort)?;
    listener.local_addr().map_err(ApiProcessError::FreePort)
}

/// What a client saw.
#[derive(Debug, Clone)]
pub struct Answer {
    /// `None`: no HTTP answer (connection failed, or nothing within the client timeout).
    pub status: Option<u16>,
    /// The `Retry-After` header, when there was one.
    pub retry_after: Option<String>,
    /// The body, `Null` when it was not JSON.
    pub json: Value,
    pub took: Duration,
}

impl Answer {
    fn none(took: Duration) -> Self {
        Self {
            status: None,
            retry_after: None,
            json: Value::Null,
            took,
        }
    }

    /// The classes clients tell apart: 2xx, 409, other 4xx, 503, other 5xx, no answer in
    /// time, connection failed.
    pub fn class(&self) -> &'static str {
        match self.status {
            Some(200..=299) => "2xx",
            Some(409) => "409",
            Some(400..=499) => "4xx",
            Some(503) => "503",
            Some(_) => "5xx (not 503)",
            None if self.took >= CLIENT_TIMEOUT => "no answer in 5 s",
            None => "connection failed",
        }
    }
}

/// An HTTP/1.1 client of one API process, with its key on every request.
#[derive(Clone)]
pub struct ApiClient {
    client: Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    api_key: String,
}

impl ApiClient {
    pub fn new(addr: SocketAddr, api_key: &str) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            addr,
            api_key: api_key.to_owned(),
        }
    }

    /// One request, given up after [`CLIENT_TIMEOUT`], never retried.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> Answer {
        let started = Instant::now();
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr))
            .header("x-api-key", &self.api_key);
        if let Some(key) = idempotency_key {
            builder = builder.header("idempotency-key", key);
        }
        if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let Ok(request) = builder.body(Full::new(body)) else {
            return Answer::none(started.elapsed());
        };
        let exchange = async {
            let response = self.client.request(request).await.ok()?;
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let bytes = response.into_body().collect().await.ok()?.to_bytes();
            Some((
                status,
                retry_after,
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            ))
        };
        match tokio::time::timeout(CLIENT_TIMEOUT, exchange).await {
            Ok(Some((status, retry_after, json))) => Answer {
                status: Some(status),
                retry_after,
                json,
                took: started.elapsed(),
            },
            _ => Answer::none(started.elapsed()),
        }
    }

    /// Polls `/healthz` until it answers 200, at most `within`.
    pub async fn wait_healthy(&self, within: Duration) -> Result<(), ApiProcessError> {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if self.call(Method::GET, "/healthz", None, None).await.status == Some(200) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(ApiProcessError::Unhealthy(within))
    }
}
