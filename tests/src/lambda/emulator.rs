//! One Lambda sandbox: `aws-lambda-rie` running one `bootstrap` on loopback, invoked through
//! its invoke endpoint (`POST /2015-03-31/functions/function/invocations`) as Lambda's
//! frontend invokes a function. Like Lambda, the emulator starts the bootstrap (init) at the
//! first invocation and serves one invocation at a time.
//!
//! Everything the emulator and the function print (rapid's own log on stderr, the
//! function's on stdout) is kept, in order of arrival, for the tests to read.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use super::LambdaError;

const INVOKE_PATH: &str = "/2015-03-31/functions/function/invocations";
/// The emulator listens within milliseconds of its start.
const LISTEN_PATIENCE: Duration = Duration::from_secs(10);
/// An invocation is given the function's timeout, its init and this much more.
const INVOKE_SLACK: Duration = Duration::from_secs(15);

/// What the invoke endpoint answered: 200 and the function's response, or the emulator's
/// error (502 with `errorType`/`errorMessage` when init or the invocation failed).
#[derive(Debug, Clone)]
pub struct Invocation {
    pub status: u16,
    pub body: Bytes,
    /// From the request's start to the answer's last byte.
    pub took: Duration,
}

impl Invocation {
    pub fn json(&self) -> Result<serde_json::Value, LambdaError> {
        serde_json::from_slice(&self.body).map_err(|e| LambdaError::Answer(format!("{e}: {}", self.text())))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A running emulator; killed (with the bootstrap it started) when dropped.
pub struct Emulator {
    child: Child,
    invoke_url: String,
    client: Client<HttpConnector, Full<Bytes>>,
    log: Arc<Mutex<String>>,
    patience: Duration,
}

impl Emulator {
    /// Starts the emulator for `bootstrap` with exactly `environment` (nothing inherited),
    /// in the bootstrap's directory as Lambda runs it in `/var/task`. `timeout` is the
    /// function's (`AWS_LAMBDA_FUNCTION_TIMEOUT` in `environment` tells the emulator).
    pub async fn start(
        emulator: &Path,
        bootstrap: &Path,
        environment: &BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<Self, LambdaError> {
        let [invoke_addr, runtime_api_addr] = free_addrs()?;
        let working_dir = bootstrap.parent().unwrap_or(Path::new("/"));
        let mut command = Command::new(emulator);
        // SAFETY: prctl is async-signal-safe and touches nothing of the parent's.
        unsafe {
            // The emulator dies with whoever started it, however that ends (a test binary
            // interrupted, `stack-env lambda-gateway` stopped by a signal); its bootstrap
            // then loses the Runtime API and exits.
            command.pre_exec(|| match libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            });
        }
        let mut child = command
            .arg("--runtime-interface-emulator-address")
            .arg(invoke_addr.to_string())
            .arg("--runtime-api-address")
            .arg(runtime_api_addr.to_string())
            .arg(bootstrap)
            .env_clear()
            .envs(environment)
            .current_dir(working_dir)
            // Its own process group: dropping it ends the bootstrap the emulator started too.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| LambdaError::Spawn {
                program: emulator.to_owned(),
                source,
            })?;
        let log = Arc::new(Mutex::new(String::new()));
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(keep_lines(stdout, log.clone()));
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(keep_lines(stderr, log.clone()));
        }
        let mut emulator = Self {
            child,
            invoke_url: format!("http://{invoke_addr}{INVOKE_PATH}"),
            client: Client::builder(TokioExecutor::new()).build_http(),
            log,
            patience: timeout + INVOKE_SLACK,
        };
        emulator.wait_listening(invoke_addr).await?;
        Ok(emulator)
    }

    async fn wait_listening(&mut self, addr: SocketAddr) -> Result<(), LambdaError> {
        let until = Instant::now() + LISTEN_PATIENCE;
        loop {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(LambdaError::Exited(format!("{status}; its log:\n{}", self.log())));
            }
            if Instant::now() > until {
                return Err(LambdaError::Exited(format!(
                    "not listening on {addr} after {LISTEN_PATIENCE:?}; its log:\n{}",
                    self.log()
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// One invocation with `payload` (an event), as `aws lambda invoke` sends it.
    pub async fn invoke(&self, payload: &[u8]) -> Result<Invocation, LambdaError> {
        let started = Instant::now();
        let request = Request::builder()
            .method(Method::POST)
            .uri(&self.invoke_url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::copy_from_slice(payload)))
            .map_err(|e| LambdaError::Invoke(e.to_string()))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| LambdaError::Invoke(e.to_string()))?;
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| LambdaError::Invoke(e.to_string()))?
                .to_bytes();
            Ok(Invocation {
                status,
                body,
                took: started.elapsed(),
            })
        };
        tokio::time::timeout(self.patience, exchange)
            .await
            .unwrap_or_else(|_| Err(LambdaError::Invoke(format!("no answer within {:?}", self.patience))))
    }

    /// Everything printed so far.
    pub fn log(&self) -> String {
        self.log.lock().map(|log| log.clone()).unwrap_or_default()
    }

    /// Kills the emulator and the bootstrap it started.
    pub async fn stop(mut self) {
        self.kill_group();
        let _ = self.child.wait().await;
    }

    fn kill_group(&mut self) {
        if let Some(pid) = self.child.id() {
            // The group's id is the emulator's pid (`process_group(0)`).
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.kill_group();
    }
}

async fn keep_lines(stream: impl AsyncRead + Unpin, log: Arc<Mutex<String>>) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Ok(mut log) = log.lock() {
            log.push_str(&line);
            log.push('\n');
        }
    }
}

/// Two free loopback ports, held open together so that they differ.
fn free_addrs() -> Result<[SocketAddr; 2], LambdaError> {
    let first = TcpListener::bind("127.0.0.1:0").map_err(LambdaError::FreePort)?;
    let second = TcpListener::bind("127.0.0.1:0").map_err(LambdaError::FreePort)?;
    Ok([
        first.local_addr().map_err(LambdaError::FreePort)?,
        second.local_addr().map_err(LambdaError::FreePort)?,
    ])
}

/// What rapid (the emulator's core) reports of a sandbox's life, read from its log.
pub mod report {
    use std::time::Duration;

    /// Each init's duration (`INIT REPORT(durationMs: ...)`), in order. The emulator runs a
    /// second, empty init after one that failed.
    pub fn inits(log: &str) -> Vec<Duration> {
        numbers_after(log, "INIT REPORT(durationMs: ")
    }

    /// Each invocation's duration as the runtime took it (`INVOKE RTDONE(... duration: ...ms)`).
    pub fn invocations(log: &str) -> Vec<Duration> {
        log.lines()
            .filter(|line| line.contains("INVOKE RTDONE("))
            .flat_map(|line| numbers_after(line, "duration: "))
            .collect()
    }

    /// How many times the function was started (init phase begun).
    pub fn init_starts(log: &str) -> usize {
        log.lines()
            .filter(|line| line.contains("INIT START(") && line.contains("phase: init"))
            .count()
    }

    fn numbers_after(text: &str, marker: &str) -> Vec<Duration> {
        text.split(marker)
            .skip(1)
            .filter_map(|rest| {
                let number: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
                number.parse::<f64>().ok()
            })
            .map(|ms| Duration::from_secs_f64(ms / 1000.0))
            .collect()
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        const LOG: &str = "\
25 Nov 2026 15:56:20,288 [INFO] (rapid) INIT START(type: on-demand, phase: init)
25 Nov 2026 15:56:20,327 [INFO] (rapid) INIT RTDONE(status: success)
25 Nov 2026 15:56:20,327 [INFO] (rapid) INIT REPORT(durationMs: 38.575000)
25 Nov 2026 15:56:20,327 [INFO] (rapid) INVOKE START(requestId: cb80cc55)
{\"level\":\"INFO\",\"message\":\"request\",\"latency_ms\":19.1}
25 Nov 2026 15:56:20,349 [INFO] (rapid) INVOKE RTDONE(status: success, produced bytes: 0, duration: 21.782000ms)
REPORT RequestId: cb80cc55\tInit Duration: 0.14 ms\tDuration: 60.75 ms\t
";

        #[test]
        fn rapids_own_figures_are_read() {
            assert_eq!(inits(LOG), [Duration::from_micros(38_575)]);
            assert_eq!(invocations(LOG), [Duration::from_micros(21_782)]);
            assert_eq!(init_starts(LOG), 1);
        }
    }
}
