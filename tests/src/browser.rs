//! A real headless Chromium driven over WebDriver (chromedriver from the machine's packages,
//! installed by tests/env/test), and the API served over TCP for it.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

/// What can keep the browser test from running.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// `CHROMEDRIVER`, else `chromedriver` on the PATH.
fn chromedriver_path() -> String {
    std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into())
}

/// `CHROMIUM`, else Debian's `/usr/bin/chromium` when present (chromedriver finds others).
fn chromium_path() -> Option<String> {
    std::env::var("CHROMIUM").ok().or_else(|| {
        std::path::Path::new("/usr/bin/chromium")
            .exists()
            .then(|| "/usr/bin/chromium".into())
    })
}

/// Serves `router` on a free loopback port until the process ends; returns its base URL.
pub async fn serve(router: axum::Router) -> Result<String, BrowserError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(format!("http://{addr}"))
}

async fn free_port() -> Result<u16, BrowserError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    Ok(listener.local_addr()?.port())
}

/// One chromedriver and one browser session; the driver is killed when dropped.
pub struct Browser {
    pub client: Client,
    _driver: Child,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium window of `width` x `height`.
    pub async fn start(width: u32, height: u32) -> Result<Self, BrowserError> {
        let port = free_port().await?;
        let driver = Command::new(chromedriver_path())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                BrowserError::Setup(format!(
                    "cannot start chromedriver (run tests/env/test to install it): {e}"
                ))
            })?;
        let url = format!("http://127.0.0.1:{port}");
        let mut options = json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     format!("--window-size={width},{height}")],
        });
        if let Some(binary) = chromium_path() {
            options["binary"] = json!(binary);
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("goog:chromeOptions".into(), options);
        capabilities.insert("goog:loggingPrefs".into(), json!({ "browser": "ALL" }));
        let mut last_error = String::new();
        // chromedriver takes a moment to listen.
        for _ in 0..100 {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Ok(Self {
                        client,
                        _driver: driver,
                    });
                }
                Err(err) => last_error = err.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(BrowserError::Setup(format!("chromedriver session: {last_error}")))
    }

    /// Browser console entries since the last call (chromedriver's log endpoint).
    pub async fn console(&self) -> Result<Vec<ConsoleEntry>, BrowserError> {
        let logs = self
            .client
            .issue_cmd(BrowserLog)
            .await
            .map_err(|e| BrowserError::Setup(format!("browser log: {e}")))?;
        Ok(logs
            .as_array()
            .into_iter()
            .flatten()
            .map(|entry| ConsoleEntry {
                level: entry["level"].as_str().unwrap_or_default().to_owned(),
                message: entry["message"].as_str().unwrap_or_default().to_owned(),
            })
            .collect())
    }

    /// Saves a PNG screenshot under the test target directory; returns its path.
    pub async fn screenshot(&self, name: &str) -> Result<PathBuf, BrowserError> {
        let png = self
            .client
            .screenshot()
            .await
            .map_err(|e| BrowserError::Setup(format!("screenshot: {e}")))?;
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png)?;
        Ok(path)
    }

    pub async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// Where screenshots go: `target/tmp/dashboard` (or `DASHBOARD_SCREENSHOTS`).
pub fn screenshot_dir() -> PathBuf {
    std::env::var_os("DASHBOARD_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tmp/dashboard"))
}

#[derive(Debug, Clone)]
pub struct ConsoleEntry {
    pub level: String,
    pub message: String,
}

impl ConsoleEntry {
    pub fn is_error(&self) -> bool {
        self.level == "SEVERE"
    }
}

/// chromedriver's `POST /session/{id}/se/log` for the `browser` log.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/se/log", session_id.unwrap_or_default()))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(json!({ "type": "browser" }).to_string()))
    }
}

/// A JSON value as a string without quotes (for comparing with page text).
pub fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
